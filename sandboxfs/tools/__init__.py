"""The tools sandboxfs serves, each declared once (see spec.ToolSpec).

Tool functions take plain arguments and return plain data; the MCP adapter
(sandboxfs.session.server) turns them into MCP tools.  Read-only mode keeps exactly the
tools annotated read-only: the filter reads the declaration, never a second list.
"""

from __future__ import annotations

from sandboxfs.tools.codemap import CODE_MAP
from sandboxfs.tools.grepping import GREP_FILES
from sandboxfs.tools.journaltools import JOURNAL_TOOLS
from sandboxfs.tools.listing import (
    GET_FILE_INFO,
    LIST_ALLOWED_DIRECTORIES,
    LIST_DIRECTORY,
    LIST_DIRECTORY_WITH_SIZES,
)
from sandboxfs.tools.patching import APPLY_PATCH
from sandboxfs.tools.reading import (
    READ_FILE,
    READ_MEDIA_FILE,
    READ_MULTIPLE_FILES,
    READ_TEXT_FILE,
)
from sandboxfs.tools.spec import (
    Annotations as Annotations,
)
from sandboxfs.tools.spec import (
    CallContext as CallContext,
)
from sandboxfs.tools.spec import (
    MediaBlock as MediaBlock,
)
from sandboxfs.tools.spec import (
    ToolResult as ToolResult,
)
from sandboxfs.tools.spec import (
    ToolSpec as ToolSpec,
)
from sandboxfs.tools.stores import WORKSPACE_TOOLS
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
