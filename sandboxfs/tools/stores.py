"""Tools of the workspaces (served only with ``--workspaces``): list_stores, create_store.

A store is a subdirectory of the one shared stores directory (an allowed directory
like the others, so every file tool works in it); these two tools list the stores
with their sizes and make a new one under a checked name, beneath the stores
directory's descriptor (:mod:`sandboxfs.fs.workspacebase`).
"""

from __future__ import annotations

from datetime import UTC, datetime

from sandboxfs.fs import InvalidArgument, Unsupported, Workspace, create_store, list_stores
from sandboxfs.tools.format import format_size
from sandboxfs.tools.spec import (
    READ_ONLY,
    Annotations,
    CallContext,
    Param,
    ToolResult,
    ToolSpec,
)


def _workspace(ctx: CallContext) -> Workspace:
    if ctx.workspace is None:
        raise Unsupported("this server was started without --workspaces: it has no stores")
    return ctx.workspace


def _modified(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def list_stores_tool(ctx: CallContext, /) -> ToolResult:
    workspace = _workspace(ctx)
    where = workspace.stores.given
    confinement = ctx.sandbox.resolver.confinement
    try:
        entries = list_stores(workspace.stores, confinement)
    except OSError as exc:
        raise confinement.error(exc, where) from None
    stores: list[dict[str, object]] = []
    lines = [f"Stores in {where} (shared with every session, kept across restarts):"]
    for e in entries:
        path, modified = f"{where}/{e.name}", _modified(e.usage.newest)
        size = format_size(e.usage.size) + ("" if e.usage.complete else "+")
        lines.append(f"[STORE] {e.name}  {size}  modified {modified}  {path}")
        stores.append(
            {
                "name": e.name,
                "path": path,
                "size": e.usage.size,
                "modified": modified,
                "sizeComplete": e.usage.complete,
            }
        )
    text = "\n".join(lines) if stores else f"No stores yet in {where}. Make one with create_store."
    return ToolResult(text=text, structured={"storesDirectory": where, "stores": stores})


def create_store_tool(ctx: CallContext, /, name: str) -> ToolResult:
    workspace = _workspace(ctx)
    path = f"{workspace.stores.given}/{name}"
    confinement = ctx.sandbox.resolver.confinement
    try:
        created = create_store(workspace.stores, confinement, name)
    except ValueError as exc:
        raise InvalidArgument(str(exc)) from None
    except OSError as exc:
        raise confinement.error(exc, path) from None
    text = (
        f"Created store '{name}' at {path}"
        if created
        else f"Store '{name}' already exists at {path}"
    )
    return ToolResult(text=text, structured={"name": name, "path": path, "created": created})


LIST_STORES = ToolSpec(
    name="list_stores",
    title="List Stores",
    description="List the named stores: directories shared with every other session of "
    "this server and kept across restarts, each with its path, total size and last "
    "modification. Read and write a store's files with the usual file tools at the path "
    "shown. Files you keep only for yourself belong in your private workspace instead "
    "(see list_allowed_directories).",
    params=(),
    annotations=READ_ONLY,
    handler=list_stores_tool,
)

CREATE_STORE = ToolSpec(
    name="create_store",
    title="Create Store",
    description="Create a named store (or find an existing one): a directory shared with "
    "every other session of this server and kept across restarts. Returns its path; use "
    "the usual file tools there. Names: 1 to 64 letters, digits, '.', '_' or '-'.",
    params=(
        Param(
            "name",
            {"type": "string", "minLength": 1},
            "The store's name, e.g. 'notes' or 'project-x'.",
            required=True,
        ),
    ),
    annotations=Annotations(read_only=False, idempotent=True, destructive=False),
    handler=create_store_tool,
)

#: The tools served with --workspaces, after the others.
WORKSPACE_TOOLS: tuple[ToolSpec, ...] = (LIST_STORES, CREATE_STORE)
