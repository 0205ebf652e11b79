"""The caps on serving: calls at once, worker threads, the step timeout of blocking
work and the size of one incoming message, as named defaults beside the filesystem's
(:mod:`sandboxfs.fs.limits`), settable on the command line and ranged the same way."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, final

from sandboxfs.tools import SECONDS, MiB, Range, TiB, check_within


@final
@dataclass(frozen=True, slots=True)
class ServingLimits:
    #: Tool calls served at once; further calls wait their turn.
    concurrent_calls: int = 64
    #: Worker threads doing blocking filesystem work at once.
    worker_threads: int = 32
    #: Seconds one blocking step (resolving a path, reading a directory) may take.
    fs_timeout: float = 15.0
    #: Bytes of one incoming JSON-RPC message (a stdio line or an HTTP body); longer
    #: ones are refused without being buffered.
    line_bytes: int = 16 * MiB

    def __post_init__(self) -> None:
        check_within(self, SERVING_RANGES)


#: The range of each serving cap (see :data:`sandboxfs.fs.limits.LIMIT_RANGES`).
SERVING_RANGES: Final[dict[str, Range]] = {
    "concurrent_calls": Range(1, 100_000),
    "worker_threads": Range(1, 4096),
    "fs_timeout": SECONDS,
    "line_bytes": Range(1, TiB),
}

#: Help text for each serving cap, used by the CLI and the README.
SERVING_HELP: Final[dict[str, str]] = {
    "concurrent_calls": "tool calls served at once",
    "worker_threads": "worker threads doing blocking filesystem work",
    "fs_timeout": "seconds one blocking filesystem step may take",
    "line_bytes": "bytes of one incoming JSON-RPC message (stdio line or HTTP body)",
}
