"""MIME types from file names, the same on every machine.

Uses Python's built-in table only (never /etc/mime.types, which differs between
hosts), with overrides for source files the built-in table gets wrong (``.ts``
is TypeScript here, not an MPEG transport stream).
"""

from __future__ import annotations

import mimetypes
import posixpath
from typing import Final

_BUILTIN: Final = mimetypes.MimeTypes(filenames=())

_OVERRIDES: Final[dict[str, str]] = {
    ".ts": "text/x-typescript",
    ".tsx": "text/x-typescript",
    ".mts": "text/x-typescript",
    ".cts": "text/x-typescript",
    ".jsx": "text/javascript",
    ".mjs": "text/javascript",
    ".cjs": "text/javascript",
    ".md": "text/markdown",
    ".markdown": "text/markdown",
    ".py": "text/x-python",
    ".rs": "text/x-rust",
    ".go": "text/x-go",
    ".rb": "text/x-ruby",
    ".java": "text/x-java",
    ".kt": "text/x-kotlin",
    ".swift": "text/x-swift",
    ".sh": "text/x-shellscript",
    ".toml": "application/toml",
    ".yaml": "application/yaml",
    ".yml": "application/yaml",
    ".jsonl": "application/jsonl",
    ".webp": "image/webp",
    ".avif": "image/avif",
    ".heic": "image/heic",
    ".flac": "audio/flac",
    ".ogg": "audio/ogg",
    ".oga": "audio/ogg",
    ".opus": "audio/opus",
    ".m4a": "audio/mp4",
    ".wav": "audio/wav",
    ".mp3": "audio/mpeg",
}

#: Non-``text/*`` types whose content is text.
_TEXTUAL: Final = frozenset(
    {
        "application/json",
        "application/jsonl",
        "application/xml",
        "application/javascript",
        "application/toml",
        "application/yaml",
        "application/x-sh",
        "image/svg+xml",
    }
)


def guess_mime(name: str) -> str | None:
    """The MIME type for ``name``'s extension (case-insensitive), or None if unknown."""
    ext = posixpath.splitext(name)[1].lower()
    if not ext:
        return None
    if ext in _OVERRIDES:
        return _OVERRIDES[ext]
    mime, _ = _BUILTIN.guess_type("x" + ext, strict=False)
    return mime


def is_textual(mime: str | None) -> bool:
    """Whether content of this type is text (unknown types decide by their bytes)."""
    return mime is None or mime.startswith("text/") or mime in _TEXTUAL
