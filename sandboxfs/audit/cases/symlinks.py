"""Symlinks on every reading and writing tool, and destination-side attacks: a
write, mkdir, move, copy or delete whose destination leads outside."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable

from sandboxfs.audit.cases.base import (
    READ_TARGETS,
    case,
    links,
    refused,
    size_pattern,
)
from sandboxfs.audit.harness import (
    CANARY_SIZE,
    CaseFailed,
    CaseSkipped,
    Fixture,
    Session,
)

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
                if not reply.error and size_pattern(CANARY_SIZE).search(reply.text):
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
