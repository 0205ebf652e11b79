"""The tenants' front: authenticate each request, then hand it to its tenant's worker.

``sandboxfs --tenants FILE --http HOST:PORT`` (or ``--unix PATH``) runs this
process and one worker process per tenant (:mod:`sandboxfs.transports.workers`).
In front of everything sits the sidecar's :class:`~sandboxfs.transports.sidecar.Gate`
(probes, draining on SIGTERM, 401 for a token that is no tenant's).  For
``/mcp`` the front then checks ``Host`` and ``Origin`` exactly as the sidecar
does (its :class:`~sandboxfs.transports.mcp_http.HttpPolicy`; 421 naming the
Host and ``--allowed-host`` / 403), refuses
a request framed with both ``Content-Length`` and ``Transfer-Encoding`` (400,
connection closed) and a body over the cap (413), and forwards the exchange,
over HTTP/1.1 on the worker's unix socket, with the worker's own secret in
place of the client's token.  Request and response bodies are relayed chunk by
chunk as they come (an SSE stream too): nothing is held but one chunk, and a
client that takes none of its answer for ``--send-timeout`` seconds is cut off
(its worker's connection closed with it, which releases the answer there).
``/readyz`` is 503 while any tenant is not served (its worker starting,
restarting, or given up after failed starts).

Guarantees: the front opens no tenant directory and holds none of their
descriptors; a request reaches exactly the worker of the tenant whose token it
bears; a worker that dies fails only its own requests in flight (502, a JSON-RPC
error as body when nothing was answered yet).  On SIGHUP the tenants file is
read again: a good one takes effect at once (tokens; added, removed and changed
tenants' workers), a bad one is logged and the old configuration kept.  On
SIGTERM or SIGINT the front drains, stops every worker and removes its run
directory (on SIGINT quietly: the command line says, in one line, that it was
interrupted).
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import math
import os
import signal
import socket
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Final, final

import h11
import trio

from sandboxfs.transports.connections import MAX_SEND_TIMEOUT
from sandboxfs.transports.frontmetrics import FrontMetrics
from sandboxfs.transports.httppolicy import NOSNIFF, HttpPolicy, misdirected
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
#: What the workers' socket directories are called (a random suffix follows).
RUNDIR_PREFIX: Final = "sandboxfs-"
#: The longest directory the run directory can be made in: a worker's socket path,
#: BASE/sandboxfs-XXXXXXXX/N.sock, must fit a unix socket address (107 bytes).
MAX_RUNDIR_BASE: Final = 107 - len(f"/{RUNDIR_PREFIX}XXXXXXXX/9999999999.sock")


class _WorkerFailed(Exception):
    """The worker could not be reached, or broke off the exchange."""


@final
@dataclass
class Front:
    """``/mcp`` of the front: route each authenticated request to its tenant's worker."""

    tenants: Tenants
    workers: Workers
    policy: HttpPolicy
    metrics: FrontMetrics | None = None

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
        if self.metrics is not None:
            self.metrics.routed.labels(tenant=tenant.name).inc()
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
            return 421, misdirected(values(b"host"))
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
            "headers": [(b"content-type", b"text/plain; charset=utf-8"), NOSNIFF, *extra],
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


@final
class RunDirError(Exception):
    """No directory for the workers' sockets could be made; the message, one line,
    says where it was tried and which option to give."""


def make_rundir(given: str | None = None) -> str:
    """A fresh private (0700) directory for the workers' sockets, in ``given``
    (``--run-dir``) when it is set, else in the first of ``$XDG_RUNTIME_DIR``,
    ``$TMPDIR``, ``/tmp`` and ``/var/tmp`` where one can be made (a read-only root
    filesystem has none of the last: a pod gives a writable volume with
    ``--run-dir``).  Never the working directory, which may be a served one."""
    if given is not None:
        try:
            return _make_in(given)
        except OSError as exc:
            raise RunDirError(
                f"--run-dir {given}: cannot make the workers' socket directory there: "
                f"{exc.strerror or exc}"
            ) from None
    tried = []
    for base in _rundir_bases():
        try:
            return _make_in(base)
        except OSError as exc:
            tried.append(f"{base}: {exc.strerror or exc}")
    raise RunDirError(
        f"nowhere to make the workers' socket directory ({'; '.join(tried)}): give "
        "--run-dir DIR, a writable directory (in a pod, an emptyDir volume)"
    )


def _make_in(base: str) -> str:
    if len(os.fsencode(os.path.abspath(base))) > MAX_RUNDIR_BASE:
        raise OSError(
            errno.ENAMETOOLONG,
            f"too long a path for the workers' unix sockets (at most {MAX_RUNDIR_BASE} bytes)",
        )
    return os.path.abspath(tempfile.mkdtemp(prefix=RUNDIR_PREFIX, dir=base))


#: Where the workers' socket directory is made without --run-dir, after
#: $XDG_RUNTIME_DIR and $TMPDIR (a private 0700 directory is made inside).
_SHARED_TEMPORARY: Final = ("/tmp", "/var/tmp")  # noqa: S108


def _rundir_bases() -> list[str]:
    given = (os.environ.get("XDG_RUNTIME_DIR", ""), os.environ.get("TMPDIR", ""))
    return list(dict.fromkeys(base for base in (*given, *_SHARED_TEMPORARY) if base))


async def serve_front(
    listener: socket.socket,
    options: SidecarOptions,
    tenants_path: str,
    tenants: Tenants,
    settings: WorkerSettings,
    *,
    metrics_listener: socket.socket | None = None,
) -> signal.Signals | None:
    """Start every tenant's worker, serve until SIGTERM/SIGINT (re-reading the tenants
    file on SIGHUP), then drain, stop every worker and remove the run directory;
    return the signal that stopped the front.

    Every worker gets twice the front's ``--send-timeout`` (see WorkerSettings)."""
    worker_timeout = min(2 * options.send_timeout, MAX_SEND_TIMEOUT)
    settings = replace(settings, send_timeout=worker_timeout)
    stopped_by = None
    try:
        async with trio.open_nursery() as nursery:
            workers = Workers(settings, nursery)
            metrics = FrontMetrics(workers)
            front = Front(tenants, workers, http_policy(options), metrics)
            gate = Gate(
                front, None, check=front.authenticate, unready=workers.unserved, metrics=metrics
            )
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
                stopped_by = await serve_gate(
                    gate, listener, options, metrics_listener=metrics_listener
                )
                # SIGTERM each, SIGKILL after the grace period; on Ctrl-C quietly.
                await workers.stop(quiet=stopped_by == signal.SIGINT)
                nursery.cancel_scope.cancel()
    finally:
        remove_rundir(settings.rundir)
    return stopped_by


def _reload(front: Front, path: str) -> None:
    """Read the tenants file again; on a problem, keep the old one and say why."""
    try:
        front.tenants = load_tenants(path, allow_weak=front.tenants.allow_weak)
    except TenantsError as exc:
        log.error("SIGHUP: %s; keeping the tenants as they were", exc)
        return
    log.info("SIGHUP: re-read %s", path)


def remove_rundir(rundir: str) -> None:
    """Remove the workers' socket directory and what is left in it (their sockets)."""
    try:
        names = os.listdir(rundir)
    except OSError:
        return
    for name in names:  # one at a time: a worker's helper may have removed its socket
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(rundir, name))
    with contextlib.suppress(OSError):
        os.rmdir(rundir)
