"""One code_map call's parses, spread over fresh helpers of the pool
(:mod:`sandboxfs.tools.parsepool`).

The server never parses: it reads a file through the chokepoint and sends the
bytes to a helper (:mod:`sandboxfs.tools.parsehelper`), which answers with spans
and names the server checks (:mod:`sandboxfs.tools.parsewire`) and cuts from its
own copy of the bytes (:mod:`sandboxfs.tools.codefacts`).  While a call waits for
its helpers its thread blocks in ``poll``, so no parse holds the server's
interpreter: every other call of every client goes on.

:class:`ParseRun` sends files in batches to up to :data:`WIDTH` helpers, answered
one by one.  Guarantees: every file submitted gets exactly one outcome: its
facts, :attr:`Unparsed.LATE` (the deadline passed first) or
:attr:`Unparsed.FAILED` (its helper crashed, was killed, ran out of memory or
said something no correct helper says: that costs this one file, the others of
its batch go to another helper); files waiting behind a helper's current one are
handed, last first, to a helper with nothing to do, so one slow file holds up no
other; :meth:`ParseRun.finish` returns by the deadline (plus one ``poll``
wake-up) whatever the helpers do, and kills the call's helpers; at most
:data:`BACKLOG_BYTES` of file contents wait in the server per call.
"""

from __future__ import annotations

import enum
import math
import select
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Final, final

from sandboxfs.tools.codefacts import LANGUAGES, Parsed, facts_from_spans
from sandboxfs.tools.parsepool import Helper, ParserPool
from sandboxfs.tools.parsewire import (
    BATCH_BYTES,
    BATCH_FILES,
    DONE,
    LATE,
    PARSED,
    AnswerReader,
    WireError,
    decode_extracted,
    encode_request,
)

#: Helpers one call parses with at once, at most.
WIDTH: Final = 2
#: File contents one call keeps waiting for answers, at most.
BACKLOG_BYTES: Final = 4 * 1024 * 1024
_RECEIVE: Final = 1024 * 1024
#: Files queued between looks at the helpers' answers.
_LOOK_EVERY: Final = 16
#: Seconds between looks for a helper while a file waits for one.
_RETRY: Final = 0.05
_LANGUAGE_INDEX: Final = {language: index for index, language in enumerate(LANGUAGES)}


class Unparsed(enum.Enum):
    """Why a file submitted to a :class:`ParseRun` has no facts."""

    LATE = "not parsed in time"
    FAILED = "not parsed: the parser failed"


Outcome = Parsed | Unparsed


@final
@dataclass(slots=True)
class _Slot:
    """A helper serving this call and the batch it is answering (None: idle)."""

    helper: Helper
    batch: list[tuple[int, int, bytes]] | None = None  # tag, language, data
    out: memoryview | None = None  # the request's bytes not yet sent
    reader: AnswerReader = field(default_factory=lambda: AnswerReader(0))
    answered: set[int] = field(default_factory=set)


@final
class ParseRun:
    """One call's parses (see the module).  Used by one thread."""

    def __init__(self, pool: ParserPool, deadline: float, width: int = WIDTH) -> None:
        self._pool = pool
        self.deadline = deadline
        self.width = width
        self._queue: deque[tuple[int, int, bytes]] = deque()
        self._queued = 0  # bytes in the queue
        self._flying = 0  # bytes in batches sent
        self._slots: list[_Slot] = []
        self._used: list[Helper] = []
        self._open: set[int] = set()
        self._stolen: set[int] = set()  # files handed to a second helper
        self._poller = select.poll()
        self._polled: dict[int, int] = {}  # descriptor -> the events it is polled for
        self._done: list[tuple[int, Outcome]] = []

    def _left(self) -> float:
        return self.deadline - time.monotonic()

    def _wait(self) -> float:
        """How long to wait for the helpers: until the deadline, or a moment while a
        file waits for a helper to come free or be forked."""
        return min(self._left(), _RETRY) if self._queue else self._left()

    def submit(self, tag: int, language: str, data: bytes) -> list[tuple[int, Outcome]]:
        """Queue one file; returns the outcomes that came meanwhile (this file's too,
        perhaps).  Waits, within the deadline, while too much is waiting."""
        self._queue.append((tag, _LANGUAGE_INDEX[language], data))
        self._queued += len(data)
        self._open.add(tag)
        if self._queued >= BATCH_BYTES or len(self._queue) >= BATCH_FILES:
            self._dispatch(whole=True)
            self._pump(0.0)
        elif len(self._queue) % _LOOK_EVERY == 0:  # answers may have come meanwhile
            self._pump(0.0)
        while self._queued + self._flying > BACKLOG_BYTES and self._left() > 0:
            self._dispatch(whole=True)
            self._pump(self._wait())
        return self._take()

    def finish(self) -> list[tuple[int, Outcome]]:
        """Every outcome not returned yet, by the deadline; then the helpers are
        killed."""
        try:
            while self._open and self._left() > 0:
                self._dispatch(whole=False)
                if not self._queue:
                    self._steal()
                    self._dispatch(whole=False)
                self._pump(self._wait())
        finally:
            for tag in self._open:
                self._done.append((tag, Unparsed.LATE))
            self._open.clear()
            self._pool.discard(self._used)
            self._used = []
            self._slots = []
        return self._take()

    def _take(self) -> list[tuple[int, Outcome]]:
        done, self._done = self._done, []
        return done

    # -- sending --------------------------------------------------------------------------

    def _idle_slot(self) -> _Slot | None:
        for slot in self._slots:
            if slot.batch is None:
                return slot
        if len(self._slots) >= self.width:
            return None
        helpers = self._pool.checkout(1, self.deadline, wait=not self._slots)
        if not helpers:
            return None
        self._used += helpers
        slot = _Slot(helpers[0])
        self._slots.append(slot)
        return slot

    def _dispatch(self, *, whole: bool) -> None:
        """Send batches to idle helpers (with ``whole``, only full batches)."""
        while self._queue and self._left() > 0:
            full = self._queued >= BATCH_BYTES or len(self._queue) >= BATCH_FILES
            if whole and not full:
                return
            slot = self._idle_slot()
            if slot is None:
                return
            batch: list[tuple[int, int, bytes]] = []
            size = 0
            while self._queue and len(batch) < BATCH_FILES:
                if batch and size + len(self._queue[0][2]) > BATCH_BYTES:
                    break
                item = self._queue.popleft()
                batch.append(item)
                size += len(item[2])
            self._queued -= size
            self._flying += size
            slot.batch = batch
            slot.answered = set()
            slot.reader = AnswerReader(len(batch))
            items = [(language, data) for _, language, data in batch]
            slot.out = memoryview(encode_request(items, self.deadline))

    def _steal(self) -> None:
        """The queue is empty and a helper could take work: give it the last file a
        busy helper has not answered yet, never the one that helper is parsing (the
        first it has not answered).  The first answer counts; a file is handed out
        twice at most."""
        if all(slot.batch is not None for slot in self._slots) and len(self._slots) >= self.width:
            return
        for slot in self._slots:
            batch = slot.batch
            if batch is None or slot.out:
                continue
            waiting = [i for i in range(len(batch)) if i not in slot.answered][1:]
            for i in reversed(waiting):
                item = batch[i]
                if item[0] in self._open and item[0] not in self._stolen:
                    self._stolen.add(item[0])
                    self._queue.append(item)
                    self._queued += len(item[2])
                    return

    # -- receiving ------------------------------------------------------------------------

    def _pump(self, timeout: float) -> None:
        """Send and receive what the helpers allow, waiting up to ``timeout`` seconds
        for the first event."""
        poller = self._poller
        by_fd: dict[int, _Slot] = {}
        for slot in self._slots:
            events = (select.POLLOUT if slot.out else 0) | (select.POLLIN if slot.batch else 0)
            fd = slot.helper.sock.fileno()
            if self._polled.get(fd) != events:
                if events:
                    poller.register(fd, events)  # registers, or changes the events
                else:
                    poller.unregister(fd)
                self._polled[fd] = events
            if events:
                by_fd[fd] = slot
        if not by_fd:
            return
        for fd, events in poller.poll(math.ceil(max(timeout, 0.0) * 1000)):
            slot = by_fd[fd]
            if slot not in self._slots:
                continue  # lost while an earlier event was handled (its number unpolled)
            if events & select.POLLOUT and slot.out:
                self._write(slot)
            if events & (select.POLLIN | select.POLLHUP | select.POLLERR):
                self._read(slot)

    def _write(self, slot: _Slot) -> None:
        assert slot.out is not None
        try:
            sent = slot.helper.sock.send(slot.out)
        except BlockingIOError:
            return
        except OSError:  # it died before it had the whole batch: no file was parsing
            self._lost(slot, None)
            return
        slot.out = slot.out[sent:] if sent < len(slot.out) else None

    def _read(self, slot: _Slot) -> None:
        try:
            data = slot.helper.sock.recv(_RECEIVE)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:  # it died or was killed: if it had its whole batch, while parsing
            self._lost(slot, self._current(slot) if slot.out is None else None)
            return
        try:
            frames = slot.reader.feed(data)
        except WireError:
            self._lost(slot, self._current(slot))
            return
        for index, status, payload in frames:
            if not self._answer(slot, index, status, payload):
                self._lost(slot, index)
                return

    @staticmethod
    def _current(slot: _Slot) -> int | None:
        """The file a helper is parsing: the first of its batch it has not answered
        (it answers in order)."""
        batch = slot.batch or []
        return next((i for i in range(len(batch)) if i not in slot.answered), None)

    def _answer(self, slot: _Slot, index: int, status: int, payload: bytes) -> bool:
        """Take one answer frame; False if no correct helper sends it."""
        batch = slot.batch
        assert batch is not None
        if status == DONE:
            if len(slot.answered) != len(batch):
                return False
            self._flying -= sum(len(item[2]) for item in batch)
            slot.batch = None
            return True
        if index in slot.answered:
            return False
        tag, _, data = batch[index]
        outcome: Outcome
        if status == PARSED:
            try:
                spans, references = decode_extracted(payload)
            except WireError:
                return False
            outcome = facts_from_spans(data, spans, references)
        else:
            outcome = Unparsed.LATE if status == LATE else Unparsed.FAILED
        slot.answered.add(index)
        if tag in self._open:  # else another helper answered it first
            self._open.discard(tag)
            self._done.append((tag, outcome))
        return True

    def _lost(self, slot: _Slot, culprit: int | None) -> None:
        """A helper died, was killed or misbehaved while answering file ``culprit`` of
        its batch (None: before it had the batch): that file failed (or was late,
        past the deadline); the rest of its batch goes back in the queue."""
        self._slots.remove(slot)
        self._used.remove(slot.helper)
        fd = slot.helper.sock.fileno()
        if self._polled.pop(fd, 0):
            self._poller.unregister(fd)
        self._pool.discard([slot.helper])
        batch = slot.batch or []
        self._flying -= sum(len(item[2]) for item in batch)
        if culprit is not None and batch[culprit][0] in self._open:
            tag = batch[culprit][0]
            self._open.discard(tag)
            late = self._left() <= 0
            self._done.append((tag, Unparsed.LATE if late else Unparsed.FAILED))
        unanswered = [
            item
            for i, item in enumerate(batch)
            if i not in slot.answered and i != culprit and item[0] in self._open
        ]
        for item in reversed(unanswered):
            self._queue.appendleft(item)
            self._queued += len(item[2])
