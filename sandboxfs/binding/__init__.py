"""Binding wrappers: the only code that touches the compiled shim (``sandboxfs._native``).

Each wrapper makes one syscall safe to call from Python (``-errno`` becomes
:class:`OSError`, NUL bytes in names are refused).  No policy lives here.
"""

from __future__ import annotations

from sandboxfs.binding import syscalls as syscalls
from sandboxfs.binding.syscalls import LEAF_BINARY as LEAF_BINARY
from sandboxfs.binding.syscalls import LEAF_GONE as LEAF_GONE
from sandboxfs.binding.syscalls import LEAF_LATER as LEAF_LATER
from sandboxfs.binding.syscalls import LEAF_SEARCH as LEAF_SEARCH
from sandboxfs.binding.syscalls import LEAF_TEXT as LEAF_TEXT
from sandboxfs.binding.syscalls import LeafBatch as LeafBatch
from sandboxfs.binding.syscalls import Statx as Statx
from sandboxfs.binding.syscalls import count_byte as count_byte
from sandboxfs.binding.syscalls import find as find
