"""The server itself, without the MCP SDK: its tools, allow-list and handshake facts.

:class:`SandboxfsServer` runs a tool call from its name and arguments to its
wire result: argument validation against the tool's input schema, waiting for
a Roots update, running the tool in a worker thread with timeouts, turning
:class:`~sandboxfs.core.errors.SandboxError` into an ``isError`` result.  It also
knows what the server answers to ``initialize`` and ``tools/list``, so the stdio
fast lane can answer them before the SDK is loaded.  The SDK adapter
(:mod:`sandboxfs.session.sdkserver`) serves everything else; nothing here imports the SDK.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar, final

import pydantic_core
import trio

from sandboxfs import __version__
from sandboxfs.core.chokepoint import Confinement
from sandboxfs.core.errors import AccessDenied, SandboxError
from sandboxfs.core.resolver import Resolver
from sandboxfs.core.roots import roots_from_uris
from sandboxfs.core.watch import NO_WATCH, Stall, Watch
from sandboxfs.fs.limits import Limits
from sandboxfs.fs.revisions import RevisionCache
from sandboxfs.fs.sandbox import Sandbox
from sandboxfs.session.access import AccessControl, Effective
from sandboxfs.session.argcheck import compile_schema
from sandboxfs.session.auditlog import AuditLog
from sandboxfs.session.blocking import BlockingRunner
from sandboxfs.session.jsonrpc import INVALID_PARAMS, MODERN_VERSIONS, ProtocolError
from sandboxfs.tools import CallContext, MediaBlock, ToolResult, ToolSpec, served_tools
from sandboxfs.tools.accounts import Accounts

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
_NO_DIRECTORIES_NO_ROOTS: Final = (
    "Server cannot operate: no allowed directories. It was started without command-line "
    "directories and the client does not support MCP Roots. Either start the server with "
    "directory arguments, or use a client that provides Roots."
)
_SURROGATE = re.compile("[\ud800-\udfff]")


def clean_text(text: str) -> str:
    """Text safe for JSON: bytes that were not UTF-8 in names become U+FFFD."""
    if text.isascii() or _SURROGATE.search(text) is None:
        return text
    cleaned: str = text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    return cleaned


def _clean_json(value: dict[str, Any]) -> dict[str, Any]:
    """A structured result with every string (keys too) safe for JSON.

    Top-level strings (a whole file's text) are checked in place, without a copy.
    Anything nested is checked by one ``pydantic_core.to_json``, which refuses lone
    surrogates: a 1,000-entry listing costs 0.3 ms instead of ~4 ms string by string.
    """
    nested = {k: v for k, v in value.items() if not isinstance(v, str)}
    clean = all(clean_text(k) is k for k in value) and all(
        clean_text(v) is v for v in value.values() if isinstance(v, str)
    )
    if clean and nested:
        try:
            pydantic_core.to_json(nested)
        except pydantic_core.PydanticSerializationError:
            clean = False
    return value if clean else _clean_each(value)


def _clean_each(value: Any) -> Any:
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, dict):
        return {clean_text(k): _clean_each(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean_each(v) for v in value]
    return value


def _argument_problems(schema: dict[str, Any], arguments: dict[str, Any]) -> str:
    """Why ``arguments`` do not satisfy ``schema``, as jsonschema explains it."""
    import jsonschema  # noqa: PLC0415 - only refusals need it (and it is slow to import)

    errors = jsonschema.Draft202012Validator(schema).iter_errors(arguments)
    problems = []
    for error in sorted(errors, key=str):
        where = "/".join(str(p) for p in error.absolute_path)
        if error.validator == "additionalProperties" or not where:
            problems.append(error.message)
        else:
            problems.append(f"'{where}': {error.message}")
    return "; ".join(problems) or "they do not match the tool's input schema"


#: A tool call's result as the 2025 era writes it: ``content`` blocks, ``isError``,
#: and ``structuredContent`` when there is one (2026-07-28 adds ``resultType`` and
#: the ``serverInfo`` stamp).
WireResult = dict[str, Any]


def error_result(message: str, code: str = "EINVAL") -> WireResult:
    """A tool error the model sees (``isError``), with its code for clients."""
    message = clean_text(message)
    return {
        "content": [{"type": "text", "text": message}],
        "structuredContent": {"error": {"code": code, "message": message}},
        "isError": True,
    }


def _media_block(block: MediaBlock) -> dict[str, Any]:
    if block.kind in ("image", "audio"):
        return {"type": block.kind, "data": block.data, "mimeType": block.mime}
    resource = {"uri": block.uri or "file:///", "mimeType": block.mime, "blob": block.data}
    return {"type": "resource", "resource": resource}


def to_wire(result: ToolResult) -> WireResult:
    """A tool's result in wire form, built directly (the SDK's models would copy it
    twice); every string is made safe for JSON."""
    content: list[dict[str, Any]] = []
    if result.text is not None:
        content.append({"type": "text", "text": clean_text(result.text)})
    if result.media is not None:
        content.append(_media_block(result.media))
    wire: WireResult = {"content": content, "isError": False}
    if result.structured is not None:
        wire["structuredContent"] = _clean_json(result.structured)
    return wire


def tool_definition(spec: ToolSpec, input_schema: dict[str, Any]) -> dict[str, Any]:
    """A tool as ``tools/list`` describes it on the wire."""
    a = spec.annotations
    return {
        "name": spec.name,
        "title": spec.title,
        "description": spec.description,
        "inputSchema": input_schema,
        "annotations": {
            "readOnlyHint": a.read_only,
            "destructiveHint": a.destructive,
            "idempotentHint": a.idempotent,
            "openWorldHint": a.open_world,
        },
    }


@final
class InputCloser:
    """Ends the connection from inside: stops reading, so the server loop sees end of
    input, answers what it can, and returns once everything is written."""

    def __init__(self) -> None:
        self.scope = trio.CancelScope()

    def close(self) -> None:
        self.scope.cancel()


@final
@dataclass(frozen=True, slots=True)
class Caller:
    """Who makes a tool call, as the audit log and the era-specific messages need it."""

    protocol_version: str
    client: str | None = None
    peer: str | None = None


@final
@dataclass(frozen=True)
class ServerOptions:
    """What the command line decided about serving."""

    read_only: bool = False
    no_xdev: bool = False
    limits: Limits = field(default_factory=Limits)
    home: str | None = None
    #: Test-only artificial slowness (see sandboxfs.core.watch.Stall).
    stall: Stall | None = None
    accounts: Accounts = field(default_factory=Accounts)
    #: Whether a 2025-era client's Roots may change the allow-list (stdio only).
    roots: bool = True
    audit: AuditLog = field(default_factory=lambda: AuditLog(None))


@final
class SandboxfsServer:
    """One MCP server instance: its tools, its allow-list and its Roots handling."""

    def __init__(
        self, options: ServerOptions, access: AccessControl, closer: InputCloser | None = None
    ) -> None:
        self.options = options
        self.access = access
        self.closer = closer
        self.exit_code = 0
        self.specs = served_tools(read_only=options.read_only)
        self.by_name = {spec.name: spec for spec in self.specs}
        self.schemas = {spec.name: spec.input_schema() for spec in self.specs}
        self.arguments_ok = {name: compile_schema(schema) for name, schema in self.schemas.items()}
        self.tool_definitions = [
            tool_definition(spec, self.schemas[spec.name]) for spec in self.specs
        ]
        #: Who this server says it is (``serverInfo``).
        self.server_info = {"name": "sandboxfs", "title": "sandboxfs", "version": __version__}
        limits = options.limits
        self.runner = BlockingRunner(
            worker_threads=limits.worker_threads,
            step_timeout=limits.fs_timeout,
            stall=options.stall,
        )
        self._calls = trio.CapacityLimiter(limits.concurrent_calls)
        self.revisions = RevisionCache()
        #: The resolve flags every call of this server uses.
        self.confinement = Confinement(no_xdev=options.no_xdev)
        #: The Roots update a client's ``initialize`` began (fetched once initialized).
        self.initial_roots: int | None = None
        #: What of the handshake the SDK is about to see again (see expect_replay).
        self._replayed_initialize = False
        self._replayed_initialized = False

    # -- the 2025-era handshake ---------------------------------------------------

    def on_initialize(self, params: Any) -> None:
        """A client's ``initialize``: a client with Roots makes calls wait for them;
        without Roots or directories the server cannot work (ProtocolError, and
        the connection ends).  The replay of one the fast lane greeted is ignored."""
        if self._replayed_initialize:
            self._replayed_initialize = False
            return
        if not self.options.roots:
            return
        capabilities = params.get("capabilities") if isinstance(params, dict) else None
        has_roots = isinstance(capabilities, dict) and capabilities.get("roots") is not None
        if has_roots:
            # Calls from now on wait for the client's Roots (fetched once initialized).
            self.initial_roots = self.access.begin_update()
            return
        if self.access.cli.empty:
            log.error("Error: %s", _NO_DIRECTORIES_NO_ROOTS)
            self.exit_code = 1
            if self.closer is not None:
                self.closer.close()
            raise ProtocolError(INVALID_PARAMS, _NO_DIRECTORIES_NO_ROOTS)

    def may_greet(self, capabilities: dict[str, Any]) -> bool:
        """Whether the fast lane may answer an ``initialize`` with these client
        capabilities itself: one :meth:`on_initialize` accepts."""
        refused = self.options.roots and self.access.cli.empty and "roots" not in capabilities
        return not refused

    def initialize_result(self, version: str) -> dict[str, Any]:
        """The ``initialize`` answer for a handshake version the client asked for."""
        return {
            "protocolVersion": version,
            "capabilities": {
                "resources": {"listChanged": False, "subscribe": False},
                "tools": {"listChanged": False},
            },
            "serverInfo": dict(self.server_info),
            "instructions": INSTRUCTIONS,
        }

    def lane_initialized(self) -> int | None:
        """The fast lane saw ``notifications/initialized`` after greeting the client:
        the Roots update to fetch, if the client has Roots."""
        generation, self.initial_roots = self.initial_roots, None
        if generation is None:
            self.initialized_without_roots()
        return generation

    def lane_roots_changed(self) -> int:
        """The client's Roots changed (the fast lane took the notification): the
        update to fetch."""
        return self.access.begin_update()

    def expect_replay(self, *, initialized: bool) -> None:
        """The SDK is about to receive the handshake the fast lane answered: its
        ``initialize`` (and ``initialized``, if sent) were already acted on."""
        self._replayed_initialize = True
        self._replayed_initialized = initialized

    def replayed_initialized(self) -> bool:
        """Whether an ``initialized`` the SDK receives is the fast lane's replay of one
        already handled (true once)."""
        replayed, self._replayed_initialized = self._replayed_initialized, False
        return replayed

    async def fill_roots(self, generation: int, fetch: Callable[[], Awaitable[list[str]]]) -> None:
        """Finish the Roots update ``generation`` with the URIs ``fetch`` gets from the
        client; if it fails (an error answer, a timeout, a closed connection), keep
        the directories in force."""
        access = self.access
        try:
            uris = await fetch()
        except Exception as exc:
            access.fail_update(generation, clean_text(str(exc)) or type(exc).__name__)
            return
        try:
            roots = await self.bounded(
                lambda _watch: roots_from_uris(
                    uris, access.cli, confine=access.confine, confinement=self.confinement
                )
            )
        except SandboxError as exc:
            access.fail_update(generation, str(exc))
            return
        access.finish_update(generation, roots)

    def initialized_without_roots(self) -> None:
        """Initialized, with no Roots to fetch: the command line decides."""
        if self.options.roots and not self.access.cli.empty:
            self.access.client_without_roots()

    # -- tools --------------------------------------------------------------------

    def sandbox(self, effective: Effective) -> Sandbox:
        resolver = Resolver(
            effective.allow,
            symlink_hops=self.options.limits.symlink_hops,
            confinement=self.confinement,
            home=self.options.home,
        )
        return Sandbox(resolver, self.options.limits, self.revisions)

    async def bounded(self, fn: Callable[[Watch], T]) -> T:
        """Run blocking work within the concurrent-call cap."""
        async with self._calls:
            return await self.runner.run(fn)

    async def run_tool(self, name: str, arguments: dict[str, Any], caller: Caller) -> WireResult:
        """One tool call, audited: the SDK's handler and the fast lane both come here.
        An unknown tool raises ProtocolError."""
        started = time.monotonic()
        result = await self._run_tool(name, arguments, caller)
        failed = bool(result["isError"])
        structured = result.get("structuredContent")
        error = structured.get("error") if failed and isinstance(structured, dict) else None
        self.options.audit.record(
            tool=name,
            arguments=arguments,
            era="2026" if caller.protocol_version in MODERN_VERSIONS else "2025",
            protocol=caller.protocol_version,
            client=caller.client,
            peer=caller.peer,
            outcome="error" if failed else "ok",
            code=error.get("code") if isinstance(error, dict) else None,
            size=sum(
                len(block.get("text") or block.get("data") or "") for block in result["content"]
            ),
            seconds=time.monotonic() - started,
        )
        return result

    async def run_lane_tool(
        self, name: str, arguments: dict[str, Any], protocol_version: str, client: str | None
    ) -> WireResult:
        """:meth:`run_tool` for the fast lane, which maps unexpected errors itself."""
        return await self.run_tool(name, arguments, Caller(protocol_version, client=client))

    async def _run_tool(self, name: str, arguments: dict[str, Any], caller: Caller) -> WireResult:
        spec = self.by_name.get(name)
        if spec is None:
            raise ProtocolError(INVALID_PARAMS, f"Unknown tool: {name}")
        if not self.arguments_ok[spec.name](arguments):
            details = _argument_problems(self.schemas[spec.name], arguments)
            return error_result(f"Invalid arguments for tool {spec.name}: {details}")
        try:
            effective = await self.access.ready()
        except SandboxError as exc:
            return error_result(str(exc), exc.code)
        if effective.allow.empty and spec.name != "list_allowed_directories":
            modern = caller.protocol_version in MODERN_VERSIONS
            message = (
                _NO_DIRECTORIES_2026
                if modern and self.access.cli.empty
                else "Access denied - no allowed directories"
            )
            return error_result(message, AccessDenied.default_code)
        sandbox = self.sandbox(effective)
        allowed = tuple(effective.allow.display())

        def work(watch: Watch) -> ToolResult:
            context = CallContext(
                sandbox=sandbox.with_watch(watch),
                limits=self.options.limits,
                allowed=allowed,
                notes=self.access.notes,
                home=self.options.home,
                accounts=self.options.accounts,
            )
            return spec.handler(context, **arguments)

        try:
            result = await self.bounded(work) if spec.touches_filesystem else work(NO_WATCH)
        except SandboxError as exc:
            return error_result(str(exc), exc.code)
        return to_wire(result)
