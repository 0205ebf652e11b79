"""Command line: ``sandboxfs [OPTIONS] [--] DIR...``.

Options may appear anywhere among the directories; ``--`` ends them, so a
directory literally named ``--read-only`` can follow it.  Startup fails closed:
without a working ``openat2``, or with a directory that does not exist or is
not a directory, the server exits with status 1 and says why.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final, NoReturn, final

import trio

from sandboxfs import __version__
from sandboxfs.access import AccessControl
from sandboxfs.allowlist import AllowList, Root
from sandboxfs.limits import LIMIT_HELP, Limits
from sandboxfs.server import SUPPORTED_VERSIONS, SandboxfsServer, ServerOptions
from sandboxfs.stdio import InputCloser, serve_stdio
from sandboxfs.syscalls import Openat2Unavailable, probe_openat2
from sandboxfs.watch import Stall

log = logging.getLogger("sandboxfs")

#: Boolean flags: option -> (attribute, help).
FLAGS: Final[dict[str, tuple[str, str]]] = {
    "--read-only": ("read_only", "serve only the tools that cannot change the filesystem"),
    "--confine-roots": (
        "confine_roots",
        "client Roots may narrow the command-line directories, never replace or widen them",
    ),
    "--no-xdev": (
        "no_xdev",
        "refuse paths that cross a mount point inside an allowed directory",
    ),
}

#: Limit options: option -> Limits field.
LIMIT_OPTIONS: Final[dict[str, str]] = {
    "--max-read-bytes": "read_bytes",
    "--max-edit-bytes": "edit_bytes",
    "--max-write-bytes": "write_bytes",
    "--max-walk-entries": "walk_entries",
    "--max-tree-depth": "tree_depth",
    "--max-symlink-hops": "symlink_hops",
    "--max-concurrent-calls": "concurrent_calls",
    "--max-worker-threads": "worker_threads",
    "--fs-timeout": "fs_timeout",
    "--max-line-bytes": "line_bytes",
}


@final
class UsageError(Exception):
    """The command line cannot be used; the message says why."""


@final
@dataclass
class Arguments:
    directories: list[str] = field(default_factory=list)
    read_only: bool = False
    confine_roots: bool = False
    no_xdev: bool = False
    limits: Limits = field(default_factory=Limits)
    show_help: bool = False
    show_version: bool = False


def _limit_value(option: str, name: str, text: str) -> int | float:
    kind: type[int] | type[float] = type(getattr(Limits(), name))
    try:
        value: int | float = kind(text)
    except ValueError:
        raise UsageError(f"{option} needs a number, got {text!r}") from None
    if value <= 0:
        raise UsageError(f"{option} must be positive, got {text}")
    return value


def parse_arguments(argv: Sequence[str]) -> Arguments:
    """Parse options anywhere among the directories; ``--`` ends the options."""
    args = Arguments()
    limit_values: dict[str, int | float] = {}
    items = list(argv)
    i = 0
    while i < len(items):
        item = items[i]
        i += 1
        if item == "--":
            args.directories.extend(items[i:])
            break
        if not item.startswith("--") or item == "-":
            args.directories.append(item)
            continue
        option, has_value, value = item.partition("=")
        if option in ("--help", "-h"):
            args.show_help = True
        elif option == "--version":
            args.show_version = True
        elif option in FLAGS:
            if has_value:
                raise UsageError(f"{option} takes no value")
            setattr(args, FLAGS[option][0], True)
        elif option in LIMIT_OPTIONS:
            if not has_value:
                if i >= len(items):
                    raise UsageError(f"{option} needs a value")
                value = items[i]
                i += 1
            limit_values[LIMIT_OPTIONS[option]] = _limit_value(option, LIMIT_OPTIONS[option], value)
        else:
            raise UsageError(f"unknown option {option} (use -- before a directory named so)")
    args.limits = dataclasses.replace(Limits(), **limit_values)  # type: ignore[arg-type]
    return args


def help_text() -> str:
    defaults = Limits()
    lines = [
        "usage: sandboxfs [OPTIONS] [--] DIR...",
        "",
        "A security-first MCP filesystem server: an agent may read, write and search",
        "files inside the given directories and nothing else. Speaks MCP over stdio",
        "(both the 2025 protocol era and 2026-07-28).",
        "",
        "Options may appear anywhere; -- ends them.",
        "",
        "options:",
    ]
    for option, (_, text) in FLAGS.items():
        lines.append(f"  {option:<26} {text}")
    lines.append(f"  {'--version':<26} print the version and exit")
    lines.append(f"  {'--help':<26} show this help and exit")
    lines += ["", "limits (defaults in brackets):"]
    for option, name in LIMIT_OPTIONS.items():
        value = getattr(defaults, name)
        lines.append(f"  {option + ' N':<26} {LIMIT_HELP[name]} [{value}]")
    return "\n".join(lines)


def _fail(message: str) -> NoReturn:
    print(f"sandboxfs: error: {message}", file=sys.stderr)
    raise SystemExit(1)


def _expand(path: str) -> str:
    home = os.environ.get("HOME")
    if home and (path == "~" or path.startswith("~/")):
        path = home + path[1:]
    return os.path.abspath(path)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``sandboxfs`` command; returns the exit status."""
    argv = sys.argv[1:] if argv is None else argv
    try:
        args = parse_arguments(argv)
    except (UsageError, ValueError) as exc:
        print(f"sandboxfs: error: {exc}\n\n{help_text()}", file=sys.stderr)
        return 2
    if args.show_help:
        print(help_text())
        return 0
    if args.show_version:
        print(f"sandboxfs {__version__}")
        return 0
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    return serve(args)


def serve(args: Arguments) -> int:
    """Open the directories, then serve stdio until the client goes away."""
    try:
        probe_openat2()
    except Openat2Unavailable as exc:
        _fail(str(exc))
    roots = []
    for directory in args.directories:
        try:
            roots.append(Root.open(_expand(directory)))
        except FileNotFoundError:
            _fail(f"allowed directory {directory} does not exist")
        except NotADirectoryError:
            _fail(f"allowed directory {directory} is not a directory")
        except OSError as exc:
            _fail(f"cannot open allowed directory {directory}: {exc.strerror}")
    if args.confine_roots and not roots:
        log.warning("Warning: --confine-roots has no effect without command-line directories")
    access = AccessControl(AllowList.of(roots), confine=args.confine_roots)
    access.announce()
    options = ServerOptions(
        read_only=args.read_only,
        no_xdev=args.no_xdev,
        limits=args.limits,
        home=os.environ.get("HOME"),
        stall=Stall.from_env(os.environ),
    )
    closer = InputCloser()
    server = SandboxfsServer(options, access, closer)
    log.info("sandboxfs %s serving MCP on stdio", __version__)
    trio.run(
        lambda: serve_stdio(
            server.server,
            max_line=args.limits.line_bytes,
            versions=SUPPORTED_VERSIONS,
            closer=closer,
        )
    )
    return server.exit_code
