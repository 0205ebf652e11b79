"""Planted hard links and special files (FIFOs, sockets, devices)."""

from __future__ import annotations

import contextlib
import os
import socket
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Final

from sandboxfs.audit.cases.base import (
    CaseFn,
    case,
    each,
)
from sandboxfs.audit.harness import (
    CaseFailed,
    CaseSkipped,
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


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _socket(path: Path) -> None:
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(path))


def _endless_device(path: Path) -> None:
    """A character device that never ends, like /dev/zero (it is /dev/zero's numbers)."""
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 5))
    except PermissionError:
        raise CaseSkipped("no privilege to make a device node (mknod)") from None


#: The special files a read case each plants: (case name, what it is, how to make it).
_READABLE_SPECIALS: Final = (
    ("fifo", "a FIFO no one writes to", _fifo),
    ("socket", "a unix socket", _socket),
    ("endless-device", "a device that never ends (/dev/zero's numbers)", _endless_device),
)


def _special_read(name: str, what: str, make: Callable[[Path], None]) -> None:
    @case("special-files", f"read-{name}")
    async def run(s: Session, fx: Fixture) -> None:
        """Every reading tool on the special file: each answers (an error will do)
        within the timeout, and the server's memory stays bounded (the harness
        checks its peak after every case)."""
        make(fx.root / name)
        calls: list[tuple[str, dict[str, object]]] = [
            ("read_text_file", {"path": fx.rel(name)}),
            ("read_media_file", {"path": fx.rel(name)}),
            ("read_file", {"path": fx.rel(name)}),
            ("read_multiple_files", {"paths": [fx.rel(name), fx.rel("inside.txt")]}),
            ("read_text_file", {"path": fx.rel(name), "head": 1}),
            ("read_text_file", {"path": fx.rel(name), "tail": 1}),
        ]
        try:
            await each(s, calls)
        except CaseFailed as exc:
            raise CaseFailed(f"{what}: {exc}") from None


for _name, _what, _make in _READABLE_SPECIALS:
    _special_read(_name, _what, _make)


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
