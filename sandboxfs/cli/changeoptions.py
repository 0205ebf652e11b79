"""``--journal`` and ``--ask`` decided with the rest of the configuration.

A journal records changes, so it needs a server that makes some (not
``--read-only``) and directories of its own (client Roots alone could name the
journal itself); its bounds must parse.  ``--ask`` patterns must compile and
have changes to ask about.  Anything else is :class:`Refused` (exit 2).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, final

from sandboxfs.cli.arguments import Arguments, Refused
from sandboxfs.core.policy import Policy, PolicyError
from sandboxfs.fs.journalstore import DEFAULT_KEEP_SECONDS, DEFAULT_MAX_BYTES
from sandboxfs.fs.workspaces import parse_age

#: What --journal-max-bytes accepts: from 1 MiB to 1 PiB.
MAX_BYTES_RANGE: Final = (1 << 20, 1 << 50)


@final
@dataclass(frozen=True, slots=True)
class ChangeOptions:
    max_bytes: int = DEFAULT_MAX_BYTES
    keep_seconds: float = DEFAULT_KEEP_SECONDS
    ask: tuple[str, ...] = ()


def decide(args: Arguments, *, has_directories: bool) -> ChangeOptions:
    """The journal's bounds and the --ask patterns, or Refused naming the problem."""
    if args.journal is None:
        for option in ("--journal-max-bytes", "--journal-keep"):
            if option in args.given:
                raise Refused(f"{option} needs --journal DIR")
    elif args.read_only:
        raise Refused("--journal records changes, and a --read-only server makes none")
    elif not has_directories:
        raise Refused(
            "--journal needs command-line directories (or a --policy file's [[directory]] "
            "or --workspaces): client Roots alone could name the journal itself"
        )
    return ChangeOptions(_max_bytes(args), _keep(args), _ask(args))


def _max_bytes(args: Arguments) -> int:
    text = args.journal_max_bytes
    if text is None:
        return DEFAULT_MAX_BYTES
    low, high = MAX_BYTES_RANGE
    if not (text.isascii() and text.isdigit()) or not low <= int(text) <= high:
        raise Refused(f"--journal-max-bytes must be from {low} to {high} bytes, got {text[:40]!r}")
    return int(text)


def _keep(args: Arguments) -> float:
    if args.journal_keep is None:
        return DEFAULT_KEEP_SECONDS
    try:
        seconds = parse_age(args.journal_keep)
    except ValueError as exc:
        raise Refused(f"--journal-keep: {exc}") from None
    if seconds <= 0:
        raise Refused(f"--journal-keep must be longer than nothing, got {args.journal_keep!r}")
    return seconds


def _ask(args: Arguments) -> tuple[str, ...]:
    if not args.ask:
        return ()
    if args.read_only:
        raise Refused("--ask approves changes, and a --read-only server makes none")
    try:
        Policy(protect=tuple(args.ask))
    except PolicyError as exc:
        raise Refused(str(exc).replace("--protect", "--ask")) from None
    return tuple(args.ask)
