"""Every OSError of every read is a client-safe error, never -32603, and one file
that cannot be read never ends a search.

The real source of read errors: ``/proc`` and one ``/proc/<pid>/mem`` bind-mounted
inside an allowed directory, in a private mount namespace (tests/proc_child.py),
whose reads fail with ``EIO`` (and ``EINVAL``) as a failing disk, a FUSE or an NFS
server's may.  In addition, a test double at the descriptor layer makes the reads of
one ordinary file fail, one system call at a time, to reach the reads /proc cannot
(``pread`` of a tail, ``preadv`` of a revision after a read that worked).
"""

from __future__ import annotations

import errno
import io
import json
import os
import shutil
import subprocess
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mcp_types
import pytest
import trio
from test_inprocess import InProcess, _server

from helpers import Tree
from mcp_client import run, session
from sandboxfs.core.errors import SandboxError
from sandboxfs.fs import files, walks
from unprivileged import nobody_command, nobody_pythonpath

CHILD = Path(__file__).with_name("proc_child.py")

#: Reads of d/mem (every read fails): each answer must be an EIO error naming the path.
FAILING_READS: list[tuple[str, dict[str, Any], str]] = [
    ("read_text_file", {"path": "d/mem"}, "d/mem"),
    ("read_text_file", {"path": "d/mem", "head": 3}, "d/mem"),
    ("read_text_file", {"path": "d/mem", "offset": 2, "limit": 5}, "d/mem"),
    ("read_file", {"path": "d/mem"}, "d/mem"),
    ("read_media_file", {"path": "d/mem"}, "d/mem"),
    ("grep_files", {"path": "d/mem", "pattern": "needle"}, "d/mem"),
    ("edit_file", {"path": "d/mem", "edits": [{"oldText": "a", "newText": "b"}]}, "d/mem"),
    ("copy_file", {"source": "d/mem", "destination": "copy.bin"}, "d/mem -> copy.bin"),
    # The report, as it was found: /proc bind-mounted inside the root.
    ("read_text_file", {"path": "proc/{pid}/mem"}, "proc/{pid}/mem"),
    ("grep_files", {"path": "proc/{pid}/mem", "pattern": "x"}, "proc/{pid}/mem"),
]
#: Calls that must answer, with what they could read, despite the failing file.
MIXED: list[tuple[str, dict[str, Any]]] = [
    ("read_multiple_files", {"paths": ["d/mem", "d/ok.txt"]}),
    ("grep_files", {"path": "d", "pattern": "needle"}),
    ("grep_files", {"path": "proc/{pid}", "pattern": "Max", "maxResults": 10000}),
]
RESOURCE = ("resources/read", {"uri": "file://{root}/d/mem"})


@pytest.fixture(scope="module")
def proc_answers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The answers of tests/proc_child.py to every call above, in both eras."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1) for a private mount namespace")
    requests = [
        ["tools/call", {"name": name, "arguments": arguments}]
        for name, arguments, _ in FAILING_READS
    ]
    requests += [
        ["tools/call", {"name": name, "arguments": arguments}] for name, arguments in MIXED
    ]
    requests.append(list(RESOURCE))
    base = tmp_path_factory.mktemp("proc")
    result = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", sys.executable, str(CHILD), str(base)],
        input=json.dumps(requests),
        capture_output=True,
        text=True,
        timeout=300,
    )
    if result.returncode != 0 and "unshare failed" in result.stderr:
        pytest.skip(f"no private mount namespace here: {result.stderr.strip()}")
    assert result.returncode == 0, result.stderr
    answers: dict[str, Any] = json.loads(result.stdout)
    return answers


def _results(proc_answers: dict[str, Any], era: str) -> list[dict[str, Any]]:
    return list(proc_answers["answers"][era])


@pytest.mark.parametrize("era", ["2025", "2026"])
def test_no_read_of_a_failing_file_is_an_internal_error(
    proc_answers: dict[str, Any], era: str
) -> None:
    answers = _results(proc_answers, era)
    assert len(answers) == len(FAILING_READS) + len(MIXED) + 1
    internal = [a for a in answers if a.get("error", {}).get("code") == -32603]
    assert internal == []


@pytest.mark.parametrize("era", ["2025", "2026"])
@pytest.mark.parametrize(
    "index", range(len(FAILING_READS)), ids=[f"{n}-{a}" for n, a, _ in FAILING_READS]
)
def test_each_failing_read_is_an_eio_error_naming_the_path(
    proc_answers: dict[str, Any], era: str, index: int
) -> None:
    answer = _results(proc_answers, era)[index]["result"]
    named = FAILING_READS[index][2].replace("{pid}", proc_answers["pid"])
    assert answer["isError"] is True
    assert answer["structuredContent"]["error"] == {
        "code": "EIO",
        "message": f"EIO: input/output error: {named}",
    }


def test_a_failed_copy_leaves_nothing(proc_answers: dict[str, Any]) -> None:
    assert "copy.bin" not in proc_answers["left"]


@pytest.mark.parametrize("era", ["2025", "2026"])
def test_read_multiple_files_reports_the_failing_file_in_place(
    proc_answers: dict[str, Any], era: str
) -> None:
    answer = _results(proc_answers, era)[len(FAILING_READS)]["result"]
    assert answer["isError"] is False
    failed, read = answer["structuredContent"]["files"]
    assert failed == {
        "path": "d/mem",
        "error": {"code": "EIO", "message": "EIO: input/output error: d/mem"},
    }
    assert read["content"] == "a needle in a readable file\n"


@pytest.mark.parametrize("era", ["2025", "2026"])
def test_grep_skips_and_counts_a_file_it_cannot_read(
    proc_answers: dict[str, Any], era: str
) -> None:
    answer = _results(proc_answers, era)[len(FAILING_READS) + 1]["result"]
    assert answer["isError"] is False
    found = answer["structuredContent"]
    assert [m["path"] for m in found["matches"]] == ["d/ok.txt"]
    assert (found["unreadableFiles"], found["filesSearched"], found["complete"]) == (1, 1, False)
    assert answer["content"][0]["text"].endswith("\n[1 file could not be read]")


@pytest.mark.parametrize("era", ["2025", "2026"])
def test_grep_over_a_procfs_directory_goes_on_past_its_unreadable_files(
    proc_answers: dict[str, Any], era: str
) -> None:
    answer = _results(proc_answers, era)[len(FAILING_READS) + 2]["result"]
    assert answer["isError"] is False
    found = answer["structuredContent"]
    pid = proc_answers["pid"]
    assert f"proc/{pid}/limits" in {m["path"] for m in found["matches"]}
    assert found["unreadableFiles"] >= 1  # mem, at least
    assert "could not be read]" in answer["content"][0]["text"]


@pytest.mark.parametrize("era", ["2025", "2026"])
def test_resources_read_of_a_failing_file_is_a_client_error(
    proc_answers: dict[str, Any], era: str
) -> None:
    answer = _results(proc_answers, era)[-1]
    assert answer["error"]["code"] == -32602
    assert answer["error"]["message"].startswith("EIO: input/output error: ")
    assert answer["error"]["message"].endswith("/d/mem")


# -- the descriptor layer's double: one system call at a time -----------------------


class _Failing:
    """Makes the reads of chosen inodes fail with EIO, one kind of call at a time."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.inodes: set[tuple[int, int]] = set()
        self.calls: set[str] = set()
        self.failed: list[str] = []
        self._monkeypatch = monkeypatch
        failing = self

        class FileIO(io.FileIO):
            def read(self, size: int = -1) -> bytes | None:  # type: ignore[override]
                failing.check("read", self.fileno())
                return super().read(size)

            def readinto(self, buffer: Any) -> int | None:
                failing.check("read", self.fileno())
                return super().readinto(buffer)

        real_pread, real_preadv = os.pread, os.preadv

        def pread(fd: int, size: int, offset: int) -> bytes:
            failing.check("pread", fd)
            return real_pread(fd, size, offset)

        def preadv(fd: int, buffers: Any, offset: int, *flags: int) -> int:
            failing.check("preadv", fd)
            return real_preadv(fd, buffers, offset, *flags)

        monkeypatch.setattr(files, "io", types.SimpleNamespace(FileIO=FileIO))
        monkeypatch.setattr(os, "pread", pread)
        monkeypatch.setattr(os, "preadv", preadv)

    def check(self, call: str, fd: int) -> None:
        st = os.fstat(fd)
        if call in self.calls and (st.st_dev, st.st_ino) in self.inodes:
            self.failed.append(call)
            raise OSError(errno.EIO, os.strerror(errno.EIO))

    def add(self, path: Path) -> None:
        st = path.stat()
        self.inodes.add((st.st_dev, st.st_ino))


@pytest.fixture
def failing(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Failing]:
    yield _Failing(monkeypatch)


def _answers(tree: Tree, calls: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    server = _server(tree)

    async def main() -> list[dict[str, Any]]:
        async with trio.open_nursery() as nursery:
            conversation = InProcess(server, nursery, "2026")
            ids = [conversation.call(name, arguments) for name, arguments in calls]
            await conversation.settle()
            return [conversation.answers[i] for i in ids]

    return trio.run(main)


@pytest.mark.parametrize(
    ("call", "name", "arguments"),
    [
        ("read", "read_text_file", {"path": "bad.txt"}),
        ("read", "read_text_file", {"path": "bad.txt", "head": 1}),
        ("read", "read_text_file", {"path": "bad.txt", "offset": 1, "limit": 1}),
        ("pread", "read_text_file", {"path": "bad.txt", "tail": 1}),
        ("preadv", "read_text_file", {"path": "bad.txt", "head": 1}),  # the revision
        ("preadv", "read_text_file", {"path": "bad.txt", "offset": 1}),  # the revision
        ("read", "read_media_file", {"path": "bad.txt"}),
        ("read", "grep_files", {"path": "bad.txt", "pattern": "line"}),
        ("read", "edit_file", {"path": "bad.txt", "edits": [{"oldText": "x", "newText": "y"}]}),
        ("preadv", "get_file_info", {"path": "bad.txt"}),  # the revision
    ],
)
def test_each_read_system_call_that_fails_is_a_clean_error(
    tree: Tree, failing: _Failing, call: str, name: str, arguments: dict[str, Any]
) -> None:
    bad = tree.root / "bad.txt"
    bad.write_text("line one\nline two\n")
    failing.add(bad)
    failing.calls.add(call)
    [answer] = _answers(tree, [(name, arguments)])
    assert call in failing.failed  # the double did fail a read
    result = answer["result"]
    assert result["isError"] is True
    assert result["structuredContent"]["error"] == {
        "code": "EIO",
        "message": "EIO: input/output error: bad.txt",
    }


def test_grep_counts_a_long_file_it_could_not_read_to_its_end(
    tree: Tree, failing: _Failing
) -> None:
    (tree.root / "good.txt").write_text("needle\n")
    bad = tree.root / "bad.txt"
    bad.write_text("needle\n" * 400_000)  # longer than one read in C: read again in Python
    failing.add(bad)
    failing.calls.add("read")
    [answer] = _answers(tree, [("grep_files", {"path": ".", "pattern": "needle"})])
    found = answer["result"]["structuredContent"]
    assert failing.failed
    assert [m["path"] for m in found["matches"]] == ["./good.txt"]
    assert (found["unreadableFiles"], found["complete"]) == (1, False)


@pytest.mark.parametrize(
    ("name", "arguments"),
    [
        ("grep_files", {"path": ".", "pattern": "needle"}),
        ("search_files", {"path": ".", "pattern": "**/*.txt"}),
        ("directory_tree", {"path": "."}),
    ],
)
def test_a_walk_notes_a_subdirectory_it_cannot_list_and_goes_on(
    tree: Tree, monkeypatch: pytest.MonkeyPatch, name: str, arguments: dict[str, Any]
) -> None:
    (tree.root / "a").mkdir()
    (tree.root / "a" / "x.txt").write_text("needle\n")
    (tree.root / "bad").mkdir()
    (tree.root / "bad" / "y.txt").write_text("needle\n")
    (tree.root / "z.txt").write_text("needle\n")
    children = walks.TreeWalk.children
    failed: list[tuple[str, ...]] = []

    def failing(self: walks.TreeWalk, rel: tuple[str, ...], shown: str) -> Any:
        if rel == ("bad",):
            failed.append(rel)
            raise SandboxError(f"EIO: input/output error: {shown}", "EIO")
        return children(self, rel, shown)

    monkeypatch.setattr(walks.TreeWalk, "children", failing)
    [answer] = _answers(tree, [(name, arguments)])
    assert failed
    result = answer["result"]
    assert result["isError"] is False
    text = result["content"][0]["text"]
    assert "y.txt" not in text
    assert "x.txt" in text and "z.txt" in text
    if name == "grep_files":
        assert result["structuredContent"]["unreadableDirectories"] == 1
        assert text.endswith("\n[1 directory could not be read]")
    elif name == "search_files":
        [note] = result["structuredContent"]["unreadable"]
        assert note == {"path": f"{tree.root}/bad", "code": "EIO"}


def test_grep_as_an_ordinary_user_counts_what_it_may_not_read(public_tree: Tree) -> None:
    """EACCES, the common case: C cannot open the file (it is counted, not read again)
    and the walk cannot list the directory; the rest is searched."""
    tree = public_tree
    tree.root.chmod(0o755)
    (tree.root / "public.txt").write_text("needle in public\n")
    (tree.root / "private.txt").write_text("needle in private\n")
    (tree.root / "private.txt").chmod(0o600)
    locked = tree.root / "locked"
    locked.mkdir()
    (locked / "inner.txt").write_text("needle inside\n")
    locked.chmod(0o700)
    pythonpath = nobody_pythonpath()

    results: list[mcp_types.CallToolResult] = []

    async def main() -> None:
        async with session(
            command=nobody_command(str(tree.root)), env={"PYTHONPATH": pythonpath}
        ) as s:
            results.append(await s.call("grep_files", pattern="needle", path="."))

    run(main)
    [result] = results
    assert result.is_error is False
    found = result.structured_content
    assert found is not None
    assert [m["text"] for m in found["matches"]] == ["needle in public"]
    assert (found["unreadableFiles"], found["unreadableDirectories"]) == (1, 1)
    assert isinstance(result.content[0], mcp_types.TextContent)
    assert result.content[0].text.endswith("\n[1 file and 1 directory could not be read]")
