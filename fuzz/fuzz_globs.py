"""Invariant tested: ``compile_glob(pattern)`` returns a Glob or raises GlobError,
never anything else, and ``Glob.matches(path)`` returns a bool for any str.

Also checked:

* negation: for a pattern not starting with ``!``, ``compile_glob("!" + p)``
  matches exactly what ``compile_glob(p)`` does not;
* the simple subset (literal characters, ``*`` and ``?`` in one segment; no
  ``/``, brackets, braces, backslash or leading ``!``) against Python:
  ``compile_glob(p).matches(name)`` equals ``re.fullmatch`` of the translation
  ``*`` -> ``[^/]*``, ``?`` -> ``[^/]`` (chunks between stars in atomic groups,
  as fnmatch does, so the oracle itself cannot backtrack exponentially), and
  ``fnmatch.fnmatchcase``, for any non-empty name without ``/``;
* several segments with ``**`` and simple classes (``[ab]``, ``[!a]``,
  ``[a-c]``) against a small recursive model of the documented semantics (a
  ``**`` segment matches zero or more names, at the end one or more), and
  ``{p,q}`` matches exactly what ``p`` or ``q`` does.

Input format (so a regression input can be written by hand): byte 0 & 3 is the
mode.  Mode 0: the rest is ``pattern NUL path``, UTF-8 with surrogateescape.
Mode 1 (simple subset): the rest is ``pattern 0xFF name``, each byte an index
into ``SIMPLE_PATTERN`` / ``SIMPLE_NAME``.  Mode 2 (segments): the rest is
``pattern 0xFE pattern2 0xFF path``, each byte an index into ``SEGMENT_TOKENS``
/ ``PATH_TOKENS``.  Mode 3: the rest is a pattern (UTF-8, surrogateescape)
matched against every path in ``PATHS``.

Known bugs can be tolerated for long runs, never by default: set
``SANDBOXFS_FUZZ_TOLERATE`` to a comma-separated list of ids from ``KNOWN_BUGS``.
"""

from __future__ import annotations

import contextlib
import fnmatch
import functools
import os
import re
import sys
from typing import Final

import atheris

with (
    atheris.instrument_imports(include=["sandboxfs"])
    if __name__ == "__main__"
    else contextlib.nullcontext()
):
    from sandboxfs.core.globs import MAX_PATTERN_LENGTH, Glob, GlobError, compile_glob

KNOWN_BUGS: Final[dict[str, str]] = {}  # fixed ones stay as regression inputs
TOLERATE_ENV: Final = "SANDBOXFS_FUZZ_TOLERATE"

SIMPLE_PATTERN: Final = "ab.*?*- é\n"
SIMPLE_NAME: Final = "ab.-c é\n"
SEGMENT_TOKENS: Final = ("a", "b", ".", "*", "?", "/", "**", "[ab]", "[!a]", "[a-c]", "x", "*a")
PATH_TOKENS: Final = ("a", "b", "c", ".", "/", "ab", "x", ".a")
PATHS: Final = (
    "a",
    "a/b",
    ".x",
    "a/b/c.txt",
    "src/main.py",
    "",
    "/",
    "a//b",
    "/abs",
    "trail/",
    "\udcff",
    "[ab]",
    "{a,b}",
    "*",
    "\\",
    "!",
)


def tolerated(bug: str) -> bool:
    return bug in os.environ.get(TOLERATE_ENV, "").split(",")


def compile_checked(pattern: str) -> Glob | None:
    """The compiled pattern, or None for a GlobError; anything else propagates."""
    try:
        glob = compile_glob(pattern)
    except GlobError:
        return None
    except RecursionError:
        if tolerated("brace-recursion") and "{" in pattern:
            return None
        raise
    assert isinstance(glob, Glob)
    return glob


def matches(glob: Glob, path: str) -> bool:
    result = glob.matches(path)
    assert isinstance(result, bool), (glob.pattern, path, result)
    return result


def check_negation(pattern: str, glob: Glob | None, paths: list[str]) -> None:
    if pattern.startswith("!") or len(pattern) >= MAX_PATTERN_LENGTH or glob is None:
        return
    negated = compile_checked("!" + pattern)
    assert negated is not None, pattern
    for path in paths:
        assert matches(negated, path) != matches(glob, path), (pattern, path)


def segment_regex(segment: str) -> str:
    """A regex for one segment: ``*`` -> ``[^/]*``, ``?`` -> ``[^/]``, ``[ab]``/``[!a]``
    as classes, everything else literal.  Like fnmatch, a chunk between two stars
    is matched at its first occurrence in an atomic group, so the regex cannot
    backtrack exponentially."""
    items: list[str | None] = []  # None is a star
    i = 0
    while i < len(segment):
        ch = segment[i]
        if ch == "*":
            if not items or items[-1] is not None:
                items.append(None)
        elif ch == "?":
            items.append("[^/]")
        elif ch == "[":
            end = segment.index("]", i)
            body = segment[i + 1 : end]
            items.append("[^" + body[1:] + "]" if body.startswith("!") else "[" + body + "]")
            i = end
        else:
            items.append(re.escape(ch))
        i += 1
    chunks: list[list[str]] = [[]]
    for item in items:
        if item is None:
            chunks.append([])
        else:
            chunks[-1].append(item)
    if len(chunks) == 1:
        return "".join(chunks[0])
    middle = "".join(f"(?>[^/]*?{''.join(c)})" for c in chunks[1:-1])
    return "".join(chunks[0]) + middle + "[^/]*" + "".join(chunks[-1])


def model(pattern: str, path: str) -> bool:
    """The documented semantics, for patterns and paths without empty segments."""
    segments = tuple(pattern.split("/"))
    names = tuple(path.split("/"))

    @functools.cache
    def at(k: int, n: int) -> bool:
        if k == len(segments):
            return n == len(names)
        if segments[k] == "**":
            if k == len(segments) - 1:
                return n < len(names)
            return any(at(k + 1, m) for m in range(n, len(names) + 1))
        return (
            n < len(names)
            and re.fullmatch(segment_regex(segments[k]), names[n]) is not None
            and at(k + 1, n + 1)
        )

    return at(0, 0)


def _tokens(raw: bytes, alphabet: tuple[str, ...] | str) -> str:
    return "".join(alphabet[b % len(alphabet)] for b in raw)


def _segments(raw: bytes, alphabet: tuple[str, ...]) -> str:
    """Tokens joined, with empty segments dropped (no leading, trailing or double /)."""
    return "/".join(s for s in _tokens(raw, alphabet).split("/") if s)


def simple_mode(payload: bytes) -> None:
    raw_pattern, _, raw_name = payload.partition(b"\xff")
    pattern, name = _tokens(raw_pattern, SIMPLE_PATTERN), _tokens(raw_name, SIMPLE_NAME)
    glob = compile_checked(pattern)
    assert glob is not None, pattern
    if not name:
        return
    expected = re.fullmatch(segment_regex(pattern), name) is not None
    assert matches(glob, name) == expected, (pattern, name, expected)
    assert fnmatch.fnmatchcase(name, pattern) == expected, (pattern, name)
    check_negation(pattern, glob, [name])


def segment_mode(payload: bytes) -> None:
    raw_patterns, _, raw_path = payload.partition(b"\xff")
    raw_p, _, raw_q = raw_patterns.partition(b"\xfe")
    p, q = _segments(raw_p, SEGMENT_TOKENS), _segments(raw_q, SEGMENT_TOKENS)
    path = _segments(raw_path, PATH_TOKENS)
    glob_p, glob_q = compile_checked(p), compile_checked(q)
    assert glob_p is not None and glob_q is not None, (p, q)
    if p and path:
        assert matches(glob_p, path) == model(p, path), (p, path, model(p, path))
    either = compile_checked("{" + p + "," + q + "}")
    assert either is not None, (p, q)
    assert matches(either, path) == (matches(glob_p, path) or matches(glob_q, path)), (p, q, path)
    check_negation(p, glob_p, [path])


def raw_mode(pattern: str, paths: list[str]) -> None:
    glob = compile_checked(pattern)
    if glob is None:
        return
    for path in paths:
        matches(glob, path)
    check_negation(pattern, glob, paths)


def TestOneInput(data: bytes) -> None:
    if not data:
        return
    mode, payload = data[0] & 3, data[1:]
    if mode == 0:
        pattern, _, path = payload.partition(b"\0")
        raw_mode(
            pattern.decode("utf-8", "surrogateescape"), [path.decode("utf-8", "surrogateescape")]
        )
    elif mode == 1:
        simple_mode(payload)
    elif mode == 2:
        segment_mode(payload)
    else:
        raw_mode(payload.decode("utf-8", "surrogateescape"), list(PATHS))


if __name__ == "__main__":
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()
