"""Resource exhaustion: sparse terabyte files, deep trees, symlink loops, glob
pattern bombs.  Each call must be answered (an error will do) within the timeout,
and the server must go on answering."""

from __future__ import annotations

import contextlib
import os
from typing import Final

from sandboxfs.audit.cases.base import case, refused
from sandboxfs.audit.harness import CaseFailed, CaseSkipped, Fixture, Session


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


#: How deep the deep tree goes: far past PATH_MAX for a path to its bottom (the
#: reference copes with 400 levels and not with this).
DEEP_LEVELS: Final = 2000


def _deep_chain(fx: Fixture, levels: int) -> None:
    """``levels`` directories ``d/d/d/...`` made relative to descriptors (no path to
    them fits in PATH_MAX)."""
    fd = os.open(fx.root, os.O_PATH | os.O_DIRECTORY)
    try:
        for _ in range(levels):
            os.mkdir("d", dir_fd=fd)
            inner = os.open("d", os.O_PATH | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = inner
        with contextlib.suppress(OSError):
            os.close(os.open("x", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd))  # one at the bottom
    finally:
        os.close(fd)


def _remove_chain(fx: Fixture) -> None:
    """Remove the chain one level at a time from the top (a recursive removal would
    run out of Python's recursion limit): ``d/d`` up to ``d-next``, ``d`` removed,
    ``d-next`` renamed ``d``; the files the server may have made go too."""
    fd = os.open(fx.root, os.O_PATH | os.O_DIRECTORY)
    try:
        while True:
            inner = os.open("d", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            try:
                names = os.listdir(inner)
                for name in names:
                    if name != "d":
                        with contextlib.suppress(OSError):
                            os.unlink(name, dir_fd=inner)
            finally:
                os.close(inner)
            if "d" not in names:
                os.rmdir("d", dir_fd=fd)
                return
            os.rename("d/d", "d-next", src_dir_fd=fd, dst_dir_fd=fd)
            os.rmdir("d", dir_fd=fd)
            os.rename("d-next", "d", src_dir_fd=fd, dst_dir_fd=fd)
    finally:
        os.close(fd)


@case("resource-exhaustion", "deep-tree-2000-levels")
async def _deeper(s: Session, fx: Fixture) -> None:
    """Every tool that walks, on a tree 2,000 levels deep: an answer (a refusal, a
    truncated tree) within the timeout, and the server still there after."""
    walks: list[tuple[str, dict[str, object]]] = [
        ("directory_tree", {"path": fx.rel()}),
        ("search_files", {"path": fx.rel(), "pattern": "**/x"}),
        ("search_files", {"path": fx.rel(), "pattern": "x"}),
        ("grep_files", {"path": fx.rel(), "pattern": "needle"}),
    ]
    present = [(tool, arguments) for tool, arguments in walks if s.has(tool)]
    if not present:
        raise CaseSkipped("the server has none of directory_tree, search_files, grep_files")
    _deep_chain(fx, DEEP_LEVELS)
    try:
        for tool, arguments in present:
            await s.call(tool, **arguments)
    finally:
        _remove_chain(fx)


#: Glob patterns that are cheap to write and dear to match, each answered in bounded
#: time or refused: (case name, what it is, the pattern).
GLOB_BOMBS: Final = (
    ("brackets", "10,000 unclosed brackets", "[" * 10_000),
    ("nested-braces", "braces nested 2,000 deep", "{a," * 2000 + "b" + "}" * 2000),
    ("brace-product", "40 brace pairs in a row (2^40 words)", "{a,b}" * 40),
    ("brace-range", "a range of a billion", "{1..1000000000}"),
    ("globstars", "1,000 ** in a row", "**/" * 1000 + "x"),
    ("star-backtracking", "50 stars against long names", "*a" * 50 + "b"),
)


def _glob_arguments(s: Session) -> list[tuple[str, str, bool]]:
    """Every (tool, argument, is a list) the server has that takes a pattern or glob,
    on tools whose other required arguments are a path and a pattern."""
    found = []
    for name, tool in s.tools.items():
        schema = tool.input_schema
        properties: dict[str, dict[str, object]] = schema.get("properties", {})
        required = set(schema.get("required", []))
        for prop, spec in properties.items():
            lowered = prop.lower()
            if not any(word in lowered for word in ("pattern", "glob", "exclude", "include")):
                continue
            if spec.get("type") not in ("string", "array"):
                continue
            if required - {prop, "path", "pattern"}:
                continue
            found.append((name, prop, spec.get("type") == "array"))
    return found


def _glob_bomb(name: str, what: str, pattern: str) -> None:
    @case("resource-exhaustion", f"glob-bomb-{name}")
    async def run(s: Session, fx: Fixture) -> None:
        targets = _glob_arguments(s)
        if not targets:
            raise CaseSkipped("the server has no tool that takes a glob pattern")
        # Work for every pattern match: a hundred long names (and a directory).
        for i in range(100):
            (fx.root / f"{'a' * 200}{i:03d}").write_bytes(b"a\n")
        (fx.root / "sub").mkdir()
        for tool, prop, is_list in targets:
            arguments: dict[str, object] = {"path": fx.rel()}
            properties = s.tools[tool].input_schema.get("properties", {})
            if prop != "pattern" and "pattern" in properties:
                arguments["pattern"] = "*"
            arguments[prop] = [pattern] if is_list else pattern
            try:
                await s.call(tool, **arguments)
            except CaseFailed as exc:
                raise CaseFailed(f"{tool} with {prop} = {what}: {exc}") from None


for _name, _what, _pattern in GLOB_BOMBS:
    _glob_bomb(_name, _what, _pattern)
