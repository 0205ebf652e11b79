"""The MCP SDK adapter: a :class:`~sandboxfs.session.server.SandboxfsServer` as the SDK's server.

It only adapts: handlers for the SDK's requests and notifications (tools,
resources, discovery, the handshake and Roots), and errors as the SDK raises
them.  Unexpected exceptions become -32603 "Internal error" with the details on
stderr.  Importing this module imports the SDK (over a second): stdio loads it
only when a connection needs it.
"""

from __future__ import annotations

import base64
import logging
from typing import Any, final

import mcp_types as types
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from sandboxfs import __version__
from sandboxfs.core.errors import IsADirectory, NotFound, SandboxError
from sandboxfs.core.roots import local_path
from sandboxfs.core.watch import Watch
from sandboxfs.session.jsonrpc import ROOTS_FETCH_TIMEOUT, SUPPORTED_VERSIONS, ProtocolError
from sandboxfs.session.server import INSTRUCTIONS, Caller, SandboxfsServer, clean_text
from sandboxfs.tools.mime import guess_mime, is_textual
from sandboxfs.tools.reading import whole_bytes

log = logging.getLogger("sandboxfs")


def _mcp_error(exc: ProtocolError) -> MCPError:
    return MCPError(code=exc.code, message=exc.message, data=exc.data)


def _client_name(ctx: ServerRequestContext[Any]) -> str | None:
    client = ctx.session.client_params
    return client.client_info.name if client is not None else None


def _peer(ctx: ServerRequestContext[Any]) -> str | None:
    request = ctx.request
    address = getattr(request, "client", None)
    return f"{address.host}:{address.port}" if address is not None else None


@final
class SdkAdapter:
    """The SDK's :class:`Server` (``.server``) serving a :class:`SandboxfsServer`."""

    def __init__(self, core: SandboxfsServer) -> None:
        self.core = core
        self.tools = [types.Tool.model_validate(tool) for tool in core.tool_definitions]
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
        self.server = server

    # -- middleware -------------------------------------------------------------

    async def _guard(self, ctx: ServerRequestContext[Any], call_next: CallNext) -> HandlerResult:
        """Watch ``initialize`` for the Roots capability; map surprises to -32603."""
        try:
            if ctx.method == "initialize":
                self.core.on_initialize(ctx.params or {})
            return await call_next(ctx)
        except (MCPError, ValidationError):
            raise
        except ProtocolError as exc:
            raise _mcp_error(exc) from None
        except Exception:
            log.exception("internal error while handling %s", ctx.method)
            raise MCPError(code=types.INTERNAL_ERROR, message="Internal error") from None

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
        return types.ListToolsResult(tools=self.tools)

    async def call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        caller = Caller(ctx.protocol_version, client=_client_name(ctx), peer=_peer(ctx))
        try:
            wire = await self.core.run_tool(params.name, params.arguments or {}, caller)
        except ProtocolError as exc:
            raise _mcp_error(exc) from None
        return types.CallToolResult.model_validate(wire)

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
        core = self.core
        try:
            effective = await core.access.ready()
            sandbox = core.sandbox(effective)
            limit = core.options.limits.read_bytes

            def read(watch: Watch) -> bytes:
                with sandbox.with_watch(watch).open_file(path) as f:
                    return whole_bytes(f, limit, path)

            data = await core.bounded(read)
        except (NotFound, IsADirectory) as exc:
            reason = "a directory is not a resource" if isinstance(exc, IsADirectory) else None
            message = "Resource not found" + (f": {reason}" if reason else "")
            raise MCPError(code=types.INVALID_PARAMS, message=message, data={"uri": uri}) from None
        except SandboxError as exc:
            raise MCPError(
                code=types.INVALID_PARAMS, message=clean_text(str(exc)), data={"uri": uri}
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
        core = self.core
        if core.replayed_initialized() or not core.options.roots:
            return
        generation = core.initial_roots
        if generation is None:
            core.initialized_without_roots()
            return
        core.initial_roots = None
        await self._fetch_roots(ctx, generation)

    async def on_roots_changed(
        self, ctx: ServerRequestContext[Any], params: types.NotificationParams
    ) -> None:
        capabilities = ctx.session.client_capabilities
        if not self.core.options.roots:
            return
        if capabilities is None or capabilities.roots is None:
            log.info("Ignoring roots/list_changed from a client without the Roots capability")
            return
        await self._fetch_roots(ctx, self.core.access.begin_update())

    async def _fetch_roots(self, ctx: ServerRequestContext[Any], generation: int) -> None:
        async def fetch() -> list[str]:
            answer = await ctx.session.send_request(
                types.ListRootsRequest(),
                types.ListRootsResult,
                request_read_timeout_seconds=ROOTS_FETCH_TIMEOUT,
            )
            return [str(root.uri) for root in answer.roots]

        await self.core.fill_roots(generation, fetch)
