"""Reading tools: read_text_file (and its deprecated alias read_file), read_media_file,
read_multiple_files.  Reads stream: head/tail never load more than they return."""

from __future__ import annotations

import base64
from typing import Final

from sandboxfs.fs import (
    MAX_PATH_BYTES,
    QUOTED_CHARS,
    InvalidArgument,
    LimitExceeded,
    OpenFile,
    SandboxError,
    content_revision,
)
from sandboxfs.tools.format import display_base, file_uri
from sandboxfs.tools.mime import guess_mime
from sandboxfs.tools.spec import (
    READ_ONLY,
    STRING_LIST,
    CallContext,
    MediaBlock,
    Param,
    Progress,
    ToolResult,
    ToolSpec,
    path_param,
)

_CHUNK: Final = 64 * 1024
#: Reads of files bigger than this report progress (when asked) as they go.
PROGRESS_READ: Final = 4 * 1024 * 1024
_MiB: Final = 1024 * 1024


def _progress(ctx: CallContext) -> Progress | None:
    return ctx.progress if ctx.wants_progress else None


def _mib(size: int) -> str:
    return f"{size / _MiB:.0f} MiB" if size >= _MiB else f"{size} bytes"


def head_bytes(f: OpenFile, lines: int, cap: int) -> bytes:
    """The first ``lines`` lines, each with its line ending; at most ``cap`` bytes."""
    if lines == 0:
        return b""
    kept = bytearray()
    seen = 0
    while chunk := f.file.read(_CHUNK):
        start = 0
        while seen < lines:
            newline = chunk.find(b"\n", start)
            if newline < 0:
                break
            seen += 1
            start = newline + 1
        if seen >= lines:
            kept += chunk[:start]
            break
        kept += chunk
        if len(kept) > cap:
            raise LimitExceeded(f"The first {lines} lines are larger than {_mib(cap)}")
    if len(kept) > cap:
        raise LimitExceeded(f"The first {lines} lines are larger than {_mib(cap)}")
    return bytes(kept)


def tail_bytes(f: OpenFile, lines: int, cap: int) -> bytes:
    """The last ``lines`` lines (a final newline does not start another line), read
    backwards from the end; at most ``cap`` bytes."""
    size = f.stat.st_size
    if lines == 0 or size == 0:
        return b""
    pieces: list[bytes] = []
    held = 0
    end = size
    seen = 0
    while end > 0:
        begin = max(0, end - _CHUNK)
        chunk = f.file.pread(end - begin, begin)
        if not chunk:
            break
        scan_end = len(chunk)
        if end == size and chunk.endswith(b"\n"):
            scan_end -= 1  # the file's final newline ends the last line
        while scan_end > 0:
            newline = chunk.rfind(b"\n", 0, scan_end)
            if newline < 0:
                break
            seen += 1
            if seen == lines:
                pieces.append(chunk[newline + 1 :])
                return _joined(pieces, cap, lines)
            scan_end = newline
        pieces.append(chunk)
        held += len(chunk)
        if held > cap:
            raise LimitExceeded(f"The last {lines} lines are larger than {_mib(cap)}")
        end = begin
    return _joined(pieces, cap, lines)


def _joined(pieces: list[bytes], cap: int, lines: int) -> bytes:
    data = b"".join(reversed(pieces))
    if len(data) > cap:
        raise LimitExceeded(f"The last {lines} lines are larger than {_mib(cap)}")
    return data


def whole_bytes(f: OpenFile, cap: int, path: str, progress: Progress | None = None) -> bytes:
    """All of the file, refused (with what to do instead) when larger than ``cap``.
    A file over :data:`PROGRESS_READ` bytes is read in steps that ``progress`` hears."""
    if f.stat.st_size > cap:
        raise LimitExceeded(
            f"File is {_mib(f.stat.st_size)}, more than the {_mib(cap)} one read may return: "
            f"{path}. Read part of it with head, tail, or offset and limit."
        )
    # Ask for the size fstat gave and one byte more, which tells whether the file
    # grew meanwhile: a buffer sized for the cap would cost every small read a
    # fresh mapping of the whole cap (32 MiB by default).
    size = f.stat.st_size
    if progress is not None and size > PROGRESS_READ:
        pieces: list[bytes] = []
        done = 0
        while done <= size and (piece := f.file.read(min(PROGRESS_READ, size + 1 - done))):
            pieces.append(piece)
            done += len(piece)
            progress(min(done, size), size, "bytes read")
        data = b"".join(pieces)
        del pieces
    else:
        data = f.file.read(size + 1)
    if len(data) > size:  # it grew: read on, up to the cap
        data += f.file.read(cap + 1 - len(data))
    if len(data) > cap:
        raise LimitExceeded(f"File grew past {_mib(cap)} while being read: {path}")
    return data


def window_lines(f: OpenFile, offset: int, limit: int | None, cap: int) -> tuple[list[bytes], int]:
    """Lines ``offset`` .. ``offset + limit - 1`` (1-based) and the file's line count,
    streaming through the file: memory holds the window, not the file."""
    end = None if limit is None else offset + limit
    window: list[bytes] = []
    held = 0
    number = 0  # lines completed so far
    partial = bytearray()  # the unfinished line, grown in place (never copied whole)
    while chunk := f.file.read(_CHUNK):
        if b"\n" in chunk:
            pieces = chunk.split(b"\n")
            if partial:
                pieces[0] = bytes(partial) + pieces[0]
            partial = bytearray(pieces.pop())
        else:
            pieces = []
            partial += chunk
        pending = number + len(pieces) + 1  # the number of the unfinished line
        if offset <= pending and (end is None or pending < end):
            if len(partial) > cap:
                raise LimitExceeded(f"Line {pending} is larger than {_mib(cap)}")
        elif partial:
            partial = bytearray(b"-")  # outside the window: only its existence matters
        first = number + 1
        number += len(pieces)
        if number >= offset and (end is None or first < end):
            lo = max(offset - first, 0)
            hi = len(pieces) if end is None else min(len(pieces), end - first)
            for line in pieces[lo:hi]:
                window.append(line)
                held += len(line) + 1
            if held > cap:
                raise LimitExceeded(
                    f"Lines from {offset} on are larger than {_mib(cap)}; pass a smaller limit"
                )
    if partial:
        number += 1
        if number >= offset and (end is None or number < end):
            window.append(bytes(partial))
    return window, number


def decode(data: bytes) -> str:
    """UTF-8 text; invalid bytes become U+FFFD."""
    return data.decode("utf-8", "replace")


def read_text_file(
    ctx: CallContext,
    /,
    path: str,
    *,
    head: int | None = None,
    tail: int | None = None,
    offset: int | None = None,
    limit: int | None = None,
) -> ToolResult:
    if head is not None and tail is not None:
        raise InvalidArgument("Cannot specify both head and tail parameters simultaneously")
    if (offset is not None or limit is not None) and (head is not None or tail is not None):
        raise InvalidArgument("offset/limit cannot be combined with head or tail")
    cap = ctx.limits.read_bytes
    with ctx.sandbox.open_file(path) as f:
        if offset is not None or limit is not None:
            return _ranged(ctx, f, path, offset or 1, limit)
        if head is not None:
            data = head_bytes(f, head, cap)
        elif tail is not None:
            data = tail_bytes(f, tail, cap)
        else:
            data = whole_bytes(f, cap, path, _progress(ctx))
            text = decode(data)
            return ToolResult(
                text=text, structured={"content": text, "revision": content_revision(data)}
            )
        revision = ctx.sandbox.file_revision(f)
    text = decode(data)
    return ToolResult(text=text, structured={"content": text, "revision": revision})


def _ranged(ctx: CallContext, f: OpenFile, path: str, offset: int, limit: int | None) -> ToolResult:
    """Numbered lines of a window, with a footer saying where it sits."""
    lines, total = window_lines(f, offset, limit, ctx.limits.read_bytes)
    revision = ctx.sandbox.file_revision(f)
    structured: dict[str, object] = {"totalLines": total, "revision": revision}
    if not lines:
        text = f"'{path}' has {total} lines; offset {offset} is past the end"
        return ToolResult(text=text, structured={**structured, "lines": []})
    last = offset + len(lines) - 1
    shown = [decode(line).removesuffix("\r") for line in lines]
    body = "\n".join(f"{offset + i}\t{line}" for i, line in enumerate(shown))
    text = f"{body}\n\n[lines {offset}-{last} of {total} total]"
    return ToolResult(
        text=text,
        structured={**structured, "firstLine": offset, "lastLine": last, "lines": shown},
    )


def read_media_file(ctx: CallContext, /, path: str) -> ToolResult:
    with ctx.sandbox.open_file(path) as f:
        data = whole_bytes(f, ctx.limits.read_bytes, path, _progress(ctx))
    mime = guess_mime(path) or "application/octet-stream"
    encoded = base64.b64encode(data)
    revision = content_revision(data)
    kind = mime.split("/", 1)[0]
    if kind in ("image", "audio"):
        block = MediaBlock("image" if kind == "image" else "audio", mime, encoded)
    else:
        base = ctx.sandbox.resolver.allow.base
        uri = file_uri(display_base(path, base, ctx.home))
        block = MediaBlock("resource", mime, encoded, uri)
    return ToolResult(
        media=block,
        structured={"type": block.kind, "mimeType": mime, "size": len(data), "revision": revision},
    )


def read_multiple_files(ctx: CallContext, /, paths: list[str]) -> ToolResult:
    budget = ctx.limits.read_bytes
    parts: list[str] = []
    files: list[dict[str, object]] = []
    for path in paths:
        try:
            if budget <= 0:
                raise LimitExceeded(
                    f"Not read: the files before it used up the {_mib(ctx.limits.read_bytes)} "
                    "one call may return"
                )
            with ctx.sandbox.open_file(path) as f:
                data = whole_bytes(f, min(budget, ctx.limits.read_bytes), path, _progress(ctx))
            budget -= len(data)
        except SandboxError as exc:
            named = _named(path)
            parts.append(f"{named}: Error - {exc}")
            files.append({"path": named, "error": {"code": exc.code, "message": str(exc)}})
            continue
        text = decode(data)
        parts.append(f"{path}:\n{text}\n")
        files.append({"path": path, "content": text, "revision": content_revision(data)})
    return ToolResult(text="\n---\n".join(parts), structured={"files": files})


def _named(path: str) -> str:
    """A path as an error line names it: as given, or, when it is longer than any path
    can be (and so was refused), its start and its length: an answer never repeats
    megabytes of a client's argument."""
    if len(path) <= MAX_PATH_BYTES:
        return path
    return f"{path[:QUOTED_CHARS]}… ({len(path)} characters)"


_HEAD = Param(
    "head",
    {"type": "integer", "minimum": 0},
    "Return only the first N lines (0 returns no lines).",
)
_TAIL = Param(
    "tail",
    {"type": "integer", "minimum": 0},
    "Return only the last N lines (0 returns no lines).",
)

_TEXT_DESCRIPTION = (
    "Read a file as UTF-8 text (invalid bytes shown as U+FFFD), whatever its extension. "
    "Use 'head' or 'tail' to read only the first or last N lines (they cannot be combined), "
    "or 'offset' (1-based line) and 'limit' to read a window of numbered lines ('N<TAB>text') "
    "with a footer '[lines A-B of N total]'; strip the numbers before using the text in "
    "edit_file. Files larger than the server's read limit must be read in parts. The "
    "result's structuredContent.revision identifies the file's content for conditional "
    "writes. Only works within allowed directories."
)
_OFFSET = Param(
    "offset", {"type": "integer", "minimum": 1}, "First line to return (1-based) of a window."
)
_LIMIT = Param("limit", {"type": "integer", "minimum": 1}, "How many lines the window holds.")

READ_FILE = ToolSpec(
    name="read_file",
    title="Read File (Deprecated)",
    description="Read the complete contents of a file as text. DEPRECATED: Use read_text_file "
    "instead.",
    params=(path_param("Path of the file to read."), _HEAD, _TAIL),
    annotations=READ_ONLY,
    handler=read_text_file,
    quick=True,
)

READ_TEXT_FILE = ToolSpec(
    name="read_text_file",
    title="Read Text File",
    description=_TEXT_DESCRIPTION,
    params=(path_param("Path of the file to read."), _HEAD, _TAIL, _OFFSET, _LIMIT),
    annotations=READ_ONLY,
    handler=read_text_file,
    quick=True,
)

READ_MEDIA_FILE = ToolSpec(
    name="read_media_file",
    title="Read Media File",
    description="Read a file and return it base64-encoded with its MIME type (from the "
    "extension). Images and audio come back as image/audio content; any other file as an "
    "embedded resource. Only works within allowed directories.",
    params=(path_param("Path of the file to read."),),
    annotations=READ_ONLY,
    handler=read_media_file,
)

READ_MULTIPLE_FILES = ToolSpec(
    name="read_multiple_files",
    title="Read Multiple Files",
    description="Read several files in one call. Each file's content is returned under its "
    "path; a file that cannot be read is reported in place and the others are still read. "
    "Only works within allowed directories.",
    params=(
        Param(
            "paths",
            {**STRING_LIST, "minItems": 1},
            "Paths of the files to read, each within an allowed directory.",
            required=True,
        ),
    ),
    annotations=READ_ONLY,
    handler=read_multiple_files,
    quick=True,
)
