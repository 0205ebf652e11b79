"""Planted hard links and special files (FIFOs, sockets, devices)."""

from __future__ import annotations

import contextlib
import os
import socket
import stat

from sandboxfs.audit.cases.base import (
    CaseFn,
    case,
    each,
)
from sandboxfs.audit.harness import (
    Fixture,
    Session,
)

# -- hard links ----------------------------------------------------------------------------------


def _through_planted_link(tool: str, arguments: dict[str, object]) -> CaseFn:
    """A case: ``tool`` on a name inside that is a hard link to an outside file must
    not change the outside file (a write must replace the name, not the inode)."""

    async def case_fn(s: Session, fx: Fixture) -> None:
        os.link(fx.outside / "secret.txt", fx.root / "linked")
        await s.call(tool, path=fx.rel("linked"), **arguments)

    return case_fn


_PLANTED: list[tuple[str, dict[str, object]]] = [
    ("write_file", {"content": "pwned"}),
    ("append_file", {"content": "pwned"}),
    ("edit_file", {"edits": [{"oldText": "CANARY", "newText": "PWNED"}]}),
]
for _tool, _arguments in _PLANTED:
    case("hard-links", f"{_tool}-through-planted-link", hard_links=True)(
        _through_planted_link(_tool, _arguments)
    )


# -- special files -----------------------------------------------------------------------------


def _special(fx: Fixture) -> list[str]:
    names = ["fifo"]
    os.mkfifo(fx.root / "fifo")
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(fx.root / "sock"))
    names.append("sock")
    with contextlib.suppress(PermissionError):
        os.mknod(fx.root / "zero", stat.S_IFCHR | 0o666, os.makedev(1, 5))  # /dev/zero
        names.append("zero")
    return names


@case("special-files", "reads-do-not-hang")
async def _special_reads(s: Session, fx: Fixture) -> None:
    for name in _special(fx):
        for tool in ("read_text_file", "read_media_file", "read_file"):
            await s.call(tool, path=fx.rel(name))
        await s.call("read_multiple_files", paths=[fx.rel(name), fx.rel("inside.txt")])
        await s.call("read_text_file", path=fx.rel(name), head=1)


@case("special-files", "writes-do-not-hang")
async def _special_writes(s: Session, fx: Fixture) -> None:
    """Each write tool the server has, on each special file (a missing tool is not
    a reason to leave the others untested)."""
    calls: list[tuple[str, dict[str, object]]] = []
    for name in _special(fx):
        calls += [
            ("write_file", {"path": fx.rel(name), "content": "x"}),
            ("append_file", {"path": fx.rel(name), "content": "x"}),
            ("edit_file", {"path": fx.rel(name), "edits": [{"oldText": "a", "newText": "b"}]}),
            ("copy_file", {"source": fx.rel(name), "destination": fx.rel(f"{name}-copy")}),
        ]
    await each(s, calls)


@case("special-files", "listings-do-not-hang")
async def _special_listings(s: Session, fx: Fixture) -> None:
    _special(fx)
    for tool, extra in (
        ("list_directory_with_sizes", {}),
        ("directory_tree", {}),
        ("search_files", {"pattern": "**/*"}),
        ("get_file_info", {}),
    ):
        await s.call(
            tool, path=str(fx.root) if tool != "get_file_info" else fx.rel("fifo"), **extra
        )
    if s.has("grep_files"):
        await s.call("grep_files", pattern="x", path=str(fx.root))
