"""The MCP adapter: tool declarations become MCP tools, results become content blocks.

It only adapts: argument validation against each tool's input schema, waiting
for a Roots update, running the tool in a worker thread with timeouts, and
turning :class:`~sandboxfs.errors.SandboxError` into an ``isError`` result.
Unexpected exceptions become -32603 "Internal error" with the details on stderr.
"""

from __future__ import annotations

import base64
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar, final

import mcp_types as types
import pydantic_core
import trio
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp.shared.exceptions import MCPError
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError

from sandboxfs import __version__
from sandboxfs.access import AccessControl, Effective, local_path, roots_from_uris
from sandboxfs.accounts import Accounts
from sandboxfs.argcheck import compile_schema
from sandboxfs.auditlog import AuditLog
from sandboxfs.blocking import BlockingRunner
from sandboxfs.errors import AccessDenied, IsADirectory, NotFound, SandboxError
from sandboxfs.limits import Limits
from sandboxfs.mime import guess_mime, is_textual
from sandboxfs.resolver import Resolver
from sandboxfs.revisions import RevisionCache
from sandboxfs.sandbox import Sandbox
from sandboxfs.stdio import InputCloser
from sandboxfs.tools import CallContext, MediaBlock, ToolResult, ToolSpec, served_tools
from sandboxfs.tools.reading import whole_bytes
from sandboxfs.watch import NO_WATCH, Stall, Watch

log = logging.getLogger("sandboxfs")

T = TypeVar("T")

#: Every protocol version served: the 2025 handshake era and 2026-07-28.
SUPPORTED_VERSIONS: Final = (*HANDSHAKE_PROTOCOL_VERSIONS, *MODERN_PROTOCOL_VERSIONS)
#: How long the server waits for a client's answer to roots/list.
ROOTS_FETCH_TIMEOUT: Final = 30.0

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


def _clean(text: str) -> str:
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
    clean = all(_clean(k) is k for k in value) and all(
        _clean(v) is v for v in value.values() if isinstance(v, str)
    )
    if clean and nested:
        try:
            pydantic_core.to_json(nested)
        except pydantic_core.PydanticSerializationError:
            clean = False
    return value if clean else _clean_each(value)


def _clean_each(value: Any) -> Any:
    if isinstance(value, str):
        return _clean(value)
    if isinstance(value, dict):
        return {_clean(k): _clean_each(v) for k, v in value.items()}
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
    message = _clean(message)
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
        content.append({"type": "text", "text": _clean(result.text)})
    if result.media is not None:
        content.append(_media_block(result.media))
    wire: WireResult = {"content": content, "isError": False}
    if result.structured is not None:
        wire["structuredContent"] = _clean_json(result.structured)
    return wire


def _client_name(ctx: ServerRequestContext[Any]) -> str | None:
    client = ctx.session.client_params
    return client.client_info.name if client is not None else None


def _peer(ctx: ServerRequestContext[Any]) -> str | None:
    request = ctx.request
    address = getattr(request, "client", None)
    return f"{address.host}:{address.port}" if address is not None else None


def _mcp_tool(spec: ToolSpec) -> types.Tool:
    a = spec.annotations
    return types.Tool(
        name=spec.name,
        title=spec.title,
        description=spec.description,
        input_schema=spec.input_schema(),
        annotations=types.ToolAnnotations(
            read_only_hint=a.read_only,
            destructive_hint=a.destructive,
            idempotent_hint=a.idempotent,
            open_world_hint=a.open_world,
        ),
    )


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
    #: Test-only artificial slowness (see sandboxfs.watch.Stall).
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
        self.mcp_tools = [_mcp_tool(spec) for spec in self.specs]
        limits = options.limits
        self.runner = BlockingRunner(
            worker_threads=limits.worker_threads,
            step_timeout=limits.fs_timeout,
            stall=options.stall,
        )
        self._calls = trio.CapacityLimiter(limits.concurrent_calls)
        self.revisions = RevisionCache()
        self._initial_roots: int | None = None
        self.server = self._build()

    # -- construction -----------------------------------------------------------

    def _build(self) -> Server[Any]:
        server: Server[Any] = Server(
            "sandboxfs",
            version=__version__,
            title="sandboxfs",
            instructions=INSTRUCTIONS,
            on_list_tools=self.list_tools,
            on_call_tool=self.call_tool,
            on_list_resources=self.list_resources,
            on_list_resource_templates=self.list_resource_templates,
            on_read_resource=self.read_resource,
        )
        server.add_request_handler("server/discover", types.RequestParams, self.discover)
        server.add_notification_handler(
            "notifications/initialized", types.NotificationParams, self.on_initialized
        )
        server.add_notification_handler(
            "notifications/roots/list_changed", types.NotificationParams, self.on_roots_changed
        )
        # Only our guard: the SDK's default OpenTelemetry middleware costs every
        # request a span, and the audit log (--audit-log) records each call.
        server.middleware = [self._guard]
        return server

    # -- middleware -------------------------------------------------------------

    async def _guard(self, ctx: ServerRequestContext[Any], call_next: CallNext) -> HandlerResult:
        """Watch ``initialize`` for the Roots capability; map surprises to -32603."""
        if ctx.method == "initialize":
            self._on_initialize(ctx.params or {})
        try:
            return await call_next(ctx)
        except (MCPError, ValidationError):
            raise
        except Exception:
            log.exception("internal error while handling %s", ctx.method)
            raise MCPError(code=types.INTERNAL_ERROR, message="Internal error") from None

    def _on_initialize(self, params: Any) -> None:
        if not self.options.roots:
            return
        capabilities = params.get("capabilities") if isinstance(params, dict) else None
        has_roots = isinstance(capabilities, dict) and capabilities.get("roots") is not None
        if has_roots:
            # Calls from now on wait for the client's Roots (fetched once initialized).
            self._initial_roots = self.access.begin_update()
            return
        if self.access.cli.empty:
            log.error("Error: %s", _NO_DIRECTORIES_NO_ROOTS)
            self.exit_code = 1
            if self.closer is not None:
                self.closer.close()
            raise MCPError(code=types.INVALID_PARAMS, message=_NO_DIRECTORIES_NO_ROOTS)

    # -- discovery and tools ------------------------------------------------------

    async def discover(
        self, ctx: ServerRequestContext[Any], params: types.RequestParams
    ) -> types.DiscoverResult:
        return types.DiscoverResult(
            supported_versions=list(SUPPORTED_VERSIONS),
            capabilities=self.server.get_capabilities(protocol_version=ctx.protocol_version),
            instructions=INSTRUCTIONS,
        )

    async def list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=self.mcp_tools)

    def _sandbox(self, effective: Effective) -> Sandbox:
        resolver = Resolver(
            effective.allow,
            symlink_hops=self.options.limits.symlink_hops,
            no_xdev=self.options.no_xdev,
            home=self.options.home,
        )
        return Sandbox(resolver, self.options.limits, self.revisions)

    async def _bounded(self, fn: Callable[[Watch], T]) -> T:
        """Run blocking work within the concurrent-call cap."""
        async with self._calls:
            return await self.runner.run(fn)

    async def call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        caller = Caller(ctx.protocol_version, client=_client_name(ctx), peer=_peer(ctx))
        wire = await self.run_tool(params.name, params.arguments or {}, caller)
        return types.CallToolResult.model_validate(wire)

    async def run_tool(self, name: str, arguments: dict[str, Any], caller: Caller) -> WireResult:
        """One tool call, audited: the SDK's handler and the fast lane both come here."""
        started = time.monotonic()
        result = await self._run_tool(name, arguments, caller)
        failed = bool(result["isError"])
        structured = result.get("structuredContent")
        error = structured.get("error") if failed and isinstance(structured, dict) else None
        self.options.audit.record(
            tool=name,
            arguments=arguments,
            era="2026" if caller.protocol_version in MODERN_PROTOCOL_VERSIONS else "2025",
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
            raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown tool: {name}")
        if not self.arguments_ok[spec.name](arguments):
            details = _argument_problems(self.schemas[spec.name], arguments)
            return error_result(f"Invalid arguments for tool {spec.name}: {details}")
        try:
            effective = await self.access.ready()
        except SandboxError as exc:
            return error_result(str(exc), exc.code)
        if effective.allow.empty and spec.name != "list_allowed_directories":
            modern = caller.protocol_version in MODERN_PROTOCOL_VERSIONS
            message = (
                _NO_DIRECTORIES_2026
                if modern and self.access.cli.empty
                else "Access denied - no allowed directories"
            )
            return error_result(message, AccessDenied.default_code)
        sandbox = self._sandbox(effective)
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
            result = await self._bounded(work) if spec.touches_filesystem else work(NO_WATCH)
        except SandboxError as exc:
            return error_result(str(exc), exc.code)
        return to_wire(result)

    # -- resources --------------------------------------------------------------------

    async def list_resources(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        return types.ListResourcesResult(resources=[])

    async def list_resource_templates(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(
            resource_templates=[
                types.ResourceTemplate(
                    name="file",
                    title="Files in the allowed directories",
                    uri_template="file://{+path}",
                    description="Any file inside an allowed directory, by its absolute "
                    "file:// URI (percent-encoded).",
                )
            ]
        )

    async def read_resource(
        self, ctx: ServerRequestContext[Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        uri = str(params.uri)
        path = local_path(uri)
        if path is None:
            raise MCPError(
                code=types.INVALID_PARAMS,
                message="Resource not found: only local file:// URIs are served",
                data={"uri": uri},
            )
        try:
            effective = await self.access.ready()
            sandbox = self._sandbox(effective)
            limit = self.options.limits.read_bytes

            def read(watch: Watch) -> bytes:
                with sandbox.with_watch(watch).open_file(path) as f:
                    return whole_bytes(f, limit, path)

            data = await self._bounded(read)
        except (NotFound, IsADirectory) as exc:
            reason = "a directory is not a resource" if isinstance(exc, IsADirectory) else None
            message = "Resource not found" + (f": {reason}" if reason else "")
            raise MCPError(code=types.INVALID_PARAMS, message=message, data={"uri": uri}) from None
        except SandboxError as exc:
            raise MCPError(
                code=types.INVALID_PARAMS, message=_clean(str(exc)), data={"uri": uri}
            ) from None
        mime = guess_mime(path)
        contents: types.TextResourceContents | types.BlobResourceContents
        text = None
        if is_textual(mime):
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError:
                text = None
        if text is not None:
            contents = types.TextResourceContents(
                uri=uri, mime_type=mime or "text/plain", text=text
            )
        else:
            contents = types.BlobResourceContents(
                uri=uri,
                mime_type=mime or "application/octet-stream",
                blob=base64.b64encode(data).decode("ascii"),
            )
        return types.ReadResourceResult(contents=[contents], ttl_ms=0, cache_scope="private")

    # -- roots (2025 era) ---------------------------------------------------------------

    async def on_initialized(
        self, ctx: ServerRequestContext[Any], params: types.NotificationParams
    ) -> None:
        generation = self._initial_roots
        if not self.options.roots:
            return
        if generation is None:
            if not self.access.cli.empty:
                self.access.client_without_roots()
            return
        self._initial_roots = None
        await self._fetch_roots(ctx, generation)

    async def on_roots_changed(
        self, ctx: ServerRequestContext[Any], params: types.NotificationParams
    ) -> None:
        capabilities = ctx.session.client_capabilities
        if not self.options.roots:
            return
        if capabilities is None or capabilities.roots is None:
            log.info("Ignoring roots/list_changed from a client without the Roots capability")
            return
        await self._fetch_roots(ctx, self.access.begin_update())

    async def _fetch_roots(self, ctx: ServerRequestContext[Any], generation: int) -> None:
        try:
            answer = await ctx.session.send_request(
                types.ListRootsRequest(),
                types.ListRootsResult,
                request_read_timeout_seconds=ROOTS_FETCH_TIMEOUT,
            )
        except Exception as exc:  # an error answer, a timeout, a broken connection
            self.access.fail_update(generation, _clean(str(exc)) or type(exc).__name__)
            return
        uris = [str(root.uri) for root in answer.roots]
        access = self.access
        try:
            roots = await self._bounded(
                lambda _watch: roots_from_uris(uris, access.cli, confine=access.confine)
            )
        except SandboxError as exc:
            access.fail_update(generation, str(exc))
            return
        access.finish_update(generation, roots)
