"""``/metrics`` under ``--workers N``: the whole server's counts, whichever process
answers the scrape.

Each server process counts its own calls
(:class:`~sandboxfs.transports.http.metrics.ServerMetrics`); a scrape lands on one of
them.  That one asks the parent, over a socket made before the fork
(:mod:`sandboxfs.cli.metricsrelay` relays), for every other process's
samples, adds them to its own and answers with the sums: the same families, the
same labels, in the same text a single process writes, plus
``sandboxfs_workers_read`` (how many processes the sums hold: ``--workers`` unless
one did not answer within :data:`GATHER_SECONDS`).  Counters, histograms and
gauges are summed (sessions being served, resident memory, descriptors, CPU time:
the server's, not one process's); ``process_start_time_seconds`` is the earliest.

Why through the parent, not prometheus_client's multiprocess mode: that mode keeps
the values in files of a directory every process must be allowed to write (Landlock
would grant one more directory, a read-only container has none to give), and is
switched on for the whole library by an environment variable.  Here nothing
touches the filesystem, each process keeps its own registry, and the parent (which
serves nothing) only passes bytes along, as the tenants' front reads its workers.

The wire, both ways: frames of a kind byte, a 4-byte sequence number and a 4-byte
length, then the payload.  A process sends ``C`` (collect) and answers ``D`` (dump
your samples) with ``S`` (its samples, JSON); the parent sends ``D`` and answers
``C`` with ``A`` (the other processes' samples, a JSON list).
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from typing import Any, Final, final

import trio
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector

from sandboxfs.transports.http.metrics import HttpMetrics, ServerMetrics
from sandboxfs.transports.metricswire import (
    ANSWER,
    COLLECT,
    DUMP,
    GATHER_SECONDS,
    SAMPLES,
    FrameReader,
    frame,
)

#: Families whose value across processes is the earliest, not the sum.
_EARLIEST: Final = frozenset({"process_start_time_seconds"})

Sample = tuple[str, dict[str, str], float]
Family = tuple[str, str, str, list[Sample]]


def dump(local: ServerMetrics) -> bytes:
    """This process's samples, as JSON: a list of ``[family, type, help, samples]``,
    each sample ``[name, labels, value]``."""
    families = [
        [family.name, family.type, family.documentation,
         [[s.name, s.labels, s.value] for s in family.samples]]
        for family in local.registry.collect()
    ]  # fmt: skip
    return json.dumps(families, separators=(",", ":")).encode()


def _families(data: Any) -> list[Family]:
    """The families of a decoded dump; ValueError if it is not one."""
    if not isinstance(data, list):
        raise ValueError("not a list of families")
    found: list[Family] = []
    for entry in data:
        name, kind, documentation, samples = entry
        if not all(isinstance(text, str) for text in (name, kind, documentation)):
            raise ValueError("a family's name, type and help are text")
        checked: list[Sample] = []
        for sample_name, labels, value in samples:
            if not (isinstance(sample_name, str) and isinstance(labels, dict)):
                raise ValueError("a sample has a name and labels")
            if not all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
                raise ValueError("labels are text")
            if not isinstance(value, (int, float)):
                raise ValueError("a sample's value is a number")
            checked.append((sample_name, labels, float(value)))
        found.append((name, kind, documentation, checked))
    return found


@final
class SummedFamilies(Collector):
    """Several processes' families as one: each sample summed across them (the
    earliest for a start time), in the first process's order."""

    def __init__(self, dumps: list[list[Family]]) -> None:
        self.dumps = dumps

    def collect(self) -> Iterator[Metric]:
        merged: dict[str, tuple[Metric, dict[tuple[str, tuple[tuple[str, str], ...]], int]]] = {}
        for families in self.dumps:
            for name, kind, documentation, samples in families:
                if name not in merged:
                    merged[name] = (Metric(name, documentation, kind), {})
                metric, index = merged[name]
                for sample_name, labels, value in samples:
                    key = (sample_name, tuple(sorted(labels.items())))
                    at = index.get(key)
                    if at is None:
                        index[key] = len(metric.samples)
                        metric.add_sample(sample_name, labels, value)
                        continue
                    old = metric.samples[at]
                    combined = min(old.value, value) if name in _EARLIEST else old.value + value
                    metric.samples[at] = old._replace(value=combined)
        for metric, _ in merged.values():
            yield metric
        read = GaugeMetricFamily(
            "sandboxfs_workers_read",
            "Server processes (--workers) whose metrics this answer sums.",
            value=len(self.dumps),
        )
        yield read


@final
class ReplicaMetrics:
    """The metrics of one of ``--workers`` processes: counted here, shown summed with
    every other process's (see the module's docstring)."""

    def __init__(self, local: ServerMetrics, fd: int) -> None:
        self.local = local
        self.http: HttpMetrics = local.http
        self._stream = trio.SocketStream(trio.socket.from_stdlib_socket(socket.socket(fileno=fd)))
        self._send_lock = trio.Lock()
        self._scrape_lock = trio.Lock()
        self._seq = 0
        self._arrived = trio.Event()
        self._answer: bytes | None = None

    async def _send(self, data: bytes) -> None:
        async with self._send_lock:
            await self._stream.send_all(data)

    async def answer_parent(self) -> None:
        """Serve the parent: answer each ``D`` with this process's samples, hand each
        ``A`` to the scrape waiting for it.  Ends when the parent is gone."""
        reader = FrameReader()
        try:
            while True:
                data = await self._stream.receive_some(65536)
                if not data:
                    return
                for kind, seq, payload in reader.feed(data):
                    if kind == DUMP:
                        await self._send(frame(SAMPLES, seq, dump(self.local)))
                    elif kind == ANSWER and seq == self._seq:
                        self._answer = payload
                        self._arrived.set()
        except (ValueError, OSError, trio.BrokenResourceError, trio.ClosedResourceError):
            return  # the parent is gone or broke the wire: scrapes show this process alone
        finally:
            self._arrived.set()

    async def exposition(self) -> bytes:
        """Every process's metrics, summed (this process's alone for those that did
        not answer in time)."""
        async with self._scrape_lock:
            self._seq = (self._seq + 1) & 0xFFFFFFFF
            self._answer = None
            self._arrived = trio.Event()
            others: list[list[Family]] = []
            try:
                await self._send(frame(COLLECT, self._seq))
                with trio.move_on_after(GATHER_SECONDS):
                    await self._arrived.wait()
            except (OSError, trio.BrokenResourceError, trio.ClosedResourceError):
                pass
            if self._answer is not None:
                others = _decoded(self._answer)
            mine = _families(json.loads(dump(self.local)))
            return generate_latest(SummedFamilies([mine, *others]))


def _decoded(answer: bytes) -> list[list[Family]]:
    """The other processes' families out of an ``A`` frame (those that parse)."""
    try:
        dumps = json.loads(answer)
    except ValueError:
        return []
    found = []
    for one in dumps if isinstance(dumps, list) else ():
        try:
            found.append(_families(one))
        except (ValueError, TypeError):
            continue
    return found
