"""The command line: ``sandboxfs [OPTIONS] [--] DIR...``, its help, and what combines.

Options may appear anywhere among the directories; ``--`` ends them, so a
directory literally named ``--read-only`` can follow it.  A command line that
cannot be used raises :class:`UsageError` with the one problem: an unknown
option, a bad value, or an option that would have no effect in the chosen mode
(an HTTP option without ``--http``/``--unix``, ``--confine-roots`` over HTTP):
an option the server would silently ignore is refused instead.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final, final

from sandboxfs.core.policy import Policy, PolicyError
from sandboxfs.fs.limits import LIMIT_HELP, Limits
from sandboxfs.fs.workspaces import check_name, parse_age
from sandboxfs.transports.sidecar import Endpoint

#: Exit statuses, as ``sandboxfs --help`` documents them.
EXIT_OK: Final = 0
#: The server could not start, or could not operate (it says why on stderr).
EXIT_FAILED: Final = 1
#: The command line cannot be used.
EXIT_USAGE: Final = 2

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
        "refuse to start if the kernel cannot apply Landlock",
    ),
    "--json-response": (
        "json_response",
        "answer HTTP requests with JSON bodies instead of SSE streams",
    ),
}

#: Options with a value: option -> (attribute, metavar, help, repeatable).
VALUE_OPTIONS: Final[dict[str, tuple[str, str, str, bool]]] = {
    "--http": ("http", "HOST:PORT", "serve streamable HTTP instead of stdio", False),
    "--unix": ("unix", "PATH", "serve streamable HTTP on a unix socket (created 0600)", False),
    "--token-file": (
        "token_file",
        "FILE",
        "bearer token clients must send over HTTP (or set SANDBOXFS_TOKEN)",
        False,
    ),
    "--allowed-host": ("allowed_hosts", "HOST", "also accept this Host header (HTTP)", True),
    "--allowed-origin": ("allowed_origins", "ORIGIN", "also accept this Origin (HTTP)", True),
    "--shutdown-grace": (
        "shutdown_grace",
        "SECONDS",
        "on SIGTERM, time calls in flight get to finish (HTTP) [10]",
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
    "--hide": (
        "hide",
        "PATTERN",
        "treat matching paths in every directory as absent (glob; no '/': any depth)",
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

#: The options that give directories a policy; they need directories to apply to.
POLICY_OPTIONS: Final = ("--hide", "--protect", "--preset")

#: The options that only mean something when serving HTTP.
HTTP_ONLY: Final = (
    "--token-file",
    "--allowed-host",
    "--allowed-origin",
    "--shutdown-grace",
    "--json-response",
)
LOG_LEVELS: Final = ("warning", "info", "debug")

#: Limit options: option -> Limits field.
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

_SHORT: Final = {"-h": "--help", "-V": "--version"}


@final
class UsageError(Exception):
    """The command line cannot be used; the message says why, in one line."""


@final
@dataclass
class Arguments:
    directories: list[str] = field(default_factory=list)
    read_only: bool = False
    confine_roots: bool = False
    no_xdev: bool = False
    no_landlock: bool = False
    require_landlock: bool = False
    json_response: bool = False
    http: str | None = None
    unix: str | None = None
    token_file: str | None = None
    allowed_hosts: list[str] = field(default_factory=list)
    allowed_origins: list[str] = field(default_factory=list)
    shutdown_grace: float = 10.0
    audit_log: str = "-"
    log_level: str = "info"
    workspaces: str | None = None
    workspace_id: str | None = None
    hide: list[str] = field(default_factory=list)
    protect: list[str] = field(default_factory=list)
    presets: list[str] = field(default_factory=list)
    policy_file: str | None = None
    tenants: str | None = None
    journal: str | None = None
    journal_max_bytes: str | None = None
    journal_keep: str | None = None
    ask: list[str] = field(default_factory=list)
    limits: Limits = field(default_factory=Limits)
    show_help: bool = False
    show_version: bool = False
    #: The options given, as written (for the checks of what combines).
    given: set[str] = field(default_factory=set)
    #: Where to listen, once ``--http`` has been checked.
    endpoint: Endpoint | None = None

    @property
    def serves_http(self) -> bool:
        return self.http is not None or self.unix is not None


def _number(option: str, text: str, kind: type[int] | type[float]) -> int | float:
    try:
        value: int | float = kind(text)
    except ValueError:
        raise UsageError(f"{option} needs a number, got {text!r}") from None
    if value <= 0 and option != "--shutdown-grace":
        raise UsageError(f"{option} must be positive, got {text}")
    if value < 0:
        raise UsageError(f"{option} must not be negative, got {text}")
    return value


def parse_arguments(argv: Sequence[str]) -> Arguments:
    """Parse options anywhere among the directories, then check what combines."""
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
        args.given.add(option)
        _set_value(args, limit_values, option, value)
    args.limits = dataclasses.replace(Limits(), **limit_values)  # type: ignore[arg-type]
    if not (args.show_help or args.show_version):
        _check_combinations(args)
    return args


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
    if option in LIMIT_OPTIONS:
        name = LIMIT_OPTIONS[option]
        limit_values[name] = _number(option, value, type(getattr(Limits(), name)))
        return
    if option == "--shutdown-grace":
        args.shutdown_grace = float(_number(option, value, float))
        return
    if option == "--log-level" and value not in LOG_LEVELS:
        raise UsageError(f"--log-level must be one of {', '.join(LOG_LEVELS)}, got {value!r}")
    attribute, _, _, repeatable = VALUE_OPTIONS[option]
    if repeatable:
        getattr(args, attribute).append(value)
    else:
        setattr(args, attribute, value)


def _check_combinations(args: Arguments) -> None:
    """Refuse options that contradict each other or would have no effect."""
    if args.no_landlock and args.require_landlock:
        raise UsageError("--no-landlock and --require-landlock contradict each other")
    if args.http is not None and args.unix is not None:
        raise UsageError("--http and --unix cannot be combined; run two servers")
    if args.http is not None:
        try:
            args.endpoint = Endpoint.parse_tcp(args.http)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    elif args.unix is not None:
        args.endpoint = Endpoint(unix=args.unix)
    if not args.serves_http:
        for option in HTTP_ONLY:
            if option in args.given:
                raise UsageError(f"{option} only applies when serving HTTP (--http or --unix)")
    elif "--confine-roots" in args.given:
        raise UsageError("--confine-roots has no effect over HTTP: HTTP never uses client Roots")
    if args.tenants is not None:
        _check_tenants(args)
        return
    _check_directories(args)
    _check_workspaces(args)
    _check_journal(args)
    _check_ask(args)


def _check_ask(args: Arguments) -> None:
    """``--ask``: patterns that compile, and changes to ask about."""
    if not args.ask:
        return
    if args.read_only:
        raise UsageError("--ask approves changes, and a --read-only server makes none")
    try:
        Policy(protect=tuple(args.ask))
    except PolicyError as exc:
        raise UsageError(str(exc).replace("--protect", "--ask")) from None


def _check_journal(args: Arguments) -> None:
    """``--journal``: something to change, directories to change it in, bounds that parse."""
    if args.journal is None:
        for option in ("--journal-max-bytes", "--journal-keep"):
            if option in args.given:
                raise UsageError(f"{option} needs --journal DIR")
        return
    if args.read_only:
        raise UsageError("--journal records changes, and a --read-only server makes none")
    if not args.directories and args.policy_file is None and args.workspaces is None:
        raise UsageError(
            "--journal needs command-line directories (or --policy FILE or --workspaces): "
            "client Roots alone could name the journal itself"
        )
    if args.journal_max_bytes is not None:
        _number("--journal-max-bytes", args.journal_max_bytes, int)
    if args.journal_keep is not None:
        try:
            parse_age(args.journal_keep)
        except ValueError as exc:
            raise UsageError(f"--journal-keep: {exc}") from None


def _check_tenants(args: Arguments) -> None:
    """--tenants: HTTP only, and each tenant's directories and rules come from the file."""
    if not args.serves_http:
        raise UsageError("--tenants needs --http HOST:PORT or --unix PATH")
    if args.directories:
        raise UsageError(
            "--tenants replaces command-line directories: give each tenant its directories "
            "in the tenants file"
        )
    for option in TENANT_OWN:
        if option in args.given:
            raise UsageError(f"{option} cannot be combined with --tenants: set it per tenant")
    _check_workspaces(args)


def _check_directories(args: Arguments) -> None:
    """Refuse options that need allowed directories when none are given."""
    if args.directories or args.policy_file is not None or args.workspaces is not None:
        return  # (the workspaces are directories, and carry the policy options' rules)
    if args.serves_http:
        raise UsageError("serving HTTP needs at least one directory on the command line")
    elif args.confine_roots:
        raise UsageError("--confine-roots needs command-line directories to confine Roots to")
    elif args.require_landlock:
        raise UsageError("--require-landlock needs command-line directories to confine to")
    for option in POLICY_OPTIONS:
        if option in args.given:
            raise UsageError(
                f"{option} needs command-line directories (or --policy FILE or --workspaces)"
            )


def _check_workspaces(args: Arguments) -> None:
    """``--workspace-id`` needs ``--workspaces`` and stdio, and a valid id; over HTTP
    sessions are made while serving, which a read-only server cannot do."""
    if args.workspaces is not None and args.serves_http and args.read_only:
        raise UsageError(
            "--workspaces with --read-only serves stdio only: over HTTP sessions are made "
            "while serving, which a read-only server (and its Landlock) cannot do"
        )
    if args.workspace_id is None:
        return
    if args.workspaces is None:
        raise UsageError("--workspace-id needs --workspaces BASE")
    if args.serves_http:
        raise UsageError(
            "--workspace-id applies to stdio; over HTTP the operator's client names its "
            "session with the Sandboxfs-Workspace-Id header"
        )
    try:
        check_name(args.workspace_id, "--workspace-id")
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def help_text() -> str:
    defaults = Limits()
    lines = [
        "usage: sandboxfs [OPTIONS] [--] DIR[:ro|:rw]...",
        "       sandboxfs audit [--era 2025|2026] [--json FILE] -- CMD ... {root}",
        "       sandboxfs workspaces BASE [--prune AGE]",
        "       sandboxfs journal DIR [list|show ID|undo ...]   (see 'sandboxfs journal --help')",
        "       sandboxfs --tenants FILE --http HOST:PORT   (one worker process per tenant)",
        "       sandboxfs hash-token < TOKEN_FILE           (a tenant's token_sha256)",
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
    lines += ["", "limits (defaults in brackets):"]
    for option, name in LIMIT_OPTIONS.items():
        value = getattr(defaults, name)
        lines.append(f"  {option + ' N':<26} {LIMIT_HELP[name]} [{value}]")
    lines += [
        "",
        "exit status:",
        f"  {EXIT_OK}  the server ran and stopped (end of input, or SIGTERM over HTTP)",
        f"  {EXIT_FAILED}  it could not start or could not operate (stderr says why)",
        f"  {EXIT_USAGE}  the command line cannot be used",
    ]
    return "\n".join(lines)
