"""Asking the user to approve a change (``--ask``), through MCP elicitation.

The filesystem layer decides *whether* a change needs approval and stops it until
the ``ask`` of its :class:`~sandboxfs.fs.approval.Gate` returns
(:mod:`sandboxfs.fs.approval`); this module is how a session asks, in each era:

* **2025 era** (stdio, or HTTP when the client takes an SSE stream): the server
  sends an ``elicitation/create`` request to the client while the call waits (its
  worker thread blocks on the answer, for at most :data:`ASK_SECONDS`), with a form
  holding one boolean, ``approve``, and the change and its diff in the message.
  The answer comes back as a JSON-RPC response, routed by its id
  (:class:`Answers`; over HTTP it arrives in a POST of its own).
* **2026-07-28** (stateless): the call answers ``resultType: input_required``
  with the same elicitation as an ``inputRequest`` and a ``requestState`` sealed
  with this process's key: it names the tool, a hash of its arguments, the
  question asked (a digest of the change's words, paths and bytes) and the
  approvals given so far.  The client retries the call with the user's answer
  (``inputResponses``) and the state; the retry runs the call afresh, and a
  change is made only if its question's digest is one the user approved, so an
  approval is for that exact change and nothing else (a file that changed since
  gets a new question).

Refused, with nothing changed: a no (``decline``, ``cancel``, or ``approve``
false), no answer in time, the connection gone, or a client that cannot ask its
user (no elicitation capability, or an HTTP client that takes no stream).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final, final

import trio

from sandboxfs.fs.approval import NotApproved, Question
from sandboxfs.tools.unidiff import unified_diff

JSON = dict[str, Any]

#: How long a call waits for the user's answer (2025 era) before it is refused.
ASK_SECONDS: Final = 300.0
#: How long a 2026-07-28 approval may take to come back.
STATE_SECONDS: Final = 3600.0
#: The input request's key in a 2026-07-28 ``input_required`` result.
KEY: Final = "approve"
#: Most characters of the diffs shown in one question.
MAX_SHOWN: Final = 48 * 1024

SCHEMA: Final[JSON] = {
    "type": "object",
    "properties": {
        KEY: {
            "type": "boolean",
            "title": "Allow this change",
            "description": "Yes lets the agent make the change shown; no refuses it.",
        }
    },
    "required": [KEY],
}


class ApprovalRequired(Exception):
    """A 2026-07-28 call must ask first: answered ``input_required`` (never an error)."""

    def __init__(self, result: JSON) -> None:
        super().__init__("input required")
        self.result = result


def message(tool: str, question: Question) -> str:
    """What the user reads: the tool, the change, and the diff of each file's bytes."""
    lines = [f"sandboxfs: the agent's {tool} call wants to {question.what}.", ""]
    shown = 0
    for place in question.places:
        if place.before is None and place.after is None:
            continue
        diff = unified_diff(place.before or b"", place.after or b"", place.path)
        if shown + len(diff) > MAX_SHOWN:
            lines.append(f"[the rest of the diff is not shown: over {MAX_SHOWN} characters]")
            break
        shown += len(diff)
        lines.append(diff)
    lines.append("Allow this change?")
    return "\n".join(lines)


def request_params(tool: str, question: Question, *, modern: bool) -> JSON:
    params: JSON = {"message": message(tool, question), "requestedSchema": SCHEMA}
    if modern:
        params["mode"] = "form"
    return params


def approved(answer: Any) -> bool:
    """Whether an ``ElicitResult`` says yes: accepted, with ``approve`` true."""
    if not isinstance(answer, dict) or answer.get("action") != "accept":
        return False
    content = answer.get("content")
    return isinstance(content, dict) and content.get(KEY) is True


def refused(question: Question, why: str) -> NotApproved:
    return NotApproved(
        f"Access denied - the change needs the user's approval (--ask), and {why}; nothing "
        f"was changed: {question.what}"
    )


# -- 2025 era: a request to the client, answered by id ------------------------------------


@final
class Answers:
    """Requests the server sent to a client, waiting for their responses by id.  Shared
    by every exchange of an HTTP endpoint (a response arrives in a POST of its own)."""

    def __init__(self) -> None:
        self._waiting: dict[str, tuple[trio.Event, list[JSON]]] = {}

    def new(self) -> tuple[str, trio.Event, list[JSON]]:
        ask = f"sandboxfs-ask-{secrets.token_urlsafe(16)}"  # unguessable: only the asked answer
        event, box = trio.Event(), list[JSON]()
        self._waiting[ask] = (event, box)
        return ask, event, box

    def forget(self, ask: str) -> None:
        self._waiting.pop(ask, None)

    def resolve(self, message: JSON) -> bool:
        """Hand a response to the request waiting for it; False if none is."""
        waiting = self._waiting.pop(str(message.get("id")), None) if "id" in message else None
        if waiting is None:
            return False
        event, box = waiting
        box.append(message)
        event.set()
        return True

    def give_up(self) -> None:
        """Nothing more will come (the connection ended): every question goes unanswered."""
        waiting, self._waiting = self._waiting, {}
        for event, _ in waiting.values():
            event.set()


Elicit = Callable[[JSON], Awaitable[JSON | None]]


@final
@dataclass(frozen=True)
class Asking:
    """How one call may ask its client's user: ``elicit`` sends a 2025-era request (None:
    it cannot reach the client), ``params`` are the call's own (2026-07-28: its state,
    the user's answers and the client's capabilities)."""

    elicit: Elicit | None
    token: trio.lowlevel.TrioToken
    params: JSON


def legacy_ask(
    tool: str, elicit: Elicit | None, token: trio.lowlevel.TrioToken
) -> Callable[[Question], None]:
    """The 2025 era's ``ask``: from the call's worker thread, send ``elicitation/create``
    on the event loop and wait for the answer (``elicit`` is None when the client
    cannot be asked)."""

    def ask(question: Question) -> None:
        if elicit is None:
            raise refused(question, "this client cannot ask its user (no elicitation)")
        params = request_params(tool, question, modern=False)
        try:
            answer = trio.from_thread.run(elicit, params, trio_token=token)
        except trio.RunFinishedError:
            answer = None
        if answer is None:
            raise refused(question, f"the user gave no answer within {ASK_SECONDS:g} s")
        if "error" in answer:
            raise refused(question, "the client could not ask its user")
        if not approved(answer.get("result")):
            raise refused(question, "the user said no")

    return ask


# -- 2026-07-28: input_required and a sealed state -----------------------------------------


@final
class Sealer:
    """Seals and opens the ``requestState`` of this process (a key drawn at start)."""

    def __init__(self) -> None:
        self._key = secrets.token_bytes(32)

    def seal(self, state: JSON) -> str:
        body = base64.urlsafe_b64encode(json.dumps(state, sort_keys=True).encode()).decode()
        mac = hmac.new(self._key, body.encode(), hashlib.sha256).hexdigest()
        return f"{body}.{mac}"

    def open(self, sealed: Any) -> JSON | None:
        if not isinstance(sealed, str) or "." not in sealed:
            return None
        body, _, mac = sealed.rpartition(".")
        good = hmac.new(self._key, body.encode(), hashlib.sha256).hexdigest()
        if not hmac.compare_digest(good, mac):
            return None
        try:
            state = json.loads(base64.urlsafe_b64decode(body.encode()))
        except ValueError:
            return None
        return state if isinstance(state, dict) else None


def arguments_digest(tool: str, arguments: JSON) -> str:
    text = json.dumps([tool, arguments], sort_keys=True, ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()


@final
@dataclass
class ModernAsk:
    """One 2026-07-28 call's ``ask``: what the retry brought, and the question to ask."""

    tool: str
    arguments: JSON
    sealer: Sealer
    can_elicit: bool
    state: Any = None
    responses: Any = None
    granted: set[str] = field(default_factory=set)
    declined: str | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        opened = self.sealer.open(self.state)
        digest = arguments_digest(self.tool, self.arguments)
        if opened is None or opened.get("call") != digest:
            return  # no state, or another call's: nothing was approved
        if time.time() > float(opened.get("until", 0)):
            return
        self.granted = {str(g) for g in opened.get("granted", [])}
        asked = opened.get("asked")
        answer = self.responses.get(KEY) if isinstance(self.responses, dict) else None
        if isinstance(asked, str):
            if approved(answer):
                self.granted.add(asked)
            else:
                self.declined = asked

    def __call__(self, question: Question) -> None:
        digest = question.digest()
        with self._lock:
            if digest in self.granted:
                return
            if digest == self.declined:
                raise refused(question, "the user said no")
            if not self.can_elicit:
                raise refused(question, "this client cannot ask its user (no elicitation)")
            state = {
                "call": arguments_digest(self.tool, self.arguments),
                "asked": digest,
                "granted": sorted(self.granted),
                "until": time.time() + STATE_SECONDS,
            }
        params = request_params(self.tool, question, modern=True)
        raise ApprovalRequired(
            {
                "resultType": "input_required",
                "inputRequests": {KEY: {"method": "elicitation/create", "params": params}},
                "requestState": self.sealer.seal(state),
            }
        )
