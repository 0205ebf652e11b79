"""Serving one configuration: open the directories, confine the process, then serve
stdio or HTTP.

The configuration is decided whole before anything is opened
(:mod:`sandboxfs.cli.config`): it is served exactly as the startup line says, or
refused (exit status 2, one line naming the conflict).  Startup then fails
closed, and every failure is one line on stderr: without a working ``openat2``,
with a directory that does not exist, with a port that is taken, the server
exits with status 1 and says why.  Ctrl-C ends it with status 130 and one line,
leaving nothing behind.  What the operator sees in the log is written for the
operator; the server's internals go to the debug level.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Sequence
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING, Final

import trio

from sandboxfs import __version__
from sandboxfs.binding.syscalls import Openat2Unavailable, probe_openat2, set_mmap_threshold
from sandboxfs.cli import hardening, logformat
from sandboxfs.cli.approvals import ask_rules
from sandboxfs.cli.arguments import (
    EXIT_OK,
)
from sandboxfs.cli.cleanup import SocketCleanup, interrupts_held
from sandboxfs.cli.config import Config
from sandboxfs.cli.exits import interrupted
from sandboxfs.cli.journal import SetupError as JournalSetupError
from sandboxfs.cli.journal import setup as journal_setup
from sandboxfs.cli.journal import stdio_session
from sandboxfs.cli.policies import Directory
from sandboxfs.cli.replicas import serve_http_replicas
from sandboxfs.cli.startup import fail, listen_on
from sandboxfs.cli.workspacescommand import SetupError as WorkspaceSetupError
from sandboxfs.cli.workspacescommand import setup as workspace_setup
from sandboxfs.core import landlock
from sandboxfs.core.allowlist import AllowList, Root, nest_policies
from sandboxfs.core.mounts import MountTable
from sandboxfs.core.watch import Stall
from sandboxfs.fs.approval import AskRules
from sandboxfs.fs.journals import Journals
from sandboxfs.fs.revisions import RevisionCache
from sandboxfs.fs.sandboxes import Sandboxes
from sandboxfs.fs.workspacebase import SessionLease
from sandboxfs.session.access import AccessControl
from sandboxfs.session.auditlog import AuditLog, Lines
from sandboxfs.session.dispatcher import SandboxfsServer, ServerOptions
from sandboxfs.session.metrics import NO_METRICS, known_tools
from sandboxfs.session.sessionworkspace import WorkspaceSessions
from sandboxfs.tools.ownernames import Accounts
from sandboxfs.tools.parsepool import ParserPool
from sandboxfs.transports.http.credentials import WEAK_WARNING
from sandboxfs.transports.http.server import SidecarOptions, serve_http
from sandboxfs.transports.stdio import serve_stdio, take_stdio

if TYPE_CHECKING:
    import socket

    from sandboxfs.transports.http.metrics import ServerMetrics


log = logging.getLogger("sandboxfs")


#: Allocations at least this big get a mapping of their own (see set_mmap_threshold).
_OWN_MAPPING_BYTES: Final = 128 * 1024


LANDLOCK_NOTE: Final = (
    "Landlock confines this server to the command-line directories: client Roots can "
    "narrow them but not add others."
)


def serve(config: Config) -> int:
    """Open the directories, confine the process, then serve stdio or HTTP."""
    for name in config.test_switches:
        log.warning("WARNING: TEST MODE: %s is set; never set it in production", name)
    if config.allow_weak_tokens:
        log.warning("%s", WEAK_WARNING)
    try:
        probe_openat2()
    except Openat2Unavailable as exc:
        fail(str(exc))
    try:
        # Big buffers (whole reads, edits, large results) go back to the kernel when
        # freed instead of staying in a worker thread's malloc arena.
        set_mmap_threshold(_OWN_MAPPING_BYTES)
    except OSError:
        log.debug("the C library keeps its own mmap threshold")
    if config.tenants is not None:
        from sandboxfs.cli.front import serve_tenants  # noqa: PLC0415

        return serve_tenants(config)
    pools = hardening.start_parsers(config)  # before any allowed directory is opened
    roots = _open_roots(config.directories)
    # Everything that needs the filesystem or the network outside the allowed
    # directories happens before Landlock: the wire, the audit log, user names.
    sidecar = _sidecar_options(config)
    listener = cleanup = metrics_listener = None
    try:
        if sidecar is not None:
            with interrupts_held():  # a socket is made only with what removes it
                listener, endpoint = listen_on(sidecar.endpoint)
                if endpoint.unix is not None:
                    cleanup = SocketCleanup(endpoint.unix, confined=config.landlock != "off")
            sidecar = replace(sidecar, endpoint=endpoint)  # with the port it really got
            config = replace(config, endpoint=endpoint)
            if config.metrics is not None:
                metrics_listener, metrics_endpoint = listen_on(config.metrics)
                config = replace(config, metrics=metrics_endpoint)
        log.info("%s", config.describe())
        return _serve(config, roots, sidecar, (listener, metrics_listener), pools)
    finally:
        if cleanup is not None:
            cleanup.finish()


def _serve(
    config: Config,
    roots: list[Root],
    sidecar: SidecarOptions | None,
    listeners: tuple[socket.socket | None, socket.socket | None],
    pools: list[ParserPool],
) -> int:
    listener, metrics_listener = listeners
    wire = take_stdio() if sidecar is None else None
    metrics = None if sidecar is None else server_metrics()
    audit = AuditLog(_open_audit_log(config.audit_log))
    accounts = Accounts.load()
    workspaces, lease = _open_workspaces(config, roots)
    stall = Stall.from_env(os.environ)
    # Read before Landlock (it is in /proc); a test stall needs every call watched.
    # One per server process (--workers): a change notice is read once per open file.
    journals = _open_journal(config, roots, workspaces)
    ask = _ask_rules(config, roots)  # (the policy file is read before Landlock)
    pools = _one_process_if_asking(config, ask, pools)
    tables = [MountTable.open() if stall is None else None for _ in pools]
    # Landlock covers BASE as a whole (sessions appear after it is applied).
    confined = roots if workspaces is None else [workspaces.base.root, *roots]
    landlocked = _apply_landlock(confined, config, journals.root if journals else None)
    hardening.confine_server(config, listener)  # seccomp: the third layer
    access = access_control(config, roots, landlocked=landlocked)
    if workspaces is not None:
        access = (
            workspaces.shared_access()
            if lease is None
            else workspaces.access(lease, notes=access.notes, policy_notes=access.policy_notes)
        )
    access.announce()
    home = os.environ.get("HOME")
    # The composition root hands the session how each call's sandbox is made.
    sandboxes = Sandboxes(config.limits, RevisionCache(), config.no_xdev, home)
    options = ServerOptions(
        read_only=config.read_only,
        no_xdev=config.no_xdev,
        limits=config.limits,
        serving=config.serving,
        home=home,
        sandboxes=sandboxes,
        stall=stall,
        accounts=accounts,
        roots=sidecar is None,
        audit=audit,
        workspaces=workspaces,
        mounts=tables[0],
        metrics=NO_METRICS if metrics is None else metrics,
        journals=journals,
        ask=ask,
    )
    server = SandboxfsServer(options, access)
    for note in server.local_directories(access.current)[1]:
        log.info("%s", note)
    if sidecar is not None and listener is not None:
        if len(pools) > 1:
            return serve_http_replicas(
                server,
                (listener, metrics_listener),
                sidecar,
                pools=pools,
                tables=tables,
                metrics=metrics,
            )
        serving = partial(serve_http, metrics=metrics, metrics_listener=metrics_listener)
        stopped_by = trio.run(serving, server, listener, sidecar)
        if stopped_by == signal.SIGINT:  # drained like SIGTERM, but Ctrl-C says so
            return interrupted()
        return EXIT_OK
    assert wire is not None
    server.session_label = stdio_session(lease)
    log.info("sandboxfs %s serving MCP on stdio", __version__)
    code: int = trio.run(lambda: serve_stdio(server, wire, max_line=config.serving.line_bytes))
    return code


def server_metrics() -> ServerMetrics:
    """The metrics of an HTTP server (prometheus_client is imported only for HTTP)."""
    from sandboxfs.transports.http.metrics import ServerMetrics  # noqa: PLC0415

    return ServerMetrics(known_tools())


def access_control(config: Config, roots: list[Root], *, landlocked: bool) -> AccessControl:
    """The allow-list a server starts with, what list_allowed_directories says of it,
    and what a client's Roots may do: narrow it, or name the directories served
    (each under the rules given for every directory)."""
    notes = (LANDLOCK_NOTE,) if landlocked and not config.serves_http else ()
    return AccessControl(
        AllowList.of(roots),
        confine=config.roots == "confine",
        notes=notes,
        policy_notes=tuple(config.policy_notes()),
        roots_policy=config.roots_policy,
    )


def _ask_rules(config: Config, roots: list[Root]) -> AskRules | None:
    """``--ask`` and the policy file's ``ask``: the changes that need the user's yes
    (the patterns were checked with the configuration)."""
    try:
        return ask_rules(config, roots)
    except OSError as exc:
        fail(f"cannot read --policy {config.policy_file}: {exc.strerror}")


def _one_process_if_asking(
    config: Config, ask: AskRules | None, pools: list[ParserPool]
) -> list[ParserPool]:
    """``--ask`` over HTTP is served by one process: a 2025-era client answers a
    question with a POST of its own, which must reach the process whose call waits
    for it (the listener gives each connection to any of them).  ``--workers N`` given
    beside it is refused; the default (the CPUs) becomes one process, and says so."""
    if ask is None or not ask.active or len(pools) <= 1:
        return pools
    if "--workers" in config.given:
        for pool in pools:
            pool.forget()
        fail(
            f"--workers {len(pools)} cannot serve --ask (or a policy file's ask keys): a "
            "client's answer to a question must reach the process that asked it; use "
            "--workers 1"
        )
    log.info(
        "--ask: served by one process, not %d (a client's answer to a question must "
        "reach the process that asked it)",
        len(pools),
    )
    for pool in pools[1:]:
        pool.forget()
    return pools[:1]


def _open_journal(
    config: Config, roots: list[Root], workspaces: WorkspaceSessions | None
) -> Journals | None:
    """``--journal DIR``: outside every allowed directory, made 0700 and opened."""
    try:
        return journal_setup(config, roots, workspaces.base.root if workspaces else None)
    except JournalSetupError as exc:
        fail(str(exc))


def _open_workspaces(
    config: Config, roots: list[Root]
) -> tuple[WorkspaceSessions | None, SessionLease | None]:
    """``--workspaces BASE``: BASE made (0700) if missing and opened, and over stdio
    this process's session held for the life of the server."""
    if config.workspaces is None:
        return None, None
    try:
        os.makedirs(config.workspaces, mode=0o700, exist_ok=True)
        base_root = Root.open(config.workspaces)
    except OSError as exc:
        fail(f"cannot open --workspaces {config.workspaces}: {exc.strerror or exc}")
    try:
        return workspace_setup(
            base_root,
            roots,
            http=config.serves_http,
            token_required=config.token is not None,
            workspace_id=config.workspace_id,
            no_xdev=config.no_xdev,
            policy=config.workspace_policy,
        )
    except WorkspaceSetupError as exc:
        fail(str(exc))


def _open_roots(directories: Sequence[Directory]) -> list[Root]:
    roots: list[Root] = []
    for configured in directories:
        directory = configured.path
        try:
            root = Root.open(directory, configured.policy)
        except FileNotFoundError:
            fail(f"allowed directory {directory} does not exist")
        except NotADirectoryError:
            fail(f"allowed directory {directory} is not a directory")
        except OSError as exc:
            fail(f"cannot open allowed directory {directory}: {exc.strerror}")
        for other in roots:
            nested = other.path == root.path or AllowList.of([other]).map(root.path) is not None
            nested = nested or AllowList.of([root]).map(other.path) is not None
            if nested and other.policy != root.policy:
                fail(
                    f"allowed directories {other.given} and {directory} overlap with different "
                    "policies; give one policy, or directories that do not nest"
                )
        roots.append(root)
    nest_policies(roots)  # nested directories: each path judged by every one's rules
    for root in roots:
        if root.policy.active:
            log.info("Policy for %s: %s", root.given, root.policy.describe())
    return roots


def _open_audit_log(target: str) -> Lines | None:
    if target == "off":
        return None
    if target == "-":
        return logformat.WRITER  # whole lines, never inside an operator's line
    try:
        return open(target, "a", encoding="utf-8", buffering=1)  # kept open for the run
    except OSError as exc:
        fail(f"cannot open the audit log {target}: {exc.strerror}")


def _sidecar_options(config: Config) -> SidecarOptions | None:
    """The HTTP settings of a configuration that serves HTTP (None for stdio)."""
    if config.endpoint is None:
        return None
    if config.token is None and config.endpoint.unix is None:
        log.warning(
            "WARNING: no bearer token: any local process can use this server; pass "
            "--token-file FILE or set SANDBOXFS_TOKEN",
        )
    return SidecarOptions(
        endpoint=config.endpoint,
        token=config.token,
        allowed_hosts=config.allowed_hosts,
        allowed_origins=config.allowed_origins,
        json_response=config.json_response,
        max_body=config.serving.line_bytes,
        grace_seconds=config.shutdown_grace,
        send_timeout=config.send_timeout,
    )


def _apply_landlock(roots: list[Root], config: Config, journal: Root | None = None) -> bool:
    """Confine the process with Landlock unless told not to; True if enforced."""
    if config.landlock == "off":
        log.warning("Warning: Landlock disabled (--no-landlock): only openat2 confines paths")
        return False
    if not roots:  # (refused with --require-landlock)
        log.warning(
            "WARNING: Landlock not applied: without command-line directories the client's "
            "Roots decide what is allowed; only openat2 confines paths"
        )
        return False
    required = config.landlock == "require"
    try:
        # Per root: its policy too; the journal is the one other place it may write.
        status = landlock.confine(roots, read_only=config.read_only, journal=journal)
    except (OSError, RuntimeError) as exc:
        if required:
            fail(f"cannot apply Landlock: {exc}")
        log.warning("WARNING: Landlock could not be applied (%s); only openat2 confines paths", exc)
        return False
    if not status.enforced:
        if required:
            fail(f"--require-landlock: {status.detail}")
        log.warning(
            "WARNING: %s; only openat2 confines paths (use --require-landlock to refuse)",
            status.detail,
        )
        return False
    log.info("%s", status.detail)
    return True
