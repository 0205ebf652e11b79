"""The server behind every session: its tools, resources and allowed directories.

:class:`SandboxfsServer` does the work a :class:`~sandboxfs.session.protocol.Session`
asks for.  A tool call goes from its name and arguments to its wire result:
argument validation against the tool's input schema, the tool in a worker
thread with timeouts, :class:`~sandboxfs.core.errors.SandboxError` as an
``isError`` result, one audit record.  A resource read and the opening of a
client's Roots go through the same confined filesystem layer.  It knows
nothing of JSON-RPC framing or of a transport.
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, TypeVar, final

import trio

from sandboxfs import __version__
from sandboxfs.session import era as eras
from sandboxfs.session.access import AccessControl, Effective
from sandboxfs.session.approval import ApprovalRequired, Asking, Sealer
from sandboxfs.session.argcheck import compile_schema
from sandboxfs.session.auditlog import AuditLog
from sandboxfs.session.blocking import BlockingRunner
from sandboxfs.session.callchanges import call_gate, call_recording, journal_store
from sandboxfs.session.effects import Caller
from sandboxfs.session.jsonrpc import (
    INVALID_PARAMS,
    ProtocolError,
)
from sandboxfs.session.metrics import (
    NO_METRICS,
    CallObserver,
    Outcome,
    known_tools,
    refusal_reason,
    tool_label,
)
from sandboxfs.session.protocol import SessionConfig
from sandboxfs.session.resources import FILE_TEMPLATE, read_resource
from sandboxfs.session.servinglimits import ServingLimits
from sandboxfs.session.toolwire import (
    ToolAnswer,
    WireResult,
    argument_problems,
    lone_surrogate_in,
    mount_kind,
    refused,
    to_wire,
    tool_definition,
    where_calls_run,
)
from sandboxfs.tools import (
    NO_WATCH,
    AccessDenied,
    Accounts,
    AskRules,
    CallContext,
    CrossesMount,
    JournalError,
    Journals,
    Limits,
    MountTable,
    ParseCache,
    Progress,
    RevisionCache,
    Sandbox,
    SandboxError,
    Sandboxes,
    Stall,
    ToolResult,
    ToolSpec,
    Watch,
    roots_from_uris,
    served_tools,
)

if TYPE_CHECKING:
    from sandboxfs.session.sessionworkspace import WorkspaceSessions

log = logging.getLogger("sandboxfs")

T = TypeVar("T")

INSTRUCTIONS: Final = (
    "sandboxfs serves files only inside its allowed directories; call "
    "list_allowed_directories first. Paths may be absolute or relative to the first "
    "allowed directory."
)

_NO_DIRECTORIES_2026: Final = (
    "Server cannot operate: no allowed directories. It was started without command-line "
    "directories, and on protocol version 2026-07-28 the client cannot provide them through "
    "Roots. Restart the server with the directories it may access as arguments."
)


@final
@dataclass(frozen=True)
class ServerOptions:
    """What the command line decided about serving."""

    read_only: bool = False
    no_xdev: bool = False
    limits: Limits = field(default_factory=Limits)
    #: Calls at once, worker threads, the step timeout (the serving caps).
    serving: ServingLimits = field(default_factory=ServingLimits)
    home: str | None = None
    #: How each call's sandbox is made (the command line gives it; None: from the above).
    sandboxes: Sandboxes | None = None
    #: Test-only artificial slowness (see sandboxfs.core.watch.Stall).
    stall: Stall | None = None
    accounts: Accounts = field(default_factory=Accounts)
    #: Whether a 2025-era client's Roots may change the allow-list (stdio only).
    roots: bool = True
    audit: AuditLog = field(default_factory=lambda: AuditLog(None))
    #: ``--workspaces``: every session's private directory and the stores.
    workspaces: WorkspaceSessions | None = None
    #: The mount table that decides which calls run inline (None: every call that
    #: touches the filesystem runs in a worker thread).
    mounts: MountTable | None = None
    #: Told of every call and refusal (the HTTP transports' /metrics).
    metrics: CallObserver = NO_METRICS
    #: ``--journal``: where every change is recorded.
    journals: Journals | None = None
    #: ``--ask``: the paths whose changes need the user's yes.
    ask: AskRules | None = None


@final
class SandboxfsServer:
    """One MCP server: its tools, its resources and the allow-list in force."""

    def __init__(self, options: ServerOptions, access: AccessControl) -> None:
        self.options = options
        self.access = access
        self.specs = served_tools(
            read_only=options.read_only,
            workspaces=options.workspaces is not None,
            journal=options.journals is not None,
        )
        self.by_name = {spec.name: spec for spec in self.specs}
        #: Every tool sandboxfs has, served here or not (the metrics' tool labels).
        self.tool_names = known_tools()
        self.schemas = {spec.name: spec.input_schema() for spec in self.specs}
        self.arguments_ok = {name: compile_schema(schema) for name, schema in self.schemas.items()}
        self.tool_definitions = [
            tool_definition(spec, self.schemas[spec.name]) for spec in self.specs
        ]
        #: Who this server says it is (``serverInfo``).
        self.server_info = {"name": "sandboxfs", "title": "sandboxfs", "version": __version__}
        serving = options.serving
        self.runner = BlockingRunner(
            worker_threads=serving.worker_threads,
            step_timeout=serving.fs_timeout,
            stall=options.stall,
        )
        self._calls = trio.CapacityLimiter(serving.concurrent_calls)
        #: How each call's sandbox is made: handed over by the command line (the
        #: composition root); a server made without one makes it from its options.
        self.sandboxes = options.sandboxes or Sandboxes(
            options.limits, RevisionCache(), options.no_xdev, options.home
        )
        #: code_map's parse results, shared by every call of this server.
        self.parses = ParseCache()
        #: Whether the allow-list last asked about is all local, what the notes say
        #: of it, and for which allow-list and mount table generation.
        self._inline_memo: tuple[object, int, bool, tuple[str, ...]] = (None, -1, False, ())
        #: The last sandbox made for an allow-list, by path (worker thread, inline):
        #: a sandbox is immutable, so calls on the same allow-list share one.
        self._sandboxes: dict[bool, tuple[object, Sandbox]] = {}
        #: Seals the state of a 2026-07-28 call that asks the user (--ask).
        self.sealer = Sealer()
        #: What the journal calls this server's session when it has no workspace (stdio:
        #: one per process), or None (HTTP: every request stands alone).
        self.session_label: str | None = None

    def session_config(self, *, http: bool = False) -> SessionConfig:
        """What a session of this server knows of it."""
        return SessionConfig(
            server_info=self.server_info,
            instructions=INSTRUCTIONS,
            tools=self.tool_definitions,
            resource_templates=[FILE_TEMPLATE],
            roots=self.options.roots and not http,
            has_directories=not self.access.cli.empty,
            http=http,
        )

    def with_access(self, access: AccessControl) -> SandboxfsServer:
        """This server serving another allow-list (one HTTP request's workspace): the
        tools, worker threads, call cap and revision cache stay shared."""
        view = copy.copy(self)
        view.access = access
        view._sandboxes = {}
        return view

    def sandbox(self, effective: Effective, *, inline: bool = False) -> Sandbox:
        """The sandbox of ``effective``'s allow-list (remembered for the last one)."""
        allow = effective.allow
        memo = self._sandboxes.get(inline)  # (one lookup: threads may replace it)
        if memo is not None and memo[0] is allow:
            return memo[1]
        sandbox = self.sandboxes.make(allow, inline=inline)
        self._sandboxes[inline] = (allow, sandbox)
        return sandbox

    # -- inline calls ------------------------------------------------------------------

    def local_directories(self, effective: Effective) -> tuple[bool, tuple[str, ...]]:
        """Whether every allowed directory of ``effective`` is on a local filesystem
        with no other kind of mount beneath it (see sandboxfs.core.mounts), so that
        a quick call may run inline; and the note that says where calls run.
        Remembered until the allow-list or the mount table changes (a look costs
        one non-blocking poll)."""
        mounts = self.options.mounts
        if mounts is None:
            return False, ()
        allow = effective.allow
        if not mounts.changed():
            memo_allow, generation, local, note = self._inline_memo
            if memo_allow is allow and generation == mounts.generation:
                return local, note
        kinds = [(root, *mount_kind(mounts, root)) for root in allow.roots]
        local = bool(kinds) and all(inline for _, inline, _ in kinds)
        note = (where_calls_run(kinds, self.options.serving.fs_timeout),) if kinds else ()
        self._inline_memo = (allow, mounts.generation, local, note)
        return local, note

    def inline_call(self, name: str, arguments: Any, caller: Caller) -> WireResult | None:
        """A quick tool call run here and now, audited, if it may run inline: a tool
        whose work is bounded and read-only, on allowed directories that are all
        local.  None: run it with :meth:`run_tool` (in a worker thread).  A call whose
        resolution would cross a mount point gives up (before it did anything) and
        answers None too."""
        spec = self.by_name.get(name)
        if (
            spec is None
            or not spec.quick
            or not isinstance(arguments, dict)
            or self.options.journals is not None  # a journal's first use may block
            or (spec.touches_filesystem and not self.local_directories(self.access.current)[0])
        ):
            return None
        started = time.monotonic()
        try:
            answer = self._inline_tool(spec, arguments, caller)
        except CrossesMount:
            return None
        self._audit_result(name, arguments, caller, started, answer)
        return answer.wire

    def _inline_tool(self, spec: ToolSpec, arguments: dict[str, Any], caller: Caller) -> ToolAnswer:
        prepared = self._prepare(spec, arguments, caller, inline=True)
        if isinstance(prepared, ToolAnswer):
            return prepared
        try:
            result = prepared(NO_WATCH)
        except (SandboxError, JournalError) as exc:
            return self._failed(spec, exc)
        return ToolAnswer(to_wire(result))

    async def bounded(self, fn: Callable[[Watch], T]) -> T:
        """Run blocking work within the concurrent-call cap."""
        async with self._calls:
            return await self.runner.run(fn)

    # -- Roots ----------------------------------------------------------------------------

    async def open_roots(self, uris: Sequence[str]) -> None:
        """Open the directories of a client's Roots answer and put them in force."""
        access = self.access
        try:
            roots = await self.bounded(
                lambda _watch: roots_from_uris(
                    uris,
                    access.cli,
                    confine=access.confine,
                    confinement=self.sandboxes.confinement,
                    policy=access.roots_policy,
                )
            )
        except SandboxError as exc:
            access.keep(str(exc))
            return
        access.install(roots)

    # -- tools ----------------------------------------------------------------------------

    async def run_tool(
        self,
        name: str,
        arguments: dict[str, Any],
        caller: Caller,
        progress: Progress | None = None,
        *,
        asking: Asking | None = None,
    ) -> WireResult:
        """One tool call, audited.  An unknown tool raises ProtocolError.  ``asking``:
        how the call may ask the user to approve a change (``--ask``)."""
        started = time.monotonic()
        spec = self.by_name.get(name)
        if spec is None:
            self._audit(name, arguments, caller, started, error="EINVAL")
            if self.options.read_only and name in self.tool_names:
                self.options.metrics.refused(name, "read_only")  # not served: --read-only
            raise ProtocolError(INVALID_PARAMS, f"Unknown tool: {name}")
        try:
            answer = await self._run_tool(spec, arguments, caller, progress, asking)
        except ApprovalRequired as required:  # 2026-07-28: the client asks, then retries
            self._audit(name, arguments, caller, started, error=None)
            return required.result
        self._audit_result(name, arguments, caller, started, answer)
        return answer.wire

    def _audit_result(
        self,
        name: str,
        arguments: dict[str, Any],
        caller: Caller,
        started: float,
        answer: ToolAnswer,
    ) -> None:
        self._audit(
            name,
            arguments,
            caller,
            started,
            error=answer.code,
            size=sum(
                len(block.get("text") or block.get("data") or "")
                for block in answer.wire["content"]
            ),
        )

    def _audit(
        self,
        name: str,
        arguments: dict[str, Any],
        caller: Caller,
        started: float,
        *,
        error: str | None,
        size: int = 0,
    ) -> None:
        seconds = time.monotonic() - started
        outcome: Outcome = "error" if error is not None else "ok"
        self.options.metrics.called(tool_label(name, self.tool_names), outcome, seconds, size)
        self.options.audit.record(
            tool=name,
            arguments=arguments,
            era=eras.of_version(caller.protocol_version) or "2025",
            protocol=caller.protocol_version,
            client=caller.client,
            peer=caller.peer,
            outcome=outcome,
            code=error,
            size=size,
            seconds=seconds,
        )

    async def _run_tool(
        self,
        spec: ToolSpec,
        arguments: dict[str, Any],
        caller: Caller,
        progress: Progress | None,
        asking: Asking | None = None,
    ) -> ToolAnswer:
        prepared = self._prepare(spec, arguments, caller, progress=progress, asking=asking)
        if isinstance(prepared, ToolAnswer):
            return prepared
        try:
            if spec.touches_filesystem:
                result = await self.bounded(prepared)
            else:
                result = prepared(NO_WATCH)
        except (SandboxError, JournalError) as exc:
            return self._failed(spec, exc)
        return ToolAnswer(to_wire(result))

    def _failed(self, spec: ToolSpec, exc: SandboxError | JournalError) -> ToolAnswer:
        """The answer of a call whose work raised ``exc`` (a refusal is counted)."""
        if isinstance(exc, JournalError):
            log.error("the change journal cannot be used: %s", exc)
            return refused(f"The change journal cannot be used: {exc}", "EIO")
        reason = refusal_reason(exc)
        if reason is not None:
            self.options.metrics.refused(spec.name, reason)
        return refused(str(exc), exc.code)

    def _prepare(
        self,
        spec: ToolSpec,
        arguments: dict[str, Any],
        caller: Caller,
        *,
        progress: Progress | None = None,
        inline: bool = False,
        asking: Asking | None = None,
    ) -> ToolAnswer | Callable[[Watch], ToolResult]:
        """The work of one call, ready to run with a watch; or the error result that
        answers it without work (arguments refused, no allowed directory)."""
        if not self.arguments_ok[spec.name](arguments):
            details = argument_problems(self.schemas[spec.name], arguments)
            return refused(f"Invalid arguments for tool {spec.name}: {details}")
        unencodable = lone_surrogate_in(arguments)
        if unencodable is not None:
            return refused(f"{unencodable} is not valid Unicode (it contains a lone surrogate)")
        effective = self.access.current
        if effective.allow.empty and spec.name != "list_allowed_directories":
            modern = eras.of_version(caller.protocol_version) == "2026"
            message = (
                _NO_DIRECTORIES_2026
                if modern and self.access.cli.empty
                else "Access denied - no allowed directories"
            )
            self.options.metrics.refused(spec.name, "outside")
            return refused(message, AccessDenied.default_code)
        sandbox = self.sandbox(effective, inline=inline)
        allowed = tuple(effective.allow.display())
        # The Roots note matters only to a client that has Roots (2025 era, stdio).
        notes = self.access.notes if eras.of_version(caller.protocol_version) != "2026" else ()
        notes += self.access.policy_notes  # what each directory's policy allows, in every era
        notes += self.local_directories(effective)[1]  # where calls run, per directory
        handler = spec.handler
        gate = call_gate(self, spec, arguments, caller, asking)

        def work(watch: Watch) -> ToolResult:
            extra: dict[str, Any] = {"progress": progress} if progress is not None else {}
            journal = journal_store(self) if spec.touches_filesystem else None
            recording = call_recording(self, journal, spec, arguments, caller)
            viewed = sandbox if watch is NO_WATCH else sandbox.with_watch(watch)
            if recording is not None:
                viewed = viewed.recording(recording)
            if gate is not None:
                viewed = viewed.gated(gate)
            context = CallContext(
                sandbox=viewed,
                limits=self.options.limits,
                allowed=allowed,
                notes=notes,
                home=self.options.home,
                accounts=self.options.accounts,
                parses=self.parses,
                workspace=self.access.workspace,
                journal=journal,
                **extra,
            )
            try:
                return handler(context, **arguments)
            finally:
                if recording is not None:
                    recording.finish()  # a change made is recorded, even by a call that failed

        return work

    # -- resources ---------------------------------------------------------------------------

    async def read_resource(self, uri: str) -> dict[str, Any]:
        """``resources/read`` of one ``file://`` URI (see sandboxfs.session.resources)."""
        return await read_resource(self, uri)
