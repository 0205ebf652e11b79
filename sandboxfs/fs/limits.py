"""Every cap sandboxfs enforces, as named defaults in one place.

Each field is settable on the command line (``--max-...``; see ``sandboxfs --help``)
and documented in the README.  The defaults keep one request from hanging or
exhausting the server while leaving ordinary agent work untouched.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Final, final

KiB: Final = 1024
MiB: Final = 1024 * KiB


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
        for field in fields(self):
            value = getattr(self, field.name)
            if value <= 0:
                raise ValueError(f"limit {field.name} must be positive, got {value}")


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
    "concurrent_calls": "tool calls served at once",
    "worker_threads": "worker threads doing blocking filesystem work",
    "fs_timeout": "seconds one blocking filesystem step may take",
    "line_bytes": "bytes of one incoming JSON-RPC message (stdio line or HTTP body)",
}
