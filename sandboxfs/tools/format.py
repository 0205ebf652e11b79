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
    """UTC ISO 8601 with milliseconds (``2026-11-30T06:49:24.123Z``); ``unknown`` if None."""
    if ns is None:
        return "unknown"
    stamp = dt.datetime.fromtimestamp(ns / 1e9, tz=dt.UTC)
    return stamp.strftime("%Y-%m-%dT%H:%M:%S.") + f"{stamp.microsecond // 1000:03d}Z"


def display_base(path: str, base: str | None, home: str | None) -> str:
    """The absolute form of a client path, lexically (never a resolved path)."""
    return absolute_request(path, base, home) or path


def file_uri(absolute: str) -> str:
    """A ``file://`` URI for an absolute path, its bytes percent-encoded (a byte
    that is not UTF-8 included, as ``local_path`` reads it back)."""
    return "file://" + quote(os.fsencode(absolute), safe="/")
