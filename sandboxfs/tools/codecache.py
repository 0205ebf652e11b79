"""code_map's parse cache: what each file defines and uses, kept per server.

Keyed by what ``fstat`` says of the file read (device, inode, size, modification
and change time) and its language, so a file that was edited, replaced or touched
misses and is parsed again, and a file that was not is never read again.  Bounded:
at most :data:`CAPACITY_BYTES` of parse results (by :meth:`Parsed.cost`) and
:data:`CAPACITY_FILES` files, least recently used first out.  Safe to share
between threads.  No file content is kept, only names, line numbers and the
definition lines the map shows.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from typing import Final, final

from sandboxfs.tools.codefacts import Parsed

#: Bytes of parse results one server keeps, at most.
CAPACITY_BYTES: Final = 64 * 1024 * 1024
#: Files one server keeps the parse results of, at most.
CAPACITY_FILES: Final = 100_000

#: language, device, inode, size, modification time, change time (ns).
ParseKey = tuple[str, int, int, int, int, int]


def parse_key(language: str, st: os.stat_result) -> ParseKey:
    return (language, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


@final
class ParseCache:
    """Parse results of files already read, least recently used first out."""

    def __init__(
        self, capacity_bytes: int = CAPACITY_BYTES, capacity_files: int = CAPACITY_FILES
    ) -> None:
        self.capacity_bytes = capacity_bytes
        self.capacity_files = capacity_files
        self._entries: OrderedDict[ParseKey, tuple[Parsed, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: ParseKey) -> Parsed | None:
        with self._lock:
            kept = self._entries.get(key)
            if kept is None:
                return None
            self._entries.move_to_end(key)
            return kept[0]

    def put(self, key: ParseKey, parsed: Parsed) -> None:
        cost = parsed.cost()
        if cost > self.capacity_bytes:
            return
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
            self._entries[key] = (parsed, cost)
            self._bytes += cost
            while self._bytes > self.capacity_bytes or len(self._entries) > self.capacity_files:
                _, (_, dropped) = self._entries.popitem(last=False)
                self._bytes -= dropped

    @property
    def size_bytes(self) -> int:
        """The cost of what is kept (see :meth:`Parsed.cost`)."""
        return self._bytes
