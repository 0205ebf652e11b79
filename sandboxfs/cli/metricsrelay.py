"""The parent's side of ``/metrics`` under ``--workers N``: it passes samples between
its server processes (the wire is :mod:`sandboxfs.transports.metricswire`).

One thread of the parent, which serves nothing else: a process that is scraped
sends ``C``; the parent asks every other process for its samples (``D``), waits
for them (``S``) at most :data:`~sandboxfs.transports.http.replicametrics.GATHER_SECONDS`,
and answers the scraped process with those it got (``A``).  One collection at a
time, in the order asked; the samples are passed on as they came, never parsed
here.  A process whose socket ends or breaks the wire is left out from then on;
the thread ends when every process's socket has ended.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import selectors
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import final

from sandboxfs.transports.metricswire import (
    ANSWER,
    COLLECT,
    DUMP,
    GATHER_SECONDS,
    SAMPLES,
    FrameReader,
    frame,
)

log = logging.getLogger("sandboxfs")


@dataclass
class _Collection:
    """One scrape's gathering: who asked, and whose samples are still awaited."""

    requester: int
    seq: int
    dump_seq: int
    deadline: float
    waiting: set[int]
    samples: list[bytes] = field(default_factory=list)


@final
class MetricsRelay:
    """Relays samples between the server processes, one socket each (by index)."""

    def __init__(self, ends: dict[int, socket.socket]) -> None:
        self.ends = dict(ends)
        for end in self.ends.values():
            end.settimeout(GATHER_SECONDS)  # a process that takes nothing is dropped
        self._readers = {index: FrameReader() for index in self.ends}
        self._selector = selectors.DefaultSelector()
        for index, end in self.ends.items():
            self._selector.register(end, selectors.EVENT_READ, index)
        self._pending: collections.deque[tuple[int, int]] = collections.deque()
        self._current: _Collection | None = None
        self._dumps = 0

    def start(self) -> threading.Thread:
        """Relay in a daemon thread (start it with SIGTERM and SIGINT blocked: the
        main thread must be the one they interrupt)."""
        thread = threading.Thread(target=self.run, name="sandboxfs-metrics-relay", daemon=True)
        thread.start()
        return thread

    def run(self) -> None:
        try:
            while self.ends:
                current = self._current
                timeout = None if current is None else max(0.0, current.deadline - time.monotonic())
                for key, _ in self._selector.select(timeout):
                    self._receive(key.data)
                self._progress()
        except Exception:  # the processes' scrapes then show each its own
            log.exception("the metrics relay between server processes stopped")
        finally:
            for index in list(self.ends):
                self._drop(index)
            self._selector.close()

    def _receive(self, index: int) -> None:
        end = self.ends.get(index)
        if end is None:
            return
        try:
            data = end.recv(65536)
            frames = self._readers[index].feed(data) if data else None
        except (BlockingIOError, InterruptedError, TimeoutError):
            return
        except (OSError, ValueError):
            frames = None
        if frames is None:
            self._drop(index)
            return
        current = self._current
        for kind, seq, payload in frames:
            if kind == COLLECT:
                self._pending.append((index, seq))
            elif (
                kind == SAMPLES
                and current is not None
                and seq == current.dump_seq
                and index in current.waiting
            ):
                current.waiting.discard(index)
                current.samples.append(payload)

    def _progress(self) -> None:
        """Answer the collection under way once complete (or late); start the next."""
        current = self._current
        if current is not None and (not current.waiting or time.monotonic() >= current.deadline):
            self._current = None
            self._send(current.requester, frame(ANSWER, current.seq, _list(current.samples)))
        while self._current is None and self._pending:
            requester, seq = self._pending.popleft()
            if requester not in self.ends:
                continue
            self._dumps = (self._dumps + 1) & 0xFFFFFFFF
            others = [index for index in self.ends if index != requester]
            asked = {index for index in others if self._send(index, frame(DUMP, self._dumps))}
            collection = _Collection(
                requester, seq, self._dumps, time.monotonic() + GATHER_SECONDS, asked
            )
            if asked:
                self._current = collection
            else:
                self._send(requester, frame(ANSWER, seq, b"[]"))

    def _send(self, index: int, data: bytes) -> bool:
        end = self.ends.get(index)
        if end is None:
            return False
        try:
            end.sendall(data)
        except OSError:  # gone, or took nothing for GATHER_SECONDS (the wire is now cut)
            self._drop(index)
            return False
        return True

    def _drop(self, index: int) -> None:
        end = self.ends.pop(index, None)
        if end is None:
            return
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(end)
        end.close()
        current = self._current
        if current is not None:
            current.waiting.discard(index)
            if current.requester == index:
                self._current = None


def _list(samples: list[bytes]) -> bytes:
    """The JSON list of the samples (each already JSON)."""
    return b"[" + b",".join(samples) + b"]"
