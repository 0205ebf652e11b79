"""A 2025-era client's Roots, sans I/O: the ``roots/list`` questions the server asks,
the calls that wait for an update, and what each answer comes to.

Part of the session core (:mod:`sandboxfs.session.protocol` owns one
:class:`ClientRoots` per connection and forwards to it); like the core, it never
reads, writes or sleeps, and returns the effects to carry out.

Guarantees:

* one question out at a time; a change announced while it is out asks again once
  it is answered (a storm of announcements costs at most one more question), and
  the answer it supersedes is never opened;
* any response carrying the question's id settles it, whatever it holds: an
  error, a malformed answer or one over a bound is logged (escaped, bounded) and
  dropped with the directories in force kept (:class:`KeepRoots`; see
  :mod:`sandboxfs.session.rooturis`), so no answer leaves a question outstanding
  and the next change asks at once;
* a question never answered is given up after :data:`ROOTS_FETCH_TIMEOUT`, and a
  change announced meanwhile asks nothing more (the next one asks again);
* calls wait while an update is under way, and never longer than
  :data:`ROOTS_FETCH_TIMEOUT` from when the first of them began waiting, however
  often the client announces a change: then they run with the directories in force.
"""

from __future__ import annotations

import itertools
import logging
from typing import Any, final

from sandboxfs.session.effects import Call, Effect, KeepRoots, OpenRoots, Send, StartTimer
from sandboxfs.session.jsonrpc import ROOTS_FETCH_TIMEOUT
from sandboxfs.session.rooturis import RootsNotTaken, answered_uris

log = logging.getLogger("sandboxfs")

#: Timer names: ``roots:<question id>`` gives a question up, ``roots-wait:<n>``
#: ends a wait of calls.
_QUESTION_TIMER = "roots:"
_WAIT_TIMER = "roots-wait:"


@final
class ClientRoots:
    """The client's Roots on one connection: declared, fetched one question at a time."""

    def __init__(self) -> None:
        #: Whether the client declared the Roots capability (and Roots may be used).
        self.declared = False
        #: Whether the Roots were asked for since the last ``initialize``.
        self.fetched = False
        #: The update under way (calls wait while one is), if any.
        self._generation: int | None = None
        #: The id of the roots/list request awaiting an answer, if any.
        self._asking: str | None = None
        #: A change was announced while a question was out: ask again once it is answered.
        self._again = False
        #: Calls waiting for the update, in arrival order, and the timer that bounds
        #: their wait.
        self._waiting: list[Call] = []
        self._wait_timer: str | None = None
        self._asks = itertools.count(1)
        self._generations = itertools.count(1)
        self._waits = itertools.count(1)
        #: Once-only facts: a client without Roots was greeted (the command line's
        #: directories put in force), and its roots/list_changed was logged as ignored.
        self._greeted_without_roots = False
        self._told_undeclared = False

    def first_greeting_without_roots(self) -> bool:
        """Whether this is the first ``initialized`` of a client without Roots (the
        command line's directories are put in force once)."""
        first, self._greeted_without_roots = not self._greeted_without_roots, True
        return first

    def first_undeclared_change(self) -> bool:
        """Whether this is the first roots/list_changed of a client that declared no
        Roots (logged once: a storm of them is not a log flood)."""
        first, self._told_undeclared = not self._told_undeclared, True
        return first

    @property
    def updating(self) -> bool:
        """Whether an update is under way (a question out, or an answer being opened)."""
        return self._generation is not None

    # -- what the session forwards ----------------------------------------------------------

    def fetch(self) -> list[Effect]:
        """The client's Roots changed (or were never asked for): ask for them."""
        self._generation = next(self._generations)
        if self._asking is not None:
            self._again = True  # one question at a time: ask again once this one is answered
            return []
        ask = f"sandboxfs-{next(self._asks)}"
        self._asking = ask
        request = {"jsonrpc": "2.0", "id": ask, "method": "roots/list"}
        return [Send(request), StartTimer(f"{_QUESTION_TIMER}{ask}", ROOTS_FETCH_TIMEOUT)]

    def response(self, message: dict[str, Any]) -> list[Effect]:
        """A response from the client, as it came (its envelope unchecked)."""
        if self._asking is None or message.get("id") != self._asking:
            log.debug("Ignoring a response to no request of ours")
            return []
        self._asking = None  # whatever it holds, the question is answered
        if self._again:  # superseded while it was out: ask again
            self._again = False
            self._generation = None
            return self.fetch()
        try:
            uris = answered_uris(message)
        except RootsNotTaken as exc:
            return self._failed(str(exc))
        assert self._generation is not None
        return [OpenRoots(self._generation, tuple(uris))]

    def settled(self, generation: int) -> list[Effect]:
        """The answer of ``generation`` is in force (or was given up): the calls that
        waited for it run now, unless a newer update is under way."""
        if self._generation != generation or self._asking is not None:
            return []
        return self._release()

    def timer_expired(self, name: str) -> list[Effect]:
        if self._asking is not None and name == f"{_QUESTION_TIMER}{self._asking}":
            return self._failed(f"no answer to roots/list within {ROOTS_FETCH_TIMEOUT:g} s")
        if name == self._wait_timer:
            return self._waited_long_enough()
        return []

    def input_ended(self) -> list[Effect]:
        if self._asking is not None:
            return self._failed("the connection closed")
        return []  # an answer being opened settles as usual

    def hold(self, call: Call) -> list[Effect]:
        """Hold ``call`` until the update lands, for at most ROOTS_FETCH_TIMEOUT."""
        self._waiting.append(call)
        if self._wait_timer is not None:
            return []
        self._wait_timer = f"{_WAIT_TIMER}{next(self._waits)}"
        return [StartTimer(self._wait_timer, ROOTS_FETCH_TIMEOUT)]

    def forget(self, keys: list[int]) -> None:
        """The calls ``keys`` were cancelled: they no longer wait."""
        if keys and self._waiting:
            self._waiting = [call for call in self._waiting if call.key not in keys]

    # -- inside ----------------------------------------------------------------------------

    def _failed(self, reason: str) -> list[Effect]:
        self._asking = None
        self._again = False
        return [KeepRoots(reason), *self._release()]

    def _waited_long_enough(self) -> list[Effect]:
        waiting, self._waiting = self._waiting, []
        self._wait_timer = None
        if waiting:
            log.warning(
                "%d call(s) waited %g s for the client's Roots to settle; they run now, "
                "with the directories in force",
                len(waiting),
                ROOTS_FETCH_TIMEOUT,
            )
        return list(waiting)

    def _release(self) -> list[Effect]:
        waiting, self._waiting = self._waiting, []
        self._generation = None
        self._wait_timer = None
        return list(waiting)
