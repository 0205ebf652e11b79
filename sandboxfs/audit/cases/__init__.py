"""The audit's attack cases, by category.

Each case builds what it needs under its fixture (``fx.root`` is inside the
server's allowed directory, ``fx.outside`` is not), makes tool calls through
``s`` and raises :class:`CaseFailed` when the server does something it must
not.  The harness then checks, for every case, that nothing outside changed,
that no reply leaked, and that the server still answers.
"""

from __future__ import annotations

import importlib
from typing import Final

from sandboxfs.audit.cases.base import CASES, Case

__all__ = ["CASES", "CATEGORIES", "Case"]

#: The category modules, in the order their cases run (and are numbered): each
#: registers its cases in :data:`CASES` when imported.
MODULES: Final = (
    "path_syntax",
    "symlinks",
    "files",
    "exhaustion",
    "races",
    "leaks",
    "protocol",
    "roots",
    "sidecar",
)
for _module in MODULES:
    importlib.import_module(f"{__name__}.{_module}")

CATEGORIES: Final = tuple(dict.fromkeys(c.category for c in CASES))
