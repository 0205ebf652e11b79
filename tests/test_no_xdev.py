"""--no-xdev: refuse paths that cross a mount point inside an allowed directory.

An outside file is bind-mounted at ``root/leaf.txt`` and an outside directory at
``root/bind``.  Every tool that touches the filesystem is tried on them (the
table must name every such tool): each either refuses, or answers without
anything of what is mounted (content, names below, sizes, revisions).
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from typing import Any

import mcp_types as types
import pytest

from helpers import CANARY, Tree, snapshot
from mcp_client import run, session
from sandboxfs.core.errors import SandboxError
from sandboxfs.fs.limits import Limits
from sandboxfs.fs.revisions import content_revision
from sandboxfs.tools import TOOLS, CallContext, ToolResult

MOUNTED_NAME = "mounted-secret.txt"  # a name that exists only behind the mounts


def _mount(*args: str) -> None:
    result = subprocess.run(["mount", *args], capture_output=True)
    if result.returncode != 0:
        pytest.skip(f"cannot mount here: {result.stderr.decode().strip()}")


@pytest.fixture
def mounts(tree: Tree) -> Iterator[Tree]:
    """Bind mounts of outside things inside the allowed directory (needs CAP_SYS_ADMIN,
    which CI's root has)."""
    (tree.outside / "dir" / MOUNTED_NAME).write_bytes(CANARY)
    (tree.root / "leaf.txt").write_bytes(b"")
    (tree.root / "bind").mkdir()
    (tree.root / "plain.txt").write_text("same mount")
    _mount("--bind", str(tree.outside / "secret.txt"), str(tree.root / "leaf.txt"))
    try:
        _mount("--bind", str(tree.outside / "dir"), str(tree.root / "bind"))
        try:
            yield tree
        finally:
            subprocess.run(["umount", "-l", str(tree.root / "bind")], check=True)
    finally:
        subprocess.run(["umount", "-l", str(tree.root / "leaf.txt")], check=True)


#: Tool -> calls that must each be refused or answer without the mounted content.
CALLS: dict[str, list[dict[str, Any]]] = {
    "read_file": [{"path": "leaf.txt"}, {"path": f"bind/{MOUNTED_NAME}"}],
    "read_text_file": [{"path": "leaf.txt"}, {"path": f"bind/{MOUNTED_NAME}"}],
    "read_media_file": [{"path": "leaf.txt"}],
    "read_multiple_files": [{"paths": ["leaf.txt", f"bind/{MOUNTED_NAME}", "plain.txt"]}],
    "write_file": [
        {"path": "leaf.txt", "content": "pwned"},
        {"path": "bind/new.txt", "content": "pwned"},
        {"path": "leaf.txt", "content": "pwned", "expectedRevision": "sha256:00"},
    ],
    "append_file": [
        {"path": "leaf.txt", "content": "pwned"},
        {"path": f"bind/{MOUNTED_NAME}", "content": "pwned"},
    ],
    "edit_file": [{"path": "leaf.txt", "edits": [{"oldText": "CANARY", "newText": "pwned"}]}],
    "create_directory": [{"path": "bind/new"}],
    "list_directory": [{"path": "bind"}, {"path": "."}],
    "list_directory_with_sizes": [{"path": "bind"}, {"path": "."}],
    "directory_tree": [{"path": "."}, {"path": "bind"}],
    "search_files": [{"path": ".", "pattern": "**/*"}, {"path": "bind", "pattern": "*"}],
    "grep_files": [{"pattern": "CANARY", "path": "."}, {"pattern": "CANARY", "path": "leaf.txt"}],
    "code_map": [{"path": "."}, {"path": "bind"}],
    "move_file": [
        {"source": "leaf.txt", "destination": "moved.txt"},
        {"source": f"bind/{MOUNTED_NAME}", "destination": "moved.txt"},
        {"source": "plain.txt", "destination": "bind/moved.txt"},
    ],
    "copy_file": [
        {"source": "leaf.txt", "destination": "copied.txt"},
        {"source": "plain.txt", "destination": "bind/copied.txt"},
    ],
    "get_file_info": [{"path": "leaf.txt"}, {"path": "bind"}, {"path": f"bind/{MOUNTED_NAME}"}],
    "delete_file": [{"path": "leaf.txt"}, {"path": f"bind/{MOUNTED_NAME}"}],
    "apply_patch": [
        {"files": [{"path": "leaf.txt", "content": "pwned"}]},
        {
            "files": [
                {"path": "plain.txt", "content": "x"},
                {"path": "bind/new.txt", "content": "x"},
            ]
        },
        {"files": [{"path": f"bind/{MOUNTED_NAME}", "delete": True}]},
        {"files": [{"path": "plain.txt", "moveTo": "bind/moved.txt"}]},
        {"patch": f"--- a/bind/{MOUNTED_NAME}\n+++ b/bind/{MOUNTED_NAME}\n@@ -1 +1 @@\n-x\n+y\n"},
    ],
}


def test_every_tool_that_touches_the_filesystem_is_tried() -> None:
    assert set(CALLS) == {t.name for t in TOOLS if t.touches_filesystem}


def _outcome(
    handler: Callable[..., ToolResult], ctx: CallContext, arguments: dict[str, Any]
) -> str:
    try:
        result = handler(ctx, **arguments)
    except SandboxError as exc:
        return f"refused: {exc}"
    return repr((result.text, result.structured, result.media))


@pytest.mark.parametrize("tool", sorted(CALLS))
def test_nothing_behind_a_mount_point_is_reached(mounts: Tree, tool: str) -> None:
    before = snapshot(mounts.outside)
    spec = next(t for t in TOOLS if t.name == tool)
    ctx = CallContext(mounts.sandbox(no_xdev=True), Limits())
    for arguments in CALLS[tool]:
        seen = _outcome(spec.handler, ctx, arguments)
        assert CANARY.decode().strip() not in seen, (arguments, seen)
        echoed = seen
        for given in _strings(arguments):  # an error names the path as the client gave it
            echoed = echoed.replace(given, "")
        assert MOUNTED_NAME not in echoed, (arguments, seen)
        assert content_revision(CANARY) not in seen, (arguments, seen)  # not even its hash
    assert snapshot(mounts.outside) == before


def _strings(value: Any) -> list[str]:
    """Every string in arguments, nested ones too (apply_patch's files), longest first."""
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list):
        found = [s for item in value for s in _strings(item)]
        return sorted(found, key=len, reverse=True)
    text = str(value)
    # A patch names its files on its --- and +++ lines (as the client gave them).
    named = [line[6:] for line in text.split("\n") if line.startswith(("--- a/", "+++ b/"))]
    return [text, *named]


def test_a_listing_and_its_revision_do_not_see_behind_the_mounts(mounts: Tree) -> None:
    sandbox = mounts.sandbox(no_xdev=True)
    first = sandbox.list_dir(".", sizes=True, tree_revision=True)
    sizes = dict(zip([e.name for e in first.entries], first.sizes or [], strict=True))
    assert sizes["leaf.txt"] is None and sizes["plain.txt"] == len("same mount")
    (mounts.outside / "secret.txt").write_bytes(CANARY + b"changed")
    (mounts.outside / "dir" / MOUNTED_NAME).write_bytes(b"changed too")
    (mounts.outside / "dir" / "new.txt").write_bytes(b"new")
    assert sandbox.list_dir(".", tree_revision=True).revision == first.revision
    assert sandbox.revision(".") == first.revision
    # Without --no-xdev the mounts are part of the tree, and the revision sees them.
    crossing = mounts.sandbox()
    assert crossing.revision(".") != first.revision


def test_the_mounts_are_served_without_no_xdev(mounts: Tree) -> None:
    sandbox = mounts.sandbox()
    with sandbox.open_file("leaf.txt") as f:
        assert f.file.read() == CANARY
    assert MOUNTED_NAME in [e.name for e in sandbox.list_dir("bind").entries]


def test_the_server_refuses_mount_crossings_over_the_wire(mounts: Tree) -> None:
    async def main() -> None:
        async with session("--no-xdev", str(mounts.root)) as s:
            assert "crosses a mount point" in await s.error("read_text_file", path="leaf.txt")
            assert "crosses a mount point" in await s.error(
                "append_file", path="leaf.txt", content="x"
            )
            assert await s.text("read_text_file", path="plain.txt") == "same mount"
            with pytest.raises(Exception) as caught:
                await s.client.read_resource((mounts.root / "leaf.txt").as_uri())
            assert "CANARY" not in str(caught.value)
            contents = await s.client.read_resource((mounts.root / "plain.txt").as_uri())
            assert isinstance(contents.contents[0], types.TextResourceContents)
        async with session(str(mounts.root)) as s:
            assert await s.text("read_text_file", path="leaf.txt") == CANARY.decode()

    run(main)
    assert (mounts.outside / "secret.txt").read_bytes() == CANARY


def test_a_mount_point_inside_a_path_is_refused_everywhere(tree: Tree) -> None:
    """A tmpfs mounted below: reached directly, through a symlink, or absolutely."""
    point = tree.root / "mnt"
    point.mkdir()
    _mount("-t", "tmpfs", "-o", "size=1m", "tmpfs", str(point))
    try:
        (point / "f.txt").write_text("on another mount")
        (tree.root / "via-link").symlink_to("mnt/f.txt")
        crossing = tree.sandbox(no_xdev=True)
        for path in ("mnt/f.txt", "via-link", str(point / "f.txt")):
            with pytest.raises(SandboxError, match="crosses a mount point"):
                crossing.open_file(path).file.close()
    finally:
        subprocess.run(["umount", "-l", str(point)], check=True)
