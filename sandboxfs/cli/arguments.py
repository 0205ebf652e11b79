"""The command line: ``sandboxfs [OPTIONS] [--] DIR...``, its options and its help.

Options may appear anywhere among the directories; ``--`` ends them, so a
directory literally named ``--read-only`` can follow it.  A command line that
cannot be parsed raises :class:`UsageError` with the one problem: an unknown
option, a missing or empty value, a number that is not finite or not in its
documented range.  What the options mean together (and with the policy file,
the tenants file and the environment) is decided in one place,
:mod:`sandboxfs.cli.config`.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final, final

from sandboxfs.cli import exits
from sandboxfs.fs.limits import LIMIT_HELP as FS_HELP
from sandboxfs.fs.limits import LIMIT_RANGES as FS_RANGES
from sandboxfs.fs.limits import Limits, Range
from sandboxfs.session.servinglimits import SERVING_HELP, SERVING_RANGES, ServingLimits
from sandboxfs.transports.http.connections import MAX_SEND_TIMEOUT, SEND_TIMEOUT
from sandboxfs.transports.http.server import Endpoint

#: Exit statuses, as ``sandboxfs --help`` documents them.
EXIT_OK: Final = exits.EXIT_OK
EXIT_FAILED: Final = exits.EXIT_FAILED
EXIT_USAGE: Final = exits.EXIT_USAGE
EXIT_INTERRUPTED: Final = exits.EXIT_INTERRUPTED

#: Boolean flags: option -> (attribute, help).
FLAGS: Final[dict[str, tuple[str, str]]] = {
    "--read-only": ("read_only", "serve only the tools that cannot change the filesystem"),
    "--confine-roots": (
        "confine_roots",
        "client Roots may narrow the command-line directories, never replace or widen them",
    ),
    "--no-xdev": (
        "no_xdev",
        "refuse paths that cross a mount point inside an allowed directory",
    ),
    "--no-landlock": (
        "no_landlock",
        "do not apply Landlock (restores the reference server's Roots semantics)",
    ),
    "--require-landlock": (
        "require_landlock",
        "refuse to start unless Landlock covers everything that may be served",
    ),
    "--no-seccomp": (
        "no_seccomp",
        "do not filter syscalls with seccomp (the server and its code parser)",
    ),
    "--require-seccomp": (
        "require_seccomp",
        "refuse to start if the kernel cannot filter syscalls with seccomp",
    ),
    "--json-response": (
        "json_response",
        "answer HTTP requests with JSON bodies instead of SSE streams",
    ),
    "--allow-weak-tokens": (
        "allow_weak_tokens",
        "TESTS ONLY: accept short or well-known tokens and token files others may read",
    ),
}

#: Options with a value: option -> (attribute, metavar, help, repeatable).
VALUE_OPTIONS: Final[dict[str, tuple[str, str, str, bool]]] = {
    "--http": ("http", "HOST:PORT", "serve streamable HTTP instead of stdio", False),
    "--unix": ("unix", "PATH", "serve streamable HTTP on a unix socket (created 0600)", False),
    "--token-file": (
        "token_file",
        "FILE",
        "bearer token clients must send over HTTP, 16 bytes or more, in a file only this "
        "user may read (or set SANDBOXFS_TOKEN)",
        False,
    ),
    "--allowed-host": ("allowed_hosts", "HOST", "also accept this Host header (HTTP)", True),
    "--allowed-origin": ("allowed_origins", "ORIGIN", "also accept this Origin (HTTP)", True),
    "--shutdown-grace": (
        "shutdown_grace",
        "SECONDS",
        "on SIGTERM, time calls in flight get to finish (HTTP) [10; 0 to 3600]",
        False,
    ),
    "--send-timeout": (
        "send_timeout",
        "SECONDS",
        "cut off a client that takes no part of its answer this long (HTTP) [30; 0.001 to 3600]",
        False,
    ),
    "--workers": (
        "workers",
        "N",
        "serve HTTP from N processes behind one listener (1 with --ask) [the CPUs; 1 to 64]",
        False,
    ),
    "--audit-log": (
        "audit_log",
        "FILE",
        "one JSON line per tool call to FILE ('-': stderr, the default; 'off': none)",
        False,
    ),
    "--workspaces": (
        "workspaces",
        "BASE",
        "give every session a private directory under BASE, plus shared named stores",
        False,
    ),
    "--workspace-id": (
        "workspace_id",
        "ID",
        "stdio: resume (or make) this session under --workspaces BASE "
        "(or set SANDBOXFS_WORKSPACE_ID)",
        False,
    ),
    "--log-level": (
        "log_level",
        "LEVEL",
        "what goes to stderr: warning, info (the default) or debug",
        False,
    ),
    "--log-format": (
        "log_format",
        "FORMAT",
        "stderr lines as 'json' (one object a line) or 'text' [text on a terminal, else json]",
        False,
    ),
    "--metrics": (
        "metrics",
        "HOST:PORT",
        "also serve /metrics there, without a token (HTTP; /metrics is always served "
        "behind the token)",
        False,
    ),
    "--hide": (
        "hide",
        "PATTERN",
        "treat matching paths in every directory (client Roots too) as absent (glob)",
        True,
    ),
    "--protect": (
        "protect",
        "PATTERN",
        "matching paths stay readable but are never changed, removed or replaced",
        True,
    ),
    "--preset": ("presets", "NAME", "add named rules: 'secrets' hides keys, .env, ...", True),
    "--policy": ("policy_file", "FILE", "per-directory rules from a TOML file (see README)", False),
    "--tenants": (
        "tenants",
        "FILE",
        "serve each tenant of a TOML file its own directories, in its own process (HTTP)",
        False,
    ),
    "--journal": (
        "journal",
        "DIR",
        "record every change in DIR (outside the allowed directories): list_changes, "
        "undo_changes, 'sandboxfs journal DIR'",
        False,
    ),
    "--journal-max-bytes": (
        "journal_max_bytes",
        "N",
        "most bytes the journal keeps; the oldest changes go first [1 GiB]",
        False,
    ),
    "--journal-keep": ("journal_keep", "AGE", "drop changes older than AGE, e.g. 7d [30d]", False),
    "--ask": (
        "ask",
        "PATTERN",
        "a change to a matching path needs the user's yes (asked through MCP elicitation)",
        True,
    ),
    "--run-dir": (
        "run_dir",
        "DIR",
        "with --tenants: make the workers' socket directory in DIR [$XDG_RUNTIME_DIR, /tmp]",
        False,
    ),
}

#: What a tenants file gives each tenant: refused beside --tenants.
TENANT_OWN: Final = (
    "--read-only",
    "--hide",
    "--protect",
    "--preset",
    "--policy",
    "--workspaces",
    "--token-file",
    "--audit-log",
    "--journal",
    "--journal-max-bytes",
    "--journal-keep",
    "--ask",
)

#: The options that only mean something when serving HTTP.
HTTP_ONLY: Final = (
    "--token-file",
    "--allowed-host",
    "--allowed-origin",
    "--shutdown-grace",
    "--json-response",
    "--allow-weak-tokens",
    "--send-timeout",
    "--workers",
    "--metrics",
)
LOG_LEVELS: Final = ("warning", "info", "debug")
LOG_FORMATS: Final = ("json", "text")

#: Every cap's range and help, the filesystem's and the serving ones.
LIMIT_RANGES: Final[dict[str, Range]] = {**FS_RANGES, **SERVING_RANGES}
LIMIT_HELP: Final[dict[str, str]] = {**FS_HELP, **SERVING_HELP}

#: Limit options: option -> the field of Limits (the filesystem's caps) or of
#: ServingLimits (the serving caps) it sets.
LIMIT_OPTIONS: Final[dict[str, str]] = {
    "--max-read-bytes": "read_bytes",
    "--max-edit-bytes": "edit_bytes",
    "--max-write-bytes": "write_bytes",
    "--max-walk-entries": "walk_entries",
    "--max-revision-entries": "revision_entries",
    "--max-search-seconds": "search_seconds",
    "--max-tree-depth": "tree_depth",
    "--max-symlink-hops": "symlink_hops",
    "--max-concurrent-calls": "concurrent_calls",
    "--max-worker-threads": "worker_threads",
    "--fs-timeout": "fs_timeout",
    "--max-line-bytes": "line_bytes",
}

#: Seconds of ``--shutdown-grace``: none at all up to an hour.
SHUTDOWN_GRACE_RANGE: Final = Range(0.0, 3600.0)
#: Seconds of ``--send-timeout``: a millisecond up to an hour.
SEND_TIMEOUT_RANGE: Final = Range(0.001, MAX_SEND_TIMEOUT)
#: Processes of ``--workers``.
WORKERS_RANGE: Final = Range(1, 64)

_SHORT: Final = {"-h": "--help", "-V": "--version"}
_WHOLE: Final = re.compile(r"[0-9]+", re.ASCII)
_DECIMAL: Final = re.compile(r"[0-9]+(?:\.[0-9]*)?|\.[0-9]+", re.ASCII)


@final
class UsageError(Exception):
    """The command line cannot be used; the message says why, in one line."""


@final
class Refused(Exception):
    """The configuration is refused: one line naming the conflict, and the exit
    status (2, or 1 when a file it names cannot be read)."""

    def __init__(self, message: str, status: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.status = status


@final
@dataclass
class Arguments:
    directories: list[str] = field(default_factory=list)
    read_only: bool = False
    confine_roots: bool = False
    no_xdev: bool = False
    no_landlock: bool = False
    require_landlock: bool = False
    no_seccomp: bool = False
    require_seccomp: bool = False
    json_response: bool = False
    allow_weak_tokens: bool = False
    http: str | None = None
    unix: str | None = None
    token_file: str | None = None
    allowed_hosts: list[str] = field(default_factory=list)
    allowed_origins: list[str] = field(default_factory=list)
    shutdown_grace: float = 10.0
    send_timeout: float = SEND_TIMEOUT
    #: ``--workers``; None: as many as the CPUs this process may run on.
    workers: int | None = None
    audit_log: str = "-"
    log_level: str = "info"
    #: None: text on a terminal, JSON otherwise (decided by the configuration).
    log_format: str | None = None
    metrics: str | None = None
    workspaces: str | None = None
    workspace_id: str | None = None
    hide: list[str] = field(default_factory=list)
    protect: list[str] = field(default_factory=list)
    presets: list[str] = field(default_factory=list)
    policy_file: str | None = None
    tenants: str | None = None
    run_dir: str | None = None
    journal: str | None = None
    journal_max_bytes: str | None = None
    journal_keep: str | None = None
    ask: list[str] = field(default_factory=list)
    limits: Limits = field(default_factory=Limits)
    serving: ServingLimits = field(default_factory=ServingLimits)
    show_help: bool = False
    show_version: bool = False
    #: The options given, as written (for the checks of what combines).
    given: set[str] = field(default_factory=set)

    @property
    def serves_http(self) -> bool:
        return self.http is not None or self.unix is not None

    @property
    def endpoint(self) -> Endpoint | None:
        """Where to listen (``--http`` checked as it was parsed), or None for stdio."""
        if self.http is not None:
            return Endpoint.parse_tcp(self.http)
        return None if self.unix is None else Endpoint(unix=self.unix)


def number(option: str, text: str, allowed: Range) -> int | float:
    """``text`` as the number ``option`` takes: plain decimal digits (a whole number
    for a count), finite and in ``allowed``; else UsageError naming the option."""
    kind = "a whole number" if allowed.whole else "a number"
    grammar = _WHOLE if allowed.whole else _DECIMAL
    if grammar.fullmatch(text) is None:
        raise UsageError(f"{option} needs {kind} from {allowed.describe()}, got {text!r}")
    value: int | float = int(text) if allowed.whole else float(text)
    if not allowed.holds(value):
        raise UsageError(f"{option} must be from {allowed.describe()}, got {text}")
    return value


def parse_arguments(argv: Sequence[str]) -> Arguments:
    """Parse options anywhere among the directories; each value checked on its own
    (what combines is :func:`sandboxfs.cli.config.build`'s to decide)."""
    args = Arguments()
    limit_values: dict[str, int | float] = {}
    items = list(argv)
    i = 0
    while i < len(items):
        item = items[i]
        i += 1
        if item == "--":
            args.directories.extend(items[i:])
            break
        item = _SHORT.get(item, item)
        if not item.startswith("-") or item == "-":
            args.directories.append(item)
            continue
        option, has_value, value = item.partition("=")
        if option in ("--help", "--version") or option in FLAGS:
            if has_value:
                raise UsageError(f"{option} takes no value")
            _set_flag(args, option)
            continue
        if option not in VALUE_OPTIONS and option not in LIMIT_OPTIONS:
            raise UsageError(f"unknown option {option} (use -- before a directory named so)")
        if not has_value:
            if i >= len(items):
                raise UsageError(f"{option} needs a value")
            value = items[i]
            i += 1
        if option in args.given and not (option in VALUE_OPTIONS and VALUE_OPTIONS[option][3]):
            raise UsageError(f"{option} was given twice; give it once")
        args.given.add(option)
        _set_value(args, limit_values, option, value)
    if "" in args.directories:
        raise UsageError("an empty argument is no directory")
    fs_values = {k: v for k, v in limit_values.items() if k in FS_RANGES}
    serving_values = {k: v for k, v in limit_values.items() if k in SERVING_RANGES}
    args.limits = dataclasses.replace(Limits(), **fs_values)  # type: ignore[arg-type]
    args.serving = dataclasses.replace(ServingLimits(), **serving_values)  # type: ignore[arg-type]
    _check_endpoints(args)
    return args


def _check_endpoints(args: Arguments) -> None:
    """``--http`` and ``--metrics``: each a HOST:PORT (UsageError naming the option)."""
    for option, text in (("--http", args.http), ("--metrics", args.metrics)):
        if text is not None:
            try:
                Endpoint.parse_tcp(text, option)
            except ValueError as exc:
                raise UsageError(str(exc)) from None


def _set_flag(args: Arguments, option: str) -> None:
    if option == "--help":
        args.show_help = True
    elif option == "--version":
        args.show_version = True
    else:
        args.given.add(option)
        setattr(args, FLAGS[option][0], True)


def _set_value(
    args: Arguments, limit_values: dict[str, int | float], option: str, value: str
) -> None:
    if not value:
        raise UsageError(f"{option} needs a value, got an empty one")
    if option in LIMIT_OPTIONS:
        name = LIMIT_OPTIONS[option]
        limit_values[name] = number(option, value, LIMIT_RANGES[name])
        return
    if option == "--shutdown-grace":
        args.shutdown_grace = float(number(option, value, SHUTDOWN_GRACE_RANGE))
        return
    if option == "--send-timeout":
        args.send_timeout = float(number(option, value, SEND_TIMEOUT_RANGE))
        return
    if option == "--workers":
        args.workers = int(number(option, value, WORKERS_RANGE))
        return
    if option == "--log-level" and value not in LOG_LEVELS:
        raise UsageError(f"--log-level must be one of {', '.join(LOG_LEVELS)}, got {value!r}")
    if option == "--log-format" and value not in LOG_FORMATS:
        raise UsageError(f"--log-format must be one of {', '.join(LOG_FORMATS)}, got {value!r}")
    attribute, _, _, repeatable = VALUE_OPTIONS[option]
    if repeatable:
        getattr(args, attribute).append(value)
    else:
        setattr(args, attribute, value)


def help_text() -> str:
    defaults = {**dataclasses.asdict(Limits()), **dataclasses.asdict(ServingLimits())}
    lines = [
        "usage: sandboxfs [OPTIONS] [--] DIR[:ro|:rw]...",
        "       sandboxfs audit [--quick] [--sarif FILE] ... -- CMD ... {root}  (see audit --help)",
        "       sandboxfs workspaces BASE [--prune AGE]",
        "       sandboxfs journal DIR [list|show ID|undo ...]   (see 'sandboxfs journal --help')",
        "       sandboxfs --tenants FILE --http HOST:PORT   (one worker process per tenant)",
        "       sandboxfs hash-token [TOKEN_FILE]           (a tenant's token_sha256)",
        "",
        "A security-first MCP filesystem server: an agent may read, write and search",
        "files inside the given directories and nothing else. Speaks MCP over stdio",
        "(both the 2025 protocol era and 2026-07-28), or streamable HTTP with --http.",
        "",
        "Options may appear anywhere; -- ends them.",
        "",
        "options:",
    ]
    for option, (_, text) in FLAGS.items():
        lines.append(f"  {option:<26} {text}")
    for option, (_, metavar, text, _) in VALUE_OPTIONS.items():
        lines.append(f"  {option + ' ' + metavar:<26} {text}")
    lines.append(f"  {'-V, --version':<26} print the version and exit")
    lines.append(f"  {'-h, --help':<26} show this help and exit")
    lines += ["", "limits ([default; range]; out of range, nan or inf: refused):"]
    for option, name in LIMIT_OPTIONS.items():
        value = defaults[name]
        span = LIMIT_RANGES[name].describe()
        lines.append(f"  {option + ' N':<26} {LIMIT_HELP[name]} [{value}; {span}]")
    lines += [
        "",
        "exit status:",
        f"  {EXIT_OK}  the server ran and stopped (end of input, or SIGTERM over HTTP)",
        f"  {EXIT_FAILED}  it could not start or could not operate (stderr says why)",
        f"  {EXIT_USAGE}  the configuration is refused: a configuration either does what it",
        "     says or is refused (command line, --policy and --tenants files, environment)",
        f"  {EXIT_INTERRUPTED}  interrupted (Ctrl-C); a unix socket it made is removed",
    ]
    return "\n".join(lines)
