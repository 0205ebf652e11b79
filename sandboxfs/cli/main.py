"""The ``sandboxfs`` command: check the command line, open the directories,
confine the process, then serve stdio or HTTP.

Startup fails closed, and every failure is one line on stderr: without a working
``openat2``, with a directory that does not exist, with a port that is taken,
the server exits with status 1 and says why (2 for a command line that cannot
be used; see :mod:`sandboxfs.cli.arguments`).  What the operator sees in the log
is written for the operator; the server's internals go to the debug level.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Final, NoReturn, TextIO

import trio

from sandboxfs import __version__
from sandboxfs.binding.syscalls import (
    TEST_OPENAT2_ERRNO_ENV,
    Openat2Unavailable,
    probe_openat2,
    set_mmap_threshold,
)
from sandboxfs.cli.approvals import ask_rules
from sandboxfs.cli.arguments import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    Arguments,
    UsageError,
    help_text,
    parse_arguments,
)
from sandboxfs.cli.journal import SetupError as JournalSetupError
from sandboxfs.cli.journal import setup as journal_setup
from sandboxfs.cli.journal import stdio_session
from sandboxfs.cli.policies import Directory, Rules, configure, global_policy
from sandboxfs.cli.workspaces import SetupError as WorkspaceSetupError
from sandboxfs.cli.workspaces import setup as workspace_setup
from sandboxfs.core import landlock
from sandboxfs.core.allowlist import AllowList, Root, nest_policies
from sandboxfs.core.policy import Policy, PolicyError
from sandboxfs.core.watch import TEST_STALL_ENV, Stall
from sandboxfs.fs.approval import AskRules
from sandboxfs.fs.journals import Journals
from sandboxfs.fs.workspaces import SessionLease
from sandboxfs.session.access import AccessControl
from sandboxfs.session.auditlog import AuditLog
from sandboxfs.session.server import SandboxfsServer, ServerOptions
from sandboxfs.session.workspaces import WorkspaceSessions
from sandboxfs.tools.accounts import Accounts
from sandboxfs.transports.front import make_rundir, serve_front
from sandboxfs.transports.sidecar import TOKEN_ENV, Endpoint, SidecarOptions, listen, serve_http
from sandboxfs.transports.stdio import serve_stdio, take_stdio
from sandboxfs.transports.tenants import TenantsError, hash_token, load_tenants
from sandboxfs.transports.workers import WorkerSettings

if TYPE_CHECKING:
    import socket

log = logging.getLogger("sandboxfs")

#: Allocations at least this big get a mapping of their own (see set_mmap_threshold).
_OWN_MAPPING_BYTES: Final = 128 * 1024

#: The test-only switches the server knows.  None of them widens what it serves:
#: each makes it stricter (a simulated kernel without openat2) or slower (a stalled
#: step).  Any other SANDBOXFS_TEST_*
#: variable is refused at startup (what a test must weaken lives in the tests).
TEST_SWITCHES: Final = frozenset({TEST_OPENAT2_ERRNO_ENV, TEST_STALL_ENV})

LANDLOCK_NOTE: Final = (
    "Landlock confines this server to the command-line directories: client Roots can "
    "narrow them but not add others."
)
#: Options of the tenants' front that every tenant worker is started with too.
WORKER_OPTIONS: Final = ("--no-xdev", "--no-landlock", "--require-landlock", "--json-response")
#: Loggers of the libraries underneath, quiet unless --log-level debug.
_LIBRARY_LOGGERS: Final = ("mcp", "hypercorn.error", "httpx", "anyio")


def _fail(message: str) -> NoReturn:
    """Stop: the server cannot start.  One line on stderr, exit status 1."""
    print(f"sandboxfs: error: {message}", file=sys.stderr)
    raise SystemExit(EXIT_FAILED)


def _expand(path: str) -> str:
    home = os.environ.get("HOME")
    if home and (path == "~" or path.startswith("~/")):
        path = home + path[1:]
    return os.path.abspath(path)


def main(argv: Sequence[str] | None = None) -> int:  # noqa: PLR0911 - one per subcommand
    """Entry point of the ``sandboxfs`` command; returns the exit status."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["audit"]:
        from sandboxfs.audit.runner import main as audit  # noqa: PLC0415 - only audit needs it

        return audit(argv[1:])
    if argv[:1] == ["workspaces"]:
        from sandboxfs.cli.workspaces import main as workspaces  # noqa: PLC0415

        return workspaces(argv[1:])
    if argv[:1] == ["hash-token"]:
        return _hash_token(argv[1:])
    if argv[:1] == ["journal"]:
        from sandboxfs.cli.journal import main as journal  # noqa: PLC0415

        return journal(argv[1:])
    try:
        args = parse_arguments(argv)
    except UsageError as exc:
        print(f"sandboxfs: error: {exc}\nsee 'sandboxfs --help'", file=sys.stderr)
        return EXIT_USAGE
    if args.show_help:
        print(help_text())
        return EXIT_OK
    if args.show_version:
        print(f"sandboxfs {__version__}")
        return EXIT_OK
    _configure_logging(args.log_level)
    return serve(args)


def _configure_logging(level: str) -> None:
    logging.basicConfig(level=level.upper(), format="%(message)s", stream=sys.stderr)
    if level != "debug":
        for name in _LIBRARY_LOGGERS:  # their info lines speak of their internals
            logging.getLogger(name).setLevel(logging.WARNING)


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
        log.debug("the C library keeps its own mmap threshold")
    if args.tenants is not None:
        return _serve_tenants(args)
    roots = _open_roots(_directories(args))
    if roots and all(not root.policy.writable for root in roots) and args.workspaces is None:
        # Nothing may change anywhere: the mutating tools are not even offered.
        args.read_only = True
    policed = any(root.policy.active for root in roots)
    # Everything that needs the filesystem or the network outside the allowed
    # directories happens before Landlock: the wire, the audit log, user names.
    sidecar = _sidecar_options(args) if args.serves_http else None
    listener = None
    if sidecar is not None:
        listener, endpoint = _listen(sidecar.endpoint)
        sidecar = replace(sidecar, endpoint=endpoint)  # with the port it really got
    wire = take_stdio() if sidecar is None else None
    audit = AuditLog(_open_audit_log(args.audit_log))
    accounts = Accounts.load()
    workspaces, lease = _open_workspaces(args, roots, sidecar)
    journals = _open_journal(args, roots, workspaces)
    ask = _ask_rules(args, roots)  # (the policy file is read before Landlock)
    # Landlock covers BASE as a whole (sessions appear after it is applied).
    confined = roots if workspaces is None else [workspaces.base.root, *roots]
    landlocked = _apply_landlock(confined, args, journals.root if journals else None)
    access = AccessControl(
        AllowList.of(roots),
        # A client's Roots may only narrow directories that carry a policy (or beside a
        # journal, which a client's root could otherwise name).
        confine=args.confine_roots or landlocked or policed or journals is not None,
        # Only a stdio client has Roots to be told about.
        notes=(LANDLOCK_NOTE,) if landlocked and sidecar is None else (),
        policy_notes=tuple(_policy_notes(roots)),
    )
    if workspaces is not None:
        notes = (LANDLOCK_NOTE,) if landlocked and sidecar is None else ()
        access = (
            workspaces.shared_access()
            if lease is None
            else workspaces.access(lease, notes=notes, policy_notes=access.policy_notes)
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
        workspaces=workspaces,
        journals=journals,
        ask=ask,
    )
    if sidecar is not None and listener is not None:
        server = SandboxfsServer(options, access)
        trio.run(serve_http, server, listener, sidecar)
        return 0
    assert wire is not None
    server = SandboxfsServer(options, access)
    server.session_label = stdio_session(lease)
    log.info("sandboxfs %s serving MCP on stdio", __version__)
    code: int = trio.run(lambda: serve_stdio(server, wire, max_line=args.limits.line_bytes))
    return code


def _open_workspaces(
    args: Arguments, roots: list[Root], sidecar: SidecarOptions | None
) -> tuple[WorkspaceSessions | None, SessionLease | None]:
    """``--workspaces BASE``: BASE made (0700) if missing and opened, and over stdio
    this process's session held for the life of the server."""
    if args.workspaces is None:
        return None, None
    base = _expand(args.workspaces)
    try:
        os.makedirs(base, mode=0o700, exist_ok=True)
        base_root = Root.open(base)
    except OSError as exc:
        _fail(f"cannot open --workspaces {args.workspaces}: {exc.strerror or exc}")
    try:
        return workspace_setup(
            base_root,
            roots,
            http=sidecar is not None,
            token_required=sidecar is not None and sidecar.token is not None,
            workspace_id=args.workspace_id,
            no_xdev=args.no_xdev,
            policy=_global_policy(args),
        )
    except WorkspaceSetupError as exc:
        if exc.usage:
            print(f"sandboxfs: error: {exc}", file=sys.stderr)
            raise SystemExit(EXIT_USAGE) from None
        _fail(str(exc))


def _ask_rules(args: Arguments, roots: list[Root]) -> AskRules | None:
    """``--ask`` and the policy file's ``ask``: the changes that need the user's yes."""
    try:
        return ask_rules(args, roots)
    except PolicyError as exc:
        print(f"sandboxfs: error: {exc}\nsee 'sandboxfs --help'", file=sys.stderr)
        raise SystemExit(EXIT_USAGE) from None
    except OSError as exc:
        _fail(f"cannot read --policy {args.policy_file}: {exc.strerror}")


def _open_journal(
    args: Arguments, roots: list[Root], workspaces: WorkspaceSessions | None
) -> Journals | None:
    """``--journal DIR``: outside every allowed directory, made 0700 and opened."""
    try:
        return journal_setup(args, roots, workspaces.base.root if workspaces else None)
    except JournalSetupError as exc:
        _fail(str(exc))


def _listen(endpoint: Endpoint) -> tuple[socket.socket, Endpoint]:
    """The listening socket and the endpoint it really has (its port, for port 0)."""
    try:
        sock = listen(endpoint)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        _fail(f"cannot listen on {endpoint.describe()}: {reason}")
    except (OverflowError, ValueError) as exc:  # what the socket module says of odd input
        _fail(f"cannot listen on {endpoint.describe()}: {exc}")
    return sock, endpoint.bound(sock)


def _directories(args: Arguments) -> list[Directory]:
    """The allowed directories and their policies (command line, then --policy)."""
    rules = Rules(tuple(args.hide), tuple(args.protect), tuple(args.presets))
    try:
        return configure(args.directories, rules, args.policy_file, read_only=args.read_only)
    except PolicyError as exc:
        print(f"sandboxfs: error: {exc}\nsee 'sandboxfs --help'", file=sys.stderr)
        raise SystemExit(EXIT_USAGE) from None
    except OSError as exc:
        _fail(f"cannot read --policy {args.policy_file}: {exc.strerror}")


def _global_policy(args: Arguments) -> Policy:
    """The rules for every directory (--hide, --protect, --preset, a policy file's top
    level): what workspace directories carry."""
    rules = Rules(tuple(args.hide), tuple(args.protect), tuple(args.presets))
    try:
        return global_policy(rules, args.policy_file)
    except PolicyError as exc:
        print(f"sandboxfs: error: {exc}\nsee 'sandboxfs --help'", file=sys.stderr)
        raise SystemExit(EXIT_USAGE) from None
    except OSError as exc:
        _fail(f"cannot read --policy {args.policy_file}: {exc.strerror}")


def _policy_notes(roots: Sequence[Root]) -> list[str]:
    """What list_allowed_directories tells the agent of each directory's policy."""
    notes = []
    for root in roots:
        policy = root.policy
        if not policy.writable:
            notes.append(f"{root.given} is read-only: every change there is refused.")
        if policy.protect:
            shown = ", ".join(policy.protect)
            notes.append(f"In {root.given}, these stay readable but are never changed: {shown}")
        if policy.hide:
            notes.append(f"In {root.given}, some paths are hidden by policy and behave as absent.")
    return notes


def _open_roots(directories: Sequence[Directory]) -> list[Root]:
    roots: list[Root] = []
    for configured in directories:
        directory = configured.path
        try:
            root = Root.open(_expand(directory), configured.policy)
        except FileNotFoundError:
            _fail(f"allowed directory {directory} does not exist")
        except NotADirectoryError:
            _fail(f"allowed directory {directory} is not a directory")
        except OSError as exc:
            _fail(f"cannot open allowed directory {directory}: {exc.strerror}")
        for other in roots:
            nested = other.path == root.path or AllowList.of([other]).map(root.path) is not None
            nested = nested or AllowList.of([root]).map(other.path) is not None
            if nested and other.policy != root.policy:
                _fail(
                    f"allowed directories {other.given} and {directory} overlap with different "
                    "policies; give one policy, or directories that do not nest"
                )
        roots.append(root)
    nest_policies(roots)  # nested directories: each path judged by every one's rules
    for root in roots:
        if root.policy.active:
            log.info("Policy for %s: %s", root.given, root.policy.describe())
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


def _sidecar_options(args: Arguments) -> SidecarOptions:
    """Assemble the HTTP settings (the endpoint was checked with the command line);
    fail closed on anything unsafe."""
    endpoint = args.endpoint
    assert endpoint is not None
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
        grace_seconds=args.shutdown_grace,
    )


def _apply_landlock(roots: list[Root], args: Arguments, journal: Root | None = None) -> bool:
    """Confine the process with Landlock unless told not to; True if enforced."""
    if args.no_landlock:
        log.warning("Warning: Landlock disabled (--no-landlock): only openat2 confines paths")
        return False
    if not roots:
        log.warning(
            "WARNING: Landlock not applied: without command-line directories the client's "
            "Roots decide what is allowed; only openat2 confines paths"
        )
        return False
    try:
        # Per root: its policy too; the journal is the one other place it may write.
        status = landlock.confine(roots, read_only=args.read_only, journal=journal)
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


def _hash_token(argv: Sequence[str]) -> int:
    """``sandboxfs hash-token``: the token_sha256 of the token on stdin."""
    if argv:
        print("usage: sandboxfs hash-token < TOKEN_FILE", file=sys.stderr)
        return EXIT_USAGE
    token = sys.stdin.read().strip()
    if not token:
        _fail("hash-token: no token on stdin (e.g. sandboxfs hash-token < token)")
    print(hash_token(token))
    return EXIT_OK


def _serve_tenants(args: Arguments) -> int:
    """--tenants: the front, which starts one worker per tenant and routes to it."""
    try:
        tenants = load_tenants(args.tenants or "")
    except TenantsError as exc:
        _fail(str(exc))
    assert args.endpoint is not None
    listener, endpoint = _listen(args.endpoint)
    sidecar = SidecarOptions(
        endpoint=endpoint,
        token=None,  # each tenant's, from the tenants file
        allowed_hosts=tuple(args.allowed_hosts),
        allowed_origins=tuple(args.allowed_origins),
        json_response=args.json_response,
        max_body=args.limits.line_bytes,
        grace_seconds=args.shutdown_grace,
    )
    passed = [option for option in WORKER_OPTIONS if option in args.given]
    settings = WorkerSettings(
        rundir=make_rundir(),
        log_level=args.log_level,
        options=tuple(passed),
        grace_seconds=args.shutdown_grace,
    )
    log.info("sandboxfs %s: tenants front; workers' sockets in %s", __version__, settings.rundir)
    _confine_front(args)
    trio.run(serve_front, listener, sidecar, args.tenants or "", tenants, settings)
    return EXIT_OK


def _confine_front(args: Arguments) -> None:
    """The front's own Landlock: no TCP beyond its listening socket, signals and abstract
    sockets scoped.  Not the filesystem: the workers it starts inherit its domain."""
    if args.no_landlock:
        log.warning("Warning: Landlock disabled (--no-landlock) for the front and every worker")
        return
    try:
        status = landlock.confine_network()
    except (OSError, RuntimeError) as exc:
        if args.require_landlock:
            _fail(f"cannot apply Landlock to the front: {exc}")
        log.warning("WARNING: Landlock could not be applied to the front (%s)", exc)
        return
    if not status.enforced and args.require_landlock:
        _fail(f"--require-landlock: {status.detail}")
    log.info("front: %s", status.detail)
