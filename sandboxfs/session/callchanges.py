"""What a changing call needs besides its tool: its record for the change journal
(``--journal``: one journal per workspace session, a crashed patch rolled back the
first time a journal is used) and the gate that asks the user about chosen paths
(``--ask``: 2025-era elicitation while the call waits, 2026-07-28 ``input_required``)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import trio

from sandboxfs.fs.approval import Ask, Gate
from sandboxfs.fs.journalstore import JournalStore
from sandboxfs.fs.recording import Recording
from sandboxfs.session.approval import Asking, ModernAsk, legacy_ask
from sandboxfs.session.auditlog import PATH_ARGUMENTS
from sandboxfs.session.effects import Caller
from sandboxfs.session.jsonrpc import CLIENT_CAPABILITIES_META_KEY, MODERN_VERSIONS
from sandboxfs.tools import ToolSpec

if TYPE_CHECKING:
    from sandboxfs.session.server import SandboxfsServer

log = logging.getLogger("sandboxfs")


def journaled_paths(arguments: dict[str, Any]) -> tuple[str, ...]:
    """The paths a call's arguments name, for its journal record."""
    found: list[str] = []
    for key in PATH_ARGUMENTS:
        value = arguments.get(key)
        if isinstance(value, str):
            found.append(value)
        elif isinstance(value, list):
            found.extend(v for v in value if isinstance(v, str))
    return tuple(found)


def call_gate(
    server: SandboxfsServer,
    spec: ToolSpec,
    arguments: dict[str, Any],
    caller: Caller,
    asking: Asking | None,
) -> Gate | None:
    """How a changing call gets the user's yes for paths that need it, or None."""
    rules = server.options.ask
    if rules is None or not rules.active or spec.annotations.read_only:
        return None
    if caller.protocol_version in MODERN_VERSIONS:
        params = asking.params if asking is not None else {}
        meta = params.get("_meta")
        caps = meta.get(CLIENT_CAPABILITIES_META_KEY) if isinstance(meta, dict) else None
        ask: Ask = ModernAsk(
            spec.name,
            arguments,
            server.sealer,
            can_elicit=isinstance(caps, dict) and isinstance(caps.get("elicitation"), dict),
            state=params.get("requestState"),
            responses=params.get("inputResponses"),
        )
    else:
        elicit = asking.elicit if asking is not None else None
        token = asking.token if asking is not None else trio.lowlevel.current_trio_token()
        ask = legacy_ask(spec.name, elicit, token)
    return Gate(rules, ask)


def journal_store(server: SandboxfsServer) -> JournalStore | None:
    """This session's change journal (``--journal``: one per workspace session), or
    None.  Blocking: called in a worker thread."""
    journals = server.options.journals
    if journals is None:
        return None
    workspace = server.access.workspace
    if journals.per_session and workspace is None:
        return None  # a request that names no session changes nothing
    store = journals.store(workspace.id if workspace is not None else None)
    unjournaled = server.sandbox(server.access.current).ctx
    for line in journals.recover_once(store, unjournaled):
        log.warning("Change journal %s: %s", store.path, line)
    return store


def call_recording(
    server: SandboxfsServer,
    journal: JournalStore | None,
    spec: ToolSpec,
    arguments: dict[str, Any],
    caller: Caller,
) -> Recording | None:
    """What a changing call records in the journal (None for a reading one)."""
    if journal is None or spec.annotations.read_only:
        return None
    workspace = server.access.workspace
    return Recording(
        journal,
        tool=spec.name,
        session=workspace.id if workspace is not None else server.session_label,
        client=caller.client,
        paths=journaled_paths(arguments),
    )
