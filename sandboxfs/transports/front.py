"""The tenants' front: authenticate each request, then hand it to its tenant's worker.

``sandboxfs --tenants FILE --http HOST:PORT`` (or ``--unix PATH``) runs this
process and one worker process per tenant (:mod:`sandboxfs.transports.workers`).
In front of everything sits the sidecar's :class:`~sandboxfs.transports.sidecar.Gate`
(probes, draining on SIGTERM, 401 for a token that is no tenant's).  For
``/mcp`` the front then checks ``Host`` and ``Origin`` exactly as the sidecar
does (its :class:`~sandboxfs.transports.mcp_http.HttpPolicy`; 421 / 403), refuses
a request framed with both ``Content-Length`` and ``Transfer-Encoding`` (400,
connection closed) and a body over the cap (413), and forwards the exchange,
over HTTP/1.1 on the worker's unix socket, with the worker's own secret in
place of the client's token.  Request and response bodies are relayed chunk by
chunk as they come (an SSE stream too): nothing is held but one chunk.

Guarantees: the front opens no tenant directory and holds none of their
descriptors; a request reaches exactly the worker of the tenant whose token it
bears; a worker that dies fails only its own requests in flight (502, a JSON-RPC
error as body when nothing was answered yet).  On SIGHUP the tenants file is
read again: a good one takes effect at once (tokens; added, removed and changed
tenants' workers), a bad one is logged and the old configuration kept.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import signal
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, final

import h11
import trio

from sandboxfs.transports.mcp_http import HttpPolicy
from sandboxfs.transports.sidecar import (
    Gate,
    Receive,
    Scope,
    Send,
    SidecarOptions,
    bearer,
    http_policy,
    serve_gate,
)
from sandboxfs.transports.tenants import Tenants, TenantsError, load_tenants
from sandboxfs.transports.workers import START_SECONDS, Workers, WorkerSettings

log = logging.getLogger("sandboxfs")

#: Request headers that describe this hop, not the request: never forwarded.
_HOP_REQUEST: Final = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"transfer-encoding",
        b"te",
        b"trailer",
        b"upgrade",
        b"host",
        b"authorization",
        b"origin",
    }
)
_HOP_RESPONSE: Final = frozenset(
    # date and server: the front's server sets its own.
    {b"connection", b"keep-alive", b"transfer-encoding", b"trailer", b"upgrade", b"date", b"server"}
)
_CHUNK: Final = 64 * 1024


class _WorkerFailed(Exception):
    """The worker could not be reached, or broke off the exchange."""


@final
@dataclass
class Front:
    """``/mcp`` of the front: route each authenticated request to its tenant's worker."""

    tenants: Tenants
    workers: Workers
    policy: HttpPolicy

    def authenticate(self, presented: str) -> bool:
        return self.tenants.authenticate(presented) is not None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        presented = bearer(scope)
        tenant = None if presented is None else self.tenants.authenticate(presented)
        if tenant is None:  # the tenants file was reloaded since the gate looked
            await _answer(send, 401, b"Unauthorized: send 'Authorization: Bearer <token>'\n")
            return
        headers: list[tuple[bytes, bytes]] = [
            (name.lower(), value) for name, value in scope.get("headers", [])
        ]
        refused = self._refused(headers)
        if refused is not None:
            await _answer(send, *refused)
            return
        worker = self.workers.by_name.get(tenant.name)
        if worker is None or not await worker.available(START_SECONDS):
            await _unavailable(send)
            return
        forwarded = [(name, value) for name, value in headers if name not in _HOP_REQUEST]
        if not any(name == b"content-length" for name, _ in forwarded):
            forwarded.append((b"transfer-encoding", b"chunked"))
        forwarded += [
            (b"host", b"localhost"),
            (b"authorization", b"Bearer " + worker.secret.encode()),
            (b"connection", b"close"),
        ]
        exchange = _Exchange(scope, receive, send, self.policy.max_body)
        try:
            await exchange.forward(worker.socket, forwarded)
        except _WorkerFailed as exc:
            log.warning("tenant %s: request failed: %s", tenant.name, exc)
            if not exchange.started:
                await _unavailable(send)
            elif not exchange.finished:
                with contextlib.suppress(Exception):
                    await send({"type": "http.response.body", "body": b""})

    def _refused(self, headers: Sequence[tuple[bytes, bytes]]) -> tuple[int, bytes] | None:
        """Host and Origin exactly as the sidecar checks them; framing; the body cap."""

        def values(name: bytes) -> list[str]:
            return [value.decode("latin-1") for key, value in headers if key == name]

        if not self.policy.host_ok(values(b"host")):
            return 421, b"Invalid Host header\n"
        if not self.policy.origin_ok(values(b"origin")):
            return 403, b"Invalid Origin header\n"
        lengths = values(b"content-length")
        if lengths and values(b"transfer-encoding"):
            return 400, b"Content-Length and Transfer-Encoding cannot both be given\n"
        if len(lengths) > 1 or (lengths and not lengths[0].isdigit()):
            return 400, b"Bad Content-Length\n"
        if lengths and int(lengths[0]) > self.policy.max_body:
            return 413, b"Request body too large\n"
        return None


@final
class _Exchange:
    """One request relayed to a worker and its response relayed back, chunk by chunk."""

    def __init__(self, scope: Scope, receive: Receive, send: Send, max_body: int) -> None:
        self.scope = scope
        self.receive = receive
        self.send = send
        self.max_body = max_body
        self.started = False
        self.finished = False
        self.too_large = False
        self.connection = h11.Connection(h11.CLIENT)

    async def forward(self, path: str, headers: list[tuple[bytes, bytes]]) -> None:
        try:
            stream = await trio.open_unix_socket(path)
        except OSError as exc:
            raise _WorkerFailed(f"cannot connect: {exc.strerror}") from None
        target = self.scope.get("raw_path") or self.scope.get("path", "/").encode()
        query = self.scope.get("query_string", b"")
        if query:
            target += b"?" + query
        request = h11.Request(method=self.scope["method"], target=target, headers=headers)
        failure = None
        async with stream, trio.open_nursery() as nursery:
            try:
                await stream.send_all(self.connection.send(request))
                nursery.start_soon(self._pump, stream, nursery.cancel_scope)
                await self._relay(stream)
            except (OSError, trio.BrokenResourceError, h11.ProtocolError, _WorkerFailed) as exc:
                log.debug("the worker's exchange failed: %r", exc)
                failure = "the worker broke off the exchange (it exited, or was killed)"
            finally:
                nursery.cancel_scope.cancel()
        if failure is not None:
            raise _WorkerFailed(failure)
        if self.too_large and not self.started:
            await _answer(self.send, 413, b"Request body too large\n")

    async def _pump(self, stream: trio.SocketStream, scope: trio.CancelScope) -> None:
        """The client's body to the worker, then watch for the client leaving (which
        ends the exchange: the worker sees its connection close and cancels the call)."""
        size = 0
        sending = True
        while True:
            message = await self.receive()
            if message["type"] != "http.request":
                scope.cancel()  # the client left
                return
            if not sending:
                continue
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                self.too_large = True
                scope.cancel()
                return
            try:
                data = self.connection.send(h11.Data(data=chunk)) if chunk else b""
                if not message.get("more_body", False):
                    data += self.connection.send(h11.EndOfMessage()) or b""
                    sending = False
                if data:
                    await stream.send_all(data)
            except (OSError, trio.BrokenResourceError, h11.ProtocolError):
                return  # the worker stopped reading: its answer says why, or _relay fails

    async def _relay(self, stream: trio.SocketStream) -> None:
        """The worker's response to the client, as it comes."""
        while True:
            event = await self._next(stream)
            if isinstance(event, h11.Response):
                headers = [
                    (name.lower(), value)
                    for name, value in event.headers
                    if name.lower() not in _HOP_RESPONSE
                ]
                await self.send(
                    {"type": "http.response.start", "status": event.status_code, "headers": headers}
                )
                self.started = True
            elif isinstance(event, h11.Data):
                await self.send(
                    {"type": "http.response.body", "body": bytes(event.data), "more_body": True}
                )
            elif isinstance(event, h11.EndOfMessage):
                await self.send({"type": "http.response.body", "body": b""})
                self.finished = True
                return
            elif isinstance(event, h11.ConnectionClosed):
                raise _WorkerFailed("the worker closed the connection before answering")

    async def _next(self, stream: trio.SocketStream) -> Any:
        while True:
            event = self.connection.next_event()
            if event is h11.NEED_DATA:
                self.connection.receive_data(await stream.receive_some(_CHUNK))
                continue
            if isinstance(event, h11.InformationalResponse):
                continue
            return event


async def _answer(send: Send, status: int, body: bytes) -> None:
    extra = [(b"connection", b"close")] if status == 400 else []
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"text/plain; charset=utf-8"), *extra],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def _unavailable(send: Send) -> None:
    """502 with a JSON-RPC error: the tenant's worker is not serving right now."""
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": None,
            "error": {"code": -32603, "message": "Tenant worker unavailable; retry"},
        }
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 502,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": body})


def make_rundir() -> str:
    """A fresh private (0700) directory for the workers' sockets, under
    ``$XDG_RUNTIME_DIR`` when it is set, else the temporary directory."""
    import tempfile  # noqa: PLC0415

    base = os.environ.get("XDG_RUNTIME_DIR")
    if not base or not os.path.isdir(base):
        base = None
    return tempfile.mkdtemp(prefix="sandboxfs-tenants-", dir=base)


async def serve_front(
    listener: socket.socket,
    options: SidecarOptions,
    tenants_path: str,
    tenants: Tenants,
    settings: WorkerSettings,
) -> None:
    """Start every tenant's worker, serve until SIGTERM/SIGINT (re-reading the tenants
    file on SIGHUP), then drain, stop every worker and remove the run directory."""
    try:
        async with trio.open_nursery() as nursery:
            workers = Workers(settings, nursery)
            front = Front(tenants, workers, http_policy(options))
            gate = Gate(front, None, check=front.authenticate)
            reloads, reload_requests = trio.open_memory_channel[None](math.inf)
            with trio.open_signal_receiver(signal.SIGHUP) as hangups:
                await workers.apply(tenants.by_name)

                async def watch_hangups() -> None:
                    async for _ in hangups:
                        reloads.send_nowait(None)

                async def reload() -> None:
                    async for _ in reload_requests:
                        _reload(front, tenants_path)
                        await workers.apply(front.tenants.by_name)

                nursery.start_soon(watch_hangups)
                nursery.start_soon(reload)
                await serve_gate(gate, listener, options)
                await workers.stop()  # SIGTERM each, SIGKILL after the grace period
                nursery.cancel_scope.cancel()
    finally:
        _remove_rundir(settings.rundir)


def _reload(front: Front, path: str) -> None:
    """Read the tenants file again; on a problem, keep the old one and say why."""
    try:
        front.tenants = load_tenants(path)
    except TenantsError as exc:
        log.error("SIGHUP: %s; keeping the tenants as they were", exc)
        return
    log.info("SIGHUP: re-read %s", path)


def _remove_rundir(rundir: str) -> None:
    with contextlib.suppress(OSError):
        for name in os.listdir(rundir):
            os.unlink(os.path.join(rundir, name))
        os.rmdir(rundir)
