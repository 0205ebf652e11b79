"""The wire between ``--workers`` processes and their parent for ``/metrics``
(:mod:`sandboxfs.transports.http.replicametrics`, :mod:`sandboxfs.cli.metricsrelay`):
frames of a kind byte, a 4-byte sequence number and a 4-byte length, then the
payload.  No prometheus_client here: the parent imports this without it.
"""

from __future__ import annotations

import struct
from typing import Final, final

#: How long a scrape waits for the other processes' samples.
GATHER_SECONDS: Final = 5.0
#: The most bytes one frame may carry (a process's samples are ~50 KiB).
MAX_FRAME: Final = 16 * 1024 * 1024

COLLECT: Final = b"C"
DUMP: Final = b"D"
SAMPLES: Final = b"S"
ANSWER: Final = b"A"
_HEADER: Final = struct.Struct(">cII")


def frame(kind: bytes, seq: int, payload: bytes = b"") -> bytes:
    """One frame of the wire."""
    return _HEADER.pack(kind, seq & 0xFFFFFFFF, len(payload)) + payload


@final
class FrameReader:
    """Frames out of a byte stream, as they complete."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[tuple[bytes, int, bytes]]:
        """The frames ``data`` completes.  ValueError: the stream is not this wire."""
        self._buffer += data
        frames = []
        while len(self._buffer) >= _HEADER.size:
            kind, seq, length = _HEADER.unpack_from(self._buffer)
            if kind not in (COLLECT, DUMP, SAMPLES, ANSWER) or length > MAX_FRAME:
                raise ValueError("not a metrics frame")
            end = _HEADER.size + length
            if len(self._buffer) < end:
                break
            frames.append((kind, seq, bytes(self._buffer[_HEADER.size : end])))
            del self._buffer[:end]
        return frames
