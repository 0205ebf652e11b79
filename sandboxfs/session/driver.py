"""Carries out what a :class:`~sandboxfs.session.protocol.Session` asks for, on trio.

The one piece between the sans-IO session and a transport: it runs calls on the
:class:`~sandboxfs.session.dispatcher.SandboxfsServer` (each in a task of its own,
cancellable), timers, the opening of a client's Roots, and hands every message
the session sends to the transport's ``send``.  Both transports use it: stdio for
the life of a connection, HTTP for one request.

Guarantees: effects are carried out in the order the session gave them (so a
transport sends messages in that order); a call that raises something
unexpected is answered -32603 and logged with its traceback, and nothing a call
does stops the others.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Final, final

import trio

from sandboxfs.session.approval import ASK_SECONDS, Answers, Asking
from sandboxfs.session.dispatcher import SandboxfsServer
from sandboxfs.session.effects import (
    Call,
    Cancel,
    Close,
    Effect,
    KeepRoots,
    OpenRoots,
    Send,
    StartTimer,
    UseCommandLine,
)
from sandboxfs.session.jsonrpc import ProtocolError
from sandboxfs.session.protocol import Session
from sandboxfs.tools import Progress

log = logging.getLogger("sandboxfs")

#: At most one progress notification per call this often (the last one always goes).
PROGRESS_INTERVAL: Final = 0.25


@final
class Driver:
    """Runs a session's effects in ``nursery``; messages go to ``send``."""

    def __init__(
        self,
        session: Session,
        server: SandboxfsServer,
        send: Callable[[dict[str, Any]], None],
        nursery: trio.Nursery,
        *,
        on_close: Callable[[int], None] | None = None,
        answers: Answers | None = None,
        can_ask: bool = True,
    ) -> None:
        self.session = session
        self.server = server
        self.send = send
        self.nursery = nursery
        self.on_close = on_close
        #: Requests this server sent the client (--ask), waiting for their answers.
        self.answers = answers if answers is not None else Answers()
        #: Whether a request can reach the client at all (HTTP: only on a stream).
        self.can_ask = can_ask
        #: What the client said of elicitation at initialize (None: it did not say).
        self.elicits: bool | None = None
        self._calls: dict[int, trio.CancelScope] = {}
        self._timers: list[trio.CancelScope] = []
        self._busy = 0
        self._idle = trio.Event()
        self._idle.set()
        self._token = trio.lowlevel.current_trio_token()
        #: Roots answers are opened one after the other, in the order they came, so the
        #: last one in force is the newest.
        self._roots_lock = trio.Lock()

    # -- feeding -----------------------------------------------------------------------

    def receive(self, message: dict[str, Any]) -> None:
        if "method" not in message and self.answers.resolve(message):
            return  # the user's answer to a question of ours (--ask)
        if message.get("method") == "initialize":
            params = message.get("params")
            caps = params.get("capabilities") if isinstance(params, dict) else None
            self.elicits = isinstance(caps, dict) and isinstance(caps.get("elicitation"), dict)
        self.feed(self.session.receive(message))

    def input_ended(self) -> None:
        """End of input: questions to the client go unanswered (refused at once)."""
        self.answers.give_up()
        self.feed(self.session.input_ended())

    async def elicit(self, params: dict[str, Any]) -> dict[str, Any] | None:
        """Ask the client's user (``elicitation/create``); the response, or None when
        none comes in time."""
        ask, event, box = self.answers.new()
        try:
            self.send(
                {"jsonrpc": "2.0", "id": ask, "method": "elicitation/create", "params": params}
            )
            with trio.move_on_after(ASK_SECONDS):
                await event.wait()
        finally:
            self.answers.forget(ask)
        return box[0] if box else None

    def _asking(self, call: Call) -> Asking:
        legacy = self.can_ask and self.elicits is not False
        return Asking(self.elicit if legacy else None, self._token, call.params)

    def feed(self, effects: list[Effect]) -> None:
        """Carry out ``effects``, in order."""
        for effect in effects:
            if isinstance(effect, Send):
                self.send(effect.message)
            elif isinstance(effect, Call):
                if not self._inline(effect):
                    self._start(self._call, effect)
            elif isinstance(effect, Cancel):
                scope = self._calls.pop(effect.key, None)
                if scope is not None:
                    scope.cancel()
            elif isinstance(effect, StartTimer):
                self.nursery.start_soon(self._timer, effect)
            elif isinstance(effect, OpenRoots):
                self._start(self._open_roots, effect)
            elif isinstance(effect, KeepRoots):
                self.server.access.keep(effect.reason)
            elif isinstance(effect, UseCommandLine):
                self.server.access.client_without_roots()
            elif isinstance(effect, Close) and self.on_close is not None:
                self.on_close(effect.exit_code)

    async def idle(self) -> None:
        """Wait until no call and no opening of Roots is under way."""
        await self._idle.wait()

    def stop_timers(self) -> None:
        for scope in self._timers:
            scope.cancel()

    # -- work ---------------------------------------------------------------------------

    def _start(self, work: Callable[[Any], Any], effect: Any) -> None:
        self._busy += 1
        self._idle = trio.Event() if self._idle.is_set() else self._idle
        self.nursery.start_soon(self._tracked, work, effect)

    async def _tracked(self, work: Callable[[Any], Any], effect: Any) -> None:
        try:
            await work(effect)
        finally:
            self._busy -= 1
            if self._busy == 0:
                self._idle.set()

    def _inline(self, call: Call) -> bool:
        """Run a quick tool call here and now, if the server may run it inline (see
        SandboxfsServer.inline_call): no task, no cancel scope, no thread; nothing can
        cancel it, since no message is read before it is answered.  False: it must
        run in a task of its own."""
        if call.method != "tools/call" or call.progress is not None:
            return False
        params = call.params
        try:
            result = self.server.inline_call(
                params["name"], params.get("arguments") or {}, call.caller
            )
        except Exception:
            log.exception("internal error while handling %s", call.method)
            self.feed(self.session.failed(call.key))
            return True
        if result is None:
            return False
        self.feed(self.session.completed(call.key, result))
        return True

    async def _call(self, call: Call) -> None:
        session = self.session
        effects: list[Effect] = []  # a cancelled call is never answered
        with trio.CancelScope() as scope:
            self._calls[call.key] = scope
            try:
                if call.method == "tools/call":
                    params = call.params
                    result = await self.server.run_tool(
                        params["name"],
                        params.get("arguments") or {},
                        call.caller,
                        self._progress(call.key, call.progress)
                        if call.progress is not None
                        else None,
                        asking=self._asking(call),
                    )
                else:
                    result = await self.server.read_resource(call.params["uri"])
                effects = session.completed(call.key, result)
            except ProtocolError as exc:
                effects = session.completed(call.key, exc)
            except Exception:
                log.exception("internal error while handling %s", call.method)
                effects = session.failed(call.key)
            finally:
                self._calls.pop(call.key, None)
        self.feed(effects)

    async def _open_roots(self, effect: OpenRoots) -> None:
        async with self._roots_lock:
            try:
                await self.server.open_roots(effect.uris)
            except Exception:
                log.exception("internal error while opening the client's Roots")
                self.server.access.keep("an internal error")
        self.feed(self.session.roots_settled(effect.generation))

    async def _timer(self, effect: StartTimer) -> None:
        with trio.CancelScope() as scope:
            self._timers.append(scope)
            await trio.sleep(effect.seconds)
            self.feed(self.session.timer_expired(effect.name))
        self._timers.remove(scope)

    def _progress(self, key: int, token: str | int) -> Progress:
        """A progress callback for a worker thread: throttled, delivered on the loop,
        and only while the call is still running (never after its answer)."""
        lock = threading.Lock()
        last = [0.0]

        def deliver(done: float, total: float | None, message: str | None) -> None:
            if key in self._calls:
                self.feed(self.session.progress_notice(token, done, total, message))

        def report(done: float, total: float | None, message: str | None) -> None:
            now = time.monotonic()
            with lock:
                finished = total is not None and done >= total
                if not finished and now - last[0] < PROGRESS_INTERVAL:
                    return
                last[0] = now
            with contextlib.suppress(trio.RunFinishedError):  # the loop is gone: nobody asks
                self._token.run_sync_soon(deliver, done, total, message)

        return report
