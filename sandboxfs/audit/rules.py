"""The weaknesses the audit looks for, one rule per category of cases: what each is,
how an attacker uses it, how to fix it, and how severe it is (a CVSS-like score, as
GitHub code scanning reads ``security-severity``).  SARIF's rules are made from these.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True)
class Rule:
    category: str
    #: A title (SARIF ``shortDescription``: what code scanning shows first).
    title: str
    #: What the weakness is, in a paragraph (``fullDescription``).
    weakness: str
    #: How an attacker (an agent fed hostile text, a poisoned repository) uses it.
    attack: str
    #: How to fix it.
    fix: str
    #: 0.1-3.9 low, 4.0-6.9 medium, 7.0-8.9 high, 9.0-10.0 critical.
    severity: float

    @property
    def id(self) -> str:
        return f"sandboxfs-audit/{self.category}"

    @property
    def help_text(self) -> str:
        return f"{self.weakness}\n\nHow it is used: {self.attack}\n\nHow to fix it: {self.fix}"

    @property
    def help_markdown(self) -> str:
        return (
            f"**{self.title}**\n\n{self.weakness}\n\n"
            f"### How an attacker uses it\n\n{self.attack}\n\n"
            f"### How to fix it\n\n{self.fix}\n\n"
            "Each result names the case (`category/name`) that got through and what the "
            "server answered; `sandboxfs audit --only CASE -- CMD {root}` runs it again."
        )


_RULES: Final = (
    Rule(
        "path-syntax",
        "A path spelled to lead out of the allowed directory is served",
        "The server decides whether a path is allowed by looking at its text (a prefix "
        "test, a normalization that differs from the kernel's) and then lets the kernel "
        "resolve it: '..', a sibling directory whose name starts like the allowed one, a "
        "trailing quote or space, '~', a NUL byte or an encoded form reach files outside.",
        "A prompt injection or a malicious repository asks the agent to read "
        "'../.ssh/id_ed25519' or '/srv/app-evil/secret', and the answer carries the file.",
        "Resolve every path in the kernel beneath a descriptor of the allowed directory "
        "(openat2 with RESOLVE_BENEATH), or compare canonical paths component by component; "
        "never expand '~' and refuse NUL bytes.",
        9.1,
    ),
    Rule(
        "symlinks",
        "A symbolic link inside the allowed directory leads a tool outside",
        "A tool follows a symbolic link whose target lies outside the allowed directory "
        "(absolute, relative, chained, or through /proc/self/root), so reading, writing, "
        "editing, copying or moving through it touches outside files.",
        "Anyone who can put a file in the directory (a cloned repository, an unpacked "
        "archive, the agent itself) plants a link to ~/.aws/credentials and asks for it.",
        "Resolve with RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS (or check every component "
        "with O_NOFOLLOW) and act on the descriptor the resolution returned.",
        9.1,
    ),
    Rule(
        "destination",
        "A write, move, copy or delete lands outside through its destination",
        "The destination of a write, a directory creation, a move, a copy or a delete is "
        "checked less strictly than a source: a link in its parent path or a dangling link "
        "as its last component puts the new file outside.",
        "The attacker plants a link to ~/.bashrc's directory or a dangling link to a "
        "startup file, then has the agent 'save' a file there: code runs at next login.",
        "Open the destination's parent beneath the allowed directory, create the last "
        "component with O_NOFOLLOW | O_EXCL (or renameat2 relative to the parent's "
        "descriptor), and never write through a link.",
        9.1,
    ),
    Rule(
        "hard-links",
        "A write through a hard link planted inside changes a file outside",
        "A hard link inside the allowed directory is the outside file itself; a server "
        "that writes in place (truncate and write, append) changes the outside file.",
        "Anyone who can link a file they cannot write into the directory (same filesystem) "
        "has the agent 'update' it: the server rewrites the outside file in place.",
        "Write to a new file beside the target and rename it over the name (the link is "
        "replaced, the outside inode untouched), or refuse regular files with st_nlink > 1.",
        8.1,
    ),
    Rule(
        "special-files",
        "A FIFO, socket or device in the tree hangs the server or exhausts its memory",
        "Reading or writing a FIFO blocks for ever; a device such as /dev/zero never ends; "
        "a socket cannot be opened: a server that opens any file it is given hangs a "
        "call (often a worker thread) or reads until memory runs out.",
        "A repository ships a FIFO named README.md, or a link-free device node in a "
        "container volume; one call from the agent wedges or kills the server.",
        "Open with O_NONBLOCK, fstat the descriptor and refuse anything but regular files "
        "and directories; bound every read by a size cap.",
        5.3,
    ),
    Rule(
        "resource-exhaustion",
        "An input exhausts the server's time or memory (a hang or a crash)",
        "A sparse terabyte file, a tree thousands of levels deep, a symlink loop or a glob "
        "pattern that is cheap to write and dear to match keeps the server busy for "
        "minutes or takes its memory; meanwhile it answers nothing else.",
        "One hostile call (from a prompt injection, or a file's own name) denies the "
        "agent and every other client the server; a crash may lose a write in progress.",
        "Bound every walk (depth, entries, time), every read (bytes, lines scanned) and "
        "every pattern (length, nesting, expansion) and answer an error past the bound.",
        5.3,
    ),
    Rule(
        "races",
        "A path swapped by another process while the server works leads it outside",
        "The server checks a path and then uses it again by name (time of check to time "
        "of use): a concurrent rename, symlink exchange or hard link planted in between "
        "redirects the use outside. These cases are probabilistic: each attacks until the "
        "first escape or its budget of attempts, and says what the attempts prove.",
        "A local process (a build step, a second agent, a hostile package's install "
        "script) swaps a directory with a link to / in a loop until a write lands.",
        "Resolve once, to a descriptor, and take every fact and act from it (fstat, "
        "fchmod, *at calls relative to the opened parent); never re-resolve a string.",
        8.1,
    ),
    Rule(
        "leaks",
        "An answer reveals what lies outside the allowed directory",
        "Error messages name where a link points or the allowed directories; sizes of "
        "outside files show through links; answers differ for existing and missing "
        "outside files (an oracle); a name holding a newline forges listing entries.",
        "The agent maps the host's filesystem and its users from refusals alone, or is "
        "tricked by a forged entry into acting on a file that does not exist.",
        "Answer with the path the client gave and a fixed reason; describe links by "
        "their own metadata; escape names in listings; make refusals uniform.",
        5.3,
    ),
    Rule(
        "protocol",
        "JSON-RPC an SDK client would never send breaks the server",
        "Lone surrogates, a second initialize, or thousands of requests then end of input "
        "crash the server, wedge it, or keep it running after its client is gone.",
        "A malicious or buggy client ends the server for every other client, or leaves "
        "it running and holding its directories after the session ended.",
        "Validate every message before acting on it, answer errors instead of raising, "
        "and end cleanly at end of input whatever is pending.",
        5.3,
    ),
    Rule(
        "roots",
        "A client's Roots widen what the server's operator allowed",
        "The server replaces the directories its command line allows with the Roots a "
        "client declares (at initialize or after roots/list_changed), wherever they lead.",
        "Any client, or an agent steered by injected text, declares / as a Root and "
        "reads or writes anywhere the server's user can.",
        "Intersect client Roots with the command-line directories: a Root may narrow "
        "what is served, never widen it.",
        9.1,
    ),
    Rule(
        "sidecar",
        "The server also listens on the network without authentication",
        "Besides stdio, the server opens a TCP listener beyond loopback that answers MCP "
        "requests with no token or an empty one.",
        "Anyone who can reach the host (the container network, the LAN) uses the same "
        "tools on the same directories, with no agent in between.",
        "Listen on loopback or a unix socket only, or require a strong bearer token and "
        "refuse an empty one.",
        9.8,
    ),
)

RULES: Final = {rule.category: rule for rule in _RULES}


def rule_for(case_id: str) -> Rule:
    """The rule of a case (``category/name``)."""
    return RULES[case_id.split("/", 1)[0]]
