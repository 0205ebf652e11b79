"""Invariant tested: for any files, ``parse_source(language, data, deadline)`` returns
a Parsed or raises ParseStopped, never anything else, and ``build_map`` turns what
it returned into a map whose text is at most ``max_chars`` characters and ends with
its bracketed summary, never anything else.

Also checked, for every input:

* every definition's line lies in its file, and its text is that line as shown;
* the text is file blocks, then the summary: each block is ``path:`` (a file of the
  input that is not a focus file and has definitions, at most once), then
  numbered lines in ascending order, each the text of a definition on that line of
  that file, with ``⋮`` exactly between two numbers that are not adjacent;
* structured content lists the same files and lines, in the same order;
* nothing is cut: a block is there with at least one line or not at all.

Input format (so a regression input can be written by hand): bytes 0-1 give
``max_chars`` (512 + big-endian value % 65025); byte 2's bits set the walk's
counts (bit 0 too large, 1 binary, 2 unreadable, 3 unparsed, 4 a stop reason,
5 unreadable directories, 6 too deep); the rest is split on ``0xFF 0xFF`` into
parts: the first is the query (UTF-8, replace; empty: none), each further part a
file: its first byte picks the language (``% len(LANGUAGES)``; bit 7: a focus
file), the rest (at most 4 KiB) is its source.

Known bugs can be tolerated for long runs, never by default: set
``SANDBOXFS_FUZZ_TOLERATE`` to a comma-separated list of ids from ``KNOWN_BUGS``.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from typing import Final

import atheris

with (
    atheris.instrument_imports(include=["sandboxfs"])
    if __name__ == "__main__"
    else contextlib.nullcontext()
):
    from sandboxfs.tools.codefacts import LANGUAGES, shown_line
    from sandboxfs.tools.codeparse import ParseStopped, parse_source
    from sandboxfs.tools.coderank import Source
    from sandboxfs.tools.coderender import GAP, MAX_CHARS, MIN_CHARS, Walked, build_map

KNOWN_BUGS: Final[dict[str, str]] = {}  # fixed ones stay as regression inputs
TOLERATE_ENV: Final = "SANDBOXFS_FUZZ_TOLERATE"
SEPARATOR: Final = b"\xff\xff"
SOURCE_BYTES: Final = 4096
MAX_FILES: Final = 24


def tolerated(bug: str) -> bool:
    return bug in os.environ.get(TOLERATE_ENV, "").split(",")


def walked_from(flags: int) -> Walked:
    return Walked(
        not_code=flags,
        too_large=99_999 if flags & 1 else 0,
        binary=99_999 if flags & 2 else 0,
        unreadable=99_999 if flags & 4 else 0,
        unparsed=99_999 if flags & 8 else 0,
        stopped="stopped after visiting 100,000 entries: narrow path" if flags & 16 else None,
        unreadable_dirs=99_999 if flags & 32 else 0,
        too_deep=256 if flags & 64 else 0,
    )


def _check_parsed(data: bytes, source: Source) -> None:
    lines = data.split(b"\n")
    for d in source.parsed.definitions:
        assert 1 <= d.line <= len(lines), (d, len(lines))
        assert d.text == shown_line(lines[d.line - 1]), d
        assert d.name, d


def _check_text(text: str, sources: list[Source], max_chars: int) -> list[tuple[str, list[int]]]:
    """The blocks of ``text``, checked against the sources (see the module)."""
    assert len(text) <= max_chars, (len(text), max_chars)
    body, _, last = text.rpartition("\n")
    assert last.startswith("[mapped ") and last.endswith("]"), last
    by_path = {s.shown: s for s in sources if not s.focus and s.parsed.definitions}
    blocks: list[tuple[str, list[int]]] = []
    if not body:
        return blocks
    assert body.endswith("\n"), body[-40:]  # a blank line before the summary
    for block in body[:-1].split("\n\n"):
        header, *rows = block.split("\n")
        assert header.endswith(":") and header[:-1] in by_path, header
        path = header[:-1]
        assert path not in (p for p, _ in blocks), path
        texts: dict[int, set[str]] = {}
        for d in by_path[path].parsed.definitions:
            texts.setdefault(d.line, set()).add(d.text)
        numbers: list[int] = []
        gap = False
        for row in rows:
            if row == GAP:
                assert numbers and not gap, rows
                gap = True
                continue
            number, _, shown = row.partition(": ")
            line = int(number)
            assert shown in texts[line], (row, texts.get(line))
            if numbers:
                assert line > numbers[-1], rows
                assert gap == (line != numbers[-1] + 1), rows
            numbers.append(line)
            gap = False
        assert numbers and not gap, rows
        blocks.append((path, numbers))
    return blocks


def TestOneInput(data: bytes) -> None:
    if len(data) < 3:
        return
    max_chars = MIN_CHARS + int.from_bytes(data[:2], "big") % (MAX_CHARS - MIN_CHARS + 1)
    parts = data[3:].split(SEPARATOR)
    query = parts[0].decode("utf-8", "replace") or None
    sources: list[Source] = []
    for index, part in enumerate(parts[1 : 1 + MAX_FILES]):
        if not part:
            continue
        language = LANGUAGES[part[0] % len(LANGUAGES)]
        code = part[1 : 1 + SOURCE_BYTES]
        try:
            parsed = parse_source(language, code, time.monotonic() + 60)
        except ParseStopped:
            continue  # a minute for 4 KiB: only on a machine that stalls
        name = f"src/f{index}.{language}"
        source = Source(name, name, parsed, focus=bool(part[0] & 0x80))
        _check_parsed(code, source)
        sources.append(source)
    result = build_map(sources, walked_from(data[2]), query=query, max_chars=max_chars)
    blocks = _check_text(result.text, sources, max_chars)
    listed = [
        (f["path"], [line["line"] for line in f["lines"]]) for f in result.structured["files"]
    ]
    assert listed == blocks, (listed, blocks)


if __name__ == "__main__":
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()
