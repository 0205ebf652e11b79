"""The fixtures every workload runs on: generated once (the tree, the listing, the huge
and big files, the edit file, the patch files, the storm), reset between calls."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path

from rows import Ctx
from rpc import (  # bench/rpc.py (the script's directory is on sys.path)
    KiB,
    MiB,
    log,
    run_text,
)
from servers import REPO

FIXTURE_FORMAT = 2  # bump when the layout changes, so --fixtures DIR regenerates


NEEDLE = "NEEDLE_SANDBOXFS_BENCH"  # in every 97th file of the tree


NEEDLE_EVERY = 97


HUGE_NEEDLE = "line 00004242 the"  # once in every MiB block of the huge file


EDIT_OLD = "EDIT_MARKER_ALPHA_0123456789"


EDIT_NEW = "EDIT_MARKER_OMEGA_9876543210"


@dataclass(frozen=True)
class FixtureSpec:
    small_files: int = 100  # 1 KiB each: sequential/pipelined reads, read_multiple_files
    listing_entries: int = 1000  # list_directory / list_directory_with_sizes
    tree_top: int = 50  # tree/dNN/eNNN/: tree_top * tree_sub leaf directories
    tree_sub: int = 100
    tree_files: int = 20  # files per leaf directory, half .py and half .txt
    huge_mib: int = 200  # head/tail
    big_mib: int = 10  # whole read
    edit_mib: int = 10  # edit_file

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)

    @property
    def n_tree_files(self) -> int:
        return self.tree_top * self.tree_sub * self.tree_files

    @property
    def n_tree_dirs(self) -> int:
        return self.tree_top * (1 + self.tree_sub)


QUICK_FIXTURES = FixtureSpec(tree_top=10, tree_sub=20, huge_mib=16)


GENERATED = ("small", "listing", "tree", "huge.txt", "big.txt", "edit.pristine.txt", "scratch")


def _text_block(target: int, seed: str) -> bytes:
    """ASCII lines of about 100 bytes adding up to at least ``target`` bytes."""
    out = []
    size = 0
    i = 0
    while size < target:
        line = f"{seed} line {i:08d} the quick brown fox jumps over the lazy dog 0123456789 xyz\n"
        out.append(line)
        size += len(line)
        i += 1
    return "".join(out).encode()


def _write_lines_file(
    path: Path, mib: int, seed: str, middle: str | None = None, last: str | None = None
) -> None:
    block = _text_block(MiB, seed)
    block = block[: block.rfind(b"\n", 0, MiB) + 1]
    with open(path, "wb") as f:
        written = 0
        middle_done = middle is None
        while written < mib * MiB:
            if not middle_done and written >= (mib * MiB) // 2:
                f.write(f"{middle}\n".encode())
                middle_done = True
            f.write(block)
            written += len(block)
        if last:
            f.write(f"{last}\n".encode())


def _make_tree(tree: Path, spec: FixtureSpec) -> None:
    tree.mkdir()
    k = 0
    for a in range(spec.tree_top):
        top = tree / f"d{a:02d}"
        top.mkdir()
        for b in range(spec.tree_sub):
            leaf = top / f"e{b:03d}"
            leaf.mkdir()
            for c in range(spec.tree_files):
                k += 1
                needle = f"# {NEEDLE} here\n" if k % NEEDLE_EVERY == 0 else ""
                body = f"# file {a}/{b}/{c}\ndef f_{k}():\n    return {k}\n{needle}x = 'lorem'\n"
                ext = ".py" if c % 2 == 0 else ".txt"
                (leaf / f"m{c:02d}{ext}").write_text(body)


def generate_fixtures(root: Path, spec: FixtureSpec) -> None:
    """Create the fixtures under ``root``, or reuse them if they are already there."""
    stamp = root / ".bench-fixtures.json"
    want = {"format": FIXTURE_FORMAT, "spec": spec.as_dict()}
    if stamp.exists():
        with contextlib.suppress(ValueError, OSError):
            if json.loads(stamp.read_text()) == want:
                log(f"reusing fixtures in {root}")
                reset_scratch(root)
                return
        log(f"fixtures in {root} have another layout: regenerating")
    stamp.unlink(missing_ok=True)
    for name in GENERATED:  # only what we generate: never anything else in DIR
        p = root / name
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        elif p.exists() or p.is_symlink():
            p.unlink()
    t0 = time.perf_counter()
    root.mkdir(parents=True, exist_ok=True)
    small = root / "small"
    small.mkdir()
    for i in range(spec.small_files):
        data = _text_block(KiB, f"small{i:03d}")[: KiB - 1] + b"\n"
        (small / f"f{i:03d}.txt").write_bytes(data)
    listing = root / "listing"
    listing.mkdir()
    n_dirs = spec.listing_entries // 20
    for i in range(spec.listing_entries - n_dirs):
        (listing / f"file{i:04d}.txt").write_bytes(b"x" * (i % 97 + 1) * 10)
    for i in range(n_dirs):
        (listing / f"dir{i:04d}").mkdir()
    log(f"generating a tree of {spec.tree_top * spec.tree_sub} dirs x {spec.tree_files} files")
    _make_tree(root / "tree", spec)
    log(f"generating files of {spec.huge_mib}, {spec.big_mib} and {spec.edit_mib} MiB")
    _write_lines_file(root / "huge.txt", spec.huge_mib, "huge", last="THE LAST LINE")
    _write_lines_file(root / "big.txt", spec.big_mib, "big")
    _write_lines_file(root / "edit.pristine.txt", spec.edit_mib, "edit", middle=EDIT_OLD)
    reset_scratch(root)
    os.sync()
    stamp.write_text(json.dumps(want))
    log(f"fixtures ready in {time.perf_counter() - t0:.1f} s")


def reset_scratch(root: Path) -> None:
    scratch = root / "scratch"
    if scratch.exists():
        shutil.rmtree(scratch)
    scratch.mkdir()
    restore_edit_file(root)


def restore_edit_file(root: Path) -> None:
    shutil.copyfile(root / "edit.pristine.txt", root / "scratch" / "edit.txt")


MIB_CONTENT = ("0123456789abcdef" * 63 + "012345678901234\n") * 1024  # 1 MiB of 1 KiB lines


PATCH_FILES = 50


def restore_patch_files(ctx: Ctx) -> None:
    """scratch/patch/f00.py .. f49.py: 200 lines each, one marker line in the middle."""
    where = ctx.root / "scratch" / "patch"
    shutil.rmtree(where, ignore_errors=True)
    where.mkdir(parents=True)
    for n in range(PATCH_FILES):
        lines = [f"line {i} of file {n}: {'x' * 60}\n" for i in range(200)]
        lines[100] = f"{EDIT_OLD}\n"
        (where / f"f{n:02d}.py").write_text("".join(lines))


# code_map: the map of this repository (an export of its committed files under the
# fixtures) and of the big tree (105,050 entries, half of them .py files: the walk stops at
# code_map's 5,000-file cap), each on its first call (every file parsed) and again (each
# answered from the server's parse cache).
def export_repository(ctx: Ctx) -> None:
    """This repository's committed files at HEAD under ``repo/`` (once per commit)."""
    dest = ctx.root / "repo"
    head = run_text(["git", "-C", str(REPO), "rev-parse", "HEAD"]).strip()
    stamp = ctx.root / ".bench-repo-commit"
    if stamp.exists() and stamp.read_text() == head and dest.is_dir():
        return
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir()
    archive = subprocess.run(  # noqa: S603 - our own fixed command
        [shutil.which("git") or "git", "-C", str(REPO), "archive", "--format=tar", "HEAD"],
        capture_output=True,
        check=True,
    )
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(dest, filter="data")
    stamp.write_text(head)


#: The issue-28 ranking attack: files that each define one shared name and their own,
#: call three neighbours, and just under half of which call the shared name (a graph
#: of file pairs has 3,500 x 1,575 edges).
STORM_FILES = 3500


def make_storm(ctx: Ctx) -> None:
    """``storm/``: STORM_FILES small Python files that call each other (once)."""
    dest = ctx.root / "storm"
    stamp = dest / ".complete"
    if stamp.exists():
        return
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir()
    for i in range(STORM_FILES):
        calls = "".join(f"    f{(i + k) % STORM_FILES}(x)\n" for k in (1, 2, 3))
        shared = "    handler(x)\n" if i < 0.45 * STORM_FILES else ""
        (dest / f"m{i:04d}.py").write_text(
            f"def handler(x):\n    return x\n\n\ndef f{i}(x):\n{calls}{shared}"
        )
    stamp.touch()
