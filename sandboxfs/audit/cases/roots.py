"""Roots: a 2025-era client's Roots may narrow what the command line allows, never
widen it.

Each case starts a fresh copy of the server as a client that declares Roots
whose URIs lead outside the command-line directory (the outside directory and the
directory holding both), at ``initialize`` (the server's first ``roots/list``) or
later, after ``notifications/roots/list_changed``, then tries to read and write
outside.  A server that replaces its directories with the client's Roots serves
them; one that only narrows refuses.
"""

from __future__ import annotations

import warnings

from sandboxfs.audit.cases.base import case
from sandboxfs.audit.harness import (
    CaseFailed,
    CaseSkipped,
    ClientRoots,
    Fixture,
    Session,
    in_fresh_server,
)
from sandboxfs.audit.verdicts import Trials


def _widening(fx: Fixture) -> list[str]:
    """Roots that reach outside: the case's outside directory, and the directory that
    holds both the allowed one and the outside ones."""
    return [fx.outside.as_uri(), fx.base.as_uri()]


async def _attack(fresh: Session, fx: Fixture, when: str) -> None:
    """Read and write outside, a round of calls per attempt, until something gets
    through or the budget's rounds are made (a server may bring the Roots in force a
    few requests later: the reference validates them asynchronously)."""
    secret = str(fx.outside / "secret.txt")
    planted = fx.outside / "written-through-roots.txt"
    planned = fresh.budget.roots_rounds
    for attempt in range(1, planned + 1):
        got_through = None
        read = await fresh.call("read_text_file", path=secret)
        if fx.token in read.raw:
            got_through = f"read_text_file read {secret}"
        elif fresh.has("write_file"):
            await fresh.call("write_file", path=str(planted), content="through Roots\n")
            if planted.exists():
                planted.unlink()
                got_through = f"write_file wrote {planted}"
        if got_through:
            fresh.trials = Trials(attempt, planned, escaped=True)
            raise CaseFailed(f"{when}, {got_through}, outside the directory")
        if fresh.has("list_allowed_directories"):
            await fresh.call("list_allowed_directories")
    fresh.trials = Trials(planned, planned, escaped=False)


def _roots_case(name: str, later: bool) -> None:
    @case("roots", name, probabilistic=True)
    async def run(s: Session, fx: Fixture) -> None:
        if s.era == "2026":
            raise CaseSkipped("2026-07-28 has no Roots")
        served = fx.base / "root"  # the command-line directory
        roots = ClientRoots([served.as_uri()] if later else _widening(fx))

        async def body(fresh: Session) -> None:
            if not await roots.asked_at_least(1, s.timeout):
                raise CaseSkipped("the server never asked for the client's Roots (roots/list)")
            when = "with the client's Roots leading outside"
            if later:
                await fresh.call("list_directory", path=str(fx.root))  # the first answer holds
                roots.uris = _widening(fx)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # the SDK: deprecated at 2026-07-28
                    await fresh.client.send_roots_list_changed()
                if not await roots.asked_at_least(2, s.timeout):
                    raise CaseSkipped("the server did not ask for Roots again on list_changed")
                when = "after roots/list_changed to Roots leading outside"
            await _attack(fresh, fx, when)

        await in_fresh_server(s, body, roots=roots)


_roots_case("client-roots-at-initialize-cannot-widen", later=False)
_roots_case("roots-list-changed-cannot-widen", later=True)
