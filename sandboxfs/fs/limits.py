"""The caps the filesystem operations enforce, as named defaults in one place (the
serving caps, calls at once, worker threads, the step timeout and a message's size,
are the session's: :mod:`sandboxfs.session.servinglimits`).

Each field is settable on the command line (``--max-...``; see ``sandboxfs --help``)
and documented in the README.  The defaults keep one request from hanging or
exhausting the server while leaving ordinary agent work untouched.  Every field has
a documented range (:data:`LIMIT_RANGES`): a value outside it (or not a finite
number) is refused at the command line; here too, but for the lower end of seconds
(:func:`check_within`, which the serving caps use too).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Final, final

KiB: Final = 1024
MiB: Final = 1024 * KiB
GiB: Final = 1024 * MiB
TiB: Final = 1024 * GiB


@final
@dataclass(frozen=True, slots=True)
class Range:
    """The values a number may take: from ``low`` to ``high``, both included."""

    low: int | float
    high: int | float

    def holds(self, value: float) -> bool:
        """Whether ``value`` is a finite number in range (never NaN, never -0.0)."""
        if isinstance(value, float) and (not math.isfinite(value) or math.copysign(1.0, value) < 0):
            return False
        return self.low <= value <= self.high

    @property
    def whole(self) -> bool:
        """Whether the values are whole numbers."""
        return isinstance(self.low, int)

    def accepts(self, value: object) -> bool:
        """Whether ``value`` is a number of the right kind (a whole one for a count),
        finite and in range."""
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        if self.whole and not isinstance(value, int):
            return False
        return self.holds(value)

    def describe(self) -> str:
        """``1 to 512``, ``0.001 to 86400``: the range as a user types it."""
        return f"{self.low:g} to {self.high:g}" if not self.whole else f"{self.low} to {self.high}"


@final
@dataclass(frozen=True, slots=True)
class Limits:
    """The caps in force for one server process."""

    #: Bytes one read may return (read_text_file, read_media_file, each file of
    #: read_multiple_files, resources/read).  Larger files: use head/tail/offset.
    read_bytes: int = 32 * MiB
    #: Size of a file edit_file will load.
    edit_bytes: int = 64 * MiB
    #: Size of ``content`` accepted by write_file and append_file.
    write_bytes: int = 16 * MiB
    #: Entries one search_files, directory_tree, grep_files or code_map walk may visit.
    walk_entries: int = 100_000
    #: Entries below a directory that a read's revision of it may describe (each
    #: costs a ``stat``); larger trees get no revision in reads.
    revision_entries: int = 10_000
    #: Seconds one grep_files or code_map call may search (or map) before it stops
    #: early (and says so).
    search_seconds: float = 30.0
    #: Directory levels a walk (or a recursive delete) may descend.
    tree_depth: int = 256
    #: Symbolic links followed while resolving one path.
    symlink_hops: int = 40

    def __post_init__(self) -> None:
        check_within(self, LIMIT_RANGES)


def check_within(limits: object, ranges: Mapping[str, Range]) -> None:
    """Every field of the dataclass ``limits`` is a positive, finite number (whole for
    counts and sizes) no larger than its range allows.  The lower end of a range of
    seconds is the operator's (checked where values are given): code may ask for less."""
    for field in fields(limits):  # type: ignore[arg-type]
        value = getattr(limits, field.name)
        allowed = ranges[field.name]
        if not allowed.whole:
            allowed = Range(sys.float_info.min, allowed.high)
        if not allowed.accepts(value):
            raise ValueError(
                f"limit {field.name} must be a positive finite number up to "
                f"{allowed.high:g}, got {value!r}"
            )


#: The range of each limit.  Counts and sizes start at 1; sizes stop at 1 TiB, far
#: beyond any sane cap yet well inside what C and the kernel take.  Seconds run from
#: a millisecond to a day.  The tree depth stops at 512 (a removal descends
#: recursively, one open directory per level).
SECONDS: Final = Range(0.001, 86400.0)
LIMIT_RANGES: Final[dict[str, Range]] = {
    "read_bytes": Range(1, TiB),
    "edit_bytes": Range(1, TiB),
    "write_bytes": Range(1, TiB),
    "walk_entries": Range(1, 1_000_000_000),
    "revision_entries": Range(1, 1_000_000_000),
    "search_seconds": SECONDS,
    "tree_depth": Range(1, 512),
    "symlink_hops": Range(1, 1024),
}


#: Help text for each limit, used by the CLI and the README.
LIMIT_HELP: Final[dict[str, str]] = {
    "read_bytes": "bytes one read may return (text or media)",
    "edit_bytes": "largest file edit_file will load, in bytes",
    "write_bytes": "largest content write_file/append_file accept, in bytes",
    "walk_entries": "entries one search/tree/grep/map walk may visit",
    "revision_entries": "entries below a directory that a read's revision may describe",
    "search_seconds": "seconds one grep_files or code_map call may take",
    "tree_depth": "directory levels a walk may descend",
    "symlink_hops": "symbolic links followed while resolving one path",
}
