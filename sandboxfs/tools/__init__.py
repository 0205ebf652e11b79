"""The tools sandboxfs serves, each declared once (see spec.ToolSpec).

Tool functions take plain arguments and return plain data; the MCP adapter
(sandboxfs.session.dispatcher) turns them into MCP tools.  Read-only mode keeps exactly the
tools annotated read-only: the filter reads the declaration, never a second list.
"""

from __future__ import annotations

from sandboxfs.fs import NO_WATCH as NO_WATCH
from sandboxfs.fs import OPEN as OPEN
from sandboxfs.fs import SECONDS as SECONDS
from sandboxfs.fs import AccessDenied as AccessDenied
from sandboxfs.fs import AllowList as AllowList
from sandboxfs.fs import Ask as Ask
from sandboxfs.fs import AskRules as AskRules
from sandboxfs.fs import Base as Base
from sandboxfs.fs import CrossesMount as CrossesMount
from sandboxfs.fs import Gate as Gate
from sandboxfs.fs import IsADirectory as IsADirectory
from sandboxfs.fs import JournalError as JournalError
from sandboxfs.fs import Journals as Journals
from sandboxfs.fs import JournalStore as JournalStore
from sandboxfs.fs import Limits as Limits
from sandboxfs.fs import MiB as MiB
from sandboxfs.fs import MountTable as MountTable
from sandboxfs.fs import NotApproved as NotApproved
from sandboxfs.fs import NotFound as NotFound
from sandboxfs.fs import Policy as Policy
from sandboxfs.fs import PolicyDenied as PolicyDenied
from sandboxfs.fs import Question as Question
from sandboxfs.fs import Range as Range
from sandboxfs.fs import Recording as Recording
from sandboxfs.fs import RevisionCache as RevisionCache
from sandboxfs.fs import Root as Root
from sandboxfs.fs import Sandbox as Sandbox
from sandboxfs.fs import SandboxError as SandboxError
from sandboxfs.fs import Sandboxes as Sandboxes
from sandboxfs.fs import SessionGone as SessionGone
from sandboxfs.fs import SessionLease as SessionLease
from sandboxfs.fs import Stall as Stall
from sandboxfs.fs import StepWatch as StepWatch
from sandboxfs.fs import TiB as TiB
from sandboxfs.fs import TimedOut as TimedOut
from sandboxfs.fs import Watch as Watch
from sandboxfs.fs import Workspace as Workspace
from sandboxfs.fs import check_name as check_name
from sandboxfs.fs import check_within as check_within
from sandboxfs.fs import has_lone_surrogate as has_lone_surrogate
from sandboxfs.fs import local_path as local_path
from sandboxfs.fs import quote_name as quote_name
from sandboxfs.fs import quote_path as quote_path
from sandboxfs.fs import roots_from_uris as roots_from_uris
from sandboxfs.tools.codecache import ParseCache as ParseCache
from sandboxfs.tools.codemap import CODE_MAP
from sandboxfs.tools.grepping import GREP_FILES
from sandboxfs.tools.journaltools import JOURNAL_TOOLS
from sandboxfs.tools.listing import (
    GET_FILE_INFO,
    LIST_ALLOWED_DIRECTORIES,
    LIST_DIRECTORY,
    LIST_DIRECTORY_WITH_SIZES,
)
from sandboxfs.tools.mime import guess_mime as guess_mime
from sandboxfs.tools.mime import is_textual as is_textual
from sandboxfs.tools.ownernames import Accounts as Accounts
from sandboxfs.tools.patching import APPLY_PATCH
from sandboxfs.tools.reading import (
    READ_FILE,
    READ_MEDIA_FILE,
    READ_MULTIPLE_FILES,
    READ_TEXT_FILE,
)
from sandboxfs.tools.reading import whole_bytes as whole_bytes
from sandboxfs.tools.spec import (
    CallContext as CallContext,
)
from sandboxfs.tools.spec import (
    MediaBlock as MediaBlock,
)
from sandboxfs.tools.spec import Progress as Progress
from sandboxfs.tools.spec import (
    ToolResult as ToolResult,
)
from sandboxfs.tools.spec import (
    ToolSpec as ToolSpec,
)
from sandboxfs.tools.stores import WORKSPACE_TOOLS
from sandboxfs.tools.unidiff import unified_diff as unified_diff
from sandboxfs.tools.walking import DIRECTORY_TREE, SEARCH_FILES
from sandboxfs.tools.writing import (
    APPEND_FILE,
    COPY_FILE,
    CREATE_DIRECTORY,
    DELETE_FILE,
    EDIT_FILE,
    MOVE_FILE,
    WRITE_FILE,
)

#: Every tool, in the order tools/list presents them.
TOOLS: tuple[ToolSpec, ...] = (
    READ_FILE,
    READ_TEXT_FILE,
    READ_MEDIA_FILE,
    READ_MULTIPLE_FILES,
    WRITE_FILE,
    APPEND_FILE,
    EDIT_FILE,
    CREATE_DIRECTORY,
    LIST_DIRECTORY,
    LIST_DIRECTORY_WITH_SIZES,
    DIRECTORY_TREE,
    MOVE_FILE,
    COPY_FILE,
    SEARCH_FILES,
    GET_FILE_INFO,
    LIST_ALLOWED_DIRECTORIES,
    DELETE_FILE,
    GREP_FILES,
    CODE_MAP,
    APPLY_PATCH,
)


def served_tools(
    *, read_only: bool, workspaces: bool = False, journal: bool = False
) -> tuple[ToolSpec, ...]:
    """The tools to serve: all (with the store tools after them under ``--workspaces``,
    and the journal's under ``--journal``), or in read-only mode those annotated
    read-only."""
    tools = TOOLS + WORKSPACE_TOOLS if workspaces else TOOLS
    if journal:
        tools += JOURNAL_TOOLS
    return tuple(t for t in tools if t.annotations.read_only or not read_only)


def annotation_table() -> str:
    """The README's table of tools and their annotations, rendered from the declarations."""

    def flag(value: bool) -> str:
        return f"`{str(value).lower()}`"

    rows = [
        "| Tool | Title | readOnlyHint | idempotentHint | destructiveHint | openWorldHint |",
        "|---|---|---|---|---|---|",
    ]
    for tool in TOOLS:
        a = tool.annotations
        rows.append(
            f"| `{tool.name}` | {tool.title} | {flag(a.read_only)} | {flag(a.idempotent)} "
            f"| {flag(a.destructive)} | {flag(a.open_world)} |"
        )
    return "\n".join(rows)
