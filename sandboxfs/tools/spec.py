"""How a tool is declared: once, with everything the adapter and the docs derive from it.

Tool functions are plain synchronous functions over the filesystem façade
(:class:`~sandboxfs.fs.facade.Sandbox`, as ``CallContext.sandbox``); they take a
:class:`CallContext` and keyword arguments named as on the wire, and return a
:class:`ToolResult` or raise :class:`~sandboxfs.core.errors.SandboxError`.  No MCP
types here: the session layer turns these into schemas and content blocks.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, final

from sandboxfs.fs import JournalStore, Limits, Sandbox, Workspace
from sandboxfs.tools.codecache import ParseCache
from sandboxfs.tools.ownernames import Accounts

JSON = dict[str, Any]


@final
@dataclass(frozen=True, slots=True)
class Annotations:
    """MCP tool annotations; every tool sets all four."""

    read_only: bool
    idempotent: bool
    destructive: bool
    open_world: bool = False


#: Annotations shared by every tool that only reads.
READ_ONLY = Annotations(read_only=True, idempotent=True, destructive=False)


@final
@dataclass(frozen=True, slots=True)
class Param:
    """One tool parameter: its JSON schema, what it means, whether it is required."""

    name: str
    schema: Mapping[str, Any]
    description: str
    required: bool = False


@final
@dataclass(frozen=True, slots=True)
class MediaBlock:
    """Binary content for the client: an image, audio, or an embedded resource blob."""

    kind: Literal["image", "audio", "resource"]
    mime: str
    data: bytes  # base64 (ASCII): written to the wire as it is, never copied into a str
    uri: str | None = None


@final
@dataclass(frozen=True, slots=True)
class ToolResult:
    """What a tool returns: text for the model, structured data for the client."""

    text: str | None = None
    structured: JSON | None = None
    media: MediaBlock | None = None


#: Reports how far a long call has come: ``(done, total or None, message or None)``.
#: Safe to call from a worker thread, as often as a tool likes: the session throttles.
Progress = Callable[[float, float | None, str | None], None]


def _no_progress(done: float, total: float | None, message: str | None) -> None:
    """Progress nobody asked for."""


@final
@dataclass(frozen=True, slots=True)
class CallContext:
    """Everything one call may use.  Built per call; holds no mutable shared state
    but the server's caches (safe to share between threads)."""

    sandbox: Sandbox
    limits: Limits
    #: Allowed directories as list_allowed_directories reports them.
    allowed: tuple[str, ...] = ()
    #: Extra lines for list_allowed_directories (e.g. why client Roots are confined).
    notes: tuple[str, ...] = ()
    home: str | None = None
    accounts: Accounts = field(default_factory=Accounts)
    #: Where a long call (a walk, a grep, a big read or copy) says how far it has come.
    progress: Progress = _no_progress
    #: This session's private directory and the stores (``--workspaces``), or None.
    workspace: Workspace | None = None
    #: What files already parsed for code_map define and use (the server's cache).
    parses: ParseCache = field(default_factory=ParseCache)
    #: This session's change journal (``--journal``), or None.
    journal: JournalStore | None = None

    @property
    def wants_progress(self) -> bool:
        """Whether the client asked for progress (work may then be done in steps)."""
        return self.progress is not _no_progress


Handler = Callable[..., ToolResult]


@final
@dataclass(frozen=True)
class ToolSpec:
    """A tool, declared once.  The read-only filter, the adapter and the README table
    all derive from this."""

    name: str
    title: str
    description: str
    params: tuple[Param, ...]
    annotations: Annotations
    handler: Handler
    output_schema: JSON | None = field(default=None)
    #: False for a tool that only reports what the server already knows: it runs
    #: on the event loop instead of in a worker thread.
    touches_filesystem: bool = True
    #: Bounded, read-only work (no walk, no write): on allowed directories that are
    #: all local it may run inline, on the event loop (see sandboxfs.core.mounts);
    #: given up and run again in a worker thread if it would cross a mount point.
    quick: bool = False

    def input_schema(self) -> JSON:
        """The JSON Schema of the arguments; unknown arguments are refused."""
        properties: JSON = {}
        for param in self.params:
            properties[param.name] = {**param.schema, "description": param.description}
        schema: JSON = {
            "type": "object",
            "properties": properties,
            "additionalProperties": False,
        }
        required = [p.name for p in self.params if p.required]
        if required:
            schema["required"] = required
        return schema


def path_param(description: str = "Path of the file or directory.") -> Param:
    return Param("path", {"type": "string", "minLength": 1}, description, required=True)


STRING_LIST = {"type": "array", "items": {"type": "string"}}
