"""The MCP session: the server's handshake, Roots, tool calls and their limits,
independent of how bytes travel."""

from __future__ import annotations

from sandboxfs.session import era as era
from sandboxfs.session.approval import Answers as Answers
from sandboxfs.session.dispatcher import SandboxfsServer as SandboxfsServer
from sandboxfs.session.driver import Driver as Driver
from sandboxfs.session.envelope import unsupported_version as unsupported_version
from sandboxfs.session.era import Era as Era
from sandboxfs.session.jsonrpc import HEADER_MISMATCH as HEADER_MISMATCH
from sandboxfs.session.jsonrpc import INTERNAL_ERROR as INTERNAL_ERROR
from sandboxfs.session.jsonrpc import INVALID_REQUEST as INVALID_REQUEST
from sandboxfs.session.jsonrpc import PARSE_ERROR as PARSE_ERROR
from sandboxfs.session.jsonrpc import PROTOCOL_VERSION_META_KEY as PROTOCOL_VERSION_META_KEY
from sandboxfs.session.jsonrpc import decode as decode
from sandboxfs.session.jsonrpc import error_frame as error_frame
from sandboxfs.session.jsonrpc import error_message as error_message
from sandboxfs.session.jsonrpc import valid_id as valid_id
from sandboxfs.session.metrics import OUTCOMES as OUTCOMES
from sandboxfs.session.metrics import REASONS as REASONS
from sandboxfs.session.metrics import UNKNOWN_TOOL as UNKNOWN_TOOL
from sandboxfs.session.metrics import Outcome as Outcome
from sandboxfs.session.metrics import Reason as Reason
from sandboxfs.session.metrics import known_tools as known_tools
from sandboxfs.session.pieces import encode_pieces as encode_pieces
from sandboxfs.session.protocol import Session as Session
from sandboxfs.session.sessionworkspace import WORKSPACE_HEADER as WORKSPACE_HEADER
from sandboxfs.session.sessionworkspace import Assigned as Assigned
from sandboxfs.session.sessionworkspace import WorkspaceRefused as WorkspaceRefused
from sandboxfs.tools import SandboxError as SandboxError
