"""The ``sandboxfs`` command: the subcommands (``audit``, ``workspaces``, ``journal``,
``hash-token``), ``--help`` and ``--version``, and otherwise a server, its configuration
decided whole first (:mod:`sandboxfs.cli.config`: served exactly as the startup line
says, or refused with exit status 2 and one line naming the conflict) and then served
(:mod:`sandboxfs.cli.serve`, or :mod:`sandboxfs.cli.front` for ``--tenants``).  Ctrl-C
ends it with status 130 and one line, leaving nothing behind."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Sequence
from typing import Final

from sandboxfs import __version__
from sandboxfs.cli import logformat
from sandboxfs.cli.arguments import (
    EXIT_OK,
    EXIT_USAGE,
    Refused,
    UsageError,
    help_text,
    parse_arguments,
)
from sandboxfs.cli.config import build
from sandboxfs.cli.exits import interrupted
from sandboxfs.cli.serve import serve

log = logging.getLogger("sandboxfs")


#: Loggers of the libraries underneath, quiet unless --log-level debug.
_LIBRARY_LOGGERS: Final = ("mcp", "hypercorn.error", "httpx", "anyio")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``sandboxfs`` command; returns the exit status."""
    argv = sys.argv[1:] if argv is None else argv
    try:
        return _main(argv)
    except KeyboardInterrupt:
        return interrupted()
    except BaseExceptionGroup as group:  # trio may wrap it with what it cancelled
        if group.subgroup(KeyboardInterrupt) is None:
            raise
        return interrupted()


def _main(argv: Sequence[str]) -> int:  # noqa: PLR0911 - one per subcommand
    if argv[:1] == ["audit"]:
        from sandboxfs.audit.runner import main as audit  # noqa: PLC0415 - only audit needs it

        return audit(argv[1:])
    if argv[:1] == ["workspaces"]:
        from sandboxfs.cli.workspacescommand import main as workspaces  # noqa: PLC0415

        return workspaces(argv[1:])
    if argv[:1] == ["journal"]:
        from sandboxfs.cli.journal import main as journal  # noqa: PLC0415

        return journal(argv[1:])
    if argv[:1] == ["hash-token"]:
        from sandboxfs.cli.hashtoken import main as hash_token  # noqa: PLC0415

        return hash_token(argv[1:])
    try:
        args = parse_arguments(argv)
    except UsageError as exc:
        print(f"sandboxfs: error: {exc}\nsee 'sandboxfs --help'", file=sys.stderr)
        return EXIT_USAGE
    if args.show_help:
        print(help_text())
        return EXIT_OK
    if args.show_version:
        print(f"sandboxfs {__version__}")
        return EXIT_OK
    try:
        config = build(args, os.environ, terminal=logformat.stderr_is_terminal())
    except Refused as exc:
        hint = "\nsee 'sandboxfs --help'" if exc.status == EXIT_USAGE else ""
        print(f"sandboxfs: error: {exc}{hint}", file=sys.stderr)
        return exc.status
    # The libraries' info lines speak of their internals: quiet unless at debug.
    logformat.configure(config.log_level, config.log_format, quiet=_LIBRARY_LOGGERS)
    return serve(config)
