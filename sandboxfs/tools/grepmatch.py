"""grep_files' matching: the pattern (RE2, or a literal searched in C) and how a
matching line is shown.  No pattern can stall the server (RE2 is linear time) or
take memory a client chooses (a pattern is at most ``_PATTERN_CHARS`` characters)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, Final

import re2

from sandboxfs.fs import QUOTED_CHARS, InvalidArgument, find, quote_path, quoted, structured_path

#: Longest pattern searched for.
_PATTERN_CHARS: Final = 65_536
#: Longest line text reported; longer lines are cut with an ellipsis.
_LINE_SHOWN: Final = 500
#: Bytes of a line decoded to show it: enough for ``_LINE_SHOWN`` characters (at
#: most 4 bytes each), so a long line is never decoded whole.
_SHOWN_BYTES: Final = 4 * _LINE_SHOWN + 4
#: What could make a pattern match differently in a file searched on its own and in
#: files searched as one text: \A, \z, and a flag group that turns a flag off
#: (``(?-m)``: ^ and $ at the text's ends only).  Found or not, nothing is wrong:
#: a pattern holding it is searched file by file.
_TEXT_EDGE: Final = re.compile(r"\\[Az]|\(\?[a-zA-Z]*-")


class Matcher:
    """Finds matching lines in a block of bytes, with RE2 or a plain substring search."""

    def __init__(self, pattern: str, *, regex: bool, case_sensitive: bool) -> None:
        if pattern == "":
            raise InvalidArgument("pattern must not be empty")
        if len(pattern) > _PATTERN_CHARS:
            # RE2 would refuse most such patterns anyway, after parsing them with memory
            # a client chooses (16 MiB of "(" cost it 500 MiB).
            raise InvalidArgument(f"pattern is longer than {_PATTERN_CHARS} characters")
        options = re2.Options()
        options.log_errors = False
        options.case_sensitive = case_sensitive
        self.literal = None if regex or not case_sensitive else pattern.encode("utf-8")
        # (?m): ^ and $ match at line boundaries, as in grep.
        source = "(?m)" + pattern if regex else re2.escape(pattern)
        #: RE2 for a search over many files at once (see readahead's ``Run._keep``):
        #: None for a literal (C searches it) and for a pattern that could see where a
        #: text starts or ends (\A, \z, ^ or $ with the m flag turned off).
        self.scanner: Any = None
        try:
            self.compiled = re2.compile(source.encode("utf-8"), options=options)
        except re2.error as exc:
            raw = exc.args[0] if exc.args else b""
            detail = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
            detail = detail.replace("(?m)", "")
            raise InvalidArgument(
                f"Invalid regular expression {quoted(pattern)}: {detail[:QUOTED_CHARS]}"
            ) from None
        if self.literal is None and not _TEXT_EDGE.search(source):
            self.scanner = self.compiled

    def any_hit(self, buffer: bytes | bytearray | memoryview, start: int, end: int) -> bool:
        """Whether ``buffer[start:end]``, searched as a block of its own, has a match."""
        if self.literal is not None:
            return find(buffer, self.literal, start, end) >= 0
        return self.compiled.search(memoryview(buffer)[start:end]) is not None

    def hits(self, data: bytes | bytearray, end: int) -> Iterator[int]:
        """Start offsets of matches in the block ``data[:end]`` (at most one per line)."""
        if self.literal is not None:
            start = 0
            while (at := find(data, self.literal, start, end)) >= 0:
                yield at
                # Past the newline: a literal that starts with one is found again after it.
                start = data.find(b"\n", at, end) + 1
                if start == 0:
                    return
            return
        position = 0
        with memoryview(data) as whole, whole[:end] as block:
            while position <= end:
                found = self.compiled.search(block, position)
                if found is None:
                    return
                yield found.start()
                newline = data.find(b"\n", found.start(), end)
                if newline < 0:
                    return
                position = newline + 1


def size_text(n: int) -> str:
    """``n`` bytes as the answers say it: whole MiB, else bytes."""
    return f"{n // (1024 * 1024)} MiB" if n % (1024 * 1024) == 0 else f"{n} bytes"


def shown_line(line: bytes | bytearray | memoryview, *, cut_at: int | None = None) -> str:
    """A line as reported: at most ``_LINE_SHOWN`` characters (then an ellipsis),
    decoded from at most ``_SHOWN_BYTES`` of it; ``cut_at``: marked as a line cut
    after that many bytes."""
    if len(line) > _SHOWN_BYTES:
        text = bytes(line[:_SHOWN_BYTES]).decode("utf-8", "replace")[:_LINE_SHOWN] + "…"
    else:
        text = bytes(line).decode("utf-8", "replace").removesuffix("\r")
        if len(text) > _LINE_SHOWN:
            text = text[:_LINE_SHOWN] + "…"
    return text if cut_at is None else f"{text} [line cut at {size_text(cut_at)}]"


def lines_cut(count: int, block: int) -> str:
    """The note on lines longer than ``block`` bytes, of which only a block was searched."""
    shown = size_text(block)
    some = "1 line longer than" if count == 1 else f"{count} lines longer than"
    return f"{some} {shown} cut: only the first {shown} of each was searched"


def not_read(files: int, directories: int) -> str:
    parts = []
    if files:
        parts.append(f"{files} file{'' if files == 1 else 's'}")
    if directories:
        parts.append(f"{directories} director{'y' if directories == 1 else 'ies'}")
    return " and ".join(parts) + " could not be read"


def shown_path(prefix: str, relative: str) -> str:
    return f"{prefix}/{quote_path(relative)}" if prefix != "/" else f"/{relative}"


def exact_path(prefix: str, relative: str) -> str:
    return f"{prefix}/{structured_path(relative)}" if prefix != "/" else f"/{relative}"
