"""Lexical path handling: no I/O, no policy beyond "is this string usable".

These functions decide *which* allowed directory a request names and what
relative path to resolve beneath it.  They never decide whether a path is safe:
that is the kernel's job (``openat2`` with ``RESOLVE_BENEATH``), asked only by
:mod:`sandboxfs.core.chokepoint`.
"""

from __future__ import annotations

import os
from typing import Final

from sandboxfs.core.errors import InvalidPath

#: The longest request path accepted, in bytes (Linux's PATH_MAX).
MAX_PATH_BYTES: Final = 4096


def check_request_path(path: str) -> None:
    """Refuse a path string that no syscall should ever see: empty, NUL, too long."""
    if not isinstance(path, str):
        raise InvalidPath("Path must be a string")
    if path == "":
        raise InvalidPath("Path must not be empty")
    if "\0" in path:
        raise InvalidPath("Path must not contain a NUL byte")
    try:
        raw = os.fsencode(path)
    except UnicodeEncodeError:
        raise InvalidPath("Path is not valid Unicode (it contains a lone surrogate)") from None
    if len(raw) > MAX_PATH_BYTES:
        raise InvalidPath(f"Path is longer than {MAX_PATH_BYTES} bytes")


def split_components(path: str) -> list[str]:
    """The non-empty, non-``.`` components of ``path`` (``..`` kept)."""
    return [part for part in path.split("/") if part not in ("", ".")]


def normalize_absolute(path: str) -> str:
    """Collapse ``//``, ``.`` and ``..`` lexically in an absolute path (``/..`` is ``/``)."""
    stack: list[str] = []
    for part in split_components(path):
        if part == "..":
            if stack:
                stack.pop()
        else:
            stack.append(part)
    return "/" + "/".join(stack)


def expand_home(path: str, home: str | None) -> str:
    """Expand a leading ``~`` or ``~/`` the way the reference server does."""
    if home and (path == "~" or path.startswith("~/")):
        return home + path[1:]
    return path


def absolute_request(path: str, base: str | None, home: str | None = None) -> str | None:
    """The normalized absolute form of a request path, or None if it is relative and
    there is no base directory to resolve it against."""
    path = expand_home(path, home)
    if not path.startswith("/"):
        if base is None:
            return None
        path = base + "/" + path
    return normalize_absolute(path)


def relative_to(path: str, prefix: str) -> tuple[str, ...] | None:
    """Components of normalized ``path`` below normalized ``prefix``, honouring the
    separator boundary (``/srv/ws-evil`` is not below ``/srv/ws``); None if not below."""
    if prefix == "/":
        return tuple(split_components(path))
    if path == prefix:
        return ()
    if path.startswith(prefix + "/"):
        return tuple(split_components(path[len(prefix) + 1 :]))
    return None


def check_leaf(name: str, path: str) -> None:
    """Refuse a final name that is not exactly one directory entry."""
    if name in ("", ".", "..") or "/" in name or "\0" in name:
        raise InvalidPath(f"Invalid final path component: {path}")


def join(components: tuple[str, ...] | list[str]) -> str:
    """Join components for an ``*at`` call; the empty path is ``.``."""
    return "/".join(components) if components else "."
