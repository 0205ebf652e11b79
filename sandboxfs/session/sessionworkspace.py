"""Which workspace a session uses, and the allow-list it gets (``--workspaces BASE``).

A session's allowed directories are its own directory ``BASE/sessions/<id>``, the
stores directory ``BASE/stores`` and the command-line directories, in that order
(relative paths resolve in the private directory).  No other session's directory
is ever in its allow-list, so the chokepoint's ``RESOLVE_BENEATH`` refuses every
path, ``..`` and symlink that leads there; a client's Roots are always confined
to that allow-list (they can narrow it, never widen it).

What names a session:

* over stdio, the process: ``--workspace-id ID`` (or ``SANDBOXFS_WORKSPACE_ID``)
  resumes or makes that session; without one, a fresh session is made;
* over HTTP, in the 2025 era, ``initialize`` makes a fresh session and answers
  with its id in ``Mcp-Session-Id``, signed with a key this process draws at
  startup, so a client can only name a session it was given (never an operator's
  id, never a name it made up); the SDK sends it back on every request;
* over HTTP, a ``Sandboxfs-Workspace-Id: ID`` header, which the operator's client
  sets, resumes or makes that session in either era.  It is honoured only by a
  server that requires a bearer token (the token was checked before the request
  got here); without a token it is refused, since any local process could then
  name any session.  In the 2026-07-28 era there is no ``initialize``, so this
  header is how a session is named.

A tool call or resource read that names no session is refused (400) with what to
send; other requests (``tools/list``, ``initialize``…) need no workspace.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from typing import Final, final

from sandboxfs.session.access import AccessControl
from sandboxfs.tools import AllowList, Base, SessionGone, SessionLease, check_name

#: The request header naming an operator-set session (HTTP).
WORKSPACE_HEADER: Final = "sandboxfs-workspace-id"
#: The methods that use the filesystem and so need a session's workspace.
NEEDS_WORKSPACE: Final = frozenset({"tools/call", "resources/read"})
_MAC_HEX: Final = 32


@final
class WorkspaceRefused(Exception):
    """A request cannot be given a workspace: ``status`` and a message for the client."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@final
@dataclass(frozen=True, slots=True)
class Assigned:
    """The session a request was given: its lease, and the ``Mcp-Session-Id`` to
    send back when it was made by this request (``initialize``)."""

    lease: SessionLease
    issued: str | None = None


@final
class WorkspaceSessions:
    """The workspaces of one server: BASE, the command-line directories beside them,
    and the key that signs the session ids it issues over HTTP."""

    def __init__(self, base: Base, cli: AllowList, *, token_required: bool = False) -> None:
        self.base = base
        self.cli = cli
        self.token_required = token_required
        self._key = secrets.token_bytes(32)

    def access(
        self,
        lease: SessionLease,
        *,
        notes: tuple[str, ...] = (),
        policy_notes: tuple[str, ...] = (),
    ) -> AccessControl:
        """The allow-list of the session ``lease`` holds: its directory, the stores,
        then the command-line directories.  Client Roots are always confined to it."""
        allow = AllowList.of((lease.root, self.base.stores, *self.cli.roots))
        return AccessControl(
            allow,
            confine=True,
            notes=notes,
            policy_notes=policy_notes,
            workspace=self.base.workspace(lease),
        )

    def shared_access(self) -> AccessControl:
        """The allow-list of a request that names no session: the stores and the
        command-line directories (its tool calls are refused before they use it)."""
        return AccessControl(AllowList.of((self.base.stores, *self.cli.roots)), confine=True)

    # -- stdio ----------------------------------------------------------------------------

    def for_process(self, session_id: str | None) -> SessionLease:
        """The session of a stdio server: ``session_id`` (resumed or made), or a fresh one."""
        if session_id is None:
            return self.base.fresh()
        return self.base.lease(session_id, create=True)

    # -- HTTP -----------------------------------------------------------------------------

    def sign(self, session_id: str) -> str:
        mac = hmac.new(self._key, session_id.encode("ascii"), hashlib.sha256).hexdigest()
        return f"{session_id}.{mac[:_MAC_HEX]}"

    def verify(self, value: str) -> str | None:
        """The session id in an ``Mcp-Session-Id`` this server issued, or None."""
        session_id, _, mac = value.rpartition(".")
        if not session_id or len(mac) != _MAC_HEX:
            return None
        return session_id if hmac.compare_digest(self.sign(session_id), value) else None

    def for_request(
        self, method: str, *, operator: str | None, session: str | None
    ) -> Assigned | None:
        """The session an HTTP request works in (blocking: run it in a worker thread),
        None if it needs none; raises WorkspaceRefused."""
        if operator is not None:
            if not self.token_required:
                raise WorkspaceRefused(
                    400,
                    "The Sandboxfs-Workspace-Id header is honoured only by a server that "
                    "requires a bearer token (--token-file or SANDBOXFS_TOKEN)",
                )
            try:
                session_id = check_name(operator, "Sandboxfs-Workspace-Id")
            except ValueError as exc:
                raise WorkspaceRefused(400, str(exc)) from None
            return Assigned(self.base.lease(session_id, create=True))
        if method == "initialize":
            lease = self.base.fresh()
            return Assigned(lease, self.sign(lease.id))
        if session is not None:
            known = self.verify(session)
            if known is None:
                raise WorkspaceRefused(404, "Session not found: initialize a new session")
            try:
                return Assigned(self.base.lease(known, create=False))
            except SessionGone:
                raise WorkspaceRefused(
                    404, "Session not found (its workspace was pruned): initialize a new session"
                ) from None
        if method in NEEDS_WORKSPACE:
            raise WorkspaceRefused(
                400,
                "This server gives every session its own workspace: send the Mcp-Session-Id "
                "it answered initialize with, or (protocol 2026-07-28, which has no "
                "initialize) the Sandboxfs-Workspace-Id header your operator set",
            )
        return None
