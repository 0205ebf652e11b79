"""grep_files reads the files of a walk in C (native/scan.c) and searches a long file
block by block in one buffer; its answers are what they were before (the code of
then, tests/grep_reference.py, is the oracle), at block boundaries too, and the C
helper opens nothing it must not: no symlink followed, no FIFO or device read or
waited on, nothing but a leaf name beneath its directory."""

from __future__ import annotations

import errno
import os
import stat
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grep_reference
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers import CANARY, Tree, make_tree, open_fd_count
from sandboxfs.binding import syscalls
from sandboxfs.core.chokepoint import LIST_FLAGS, READ_FLAGS, Confinement, Directory, Location
from sandboxfs.core.errors import SandboxError
from sandboxfs.fs.limits import Limits
from sandboxfs.tools import CallContext, grepping

MODULES = (grepping, grep_reference)


def _outcome(fn: Callable[..., Any], ctx: CallContext, pattern: str, **kw: Any) -> tuple[Any, ...]:
    try:
        result = fn(ctx, pattern, **kw)
    except SandboxError as exc:
        return ("error", type(exc).__name__, str(exc))
    return ("ok", result.text, result.structured)


def same_answers(ctx: CallContext, pattern: str, **kw: Any) -> tuple[Any, ...]:
    """grep_files's answer, checked to be the reference's."""
    new = _outcome(grepping.grep_files, ctx, pattern, **kw)
    old = _outcome(grep_reference.grep_files, ctx, pattern, **kw)
    assert new == old, (pattern, kw)
    return new


@contextmanager
def constants(**values: int) -> Iterator[None]:
    """Set module constants (``_BLOCK``, ``_BINARY_PROBE``, the batch sizes) in both
    implementations for the block."""
    saved = [(m, name, getattr(m, name)) for m in MODULES for name in values if hasattr(m, name)]
    try:
        for module, name, _ in saved:
            setattr(module, name, values[name])
        yield
    finally:
        for module, name, value in saved:
            setattr(module, name, value)


def _ctx(tree: Tree) -> CallContext:
    return CallContext(tree.sandbox(), Limits())


# -- differential: random trees, patterns and block sizes --------------------------------

_PIECES = ["a", "b", "ab", "needle", "NEEDLE", "é", "x" * 600, "\r", "\0", "\xff", " ", ""]
_LINE = st.lists(st.sampled_from(_PIECES), max_size=4).map("".join)
_CONTENT = st.builds(
    lambda lines, crlf, last: ("\r\n" if crlf else "\n").join(lines) + ("\n" if last else ""),
    st.lists(_LINE, max_size=12),
    st.booleans(),
    st.booleans(),
).map(lambda text: text.encode().replace("\xff".encode(), b"\xff"))
_NAMES = st.sampled_from(["f.txt", "g.py", "d/h.txt", "d/e/i.txt", "d/j.py", "k", "d/e/f.txt"])
_FILES = st.dictionaries(_NAMES, _CONTENT, max_size=6)
_LITERALS = st.sampled_from(["a", "b", "ab", "needle", "NEEDLE", "\r", "é", "a\nb", "x", " a"])
_REGEXES = st.sampled_from(
    [
        *("^a", "b$", "a+", "^", "$", r"\Aa", r"a\z", "(?-m)^a", "(?-m)b$", "x{3}", "(?i)needle"),
        *("é", r"\bab\b", r"\Bb", r"a\nb", r"\n", "^$", "(?s)a.b", ".", "b\r$", "a*", r"[^a]+"),
    ]
)
_BLOCKS = st.sampled_from([8, 16, 64, 4 * 1024 * 1024])


def _write(root: Path, files: dict[str, bytes]) -> None:
    for name, data in files.items():
        path = root / name
        if any(p.exists() and not p.is_dir() for p in path.parents if root in p.parents):
            continue  # a file already holds that directory's name
        if path.is_dir():
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    files=_FILES,
    regex=st.booleans(),
    literal=_LITERALS,
    expression=_REGEXES,
    case_sensitive=st.booleans(),
    context=st.integers(0, 3),
    max_results=st.integers(1, 8),
    glob=st.sampled_from([None, "*.txt", "d/*", "**/f.txt"]),
    block=_BLOCKS,
    probe=st.sampled_from([4, 8192]),
    batch_bytes=st.sampled_from([16, 1024 * 1024]),
    batch_names=st.sampled_from([1, 2, 256]),
    ahead=st.sampled_from([0, 1, 16]),
    run=st.sampled_from([(1, 1), (2, 8), (256, 1024 * 1024)]),
    single=st.booleans(),
)
def test_answers_are_the_reference_answers(
    files: dict[str, bytes],
    regex: bool,
    literal: str,
    expression: str,
    case_sensitive: bool,
    context: int,
    max_results: int,
    glob: str | None,
    block: int,
    probe: int,
    batch_bytes: int,
    batch_names: int,
    ahead: int,
    run: tuple[int, int],
    single: bool,
) -> None:
    with tempfile.TemporaryDirectory() as base:
        tree = make_tree(Path(base))
        _write(tree.root, files)
        (tree.root / "out").symlink_to(tree.outside / "secret.txt")
        ctx = _ctx(tree)
        path = "."
        if single:
            regular = sorted(n for n in files if (tree.root / n).is_file())
            path = regular[0] if regular else "."
        kw: dict[str, Any] = {
            "path": path,
            "regex": regex,
            "context": context,
            "maxResults": max_results,
            "caseSensitive": case_sensitive,
        }
        if glob is not None:
            kw["glob"] = glob
        with constants(
            _BLOCK=block,
            _BINARY_PROBE=probe,
            _BATCH_BYTES=batch_bytes,
            _BATCH_NAMES=batch_names,
            _READ_AHEAD=ahead,
            _RUN_FILES=run[0],
            _RUN_BYTES=run[1],
        ):
            same_answers(ctx, expression if regex else literal, **kw)


# -- the edges, one by one ---------------------------------------------------------------


@pytest.mark.parametrize("regex", [False, True])
def test_a_match_straddling_a_block_boundary(tree: Tree, regex: bool) -> None:
    (tree.root / "big.txt").write_bytes(b"0123456789abcdefneedleX\nxx\n" * 3 + b"tail\n")
    with constants(_BLOCK=20):
        found = same_answers(_ctx(tree), "needle" if not regex else "ne+dle", regex=regex)
    assert found[1].count("needle") == 3


@pytest.mark.parametrize("pattern", [r"x\ny", r"x$\n^y", r"x\s+y", r"(?s)x.y", r"x\b\W+\by"])
def test_a_regex_never_matches_across_two_files(tree: Tree, pattern: str) -> None:
    """The files of a read are searched as one text (each followed by a newline)
    first: what a match there spans is searched again in its own file."""
    (tree.root / "a.txt").write_bytes(b"no\nx")
    (tree.root / "b.txt").write_bytes(b"y\nx\ny\n")
    (tree.root / "c.txt").write_bytes(b"x")
    (tree.root / "d.txt").write_bytes(b"y")
    found = same_answers(_ctx(tree), pattern, regex=True)
    assert found[1] == "./b.txt:2:x"


@pytest.mark.parametrize("block", [1000, 4 * 1024 * 1024])
def test_many_matches_in_one_block_with_context(tree: Tree, block: int) -> None:
    """Only the lines shown are looked at, never the whole block split into lines."""
    lines = [
        f"row {i:05d}" + (" needle" if i % 7 in (0, 1) or i % 97 == 5 else "") for i in range(6000)
    ]
    (tree.root / "rows.txt").write_text("\n".join(lines))  # no newline at the end
    with constants(_BLOCK=block):
        for context in (0, 1, 3, 20):
            found = same_answers(
                _ctx(tree), "needle", path="rows.txt", context=context, maxResults=10000
            )
            same_answers(_ctx(tree), "e{2}dle$", path="rows.txt", regex=True, context=context)
    assert found[2]["matches"][-1]["line"] == 6000  # row 05999, the last line


def test_a_literal_that_starts_with_a_newline_ends(tree: Tree) -> None:
    """It used to be found again at the newline it starts with, forever (the old code
    never answers): now the search goes on after that newline."""
    (tree.root / "f.txt").write_text("a\nb\nab\nb\n")
    result = grepping.grep_files(_ctx(tree), "\nb", maxResults=100)
    assert result.text == "./f.txt:1:a\n./f.txt:3:ab"


def test_crlf_and_no_trailing_newline(tree: Tree) -> None:
    (tree.root / "crlf.txt").write_bytes(b"one\r\nneedle two\r\nthree needle")
    for block in (4, 64, 4 * 1024 * 1024):
        with constants(_BLOCK=block):
            text = same_answers(_ctx(tree), "needle", context=1)[1]
    # As before: a match already shown as context of the one above stays a context
    # line (GNU grep would mark it ':'); structured content lists both matches.
    assert text.splitlines() == [
        "./crlf.txt-1-one",
        "./crlf.txt:2:needle two",
        "./crlf.txt-3-three needle",
    ]


def test_context_next_to_block_boundaries(tree: Tree) -> None:
    """As before: context lines come from the block a match is in (a block ends at a
    newline), so blocks change which lines are shown around a match near one."""
    lines = [f"line {i}" + (" needle" if i % 7 == 3 else "") for i in range(60)]
    (tree.root / "ctx.txt").write_text("\n".join(lines) + "\n")
    for block in (16, 50, 100, 4 * 1024 * 1024):
        with constants(_BLOCK=block):
            same_answers(_ctx(tree), "needle", context=2, maxResults=100)
            same_answers(_ctx(tree), "needle", path="ctx.txt", context=3, maxResults=100)


def test_lines_longer_than_a_block_and_than_shown(tree: Tree) -> None:
    (tree.root / "long.txt").write_bytes(b"a" * 700 + b"needle" + b"b" * 700 + b"\nshort needle\n")
    for block in (64, 4 * 1024 * 1024):
        with constants(_BLOCK=block):
            text = same_answers(_ctx(tree), "needle")[1]
    first = text.splitlines()[0]
    assert first.endswith("…") and len(first) == len("./long.txt:1:") + 500 + 1


def test_files_bigger_than_the_batch_and_binary_after_the_probe(tree: Tree) -> None:
    (tree.root / "a.txt").write_bytes(b"x\n" * 5000 + b"needle\n")
    (tree.root / "b.bin").write_bytes(b"\0needle\n")
    (tree.root / "c.txt").write_bytes(b"y" * 9000 + b"\0needle\n")  # NUL after the probe
    (tree.root / "d.txt").write_bytes(b"")
    for batch in (1, 64, 1024 * 1024):
        with constants(_BATCH_BYTES=batch):
            found = same_answers(_ctx(tree), "needle")
    assert found[2]["binaryFilesSkipped"] == 1
    assert found[2]["filesSearched"] == 3


def test_many_files_in_one_directory_fill_the_results_in_order(tree: Tree) -> None:
    for i in range(600):
        (tree.root / f"f{i:03d}.txt").write_text("needle\n" if i % 3 else "hay\n")
    for names, run, run_bytes in ((1, 256, 1024 * 1024), (7, 50, 20), (256, 1, 1)):
        with constants(_BATCH_NAMES=names, _RUN_FILES=run, _RUN_BYTES=run_bytes):
            for cap in (1, 5, 199, 200, 201, 10000):
                found = same_answers(_ctx(tree), "needle", maxResults=cap)
                same_answers(_ctx(tree), "need.e", regex=True, maxResults=cap)
                same_answers(_ctx(tree), r"\Aneed.e", regex=True, maxResults=cap)
    assert found[2]["filesSearched"] == 600


def test_special_files_and_symlinks_in_the_tree(tree: Tree) -> None:
    root = tree.root
    os.mkfifo(root / "fifo.txt")
    os.mknod(root / "zero.txt", stat.S_IFCHR | 0o600, os.makedev(1, 5))  # /dev/zero's
    (root / "link.txt").symlink_to(tree.outside / "secret.txt")
    (root / "dirlink").symlink_to(tree.outside)
    (root / "plain.txt").write_text("CANARY is only a word here\n")
    found = same_answers(_ctx(tree), "CANARY")
    assert found[1] == "./plain.txt:1:CANARY is only a word here"


# -- the C helper itself, through the chokepoint ----------------------------------------


@pytest.fixture
def directory(tree: Tree) -> Iterator[Directory]:
    root = tree.sandbox().resolver.allow.roots[0]
    confinement = Confinement()
    fd = Location(root, ()).open(confinement, LIST_FLAGS, exact=True)
    with Directory(fd, Location(root, ()), ".", confinement) as d:
        yield d


def _read(
    directory: Directory, names: list[str], *, needle: bytes = b""
) -> list[tuple[int, int, bytes]]:
    batch = syscalls.LeafBatch(1024, 16)
    blob = b"".join(os.fsencode(n) + b"\0" for n in names)
    count = directory.read_files(batch, blob, block=4096, probe=8192, needle=needle)
    assert count == len(names)
    kinds = batch.kinds(count)
    out = []
    for i, kind in enumerate(kinds):
        start, length = batch.spans[2 * i], batch.spans[2 * i + 1]
        out.append((kind, batch.error(i), bytes(batch.view[start : start + length])))
    return out


def test_the_helper_reads_only_regular_files_by_leaf_name(tree: Tree, directory: Directory) -> None:
    root = tree.root
    (root / "a.txt").write_bytes(b"hello needle\n")
    (root / "b.txt").write_bytes(b"hello\n")
    (root / "bin").write_bytes(b"\0needle")
    (root / "sub").mkdir()
    os.mkfifo(root / "fifo")
    os.mknod(root / "zero", stat.S_IFCHR | 0o600, os.makedev(1, 5))
    (root / "link").symlink_to(tree.outside / "secret.txt")
    (root / "inlink").symlink_to("a.txt")  # inside, but a symlink: not followed either
    before = open_fd_count()
    got = _read(
        directory,
        ["a.txt", "b.txt", "bin", "sub", "fifo", "zero", "link", "inlink", "gone"],
        needle=b"needle",
    )
    assert open_fd_count() == before
    assert got == [
        (syscalls.LEAF_SEARCH, 0, b"hello needle\n"),
        (syscalls.LEAF_TEXT, 0, b""),
        (syscalls.LEAF_BINARY, 0, b""),
        (syscalls.LEAF_GONE, 0, b""),  # a directory opens, but is not a regular file
        (syscalls.LEAF_GONE, 0, b""),  # opened without blocking, never read
        (syscalls.LEAF_GONE, 0, b""),  # never read (it would never end)
        (syscalls.LEAF_GONE, errno.ELOOP, b""),
        (syscalls.LEAF_GONE, errno.ELOOP, b""),
        (syscalls.LEAF_GONE, errno.ENOENT, b""),
    ]
    assert CANARY not in b"".join(g[2] for g in got)


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "../outside", "/etc/passwd"])
def test_the_helper_refuses_anything_but_a_leaf_name(directory: Directory, name: str) -> None:
    batch = syscalls.LeafBatch(64, 4)
    with pytest.raises(ValueError, match="leaf"):
        directory.read_files(batch, b"ok\0" + name.encode() + b"\0", block=64, probe=64, needle=b"")


def test_the_helper_refuses_to_open_for_anything_but_reading(directory: Directory) -> None:
    batch = syscalls.LeafBatch(64, 4)
    for flags in (os.O_WRONLY, os.O_RDWR, os.O_RDONLY | os.O_CREAT, os.O_RDONLY | os.O_TRUNC):
        with pytest.raises(ValueError):
            syscalls.read_leaves(
                batch, directory.fd, b"x\0", flags, resolve=0, retries=1, block=64, probe=64
            )
    assert READ_FLAGS & os.O_ACCMODE == os.O_RDONLY


def test_the_helper_stops_when_the_arena_is_full(tree: Tree, directory: Directory) -> None:
    for name in "abcd":
        (tree.root / name).write_bytes(name.encode() * 300 + b"\n")
    batch = syscalls.LeafBatch(700, 16)
    blob = b"a\0b\0c\0d\0"
    count = directory.read_files(batch, blob, block=4096, probe=8192, needle=b"")
    assert count == 2  # two files of 301 bytes fit in 700; the third waits for the next call
    assert batch.kinds(count) == bytes([syscalls.LEAF_SEARCH] * 2)
    small = syscalls.LeafBatch(100, 16)
    count = directory.read_files(small, blob, block=4096, probe=8192, needle=b"")
    assert small.kinds(count) == bytes([syscalls.LEAF_LATER] * 4)  # each longer than the arena


@pytest.mark.parametrize("length", [0, 1, 31, 64, 65, 1000, 4097])
def test_find_and_count_are_bytes_find_and_count(length: int) -> None:
    data = bytes((i * 37) % 251 for i in range(length)) + b"\n" * (length % 3)
    n = len(data)
    for start, end in ((0, n), (n // 3, n), (min(1, n), max(min(1, n), n - 1))):
        assert syscalls.count_byte(data, 10, start, end) == data.count(b"\n", start, end)
        for needle in (b"", b"\n", data[5:9], data[-4:], b"absent-needle", b"\x25\x4a"):
            assert syscalls.find(data, needle, start, end) == data.find(needle, start, end)
    with pytest.raises(ValueError):
        syscalls.find(data, b"x", 0, len(data) + 1)


def test_find_stays_linear_when_the_rare_byte_is_everywhere() -> None:
    hay = b"e" * (8 * 1024 * 1024)
    assert syscalls.find(hay, b"e" * 40 + b"Q", 0, len(hay)) == -1
    assert syscalls.find(hay + b"Q", b"e" * 40 + b"Q", 0, len(hay) + 1) == len(hay) - 40


# -- races: files that grow and shrink while they are read ----------------------------


def test_files_that_grow_and_shrink_while_grep_reads_them(tree: Tree) -> None:
    root = tree.root
    (root / "steady.txt").write_text("needle steady\n")
    victim = root / "victim.txt"
    victim.write_text("needle\n")
    ready = threading.Event()
    stop = threading.Event()
    changes = [0]

    def churn() -> None:
        fd = os.open(victim, os.O_WRONLY)
        try:
            while not stop.is_set():
                os.ftruncate(fd, 0)
                os.pwrite(fd, b"needle grows\n" * (changes[0] % 50), 0)
                changes[0] += 1
                ready.set()
        finally:
            os.close(fd)

    writer = threading.Thread(target=churn)
    writer.start()
    try:
        ready.wait()
        ctx = _ctx(tree)
        for i in range(200):
            with constants(_BLOCK=64 if i % 2 else 4 * 1024 * 1024):
                result = grepping.grep_files(ctx, "needle", maxResults=10000)
            assert "steady.txt:1:needle steady" in (result.text or "")
            for match in result.structured["matches"]:
                # A read may end where a write has got to: a line may be cut short.
                assert match["text"] == "needle steady" or "needle grows".startswith(
                    match["text"]
                ), match
    finally:
        stop.set()
        writer.join()
    assert changes[0] > 0
