"""The exit statuses of the ``sandboxfs`` command, as ``sandboxfs --help`` documents
them (imported before anything heavy: the launcher needs them too)."""

from __future__ import annotations

from typing import Final

EXIT_OK: Final = 0
#: The server could not start, or could not operate (it says why on stderr).
EXIT_FAILED: Final = 1
#: The configuration cannot be used: it is refused rather than half served.
EXIT_USAGE: Final = 2
#: Interrupted (Ctrl-C, SIGINT): 128 + the signal's number, as shells report it.
EXIT_INTERRUPTED: Final = 130
#: What an interrupted command prints: its one line.
INTERRUPTED: Final = "sandboxfs: interrupted"


def interrupted() -> int:
    """Say so in the one line, and give the status an interrupted command ends with."""
    import sys  # noqa: PLC0415 - this module is imported before anything else

    print(INTERRUPTED, file=sys.stderr, flush=True)
    return EXIT_INTERRUPTED
