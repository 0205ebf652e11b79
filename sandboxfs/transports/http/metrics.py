"""``/metrics``: what an HTTP server has done, in Prometheus' text format.

Served behind the bearer token on the server's own port (``GET /metrics``), or
without one on a port of its own (``--metrics HOST:PORT``: a scraper's, bind it
to loopback or a pod's network).  The metrics (``prometheus_client``, in a
registry of this server's own):

* ``sandboxfs_tool_calls_total{tool,outcome}``, ``sandboxfs_tool_call_duration_seconds``
  (a histogram, by tool) and ``sandboxfs_tool_result_bytes_total{tool}``;
* ``sandboxfs_refusals_total{reason}``: outside, policy, read_only, timeout;
* ``sandboxfs_http_request_bytes_total`` and ``sandboxfs_http_response_bytes_total``
  (bodies at ``/mcp``), ``sandboxfs_http_responses_total{code}`` (every answer,
  401s included) and ``sandboxfs_active_sessions`` (MCP exchanges being served: over
  HTTP each POST is a session of its own);
* the process's own: ``process_resident_memory_bytes``, ``process_open_fds``,
  ``process_cpu_seconds_total``, ``process_start_time_seconds`` (read through
  descriptors opened before Landlock, which then forbids opening anything in /proc).

The tenants' front has its own (:mod:`sandboxfs.tenancy.metrics`): the HTTP
metrics above, its workers' states, and their tool metrics by tenant.

Labels never carry client text: tool names are the tools sandboxfs has (any other
name is ``unknown``), outcomes and reasons fixed words, status codes the server's
own, tenant names the operator's (from the tenants file).  Every series of a fixed
label set is there from the start, at zero.
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Awaitable, Callable, Collection, Iterator, MutableMapping
from typing import Any, Final, final

import prometheus_client
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector

from sandboxfs.session import OUTCOMES, REASONS, UNKNOWN_TOOL, Outcome, Reason

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

# A *_created series for every counter and histogram doubles the output and tells a
# scraper nothing it needs (the process's start time is there).
prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]

METRICS_PATH: Final = "/metrics"
#: The text format's media type (version 0.0.4), as Prometheus asks for it.
CONTENT_TYPE: Final = b"text/plain; version=0.0.4; charset=utf-8"
#: Durations of tool calls: a stat takes microseconds, a big search seconds.
DURATION_BUCKETS: Final = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
)


@final
class HttpMetrics:
    """Bytes in and out at ``/mcp``, answers by status code, sessions being served."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.request_bytes = Counter(
            "sandboxfs_http_request_bytes",
            "Bytes of request bodies received at /mcp.",
            registry=registry,
        )
        self.response_bytes = Counter(
            "sandboxfs_http_response_bytes",
            "Bytes of response bodies sent from /mcp.",
            registry=registry,
        )
        self.responses = Counter(
            "sandboxfs_http_responses",
            "HTTP answers, by status code (probes and /metrics not counted).",
            ["code"],
            registry=registry,
        )
        self.active = Gauge(
            "sandboxfs_active_sessions",
            "MCP exchanges being served (over HTTP each POST is a session of its own).",
            registry=registry,
        )

    def answered(self, status: int) -> None:
        """An answer the gate gave itself (401, 404...)."""
        self.responses.labels(code=str(status)).inc()

    async def measured(self, app: ASGIApp, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve one exchange through ``app``, counting its bodies and its status."""

        async def counted_receive() -> Message:
            message = await receive()
            if message.get("type") == "http.request":
                self.request_bytes.inc(len(message.get("body", b"")))
            return message

        async def counted_send(message: Message) -> None:
            kind = message.get("type")
            if kind == "http.response.start":
                self.answered(int(message.get("status", 0)))
            elif kind == "http.response.body":
                self.response_bytes.inc(len(message.get("body", b"")))
            await send(message)

        self.active.inc()
        try:
            await app(scope, counted_receive, counted_send)
        finally:
            self.active.dec()


@final
class ServerMetrics:
    """One server's metrics; its :class:`~sandboxfs.session.metrics.CallObserver`."""

    def __init__(self, tools: Collection[str]) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        registry = self.registry
        self.calls = Counter(
            "sandboxfs_tool_calls",
            "Tool calls answered, by tool and outcome.",
            ["tool", "outcome"],
            registry=registry,
        )
        self.durations = Histogram(
            "sandboxfs_tool_call_duration_seconds",
            "How long tool calls took, by tool.",
            ["tool"],
            buckets=DURATION_BUCKETS,
            registry=registry,
        )
        self.result_bytes = Counter(
            "sandboxfs_tool_result_bytes",
            "Size of tool results' content (text and base64 data), by tool.",
            ["tool"],
            registry=registry,
        )
        self.refusals = Counter(
            "sandboxfs_refusals",
            "Calls refused, by reason: outside the allowed directories, the operator's "
            "policy, read-only, or a filesystem call that timed out.",
            ["reason"],
            registry=registry,
        )
        self.http = HttpMetrics(registry)
        registry.register(ProcessMetrics())
        # Every series from the start, each looked up once (a call then costs a few
        # dictionary lookups, not a label resolution per metric).
        names = (*sorted(tools), UNKNOWN_TOOL)
        self._calls = {
            (tool, outcome): self.calls.labels(tool=tool, outcome=outcome)
            for tool in names
            for outcome in OUTCOMES
        }
        self._durations = {tool: self.durations.labels(tool=tool) for tool in names}
        self._result_bytes = {tool: self.result_bytes.labels(tool=tool) for tool in names}
        self._refusals = {reason: self.refusals.labels(reason=reason) for reason in REASONS}

    def called(self, tool: str, outcome: Outcome, seconds: float, result_bytes: int) -> None:
        if tool not in self._durations:  # (the session core labels only known tools)
            tool = UNKNOWN_TOOL
        self._calls[tool, outcome].inc()
        self._durations[tool].observe(seconds)
        if result_bytes:
            self._result_bytes[tool].inc(result_bytes)

    def refused(self, tool: str, reason: Reason) -> None:
        self._refusals[reason].inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)

    async def exposition(self) -> bytes:
        return self.render()


@final
class ProcessMetrics(Collector):
    """The process's memory, descriptors and CPU, in the names Prometheus' clients use.

    Made before the process confines itself: it keeps ``/proc/self/statm`` and
    ``/proc/self/fd`` open and reads them again at every scrape (Landlock refuses to
    open them later).  A reading that fails is left out, not made up; so are the
    memory and descriptors of a process forked after it was made (``--workers``: the
    descriptors describe the parent, and Landlock refuses to open its own).
    """

    def __init__(self) -> None:
        self._pid = os.getpid()
        self._statm = _open_or_none("/proc/self/statm", os.O_RDONLY)
        self._fds = _open_or_none("/proc/self/fd", os.O_RDONLY | os.O_DIRECTORY)
        self._page = os.sysconf("SC_PAGE_SIZE")
        self._started = time.time()

    def collect(self) -> Iterator[Metric]:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        yield CounterMetricFamily(
            "process_cpu_seconds",
            "Total user and system CPU time spent in seconds.",
            value=usage.ru_utime + usage.ru_stime,
        )
        yield GaugeMetricFamily(
            "process_start_time_seconds",
            "Start time of the process since unix epoch in seconds (when it began serving).",
            value=self._started,
        )
        if os.getpid() != self._pid:
            return  # what the descriptors show is the parent's
        if self._statm is not None:
            try:
                resident = int(os.pread(self._statm, 128, 0).split()[1]) * self._page
            except (OSError, IndexError, ValueError):
                pass
            else:
                yield GaugeMetricFamily(
                    "process_resident_memory_bytes", "Resident memory size in bytes.", resident
                )
        if self._fds is not None:
            try:
                count = len(os.listdir(self._fds)) - 1  # less the one listing them
            except OSError:
                pass
            else:
                yield GaugeMetricFamily(
                    "process_open_fds", "Number of open file descriptors.", count
                )


def _open_or_none(path: str, flags: int) -> int | None:
    try:
        return os.open(path, flags | os.O_CLOEXEC)
    except OSError:
        return None


async def answer_metrics(exposition: Callable[[], Awaitable[bytes]], send: Send) -> None:
    """Send the metrics as the answer to a ``GET /metrics``."""
    body = await exposition()
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [
                (b"content-type", CONTENT_TYPE),
                (b"content-length", str(len(body)).encode()),
                (b"cache-control", b"no-store"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


@final
class MetricsApp:
    """The ASGI app of ``--metrics HOST:PORT``: ``GET /metrics`` and nothing else, with
    no token (what it shows is counts: no path, no client text)."""

    def __init__(self, exposition: Callable[[], Awaitable[bytes]]) -> None:
        self.exposition = exposition

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                kind = message["type"].removeprefix("lifespan.")
                await send({"type": f"lifespan.{kind}.complete"})
                if kind == "shutdown":
                    return
        if scope["type"] != "http":
            await send({"type": "websocket.close", "code": 1008})
            return
        if scope.get("path") != METRICS_PATH:
            await _plain(send, 404, b"Not Found: the metrics are at /metrics\n")
        elif scope.get("method") not in ("GET", "HEAD"):
            await _plain(send, 405, b"Only GET is served\n", [(b"allow", b"GET, HEAD")])
        else:
            await answer_metrics(self.exposition, send)


async def _plain(
    send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    start = [(b"content-type", b"text/plain; charset=utf-8"), *(headers or [])]
    await send({"type": "http.response.start", "status": status, "headers": start})
    await send({"type": "http.response.body", "body": body})
