"""The bytes between the server and a parse helper, and the server's checks of them.

The **control socket** (server <-> supervisor) carries :data:`COMMAND` s (fork a
helper, kill one) one way and, the other way, each new helper's socket with its
pid (:data:`SPAWNED`).

A **request** (server -> helper) is one batch of files: a header
(:data:`MAGIC`, the number of files, the call's deadline on the system-wide
monotonic clock), then per file its language (an index into
:data:`~sandboxfs.tools.codefacts.LANGUAGES`), its length and its bytes.

An **answer** (helper -> server) is one frame per file, sent as each is done,
then a last :data:`DONE` frame: the file's index in the batch, a status and a
payload.  :data:`PARSED`'s payload is binary, never pickled, never JSON: the
number of spans and of names, the spans (start and end byte of each defined
name), the count of each name, then the names (UTF-8, one per line).

The server trusts nothing a helper says (a helper parses planted files, and a
parser bug can make it say anything): :class:`AnswerReader` refuses a frame
whose index, status or length is out of bounds, :func:`decode_extracted` a
payload whose counts or length disagree, each with :class:`WireError`; the
caller then discards the helper.  Bounded: a batch at most
:data:`BATCH_FILES` files and :data:`BATCH_BYTES` bytes (one file may exceed
the latter alone), a payload at most :data:`PAYLOAD_MAX` bytes.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Final

from sandboxfs.tools.codefacts import DEFINITIONS_MAX, LANGUAGES, NAME_MAX, REFERENCES_MAX

MAGIC: Final = 0x31504653  # b"SFP1", little-endian
#: Files and bytes of one batch the server sends, at most (a single file may be
#: larger than BATCH_BYTES: it then goes alone).
BATCH_FILES: Final = 64
BATCH_BYTES: Final = 256 * 1024
#: The largest file a request may carry (code_map reads at most 1 MiB of a file).
FILE_MAX: Final = 1024 * 1024
#: The largest answer payload: every span and name at its bound.
PAYLOAD_MAX: Final = 8 + 8 * DEFINITIONS_MAX + REFERENCES_MAX * (4 + 4 * NAME_MAX + 1)

#: Statuses of an answer frame.
PARSED: Final = 0
LATE: Final = 1  # the deadline passed before this file was parsed
FAILED: Final = 2  # the parser could not parse it (its memory ran out)
DONE: Final = 3  # the batch is answered

_REQUEST: Final = struct.Struct("<IId")
_ITEM: Final = struct.Struct("<BI")
_FRAME: Final = struct.Struct("<IBI")
_COUNTS: Final = struct.Struct("<II")


#: Test-only switch: a helper given a file holding these bytes aborts, as a parser
#: that crashed would (tests/test_parse_helpers.py).  It only makes parsing fail.
TEST_ABORT_ENV: Final = "SANDBOXFS_TEST_PARSER_ABORT"
#: Commands on the control socket (server -> supervisor): an opcode and a pid.
SPAWN: Final = b"S"
KILL: Final = b"K"
COMMAND: Final = struct.Struct("<cI")
#: What the supervisor sends with each helper's socket: the helper's pid.
SPAWNED: Final = struct.Struct("<I")


class WireError(Exception):
    """A helper sent something no correct helper sends."""


# -- requests ----------------------------------------------------------------------------


def encode_request(items: Sequence[tuple[int, bytes]], deadline: float) -> bytes:
    """A batch of ``(language index, bytes)`` to parse before ``deadline``."""
    parts = [_REQUEST.pack(MAGIC, len(items), deadline)]
    for language, data in items:
        parts += [_ITEM.pack(language, len(data)), data]
    return b"".join(parts)


REQUEST_HEADER: Final = _REQUEST.size
ITEM_HEADER: Final = _ITEM.size


def decode_request_header(header: bytes) -> tuple[int, float]:
    """The number of files and the deadline of a request header."""
    magic, count, deadline = _REQUEST.unpack(header)
    if magic != MAGIC or not 0 < count <= BATCH_FILES:
        raise WireError("not a parse request")
    return count, deadline


def decode_item_header(header: bytes) -> tuple[int, int]:
    """The language index and length of one file of a request."""
    language, length = _ITEM.unpack(header)
    if language >= len(LANGUAGES) or length > FILE_MAX:
        raise WireError("a file of the request is out of bounds")
    return language, length


# -- answers -----------------------------------------------------------------------------


def encode_frame(index: int, status: int, payload: bytes = b"") -> bytes:
    return _FRAME.pack(index, status, len(payload)) + payload


def encode_extracted(spans: Sequence[tuple[int, int]], references: dict[str, int]) -> bytes:
    """The payload of a :data:`PARSED` frame (a name holding a newline is left out)."""
    names = [name for name in references if "\n" not in name]
    parts = [_COUNTS.pack(len(spans), len(names))]
    parts.append(struct.pack(f"<{2 * len(spans)}I", *(x for span in spans for x in span)))
    parts.append(struct.pack(f"<{len(names)}I", *(references[name] for name in names)))
    parts.append("\n".join(names).encode("utf-8", "replace"))
    return b"".join(parts)


def decode_extracted(payload: bytes) -> tuple[list[tuple[int, int]], dict[str, int]]:
    """The spans and the counted names of a :data:`PARSED` payload; WireError if its
    counts are out of bounds or disagree with its length."""
    if len(payload) < _COUNTS.size:
        raise WireError("a parse answer is too short")
    n_spans, n_names = _COUNTS.unpack_from(payload)
    numbers_end = _COUNTS.size + 8 * n_spans + 4 * n_names
    if n_spans > DEFINITIONS_MAX or n_names > REFERENCES_MAX or len(payload) < numbers_end:
        raise WireError("a parse answer's counts are out of bounds")
    numbers = struct.unpack_from(f"<{2 * n_spans + n_names}I", payload, _COUNTS.size)
    spans = list(zip(numbers[0 : 2 * n_spans : 2], numbers[1 : 2 * n_spans : 2], strict=True))
    if not n_names:
        if len(payload) != numbers_end:
            raise WireError("a parse answer has bytes after its last name")
        return spans, {}
    names = payload[numbers_end:].decode("utf-8", "replace").split("\n")
    if len(names) != n_names:
        raise WireError("a parse answer's names disagree with its count")
    return spans, dict(zip(names, numbers[2 * n_spans :], strict=True))


class AnswerReader:
    """Frames out of the bytes a helper sent, as they arrive (see the module)."""

    def __init__(self, batch_size: int) -> None:
        self.batch_size = batch_size
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[tuple[int, int, bytes]]:
        """Add ``data``; the frames now complete, as ``(index, status, payload)``.
        Raises WireError for a frame no correct helper sends."""
        self._buffer += data
        frames: list[tuple[int, int, bytes]] = []
        buffer = self._buffer
        at = 0
        while len(buffer) - at >= _FRAME.size:
            index, status, length = _FRAME.unpack_from(buffer, at)
            if status > DONE or length > PAYLOAD_MAX:
                raise WireError("a parse answer frame is out of bounds")
            if status == DONE:
                if index != self.batch_size or length:
                    raise WireError("a parse answer ends out of order")
            elif index >= self.batch_size or (status != PARSED and length):
                raise WireError("a parse answer frame is out of bounds")
            end = at + _FRAME.size + length
            if end > len(buffer):
                break
            frames.append((index, status, bytes(buffer[at + _FRAME.size : end])))
            at = end
        del buffer[:at]
        return frames

    @property
    def pending(self) -> int:
        """Bytes received that do not make a whole frame yet."""
        return len(self._buffer)
