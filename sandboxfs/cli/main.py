"""Command line: ``sandboxfs [OPTIONS] [--] DIR...``.

Options may appear anywhere among the directories; ``--`` ends them, so a
directory literally named ``--read-only`` can follow it.  Startup fails closed:
without a working ``openat2``, or with a directory that does not exist or is
not a directory, the server exits with status 1 and says why.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, NoReturn, TextIO, final

import trio

from sandboxfs import __version__
from sandboxfs.binding.syscalls import (
    TEST_OPENAT2_ERRNO_ENV,
    Openat2Unavailable,
    probe_openat2,
    set_mmap_threshold,
)
from sandboxfs.core import landlock
from sandboxfs.core.allowlist import AllowList, Root
from sandboxfs.core.watch import TEST_STALL_ENV, Stall
from sandboxfs.fs.limits import LIMIT_HELP, Limits
from sandboxfs.session.access import AccessControl
from sandboxfs.session.auditlog import AuditLog
from sandboxfs.session.fastlane import NO_FAST_LANE_ENV, FastLane
from sandboxfs.session.jsonrpc import SUPPORTED_VERSIONS
from sandboxfs.session.server import InputCloser, SandboxfsServer, ServerOptions
from sandboxfs.tools.accounts import Accounts
from sandboxfs.transports.sidecar import TOKEN_ENV, Endpoint, SidecarOptions, listen, serve_http
from sandboxfs.transports.stdio import serve_stdio, take_stdio

if TYPE_CHECKING:
    from mcp.server.lowlevel.server import Server

log = logging.getLogger("sandboxfs")

#: Boolean flags: option -> (attribute, help).
#: Allocations at least this big get a mapping of their own (see set_mmap_threshold).
_OWN_MAPPING_BYTES: Final = 128 * 1024

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

#: The test-only switches the server knows.  None of them widens what it serves:
#: each makes it stricter (a simulated kernel without openat2), slower (a stalled
#: step) or take another code path of the protocol.  Any other SANDBOXFS_TEST_*
#: variable is refused at startup (what a test must weaken lives in the tests).
TEST_SWITCHES: Final = frozenset({TEST_OPENAT2_ERRNO_ENV, TEST_STALL_ENV, NO_FAST_LANE_ENV})

LANDLOCK_NOTE: Final = (
    "Landlock confines this server to the command-line directories: client Roots can "
    "narrow them but not add others."
)

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
        "on SIGTERM, time calls in flight get to finish [10]",
        False,
    ),
    "--audit-log": (
        "audit_log",
        "FILE",
        "one JSON line per tool call to FILE ('-': stderr, the default; 'off': none)",
        False,
    ),
}

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


@final
class UsageError(Exception):
    """The command line cannot be used; the message says why."""


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
    shutdown_grace: str = "10"
    audit_log: str = "-"
    limits: Limits = field(default_factory=Limits)
    show_help: bool = False
    show_version: bool = False


def _limit_value(option: str, name: str, text: str) -> int | float:
    kind: type[int] | type[float] = type(getattr(Limits(), name))
    try:
        value: int | float = kind(text)
    except ValueError:
        raise UsageError(f"{option} needs a number, got {text!r}") from None
    if value <= 0:
        raise UsageError(f"{option} must be positive, got {text}")
    return value


def parse_arguments(argv: Sequence[str]) -> Arguments:
    """Parse options anywhere among the directories; ``--`` ends the options."""
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
        if not item.startswith("--") or item == "-":
            args.directories.append(item)
            continue
        option, has_value, value = item.partition("=")
        if option in ("--help", "-h", "--version") or option in FLAGS:
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
        _set_value(args, limit_values, option, value)
    args.limits = dataclasses.replace(Limits(), **limit_values)  # type: ignore[arg-type]
    return args


def _set_flag(args: Arguments, option: str) -> None:
    if option in ("--help", "-h"):
        args.show_help = True
    elif option == "--version":
        args.show_version = True
    else:
        setattr(args, FLAGS[option][0], True)


def _set_value(
    args: Arguments, limit_values: dict[str, int | float], option: str, value: str
) -> None:
    if option in LIMIT_OPTIONS:
        limit_values[LIMIT_OPTIONS[option]] = _limit_value(option, LIMIT_OPTIONS[option], value)
        return
    attribute, _, _, repeatable = VALUE_OPTIONS[option]
    if repeatable:
        getattr(args, attribute).append(value)
    else:
        setattr(args, attribute, value)


def help_text() -> str:
    defaults = Limits()
    lines = [
        "usage: sandboxfs [OPTIONS] [--] DIR...",
        "       sandboxfs audit [--era 2025|2026] [--json FILE] -- CMD ... {root}",
        "",
        "A security-first MCP filesystem server: an agent may read, write and search",
        "files inside the given directories and nothing else. Speaks MCP over stdio",
        "(both the 2025 protocol era and 2026-07-28).",
        "",
        "Options may appear anywhere; -- ends them.",
        "",
        "options:",
    ]
    for option, (_, text) in FLAGS.items():
        lines.append(f"  {option:<26} {text}")
    for option, (_, metavar, text, _) in VALUE_OPTIONS.items():
        lines.append(f"  {option + ' ' + metavar:<26} {text}")
    lines.append(f"  {'--version':<26} print the version and exit")
    lines.append(f"  {'--help':<26} show this help and exit")
    lines += ["", "limits (defaults in brackets):"]
    for option, name in LIMIT_OPTIONS.items():
        value = getattr(defaults, name)
        lines.append(f"  {option + ' N':<26} {LIMIT_HELP[name]} [{value}]")
    return "\n".join(lines)


def _fail(message: str) -> NoReturn:
    print(f"sandboxfs: error: {message}", file=sys.stderr)
    raise SystemExit(1)


def _expand(path: str) -> str:
    home = os.environ.get("HOME")
    if home and (path == "~" or path.startswith("~/")):
        path = home + path[1:]
    return os.path.abspath(path)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``sandboxfs`` command; returns the exit status."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["audit"]:
        from sandboxfs.audit.runner import main as audit  # noqa: PLC0415 - only audit needs it

        return audit(argv[1:])
    try:
        args = parse_arguments(argv)
    except (UsageError, ValueError) as exc:
        print(f"sandboxfs: error: {exc}\n\n{help_text()}", file=sys.stderr)
        return 2
    if args.show_help:
        print(help_text())
        return 0
    if args.show_version:
        print(f"sandboxfs {__version__}")
        return 0
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    return serve(args)


def serve(args: Arguments) -> int:
    """Open the directories, confine the process, then serve stdio or HTTP."""
    for name in sorted(os.environ):
        if not name.startswith("SANDBOXFS_TEST_"):
            continue
        if name not in TEST_SWITCHES:
            _fail(f"unknown test switch {name} is set; unset it (the server never widens access)")
        log.warning("WARNING: TEST MODE: %s is set; never set it in production", name)
    try:
        probe_openat2()
    except Openat2Unavailable as exc:
        _fail(str(exc))
    try:
        # Big buffers (whole reads, edits, large results) go back to the kernel when
        # freed instead of staying in a worker thread's malloc arena.
        set_mmap_threshold(_OWN_MAPPING_BYTES)
    except OSError:
        log.info("the C library keeps its own mmap threshold")
    if args.no_landlock and args.require_landlock:
        _fail("--no-landlock and --require-landlock contradict each other")
    roots = _open_roots(args.directories)
    if args.confine_roots and not roots:
        log.warning("Warning: --confine-roots has no effect without command-line directories")
    # Everything that needs the filesystem or the network outside the allowed
    # directories happens before Landlock: the wire, the audit log, user names.
    sidecar = _sidecar_options(args, roots) if args.http or args.unix else None
    listener = listen(sidecar.endpoint) if sidecar is not None else None
    wire = take_stdio() if sidecar is None else None
    audit = AuditLog(_open_audit_log(args.audit_log))
    accounts = Accounts.load()
    landlocked = _apply_landlock(roots, args)
    access = AccessControl(
        AllowList.of(roots),
        confine=args.confine_roots or landlocked,
        notes=(LANDLOCK_NOTE,) if landlocked else (),
    )
    access.announce()
    options = ServerOptions(
        read_only=args.read_only,
        no_xdev=args.no_xdev,
        limits=args.limits,
        home=os.environ.get("HOME"),
        stall=Stall.from_env(os.environ),
        accounts=accounts,
        roots=sidecar is None,
        audit=audit,
    )
    if sidecar is not None and listener is not None:
        server = SandboxfsServer(options, access)
        trio.run(serve_http, server, listener, sidecar)
        return 0
    assert wire is not None
    closer = InputCloser()
    server = SandboxfsServer(options, access, closer)
    lane = None if os.environ.get(NO_FAST_LANE_ENV) else FastLane(server)

    def make_sdk() -> Server[Any]:
        from sandboxfs.session.sdkserver import SdkAdapter  # noqa: PLC0415 - the SDK loads when needed

        return SdkAdapter(server).server

    log.info("sandboxfs %s serving MCP on stdio", __version__)
    trio.run(
        lambda: serve_stdio(
            make_sdk,
            wire,
            max_line=args.limits.line_bytes,
            versions=SUPPORTED_VERSIONS,
            closer=closer,
            lane=lane,
        )
    )
    if lane is not None:
        log.info("The fast lane answered %d request(s) without the SDK dispatcher", lane.taken)
    return server.exit_code


def _open_roots(directories: Sequence[str]) -> list[Root]:
    roots = []
    for directory in directories:
        try:
            roots.append(Root.open(_expand(directory)))
        except FileNotFoundError:
            _fail(f"allowed directory {directory} does not exist")
        except NotADirectoryError:
            _fail(f"allowed directory {directory} is not a directory")
        except OSError as exc:
            _fail(f"cannot open allowed directory {directory}: {exc.strerror}")
    return roots


def _open_audit_log(target: str) -> TextIO | None:
    if target == "off":
        return None
    if target == "-":
        return sys.stderr
    try:
        return open(target, "a", encoding="utf-8", buffering=1)  # kept open for the run
    except OSError as exc:
        _fail(f"cannot open the audit log {target}: {exc.strerror}")


def _sidecar_options(args: Arguments, roots: list[Root]) -> SidecarOptions:
    """Check and assemble the HTTP settings; fail closed on anything unsafe."""
    if args.http and args.unix:
        _fail("--http and --unix cannot be combined; run two servers")
    if not roots:
        _fail("HTTP serving needs at least one directory on the command line")
    try:
        endpoint = Endpoint.parse_tcp(args.http) if args.http else Endpoint(unix=args.unix)
        grace = float(args.shutdown_grace)
    except ValueError as exc:
        _fail(str(exc))
    token = os.environ.get(TOKEN_ENV)
    if token is not None and not token.strip():
        _fail(
            f"{TOKEN_ENV} is set but empty: a token must not be blank (unset it to serve "
            "loopback without one, or give a real token)"
        )
    if args.token_file:
        try:
            with open(args.token_file, encoding="utf-8") as f:
                token = f.read().strip()
        except OSError as exc:
            _fail(f"cannot read --token-file {args.token_file}: {exc.strerror}")
        if not token:
            _fail(f"--token-file {args.token_file} is empty")
    if token is None and not endpoint.loopback:
        _fail(
            f"refusing to serve {endpoint.describe()} without a bearer token: pass "
            f"--token-file FILE or set {TOKEN_ENV}"
        )
    if token is None and endpoint.unix is None:
        log.warning(
            "WARNING: no bearer token: any local process can use this server; pass "
            "--token-file FILE or set %s",
            TOKEN_ENV,
        )
    return SidecarOptions(
        endpoint=endpoint,
        token=token,
        allowed_hosts=tuple(args.allowed_hosts),
        allowed_origins=tuple(args.allowed_origins),
        json_response=args.json_response,
        max_body=args.limits.line_bytes,
        grace_seconds=grace,
    )


def _apply_landlock(roots: list[Root], args: Arguments) -> bool:
    """Confine the process with Landlock unless told not to; True if enforced."""
    if args.no_landlock:
        log.warning("Warning: Landlock disabled (--no-landlock): only openat2 confines paths")
        return False
    if not roots:
        if args.require_landlock:
            _fail("--require-landlock needs command-line directories to confine the server to")
        log.warning(
            "WARNING: Landlock not applied: without command-line directories the client's "
            "Roots decide what is allowed; only openat2 confines paths"
        )
        return False
    try:
        status = landlock.confine(roots, read_only=args.read_only)
    except (OSError, RuntimeError) as exc:
        if args.require_landlock:
            _fail(f"cannot apply Landlock: {exc}")
        log.warning("WARNING: Landlock could not be applied (%s); only openat2 confines paths", exc)
        return False
    if not status.enforced:
        if args.require_landlock:
            _fail(f"--require-landlock: {status.detail}")
        log.warning(
            "WARNING: %s; only openat2 confines paths (use --require-landlock to refuse)",
            status.detail,
        )
        return False
    log.info("%s", status.detail)
    return True
