"""``--workspaces BASE`` at startup, and the ``sandboxfs workspaces BASE [--prune AGE]`` command.

The command lists the sessions (id, idle time, last use, size, whether a server
holds it) and the stores under BASE; ``--prune AGE`` removes the sessions idle
longer than AGE that no server holds, descriptor-relative and without following
a symlink (:func:`sandboxfs.fs.workspacebase.Base.prune`), and never a store.
Exit status: 0 done, 1 BASE cannot be opened or a session could not be removed,
2 the command line cannot be used.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Final, final

from sandboxfs.cli.arguments import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from sandboxfs.core.allowlist import AllowList, Root
from sandboxfs.core.chokepoint import Confinement
from sandboxfs.core.pathnames import relative_to
from sandboxfs.core.policy import OPEN, Policy
from sandboxfs.fs.workspacebase import Base, SessionLease, parse_age
from sandboxfs.session.sessionworkspace import WorkspaceSessions
from sandboxfs.tools.format import format_size

log = logging.getLogger("sandboxfs")

USAGE: Final = "usage: sandboxfs workspaces BASE [--prune AGE]   (AGE: e.g. 30m, 12h, 7d)"
HELP: Final = f"""{USAGE}

List the sessions under BASE (id, idle time, last use, size, whether a server
holds it) and the shared stores.  With --prune AGE, remove the sessions idle
longer than AGE that no server holds; stores are never pruned.

options:
  --prune AGE   remove sessions idle longer than AGE (s, m, h, d or w)
  -h, --help    show this help and exit

exit status:
  0  done
  1  BASE cannot be opened, or a session could not be removed
  2  the command line cannot be used"""


@final
class SetupError(Exception):
    """``--workspaces`` cannot be used as given; the message says why (exit 1)."""


def setup(
    base_root: Root,
    cli_roots: Sequence[Root],
    *,
    http: bool,
    token_required: bool,
    workspace_id: str | None,
    no_xdev: bool = False,
    policy: Policy = OPEN,
) -> tuple[WorkspaceSessions, SessionLease | None]:
    """The server's workspaces, and over stdio the lease of this process's session
    (``workspace_id``, already checked, else a fresh one)."""
    for root in cli_roots:
        if (
            relative_to(root.path, base_root.path) is not None
            or relative_to(base_root.path, root.path) is not None
        ):
            raise SetupError(
                f"allowed directory {root.given} overlaps --workspaces {base_root.given}: "
                "it would expose other sessions' directories; give directories outside BASE"
            )
    try:
        base = Base(base_root, Confinement(no_xdev=no_xdev), policy)
    except OSError as exc:
        raise SetupError(
            f"cannot lay out --workspaces {base_root.given}: {exc.strerror or exc}"
        ) from None
    sessions = WorkspaceSessions(base, AllowList.of(cli_roots), token_required=token_required)
    if http:
        return sessions, None
    try:
        lease = sessions.for_process(workspace_id)
    except OSError as exc:
        raise SetupError(f"cannot open the workspace session: {exc.strerror or exc}") from None
    log.info(
        "Workspace session %s: %s (resume it with --workspace-id %s)",
        lease.id,
        lease.root.path,
        lease.id,
    )
    return sessions, lease


def _idle(seconds: float) -> str:
    """An idle time, to the largest whole unit: ``45s``, ``12m``, ``3h``, ``8d``."""
    seconds = max(0, int(seconds))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _when(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def main(argv: Sequence[str]) -> int:  # noqa: PLR0911 - help, usage errors, each outcome
    """``sandboxfs workspaces BASE [--prune AGE]``; returns the exit status."""
    items = list(argv)
    if "-h" in items or "--help" in items:
        print(HELP)
        return EXIT_OK
    age: float | None = None
    if "--prune" in items:
        at = items.index("--prune")
        if at + 1 >= len(items):
            return _usage("--prune needs an age, e.g. 7d")
        try:
            age = parse_age(items[at + 1])
        except ValueError as exc:
            return _usage(str(exc))
        del items[at : at + 2]
    if len(items) != 1 or items[0].startswith("-"):
        return _usage("give exactly one BASE" if not items else f"unexpected {items[-1]!r}")
    given = os.path.abspath(items[0])
    try:
        base = Base(Root.open(given))
    except OSError as exc:
        print(
            f"sandboxfs: error: cannot open workspaces {items[0]}: {exc.strerror}", file=sys.stderr
        )
        return EXIT_FAILED
    now = time.time()
    if age is not None:
        report = base.prune(age, now=now)
        for name in report.removed:
            print(f"removed session {name}")
        for name in report.busy:
            print(f"kept session {name}: in use by a server")
        for name, reason in report.failed:
            print(f"sandboxfs: error: could not remove session {name}: {reason}", file=sys.stderr)
        print(
            f"{len(report.removed)} removed, {len(report.kept)} not idle long enough, "
            f"{len(report.busy)} in use; stores are never pruned"
        )
        return EXIT_FAILED if report.failed else EXIT_OK
    sessions = base.sessions()
    print(f"sessions in {base.path}/sessions: {len(sessions)}")
    for s in sessions:
        flag = "  in use" if s.in_use else ""
        print(
            f"  {s.name}  idle {_idle(now - s.usage.newest)}  last used {_when(s.usage.newest)}"
            f"  {format_size(s.usage.size)}{flag}"
        )
    stores = base.stores_list()
    print(f"stores in {base.path}/stores: {len(stores)}")
    for st in stores:
        print(f"  {st.name}  {format_size(st.usage.size)}  modified {_when(st.usage.newest)}")
    return EXIT_OK


def _usage(problem: str) -> int:
    print(f"sandboxfs workspaces: error: {problem}\n{USAGE}", file=sys.stderr)
    return EXIT_USAGE
