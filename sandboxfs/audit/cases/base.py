"""The case registry and what the categories share."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final

from sandboxfs.audit.harness import (
    CaseFailed,
    CaseSkipped,
    Fixture,
    Reply,
    Session,
)

CaseFn = Callable[[Session, Fixture], Awaitable[None]]


@dataclass(frozen=True)
class Case:
    category: str
    name: str
    run: CaseFn
    #: Prepares what the case needs outside, before the outside is snapshotted.
    setup: Callable[[Fixture], None] | None = None
    #: A hard link planted inside is a real inside name of an outside file: reading
    #: its content there is expected, so replies are not checked for canary content.
    reads_inside_names_of_outside_files: bool = False
    #: Its verdict rests on attempts that each may or may not get through (a race):
    #: it attacks until the first escape or its budget, and says what that proves.
    probabilistic: bool = False
    #: It runs alone among the cases of its kind (races: each has both cores' worth
    #: of attacker and server to itself, so attempts weigh the same in every run).
    exclusive: bool = False

    @property
    def id(self) -> str:
        return f"{self.category}/{self.name}"


CASES: list[Case] = []


def case(
    category: str,
    name: str,
    setup: Callable[[Fixture], None] | None = None,
    *,
    hard_links: bool = False,
    probabilistic: bool = False,
    exclusive: bool = False,
) -> Callable[[CaseFn], CaseFn]:
    def register(fn: CaseFn) -> CaseFn:
        CASES.append(Case(category, name, fn, setup, hard_links, probabilistic, exclusive))
        return fn

    return register


def refused(reply: Reply, what: str) -> None:
    if not reply.error:
        raise CaseFailed(f"{what} was served: {reply.text[:160]!r}")


def links(fx: Fixture) -> None:
    """Symlinks inside the case root that lead outside in every common way."""
    secret = fx.outside / "secret.txt"
    (fx.root / "abs-file").symlink_to(secret)
    depth = len(fx.root.relative_to(fx.base).parts)
    (fx.root / "rel-file").symlink_to("../" * depth + f"outside/{fx.outside.name}/secret.txt")
    (fx.root / "abs-dir").symlink_to(fx.outside / "dir")
    (fx.root / "chain").symlink_to("abs-file")
    (fx.root / "proc").symlink_to(f"/proc/self/root{secret}")
    (fx.root / "dangling-out").symlink_to(fx.outside / "created-through-link.txt")
    (fx.root / "up").symlink_to("../" * depth)


READ_TARGETS: Final = ("abs-file", "rel-file", "chain", "proc", "abs-dir/secret.txt", "up/outside")


def size_pattern(size: int) -> re.Pattern[str]:
    """``size`` reported as a size: ``size: N``, ``"size":N`` or ``N.NN KB``."""
    return re.compile(rf"size\W{{1,4}}{size}\b|\b{size / 1024:.2f} KB", re.IGNORECASE)


async def each(s: Session, calls: list[tuple[str, dict[str, object]]]) -> None:
    """Make each call whose tool the server has; skip only if it has none of them."""
    present = [(tool, arguments) for tool, arguments in calls if s.has(tool)]
    if not present:
        raise CaseSkipped(f"the server has none of {', '.join(sorted({t for t, _ in calls}))}")
    for tool, arguments in present:
        await s.call(tool, **arguments)
