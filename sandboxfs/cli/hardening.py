"""Start-up steps for the layers beside openat2 and Landlock: code_map's parse helpers.

Called from :mod:`sandboxfs.cli.main`: :func:`start_parsers` before any allowed
directory is opened (so the parse supervisor, a clean exec anyway, is started
by a process that holds no directory yet).
"""

from __future__ import annotations

import logging
import sys
from typing import NoReturn

from sandboxfs.cli.arguments import EXIT_FAILED, Arguments
from sandboxfs.core import seccomp
from sandboxfs.tools import parsepool

log = logging.getLogger("sandboxfs")


def _fail(message: str) -> NoReturn:
    print(f"sandboxfs: error: {message}", file=sys.stderr)
    raise SystemExit(EXIT_FAILED)


def start_parsers(args: Arguments) -> None:
    """Start code_map's parse supervisor and make it this process's parser."""
    filtered = seccomp.unavailable_reason() is None
    try:
        pool = parsepool.ParserPool.start(cpu_seconds=args.limits.search_seconds, seccomp=filtered)
    except OSError as exc:
        _fail(f"cannot start code_map's parse helpers: {exc.strerror or exc}")
    parsepool.install(pool)
    layers = "seccomp, " if filtered else ""
    log.debug(
        "code_map parses in helper processes (%sLandlock without filesystem access, "
        "%d MiB of address space, no descriptor of the server)",
        layers,
        parsepool.MEMORY_BYTES >> 20,
    )
