"""Text formatting shared by tools: sizes, times, display paths."""

from __future__ import annotations

import datetime as dt
import functools
import math
import os
from decimal import ROUND_HALF_UP, Decimal
from typing import Final
from urllib.parse import quote

from sandboxfs.fs import absolute_request

_UNITS: Final = ("B", "KB", "MB", "GB", "TB")


@functools.lru_cache(maxsize=4096)  # listings repeat sizes; the Decimal path is slow
def format_size(size: int) -> str:
    """Human size in 1024 steps, two decimals rounded half up: ``1.50 KB``, ``0 B``."""
    if size <= 0:
        return "0 B"
    if size < 1024:
        return f"{size} B"
    exponent = min(int(math.log(size, 1024)), len(_UNITS) - 1)
    if exponent == 0:
        return f"{size} B"
    value = (Decimal(size) / Decimal(1024**exponent)).quantize(Decimal("0.01"), ROUND_HALF_UP)
    return f"{value} {_UNITS[exponent]}"


def iso_time(ns: int | None) -> str:
    """UTC ISO 8601 with milliseconds (``2026-11-30T06:49:24.123Z``); ``unknown`` if None.

    The instant is ``datetime.fromtimestamp(ns / 1e9)``'s, rounded to the microsecond
    as it rounds (half to even, on the float), and the text is made by arithmetic:
    the date and time of a second come from a small cache (a listing's files share
    a few seconds), the milliseconds from the rounded microseconds.  A time outside
    the years 1 to 9999 (a filesystem may store one) is ``unknown`` too."""
    if ns is None or not _FIRST_NS <= ns < _AFTER_LAST_NS:
        return "unknown"
    seconds = ns / 1e9
    fraction, whole = math.modf(seconds)
    micro = round(fraction * 1e6)
    if micro >= 1_000_000:
        whole += 1.0
        micro -= 1_000_000
    elif micro < 0:
        whole -= 1.0
        micro += 1_000_000
    return f"{_second_text(int(whole))}{micro // 1000:03d}Z"


@functools.lru_cache(maxsize=1024)
def _second_text(second: int) -> str:
    """``YYYY-MM-DDTHH:MM:SS.`` of a second since the epoch, UTC (a year as glibc's
    ``%Y`` writes it: no padding)."""
    stamp = _EPOCH + dt.timedelta(seconds=second)
    return (
        f"{stamp.year}-{stamp.month:02d}-{stamp.day:02d}T"
        f"{stamp.hour:02d}:{stamp.minute:02d}:{stamp.second:02d}."
    )


_EPOCH: Final = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
#: The first nanosecond of year 1 and the first after year 9999, UTC (what
#: ``datetime`` can show).
_FIRST_NS: Final = -62135596800 * 10**9
_AFTER_LAST_NS: Final = 253402300800 * 10**9 - 500


def display_base(path: str, base: str | None, home: str | None) -> str:
    """The absolute form of a client path, lexically (never a resolved path)."""
    return absolute_request(path, base, home) or path


def file_uri(absolute: str) -> str:
    """A ``file://`` URI for an absolute path, its bytes percent-encoded (a byte
    that is not UTF-8 included, as ``local_path`` reads it back)."""
    return "file://" + quote(os.fsencode(absolute), safe="/")
