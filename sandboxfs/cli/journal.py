"""``--journal DIR`` at startup, and the operator's ``sandboxfs journal DIR`` command.

At startup the journal directory is checked to lie outside every allowed
directory (and outside ``--workspaces`` BASE), and to hold none of them: a
directory that is both would let the agent reach the journal, or Landlock's
write right on the journal reach a read-only directory.  It is made ``0700`` if
missing and opened once; everything after that goes through its descriptor.

The command reviews and undoes changes while no server runs, or while one does
(it holds the journal's lock while it undoes, as a server does):

    sandboxfs journal DIR [list] [--path PATH] [--session S] [--limit N] [--diff]
    sandboxfs journal DIR show ID
    sandboxfs journal DIR undo (ID... | --count N | --back-to ID) [--dry-run]

Exit status: 0 done, 1 the journal cannot be used or an undo was refused, 2 a
bad command line.
"""

from __future__ import annotations

import argparse
import logging
import os
import secrets
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from sandboxfs.cli.config import Config
from sandboxfs.cli.exits import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from sandboxfs.core.allowlist import AllowList, Root
from sandboxfs.core.errors import SandboxError
from sandboxfs.core.pathnames import normalize_absolute, relative_to
from sandboxfs.core.resolver import Resolver
from sandboxfs.fs import undoing
from sandboxfs.fs.journalobjects import JournalError
from sandboxfs.fs.journals import Journals
from sandboxfs.fs.journalstore import (
    MARKER,
    SESSIONS,
    JournalStore,
)
from sandboxfs.fs.recording import Recording
from sandboxfs.fs.sandbox import Sandbox
from sandboxfs.fs.workspaces import SessionLease
from sandboxfs.tools import changes

OPERATOR = "operator"

log = logging.getLogger("sandboxfs")


class SetupError(Exception):
    """``--journal`` cannot be used as given (exit 1)."""


def _real(path: str) -> str:
    home = os.environ.get("HOME")
    if home and (path == "~" or path.startswith("~/")):
        path = home + path[1:]
    return os.path.realpath(os.path.abspath(path))


def check_apart(journal: str, roots: Sequence[Root], base: Root | None) -> None:
    """Refuse a journal inside, or holding, an allowed directory or the workspaces BASE."""
    for root in [*roots, *([base] if base is not None else [])]:
        for name in {root.path, normalize_absolute(root.given)}:
            if relative_to(journal, name) is not None:
                raise SetupError(
                    f"--journal {journal} lies inside the allowed directory {root.given}: the "
                    "agent could read it; give a directory outside every allowed directory"
                )
            if relative_to(name, journal) is not None:
                raise SetupError(
                    f"--journal {journal} holds the allowed directory {root.given}; give a "
                    "directory outside every allowed directory"
                )


def setup(config: Config, roots: Sequence[Root], base: Root | None) -> Journals | None:
    """The server's journal(s), made and opened; None without ``--journal``.  Raises
    SetupError with what is wrong."""
    if config.journal is None:
        return None
    journal = _real(config.journal)
    check_apart(journal, roots, base)
    try:
        os.makedirs(journal, mode=0o700, exist_ok=True)
        root = Root.open(journal)
    except OSError as exc:
        raise SetupError(f"cannot open --journal {config.journal}: {exc.strerror or exc}") from None
    check_apart(root.path, roots, base)  # what it really is, once opened
    max_bytes, keep = config.journal_max_bytes, config.journal_keep
    try:
        journals = Journals(
            root, max_bytes=max_bytes, keep_seconds=keep, per_session=base is not None
        )
        if journals.main is not None:  # patches a crash interrupted: taken back now
            unjournaled = Sandbox(Resolver(AllowList.of(roots))).ctx
            for line in journals.recover_once(journals.main, unjournaled):
                log.warning("Change journal %s: %s", journals.main.path, line)
    except (OSError, JournalError, SandboxError) as exc:
        raise SetupError(f"cannot use --journal {config.journal}: {exc}") from None
    return journals


def stdio_session(lease: SessionLease | None) -> str:
    """What the journal calls a stdio server's session: its workspace, else this process."""
    return lease.id if lease is not None else f"stdio-{secrets.token_hex(4)}"


# -- the command -----------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sandboxfs journal",
        description="Review and undo the changes a sandboxfs server recorded with --journal "
        "DIR. Works while no server runs; a running server's changes wait while an undo "
        "is made.",
    )
    parser.add_argument("dir", metavar="DIR", help="the journal directory (--journal DIR)")
    sub = parser.add_subparsers(dest="command")
    listing = sub.add_parser("list", help="the changes, newest first (the default)")
    listing.add_argument("--path", help="only changes to this absolute path or below it")
    listing.add_argument("--session", help="only changes by this session (or client name)")
    listing.add_argument("--limit", type=int, default=50, help="most changes to show [50]")
    listing.add_argument("--diff", action="store_true", help="show each change as a diff")
    show = sub.add_parser("show", help="one change, with its diff")
    show.add_argument("id", type=int)
    undo = sub.add_parser("undo", help="undo changes (each file must still hold what they left)")
    undo.add_argument("ids", type=int, nargs="*", metavar="ID", help="undo these changes")
    undo.add_argument("--count", type=int, help="undo the last N changes")
    undo.add_argument("--back-to", type=int, metavar="ID", help="undo ID and every later one")
    undo.add_argument("--dry-run", action="store_true", help="check, but change nothing")
    return parser


def _fail(message: str) -> NoReturn:
    print(f"sandboxfs journal: error: {message}", file=sys.stderr)
    raise SystemExit(EXIT_FAILED)


def main(argv: Sequence[str]) -> int:
    """``sandboxfs journal DIR ...``; returns the exit status."""
    parser = _parser()
    try:
        options = parser.parse_args(list(argv))
    except SystemExit as exc:
        return EXIT_OK if exc.code == 0 else EXIT_USAGE
    try:
        store = _open(options.dir)
    except (OSError, JournalError) as exc:
        _fail(str(getattr(exc, "strerror", None) or exc))
    command = options.command or "list"
    try:
        if command == "undo":
            return _undo(store, options)
        visible = changes.everything
        if command == "show":
            shown = changes.select_shown(store, visible, entry=options.id)
            if not shown:
                _fail(f"change #{options.id} is not in the journal")
            diff = True
        else:
            where = None
            if options.path:
                path = normalize_absolute(_real(options.path))
                where = _root_of(store, path)
            shown = changes.select_shown(store, visible, path=where, session=options.session)
            shown = shown[: max(1, options.limit)]
            diff = options.diff
        text = changes.render(shown, store, _operator_reader(shown), visible, diff=diff)
    except JournalError as exc:
        _fail(str(exc))
    print(text or "No changes recorded.")
    return EXIT_OK


def _open(directory: str) -> JournalStore:
    path = _real(directory)
    root = Root.open(path)
    try:
        return JournalStore(root, create=False)
    except JournalError:
        sessions = os.path.join(path, SESSIONS)
        if not os.path.exists(os.path.join(path, MARKER)) and os.path.isdir(sessions):
            names = sorted(os.listdir(sessions))
            raise JournalError(
                f"{directory} holds one journal per workspace session; name one: sandboxfs "
                f"journal {directory}/{SESSIONS}/ID (sessions: {', '.join(names) or 'none'})"
            ) from None
        raise


def _root_of(store: JournalStore, path: str) -> tuple[str, tuple[str, ...]] | None:
    """The recorded allowed directory ``path`` lies in, and the names below it."""
    for item in store.index():
        record = store.record(item.id) or {}
        for step in record.get("steps", []):
            for where in (step, step.get("to")):
                if where is None:
                    continue
                below = relative_to(path, str(where["root"]))
                if below is not None:
                    return str(where["root"]), below
    return ("", ("\0",))  # in no recorded directory: matches nothing


def _operator_reader(shown: list[changes.Shown]) -> changes.Reader:
    """Reads what is in place now through the directories the changes were made in."""
    return changes.sandbox_reader(_operator_sandbox([s.record for s in shown], strict=False))


def _undo(store: JournalStore, options: argparse.Namespace) -> int:
    given = sum(bool(x) for x in (options.ids, options.count, options.back_to))
    if given != 1:
        print(
            "sandboxfs journal: error: undo needs IDs, --count N or --back-to ID (one)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    with store.locked():
        undone = store.undone()
        live = [i for i in store.index() if i.state == "done" and i.id not in undone]
        if options.ids:
            ids = sorted(set(options.ids), reverse=True)
            missing = [i for i in ids if i not in {item.id for item in live}]
            if missing:
                _fail(f"change #{missing[0]} is not in the journal, or is already undone")
        elif options.count:
            ids = [i.id for i in live if not i.undoes][: options.count]
        else:
            ids = [i.id for i in live if not i.undoes and i.id >= options.back_to]
        if not ids:
            _fail("there is no change to undo")
        records = [store.record(i) for i in ids]
        if any(r is None for r in records):
            _fail("a change to undo is no longer in the journal")
        chosen = [r for r in records if r is not None]
        sandbox = _operator_sandbox(chosen)
        recording = Recording(store, tool="sandboxfs journal undo", session=OPERATOR)
        recording.undoes = tuple(ids)
        try:
            if options.dry_run:
                plan = undoing.check(sandbox.ctx, chosen)
                print(f"Would undo {', '.join(f'#{i}' for i in ids)}: {len(plan)} steps")
                return EXIT_OK
            steps = undoing.undo(sandbox.recording(recording).ctx, store, chosen)
        except SandboxError as exc:
            recording.finish()  # whatever was undone before the failure is recorded
            _fail(str(exc))
        entry = recording.finish()
    print(f"Undid {', '.join(f'#{i}' for i in ids)}: {steps} steps (recorded as #{entry})")
    return EXIT_OK


def _operator_sandbox(records: list[dict[str, Any]], *, strict: bool = True) -> Sandbox:
    """A sandbox over the directories the records were made in, with no policy: the
    operator's undo may do what the operator may.  A directory that cannot be opened
    stops an undo (``strict``); a review does without it."""
    paths: list[str] = []
    for record in records:
        for step in record.get("steps", []):
            for where in (step, step.get("to")):
                if where is not None and str(where["root"]) not in paths:
                    paths.append(str(where["root"]))
    roots = []
    for path in paths:
        try:
            roots.append(Root.open(path))
        except OSError as exc:
            if strict:
                _fail(f"cannot open {path}, where a change to undo was made: {exc.strerror}")
    return Sandbox(Resolver(AllowList.of(roots)))
