"""The audit log: one JSON line per tool call, never file contents.

Each line holds ``"log": "audit"`` (what tells it from the operator's lines on
stderr), the time, the client's identity if known (its clientInfo name, and over
HTTP the peer address), the protocol era and version, the tool, the paths as the
client gave them, the outcome (and error code), the bytes returned, and the
duration.  Lines are ASCII-only JSON: every control and non-ASCII character a
client sent is written escaped (``\\uXXXX``), so none reaches a terminal raw.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any, Final, Protocol, final

#: Made once: json.dumps with options builds a new encoder on every call.  ASCII-only:
#: client text is escaped, and a lone surrogate a client sent can always be written.
_ENCODER: Final = json.JSONEncoder(ensure_ascii=True, default=str)


class Lines(Protocol):
    """Where audit lines go: a text file, or stderr's line writer."""

    def write(self, text: str, /) -> int: ...

    def flush(self) -> None: ...


#: The arguments that name paths; nothing else from a call is logged.
PATH_ARGUMENTS: Final = ("path", "paths", "source", "destination", "focus")
#: Longest client text kept in a line (a path the server would accept is at most
#: 4,096 bytes; a longer one was refused, and its start is enough to recognize it).
MAX_LOGGED_CHARS: Final = 4096
#: Most items of a list kept (read_multiple_files' paths).
MAX_LOGGED_ITEMS: Final = 100


def bounded(value: Any) -> Any:
    """Client data as the log keeps it: strings cut at MAX_LOGGED_CHARS, lists at
    MAX_LOGGED_ITEMS (each cut said with how much there was), an object only by its
    kind: a line never grows with what a client sends."""
    if isinstance(value, str):
        if len(value) <= MAX_LOGGED_CHARS:
            return value
        return f"{value[:MAX_LOGGED_CHARS]}... [{len(value):,} characters]"
    if isinstance(value, list):
        kept = [bounded(item) for item in value[:MAX_LOGGED_ITEMS]]
        if len(value) > MAX_LOGGED_ITEMS:
            kept.append(f"... [{len(value):,} items]")
        return kept
    if value is None or isinstance(value, bool | int | float):
        return value
    return f"<{type(value).__name__}>"  # not a path (the call was refused): its kind only


@final
class AuditLog:
    """Writes audit lines to a text stream (stderr or a file opened at startup)."""

    def __init__(self, stream: Lines | None) -> None:
        self.stream = stream
        self._second = -1
        self._second_text = ""

    def _timestamp(self) -> str:
        """Now in UTC, ISO 8601 with milliseconds (the seconds part formatted once a
        second: this runs for every call)."""
        now = time.time()
        second = int(now)
        if second != self._second:
            self._second = second
            self._second_text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
        return f"{self._second_text}.{int((now - second) * 1000):03d}+00:00"

    def record(
        self,
        *,
        tool: str,
        arguments: Mapping[str, Any],
        era: str,
        protocol: str,
        client: str | None,
        peer: str | None,
        outcome: str,
        code: str | None,
        size: int,
        seconds: float,
    ) -> None:
        if self.stream is None:
            return
        entry: dict[str, Any] = {
            "time": self._timestamp(),
            "log": "audit",
            "event": "tool_call",
            "client": bounded(client),
            "peer": peer,
            "era": era,
            "protocolVersion": protocol,
            "tool": tool,
            "paths": {k: bounded(arguments[k]) for k in PATH_ARGUMENTS if k in arguments},
            "outcome": outcome,
            "error": code,
            "bytes": size,
            "durationMs": round(seconds * 1000, 3),
        }
        line = _ENCODER.encode(entry)
        self.stream.write(line + "\n")
        self.stream.flush()
