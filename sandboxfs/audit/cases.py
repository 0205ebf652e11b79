"""The audit's attack cases, by category.

Each case builds what it needs under its fixture (``fx.root`` is inside the
server's allowed directory, ``fx.outside`` is not), makes tool calls through
``s`` and raises :class:`CaseFailed` when the server does something it must
not.  The harness then checks, for every case, that nothing outside changed,
that no reply leaked, and that the server still answers.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import stat
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import trio

from sandboxfs.audit.attacker import AttackerProcess, Tally, prepare
from sandboxfs.audit.harness import (
    CANARY_SIZE,
    CaseFailed,
    CaseSkipped,
    Fixture,
    Reply,
    Session,
)
from sandboxfs.audit.rawwire import RawServer, handshake, raw_server, request

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

    @property
    def id(self) -> str:
        return f"{self.category}/{self.name}"


CASES: list[Case] = []

#: How long a race case keeps attacking when nothing escapes: at most this many tool
#: calls and this many seconds (it stops at the first escape).
RACE_CALLS: Final = 2000
RACE_SECONDS: Final = 30.0


def case(
    category: str,
    name: str,
    setup: Callable[[Fixture], None] | None = None,
    *,
    hard_links: bool = False,
) -> Callable[[CaseFn], CaseFn]:
    def register(fn: CaseFn) -> CaseFn:
        CASES.append(Case(category, name, fn, setup, hard_links))
        return fn

    return register


def _prepared(kind: str) -> Callable[[Fixture], None]:
    return lambda fx: prepare(kind, fx.root, fx.outside, fx.canary)


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


# -- path syntax -----------------------------------------------------------------------


@case("path-syntax", "relative-dotdot")
async def _dotdot(s: Session, fx: Fixture) -> None:
    depth = len(fx.root.relative_to(fx.base / "root").parts)
    path = "../" * (depth + 1) + f"outside/{fx.outside.name}/secret.txt"
    refused(await s.call("read_text_file", path=fx.rel(path)), "a ../ path out of the root")
    refused(await s.call("read_text_file", path=path), "a relative ../ path")


@case("path-syntax", "absolute-outside")
async def _absolute(s: Session, fx: Fixture) -> None:
    refused(await s.call("read_text_file", path=str(fx.outside / "secret.txt")), "an outside path")
    refused(await s.call("list_directory", path=str(fx.outside)), "an outside directory")


@case("path-syntax", "prefix-sibling")
async def _prefix_sibling(s: Session, fx: Fixture) -> None:
    sibling = fx.base / f"root-evil-{fx.root.name}"
    sibling.mkdir()
    (sibling / "secret.txt").write_bytes(fx.canary)
    refused(await s.call("read_text_file", path=str(sibling / "secret.txt")), "a prefix sibling")
    refused(await s.call("list_directory", path=str(sibling)), "a prefix sibling directory")
    reply = await s.call("write_file", path=str(sibling / "new.txt"), content="escaped")
    if (sibling / "new.txt").exists():
        raise CaseFailed(f"wrote into a prefix sibling directory ({reply.text[:80]!r})")


@case("path-syntax", "quote-and-space-siblings")
async def _quote_siblings(s: Session, fx: Fixture) -> None:
    root = fx.base / "root"
    for suffix in ("'", " ", '"'):
        sibling = Path(str(root) + suffix)
        sibling.mkdir(exist_ok=True)
        (sibling / f"secret-{fx.root.name}.txt").write_bytes(fx.canary)
        refused(await s.call("list_directory", path=str(sibling)), f"the sibling {sibling.name!r}")
        await s.call("write_file", path=str(sibling / "escaped.txt"), content="escaped")
        if (sibling / "escaped.txt").exists():
            (sibling / "escaped.txt").unlink()
            raise CaseFailed(f"wrote into the sibling directory {sibling.name!r}")


@case("path-syntax", "dotdot-inside-absolute")
async def _dotdot_absolute(s: Session, fx: Fixture) -> None:
    depth = len(fx.root.relative_to(fx.base).parts)
    path = fx.rel(*[".."] * depth, "outside", fx.outside.name, "secret.txt")
    refused(await s.call("read_text_file", path=path), "root/../outside")


@case("path-syntax", "nul-byte")
async def _nul(s: Session, fx: Fixture) -> None:
    refused(await s.call("read_text_file", path=fx.rel("inside.txt\0.png")), "a path with NUL")


@case("path-syntax", "very-long-path")
async def _long(s: Session, fx: Fixture) -> None:
    await s.call("read_text_file", path=fx.rel("a" * 300, *["b" * 200] * 40))


@case("path-syntax", "encoded-and-backslash")
async def _encoded(s: Session, fx: Fixture) -> None:
    for path in ("%2e%2e/%2e%2e/outside", "..\\..\\outside\\secret.txt", "file:///etc/passwd"):
        await s.call("read_text_file", path=fx.rel(path))


# -- symlinks: every reading tool ------------------------------------------------------------


def _reading(tool: str, build: Callable[[str], dict[str, object]]) -> None:
    @case("symlinks", f"read-{tool}")
    async def run(s: Session, fx: Fixture) -> None:
        links(fx)
        for target in READ_TARGETS:
            reply = await s.call(tool, **build(fx.rel(target)))
            if tool == "read_multiple_files":
                continue  # per-file errors are inline; the leak check covers content
            if tool == "get_file_info":
                # Describing the link itself is fine; describing its outside target is not.
                if not reply.error and _size_pattern(CANARY_SIZE).search(reply.text):
                    raise CaseFailed(f"get_file_info through {target} described the outside file")
                continue
            refused(reply, f"{tool} through {target}")


_reading("read_text_file", lambda p: {"path": p})
_reading("read_file", lambda p: {"path": p})
_reading("read_media_file", lambda p: {"path": p})
_reading("read_multiple_files", lambda p: {"paths": [p]})
_reading("get_file_info", lambda p: {"path": p})


@case("symlinks", "list-directory-through-link")
async def _list_link(s: Session, fx: Fixture) -> None:
    links(fx)
    refused(await s.call("list_directory", path=fx.rel("abs-dir")), "listing an outside dir")
    refused(await s.call("list_directory", path=fx.rel("up")), "listing through up/")


@case("symlinks", "walks-never-follow-out")
async def _walks(s: Session, fx: Fixture) -> None:
    links(fx)
    marker = "only-outside.txt"
    for tool, extra in (
        ("directory_tree", {}),
        ("search_files", {"pattern": "**/*"}),
        ("list_directory_with_sizes", {}),
    ):
        reply = await s.call(tool, path=str(fx.root), **extra)
        if marker in reply.raw:
            raise CaseFailed(f"{tool} listed a name from outside")
    if s.has("grep_files"):
        await s.call("grep_files", pattern="CANARY", path=str(fx.root))


# -- symlinks: every writing tool ---------------------------------------------------------------


@case("symlinks", "write-through-links")
async def _write_links(s: Session, fx: Fixture) -> None:
    links(fx)
    for target in ("abs-file", "rel-file", "chain", "abs-dir/new.txt", "dangling-out"):
        await s.call("write_file", path=fx.rel(target), content="pwned")


@case("symlinks", "append-through-links")
async def _append_links(s: Session, fx: Fixture) -> None:
    links(fx)
    for target in ("abs-file", "rel-file", "abs-dir/new.txt", "dangling-out"):
        await s.call("append_file", path=fx.rel(target), content="pwned")


@case("symlinks", "edit-through-links")
async def _edit_links(s: Session, fx: Fixture) -> None:
    links(fx)
    edit = [{"oldText": "CANARY", "newText": "PWNED"}]
    for target in ("abs-file", "rel-file", "chain"):
        await s.call("edit_file", path=fx.rel(target), edits=edit)


@case("symlinks", "copy-from-links")
async def _copy_from(s: Session, fx: Fixture) -> None:
    links(fx)
    for i, target in enumerate(("abs-file", "rel-file", "chain")):
        await s.call("copy_file", source=fx.rel(target), destination=fx.rel(f"copy{i}"))


@case("symlinks", "move-links")
async def _move_links(s: Session, fx: Fixture) -> None:
    links(fx)
    await s.call("move_file", source=fx.rel("abs-dir/secret.txt"), destination=fx.rel("stolen"))
    await s.call("move_file", source=fx.rel("abs-file"), destination=fx.rel("moved-link"))


# -- destination-side attacks -------------------------------------------------------------------


@case("destination", "write-into-link-dir")
async def _dest_write(s: Session, fx: Fixture) -> None:
    links(fx)
    await s.call("write_file", path=fx.rel("abs-dir", "planted.txt"), content="pwned")
    await s.call("write_file", path=fx.rel("up", "outside", "planted.txt"), content="pwned")


@case("destination", "mkdir-through-links")
async def _dest_mkdir(s: Session, fx: Fixture) -> None:
    links(fx)
    await s.call("create_directory", path=fx.rel("abs-dir", "made"))
    await s.call("create_directory", path=fx.rel("dangling-out", "made"))
    await s.call("create_directory", path=fx.rel("up", "outside", "made"))


@case("destination", "move-into-link-dir")
async def _dest_move(s: Session, fx: Fixture) -> None:
    links(fx)
    await s.call("move_file", source=fx.rel("inside.txt"), destination=fx.rel("abs-dir", "m.txt"))
    (fx.root / "inside.txt").write_bytes(b"inside\n")
    await s.call("move_file", source=fx.rel("inside.txt"), destination=fx.rel("dangling-out"))


@case("destination", "copy-into-link-dir")
async def _dest_copy(s: Session, fx: Fixture) -> None:
    links(fx)
    await s.call("copy_file", source=fx.rel("inside.txt"), destination=fx.rel("abs-dir", "c.txt"))
    await s.call("copy_file", source=fx.rel("inside.txt"), destination=fx.rel("dangling-out"))


@case("destination", "delete-through-links")
async def _dest_delete(s: Session, fx: Fixture) -> None:
    links(fx)
    if not s.has("delete_file"):
        raise CaseSkipped("the server has no delete_file tool")
    await s.call("delete_file", path=fx.rel("abs-dir", "secret.txt"))
    await s.call("delete_file", path=fx.rel("abs-dir"), recursive=True)
    await s.call("delete_file", path=fx.rel("up", "outside"), recursive=True)


@case("destination", "write-to-the-root-itself")
async def _dest_root_itself(s: Session, fx: Fixture) -> None:
    """A write naming the allowed directory itself ("", ".", its own path) must not
    leave anything next to it: a temporary file beside the root is outside."""
    served_root = fx.base / "root"
    before = set(os.listdir(fx.base))
    for path in ("", ".", str(served_root), str(served_root) + "/"):
        await s.call("write_file", path=path, content="written at the root itself\n")
    stray = sorted(set(os.listdir(fx.base)) - before)
    for name in stray:
        with contextlib.suppress(OSError):
            (fx.base / name).unlink()
    if stray:
        raise CaseFailed(f"write_file of the root itself left {stray[0]!r} next to the root")
    if not served_root.is_dir():
        raise CaseFailed("write_file replaced the allowed directory itself")


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
    await _each(s, calls)


async def _each(s: Session, calls: list[tuple[str, dict[str, object]]]) -> None:
    """Make each call whose tool the server has; skip only if it has none of them."""
    present = [(tool, arguments) for tool, arguments in calls if s.has(tool)]
    if not present:
        raise CaseSkipped(f"the server has none of {', '.join(sorted({t for t, _ in calls}))}")
    for tool, arguments in present:
        await s.call(tool, **arguments)


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


# -- resource exhaustion ----------------------------------------------------------------------


def _sparse(fx: Fixture) -> str:
    with (fx.root / "sparse.log").open("wb") as f:
        f.truncate(1 << 40)  # 1 TiB, no blocks
    return fx.rel("sparse.log")


@case("resource-exhaustion", "sparse-1tib-whole-read")
async def _sparse_whole(s: Session, fx: Fixture) -> None:
    await s.call("read_text_file", path=_sparse(fx))


@case("resource-exhaustion", "sparse-1tib-head-and-tail")
async def _sparse_head(s: Session, fx: Fixture) -> None:
    path = _sparse(fx)
    await s.call("read_text_file", path=path, head=5)
    await s.call("read_text_file", path=path, tail=5)


@case("resource-exhaustion", "sparse-1tib-media")
async def _sparse_media(s: Session, fx: Fixture) -> None:
    await s.call("read_media_file", path=_sparse(fx))


@case("resource-exhaustion", "deep-tree")
async def _deep(s: Session, fx: Fixture) -> None:
    fd = os.open(fx.root, os.O_PATH | os.O_DIRECTORY)
    try:
        for _ in range(400):  # past sandboxfs's 256-level cap; Python's tools still cope
            os.mkdir("d", dir_fd=fd)
            inner = os.open("d", os.O_PATH | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = inner
    finally:
        os.close(fd)
    # A slow answer is not the weakness looked for here (a crash or a hang is): on a
    # loaded machine the reference takes 10-20 s for this tree, so allow four timeouts.
    timeout, s.timeout = s.timeout, 4 * s.timeout
    try:
        await s.call("directory_tree", path=str(fx.root))
        await s.call("search_files", path=str(fx.root), pattern="**/x")
    finally:
        s.timeout = timeout


@case("resource-exhaustion", "symlink-loop")
async def _loop(s: Session, fx: Fixture) -> None:
    (fx.root / "loop-a").symlink_to("loop-b")
    (fx.root / "loop-b").symlink_to("loop-a")
    refused(await s.call("read_text_file", path=fx.rel("loop-a")), "a symlink loop")
    await s.call("write_file", path=fx.rel("loop-a"), content="x")
    await s.call("search_files", path=str(fx.root), pattern="**/*")


# -- races with an attacker process ----------------------------------------------------------


async def _race(
    kind: str, s: Session, fx: Fixture, calls: list[tuple[str, dict[str, object]]]
) -> None:
    """Call the tools in turn while the ``kind`` attacker changes the tree, until an
    escape is seen (outside content in a reply, or an outside file changed) or the
    bound (:data:`RACE_CALLS` calls, :data:`RACE_SECONDS`) is reached.  An attacker
    that made no change proves nothing: the case then fails as an error."""
    if not any(s.has(tool) for tool, _ in calls):
        raise CaseSkipped(f"the server has none of {', '.join(sorted({t for t, _ in calls}))}")
    before = _outside_state(fx.outside)
    # Through a planted hard link the outside content is the inside file's: seeing it
    # is no escape (changing it is, and the outside state shows that).
    token = None if kind == "plant-hardlink" else fx.token
    attacker = await trio.to_thread.run_sync(AttackerProcess, kind, fx.root, fx.outside)
    made = 0
    escaped = False
    try:
        deadline = trio.current_time() + RACE_SECONDS
        for i in range(RACE_CALLS):
            tool, arguments = calls[i % len(calls)]
            if not s.has(tool):
                continue
            reply = await s.call(tool, **json.loads(json.dumps(arguments).replace("{i}", str(i))))
            made += 1
            if (token is not None and token in reply.raw) or _outside_state(fx.outside) != before:
                escaped = True
                break
            if trio.current_time() > deadline:
                break
    finally:
        tally = await trio.to_thread.run_sync(_stopped, attacker)
    moved = fx.outside / "moved-d"
    if moved.exists():  # the attacker stopped mid-move: put it back for the checks
        moved.rename(fx.root / "d")
    if tally.swaps == 0:
        raise CaseFailed(f"the {kind} attacker made no change in {made} calls: nothing was tested")
    s.notes.append(
        f"{'escaped' if escaped else 'held'} after {made} calls against {tally.swaps} changes"
    )


def _outside_state(outside: Path) -> dict[str, tuple[int, int, int]]:
    """Every entry below ``outside`` with its mode, size and mtime, read while the
    attacker may be moving things: what vanishes meanwhile is left out, and the
    directory the attacker itself moves out and back (``moved-d``) is not looked at."""
    state: dict[str, tuple[int, int, int]] = {}
    for directory, dirs, files in os.walk(outside):
        dirs[:] = [d for d in dirs if not (directory == str(outside) and d == "moved-d")]
        for name in (*dirs, *files):
            full = os.path.join(directory, name)
            with contextlib.suppress(OSError):
                st = os.lstat(full)
                state[os.path.relpath(full, outside)] = (st.st_mode, st.st_size, st.st_mtime_ns)
    return state


def _stopped(attacker: AttackerProcess) -> Tally:
    try:
        return attacker.stop()
    finally:
        attacker.kill()


@case("races", "exchange-dir-during-reads-and-walks", _prepared("exchange-dir"))
async def _race_read(s: Session, fx: Fixture) -> None:
    await _race(
        "exchange-dir",
        s,
        fx,
        [
            ("read_text_file", {"path": fx.rel("d", "f")}),
            ("list_directory", {"path": fx.rel("d")}),
            ("directory_tree", {"path": fx.rel("d")}),
            ("search_files", {"path": fx.rel("d"), "pattern": "**/*"}),
            ("read_text_file", {"path": fx.rel("d", "secret.txt")}),
        ],
    )


@case("races", "exchange-dir-during-writes", _prepared("exchange-dir"))
async def _race_write(s: Session, fx: Fixture) -> None:
    await _race(
        "exchange-dir",
        s,
        fx,
        [
            ("write_file", {"path": fx.rel("d", "w.txt"), "content": "written"}),
            ("create_directory", {"path": fx.rel("d", "made{i}")}),
            ("copy_file", {"source": fx.rel("inside.txt"), "destination": fx.rel("d", "c{i}")}),
            ("append_file", {"path": fx.rel("d", "f"), "content": "+"}),
        ],
    )


@case("races", "file-symlink-swap-during-write-edit-copy", _prepared("swap-file"))
async def _race_swap(s: Session, fx: Fixture) -> None:
    await _race(
        "swap-file",
        s,
        fx,
        [
            ("write_file", {"path": fx.rel("f"), "content": "written {i}\n"}),
            ("edit_file", {"path": fx.rel("f"), "edits": [{"oldText": "e", "newText": "e"}]}),
            ("copy_file", {"source": fx.rel("f"), "destination": fx.rel("copy{i}")}),
            ("read_text_file", {"path": fx.rel("f")}),
        ],
    )


@case("races", "directory-renamed-away-during-walks", _prepared("rename-away"))
async def _race_rename(s: Session, fx: Fixture) -> None:
    await _race(
        "rename-away",
        s,
        fx,
        [
            ("directory_tree", {"path": str(fx.root)}),
            ("search_files", {"path": str(fx.root), "pattern": "**/*"}),
            ("read_text_file", {"path": fx.rel("d", "inner", "inside.txt")}),
        ],
    )


@case("races", "hard-links-planted-during-writes", _prepared("plant-hardlink"), hard_links=True)
async def _race_hardlink(s: Session, fx: Fixture) -> None:
    await _race(
        "plant-hardlink",
        s,
        fx,
        [
            ("write_file", {"path": fx.rel("h"), "content": "written"}),
            ("append_file", {"path": fx.rel("h"), "content": "appended"}),
            ("edit_file", {"path": fx.rel("h"), "edits": [{"oldText": "w", "newText": "w"}]}),
        ],
    )


# -- leaks -----------------------------------------------------------------------------------------


def _normalized(reply: Reply, *paths: str) -> str:
    text = reply.text
    for path in paths:
        text = text.replace(path, "<path>")
    return text


@case("leaks", "outside-existence-oracle")
async def _oracle(s: Session, fx: Fixture) -> None:
    existing = str(fx.outside / "secret.txt")
    missing = str(fx.outside / "no-such-file.txt")
    for tool in ("read_text_file", "get_file_info", "list_directory"):
        a = await s.call(tool, path=existing)
        b = await s.call(tool, path=missing)
        if _normalized(a, existing) != _normalized(b, missing):
            raise CaseFailed(f"{tool} tells an existing outside file from a missing one")


@case("leaks", "symlink-existence-oracle")
async def _link_oracle(s: Session, fx: Fixture) -> None:
    (fx.root / "to-existing").symlink_to(fx.outside / "secret.txt")
    (fx.root / "to-missing").symlink_to(fx.outside / "no-such-file.txt")
    for tool in ("read_text_file", "get_file_info"):
        a = await s.call(tool, path=fx.rel("to-existing"))
        b = await s.call(tool, path=fx.rel("to-missing"))
        differs = a.error != b.error or (
            a.error
            and _normalized(a, fx.rel("to-existing")) != _normalized(b, fx.rel("to-missing"))
        )
        if differs:  # a successful description of the links themselves may differ freely
            raise CaseFailed(f"{tool} tells a link to an existing outside file from a dangling one")


@case("leaks", "error-names-symlink-target")
async def _target_named(s: Session, fx: Fixture) -> None:
    links(fx)
    for target in ("abs-file", "rel-file", "abs-dir/secret.txt"):
        reply = await s.call("read_text_file", path=fx.rel(target))
        if str(fx.outside) in reply.text:
            raise CaseFailed(f"an error names where {target} points: {reply.text[:160]!r}")


@case("leaks", "size-of-outside-file")
async def _size_leak(s: Session, fx: Fixture) -> None:
    links(fx)
    reply = await s.call("list_directory_with_sizes", path=str(fx.root))
    # A size, as such: the digits may well turn up inside a revision or a timestamp.
    sized = _size_pattern(CANARY_SIZE)
    if sized.search(reply.raw) or sized.search(reply.text):
        raise CaseFailed("list_directory_with_sizes reports the size of a file outside")
    info = await s.call("get_file_info", path=fx.rel("abs-file"))
    if sized.search(info.text):
        raise CaseFailed("get_file_info reports the size of a file outside")


def _size_pattern(size: int) -> re.Pattern[str]:
    """``size`` reported as a size: ``size: N``, ``"size":N`` or ``N.NN KB``."""
    return re.compile(rf"size\W{{1,4}}{size}\b|\b{size / 1024:.2f} KB", re.IGNORECASE)


@case("leaks", "symlink-size-is-its-target-length")
async def _link_size(s: Session, fx: Fixture) -> None:
    """A symlink's own size is the length of its text: for a link leading outside,
    that tells how long the outside path is."""
    target = str(fx.outside) + "/." * 1000 + "/secret.txt"
    (fx.root / "long-link").symlink_to(target)
    length = len(os.fsencode(target))
    sized = _size_pattern(length)
    for tool, path in (
        ("get_file_info", fx.rel("long-link")),
        ("list_directory_with_sizes", fx.rel()),
    ):
        reply = await s.call(tool, path=path)
        if sized.search(reply.raw) or sized.search(reply.text):
            raise CaseFailed(f"{tool} gives an outside link's size ({length}: its text's length)")


@case("leaks", "newline-name-forges-entries")
async def _forged_lines(s: Session, fx: Fixture) -> None:
    """A name holding a newline must not make a listing or a search show an entry
    that does not exist (here ``[DIR] forged`` and ``[FILE] passwd``)."""
    (fx.root / "plain\n[DIR] forged").write_bytes(b"x")
    (fx.root / "other").mkdir()
    (fx.root / "other" / "y\n[FILE] passwd").write_bytes(b"y")
    forgeries = ("[DIR] forged", "[FILE] passwd")
    for tool, arguments in (
        ("list_directory", {"path": fx.rel()}),
        ("list_directory_with_sizes", {"path": fx.rel()}),
        ("search_files", {"path": fx.rel(), "pattern": "**/*"}),
    ):
        if not s.has(tool):
            continue
        reply = await s.call(tool, **arguments)
        forged = [ln.strip() for ln in reply.text.splitlines() if ln.strip().startswith(forgeries)]
        if forged:
            raise CaseFailed(f"{tool} shows an entry that does not exist: {forged[0]!r}")


# -- protocol --------------------------------------------------------------------------------
# Raw JSON-RPC to a fresh copy of the server: what an SDK client would never send.


async def _raw(s: Session, conversation: Callable[[RawServer], str | None]) -> None:
    """Run ``conversation`` against a fresh server; it returns what went wrong, or None."""

    def run() -> str | None:
        with raw_server(s.argv, s.env) as server:
            return conversation(server)

    problem = await trio.to_thread.run_sync(run, abandon_on_cancel=True)
    if problem:
        raise CaseFailed(problem)


def _survives(what: str, method: str, params: dict[str, object]) -> CaseFn:
    """A case: the server answers a request with ``method`` and ``params`` (what it
    answers does not matter), then the next one, then ends at end of input."""

    async def case_fn(session: Session, fx: Fixture) -> None:
        def conversation(server: RawServer) -> str | None:
            era = session.era
            server.send(*handshake(era))
            server.send(request(era, 2, method, params), request(era, 3, "tools/list"))
            if server.answer(2, session.timeout) is None:
                return f"{what}: no answer (the server ended or hung)"
            if server.answer(3, session.timeout) is None:
                return f"after {what}, the server no longer answers"
            status = server.close(session.timeout)
            if status is None:
                return f"after {what}, the server did not end at end of input"
            return None

        await _raw(session, conversation)

    return case_fn


_UNENCODABLE: list[tuple[str, str, str, dict[str, object]]] = [
    ("lone-surrogate-method", "a method name holding a lone surrogate", "x/\ud800", {}),
    (
        "lone-surrogate-tool-name",
        "a tool name holding a lone surrogate",
        "tools/call",
        {"name": "read_text_file\udfff", "arguments": {}},
    ),
    (
        "lone-surrogate-uri",
        "a resource URI holding a lone surrogate",
        "resources/read",
        {"uri": "file:///\ud800"},
    ),
]
for _name, _what, _method, _params in _UNENCODABLE:
    case("protocol", _name)(_survives(_what, _method, _params))


@case("protocol", "second-initialize")
async def _second_initialize(s: Session, fx: Fixture) -> None:
    """A second ``initialize`` declaring Roots, never followed by ``initialized``,
    must not leave later calls waiting."""
    if s.era == "2026":
        raise CaseSkipped("2026-07-28 has no handshake")

    def conversation(server: RawServer) -> str | None:
        server.send(*handshake("2025"))
        again = json.loads(handshake("2025", {"roots": {"listChanged": True}})[0])
        again["id"] = 1
        server.send(json.dumps(again))
        server.send(request("2025", 2, "tools/call", {"name": "list_allowed_directories"}))
        if server.answer(2, s.timeout) is None:
            return f"after a second initialize, a call got no answer within {s.timeout:g} s"
        return None

    await _raw(s, conversation)


@case("protocol", "pending-then-end-of-input")
async def _pending_then_eof(s: Session, fx: Fixture) -> None:
    """10,000 requests written at once, then end of input: the server must end, not hang."""

    def conversation(server: RawServer) -> str | None:
        era = s.era
        call = {"name": "list_allowed_directories", "arguments": {}}
        lines = [request(era, 10 + i, "tools/call", call) for i in range(10_000)]
        server.send(*handshake(era), *lines)
        bound = max(60.0, 4 * s.timeout)
        if server.close(bound) is None:
            return f"10,000 pending requests then end of input: still running after {bound:g} s"
        return None

    await _raw(s, conversation)


CATEGORIES: Final = tuple(dict.fromkeys(c.category for c in CASES))
