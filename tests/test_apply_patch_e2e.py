"""apply_patch end to end: through the SDK client over stdio and HTTP in both protocol
eras (a git diff, a dry run, a refused hunk), and a server killed (SIGKILL) in the middle
of a patch: the next server to open the journal takes the patch back at startup."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest
from sidecar_helpers import http_client, sidecar

from helpers import Tree
from mcp_client import (
    ERAS,
    INIT_2025,
    INITIALIZED,
    PATCHED,
    SERVER,
    Era,
    call_line,
    run,
    server_env,
    session,
)

BEFORE = {"a.py": "def f():\n    return 1\n", "b.py": "import a\n", "gone.txt": "old\n"}
PATCH = """diff --git a/a.py b/a.py
--- a/a.py
+++ b/a.py
@@ -1,2 +1,2 @@
 def f():
-    return 1
+    return 2
diff --git a/b.py b/pkg/b.py
similarity index 60%
rename from b.py
rename to pkg/b.py
--- a/b.py
+++ b/pkg/b.py
@@ -1 +1 @@
-import a
+from . import a
diff --git a/gone.txt b/gone.txt
deleted file mode 100644
--- a/gone.txt
+++ /dev/null
@@ -1 +0,0 @@
-old
diff --git a/new.txt b/new.txt
new file mode 100644
--- /dev/null
+++ b/new.txt
@@ -0,0 +1 @@
+new
"""
AFTER = {"a.py": "def f():\n    return 2\n", "pkg/b.py": "from . import a\n", "new.txt": "new\n"}


def files(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*")) if p.is_file()}


def populate(root: Path) -> None:
    for name, text in BEFORE.items():
        (root / name).write_text(text)


def _text(result: Any) -> str:
    return "".join(getattr(c, "text", "") for c in result.content)


@pytest.mark.parametrize("era", ERAS)
def test_a_patch_over_stdio(tree: Tree, era: Era) -> None:
    populate(tree.root)

    async def main() -> None:
        async with session("--journal", str(tree.base / "journal"), str(tree.root), era=era) as s:
            dry = await s.text("apply_patch", patch=PATCH, dryRun=True)
            assert "-    return 1\n+    return 2" in dry and "Renamed: b.py -> pkg/b.py" in dry
            assert files(tree.root) == BEFORE
            bad = await s.error("apply_patch", patch=PATCH.replace("return 1", "return 9"))
            assert "Hunk 1 of 1 for a.py" in bad and "Closest lines" in bad
            assert files(tree.root) == BEFORE
            done = await s.call("apply_patch", patch=PATCH)
            assert not done.is_error, _text(done)
            assert done.structured_content["entry"] == 1
            assert files(tree.root) == AFTER
            listed = await s.text("list_changes", diff=True)
            assert listed.startswith("#1 ") and "apply_patch" in listed
            await s.text("undo_changes")
            assert files(tree.root) == BEFORE

    run(main)


@pytest.mark.parametrize("era", ERAS)
def test_a_patch_over_http(tmp_path: Path, era: str) -> None:
    root = tmp_path / "root"
    root.mkdir()
    populate(root)

    async def main(url: str) -> None:
        async with http_client(url, era) as client:  # type: ignore[arg-type]
            result = await client.call_tool("apply_patch", {"patch": PATCH})
            assert not result.is_error, _text(result)

    with sidecar(str(root), tmp=tmp_path) as served:
        run(lambda: main(served.url))
    assert files(root) == AFTER


@pytest.mark.parametrize("step", ["intent", "change 2", "changed"])
def test_a_server_killed_mid_patch_is_taken_back_at_the_next_start(tree: Tree, step: str) -> None:
    populate(tree.root)
    journal = tree.base / "journal"
    lines = [INIT_2025, INITIALIZED, call_line(1, "apply_patch", patch=PATCH)]
    crashed = subprocess.run(
        [*PATCHED, f"crash-patch-at={step}", "--journal", str(journal), str(tree.root)],
        input="\n".join(lines) + "\n",
        capture_output=True,
        text=True,
        env=server_env(),
        timeout=60,
    )
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr  # killed mid-patch
    assert '"id":1' not in crashed.stdout  # never answered
    restart = subprocess.run(
        [*SERVER, "--journal", str(journal), str(tree.root)],
        input="",
        capture_output=True,
        text=True,
        env=server_env(),
        timeout=60,
    )
    assert restart.returncode == 0, restart.stderr
    assert "an interrupted patch (change #1, by apply_patch) was taken back" in restart.stderr
    assert files(tree.root) == BEFORE
    assert not any(".sandboxfs-" in p.name for p in tree.root.rglob("*"))
    listed = subprocess.run(
        [*SERVER, "journal", str(journal), "list"], capture_output=True, text=True, env=server_env()
    )
    assert "[rolled back: it never took effect]" in listed.stdout
