"""The tenants' front's ``/metrics``: its own HTTP traffic and workers, and each
worker's tool metrics, read from the worker at every scrape and labelled with its
tenant.

Per tenant: the worker's restarts, whether it is up or given up, the requests routed
to it, and (from the worker itself) ``sandboxfs_tool_calls_total``,
``sandboxfs_tool_call_duration_seconds``, ``sandboxfs_tool_result_bytes_total`` and
``sandboxfs_refusals_total`` with a ``tenant`` label.  A worker's text is not
trusted to keep the front's label sets bounded: only those families, and only the
label values a server makes, are passed on; a worker that does not answer in time,
or answers with what does not parse, is left out, and
``sandboxfs_tenant_metrics_read`` says so.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Final, final

import h11
import trio
from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from sandboxfs.session.metrics import OUTCOMES, REASONS, UNKNOWN_TOOL, known_tools
from sandboxfs.transports.metrics import (
    DURATION_BUCKETS,
    METRICS_PATH,
    HttpMetrics,
    ProcessMetrics,
)

if TYPE_CHECKING:
    from sandboxfs.transports.workers import Workers


@final
class _TenantsCollector(Collector):
    """Each tenant's worker, read as it is when scraped."""

    def __init__(self, workers: Workers) -> None:
        self.workers = workers

    def collect(self) -> Iterator[Metric]:
        restarts = CounterMetricFamily(
            "sandboxfs_tenant_worker_restarts",
            "Times a tenant's worker was started again after it ended (since its "
            "tenant was last added or changed).",
            labels=["tenant"],
        )
        up = GaugeMetricFamily(
            "sandboxfs_tenant_worker_up",
            "1 while the tenant's worker accepts connections.",
            labels=["tenant"],
        )
        given_up = GaugeMetricFamily(
            "sandboxfs_tenant_worker_given_up",
            "1 when the tenant's worker failed every start and is no longer restarted.",
            labels=["tenant"],
        )
        for name, worker in sorted(self.workers.by_name.items()):
            restarts.add_metric([name], max(worker.starts - 1, 0))
            up.add_metric([name], 1 if worker.up else 0)
            given_up.add_metric([name], 1 if worker.given_up else 0)
        yield restarts
        yield up
        yield given_up


@final
class FrontMetrics:
    """The tenants' front's metrics: its HTTP traffic and its workers, and each
    worker's tool metrics, read from it at every scrape and labelled with its tenant."""

    def __init__(self, workers: Workers) -> None:
        self.workers = workers
        self.registry = CollectorRegistry(auto_describe=False)
        self.http = HttpMetrics(self.registry)
        self.routed = Counter(
            "sandboxfs_tenant_requests",
            "Requests routed to a tenant's worker, by tenant.",
            ["tenant"],
            registry=self.registry,
        )
        self.registry.register(_TenantsCollector(workers))
        self.registry.register(ProcessMetrics())

    def render(self) -> bytes:
        return generate_latest(self.registry)

    async def exposition(self) -> bytes:
        """The front's own metrics, then its workers' tool metrics by tenant (a worker
        that does not answer within :data:`WORKER_SCRAPE_SECONDS` is left out, and
        ``sandboxfs_tenant_metrics_read`` says so)."""
        up = sorted((n, w) for n, w in self.workers.by_name.items() if w.up)
        texts: dict[str, bytes | None] = {}

        async def read(name: str, socket_path: str, secret: str) -> None:
            with trio.move_on_after(WORKER_SCRAPE_SECONDS):
                texts[name] = await _scrape(socket_path, secret)

        async with trio.open_nursery() as nursery:
            for name, worker in up:
                texts[name] = None
                nursery.start_soon(read, name, worker.socket, worker.secret)
        return self.render() + generate_latest(WorkerFamilies(texts))


#: How long the front waits for a worker's metrics at a scrape.
WORKER_SCRAPE_SECONDS: Final = 5.0
#: The most bytes of a worker's metrics the front reads.
_MAX_WORKER_METRICS: Final = 4 * 1024 * 1024
#: The workers' families the front passes on, with the samples each may hold.
_WORKER_FAMILIES: Final = {
    "sandboxfs_tool_calls": ("counter", ("_total",)),
    "sandboxfs_tool_call_duration_seconds": ("histogram", ("_bucket", "_count", "_sum")),
    "sandboxfs_tool_result_bytes": ("counter", ("_total",)),
    "sandboxfs_refusals": ("counter", ("_total",)),
}


async def _scrape(socket_path: str, secret: str) -> bytes | None:
    """A worker's ``/metrics`` (over its socket, with its secret), or None."""
    connection = h11.Connection(h11.CLIENT)
    request = h11.Request(
        method="GET",
        target=METRICS_PATH,
        headers=[
            ("host", "localhost"),
            ("authorization", f"Bearer {secret}"),
            ("connection", "close"),
        ],
    )
    try:
        stream = await trio.open_unix_socket(socket_path)
    except OSError:
        return None
    body = bytearray()
    status = 0
    async with stream:
        try:
            await stream.send_all(connection.send(request) + connection.send(h11.EndOfMessage()))
            while True:
                event = connection.next_event()
                if event is h11.NEED_DATA:
                    connection.receive_data(await stream.receive_some(65536))
                elif isinstance(event, h11.Response):
                    status = event.status_code
                elif isinstance(event, h11.Data):
                    body += event.data
                    if len(body) > _MAX_WORKER_METRICS:
                        return None
                elif isinstance(event, (h11.EndOfMessage, h11.ConnectionClosed)):
                    break
        except (OSError, trio.BrokenResourceError, h11.ProtocolError):
            return None
    return bytes(body) if status == 200 else None


@final
class WorkerFamilies(Collector):
    """The workers' tool metrics, each sample labelled with its tenant.  Only the
    families and label values a server makes are passed on (a worker's text is not
    trusted to keep the front's label sets bounded); a text that does not parse is
    left out whole."""

    def __init__(self, texts: dict[str, bytes | None]) -> None:
        self.texts = texts
        self.allowed = {
            "tool": frozenset({*known_tools(), UNKNOWN_TOOL}),
            "outcome": frozenset(OUTCOMES),
            "reason": frozenset(REASONS),
            "le": frozenset({*map(_go_float, DURATION_BUCKETS), "+Inf"}),
        }

    def collect(self) -> Iterator[Metric]:
        read = GaugeMetricFamily(
            "sandboxfs_tenant_metrics_read",
            "1 when the tenant's worker's metrics were read at this scrape.",
            labels=["tenant"],
        )
        merged: dict[str, Metric] = {}
        for tenant, text in sorted(self.texts.items()):
            samples = None if text is None else self._samples(text)
            read.add_metric([tenant], 0 if samples is None else 1)
            for family, name, labels, value in samples or ():
                if family not in merged:
                    kind = _WORKER_FAMILIES[family][0]
                    merged[family] = Metric(family, f"{family}, by tenant.", kind)
                merged[family].add_sample(name, {"tenant": tenant, **labels}, value)
        yield read
        yield from merged.values()

    def _samples(self, text: bytes) -> list[tuple[str, str, dict[str, str], float]] | None:
        found = []
        try:
            for family in text_string_to_metric_families(text.decode("utf-8")):
                allowed = _WORKER_FAMILIES.get(family.name)
                if allowed is None or family.type != allowed[0]:
                    continue
                for sample in family.samples:
                    if sample.name.removeprefix(family.name) not in allowed[1]:
                        continue
                    if all(
                        value in self.allowed.get(key, frozenset())
                        for key, value in sample.labels.items()
                    ):
                        found.append((family.name, sample.name, dict(sample.labels), sample.value))
        except (ValueError, UnicodeDecodeError):
            return None
        return found


def _go_float(value: float) -> str:
    """A bucket bound as the text format writes it (as Go does: 0.5, 1.0, +Inf)."""
    return str(floatToGoString(value))  # type: ignore[no-untyped-call]
