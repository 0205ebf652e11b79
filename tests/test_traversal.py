"""The one traversal keeps every bound: depth, entries, time (each directory read is a
watched step), never a symlink followed, never a hidden entry visited, one descriptor
per level and none left open."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from sandboxfs.core.allowlist import Root
from sandboxfs.core.chokepoint import LIST_FLAGS, Confinement, Directory, Location
from sandboxfs.core.policy import OPEN, Policy
from sandboxfs.core.traversal import (
    ENTER,
    ENTRY,
    LEAVE,
    RUN,
    TOO_DEEP,
    TOO_MANY,
    UNREADABLE,
    Bounds,
    Step,
    Traversal,
)
from sandboxfs.core.watch import Watch
from sandboxfs.fs.below import below
from sandboxfs.fs.entries import Entry, read_entries


@contextmanager
def _top(path: Path, policy: Policy = OPEN) -> Iterator[Directory]:
    root = Root.open(str(path), policy)
    confinement = Confinement()
    location = Location(root, ())
    fd = location.open(confinement, LIST_FLAGS, exact=True)
    with Directory(fd, location, str(path), confinement, readable=True) as directory:
        yield directory


def _steps(path: Path, bounds: Bounds, **options: object) -> list[Step[Directory, Entry]]:
    with _top(path, options.pop("policy", OPEN)) as top:  # type: ignore[arg-type]
        return list(below(top, "t", bounds=bounds, **options))  # type: ignore[arg-type]


def _chain(base: Path, levels: int) -> None:
    """``base/d/d/.../d/f``: ``levels`` directories, a file in the last."""
    here = base
    for _ in range(levels):
        here /= "d"
        here.mkdir()
    (here / "f").write_text("x")


def _kinds(steps: list[Step[Directory, Entry]]) -> list[tuple[str, str]]:
    return [(step.kind, "/".join(step.rel)) for step in steps]


def test_steps_come_depth_first_pre_order_with_each_directory_left_after_its_contents(
    tmp_path: Path,
) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x").write_text("")
    (tmp_path / "b").write_text("")
    assert _kinds(_steps(tmp_path, Bounds(8, 100))) == [
        (ENTER, ""),
        (ENTRY, "a"),
        (ENTER, "a"),
        (ENTRY, "a/x"),
        (LEAVE, "a"),
        (ENTRY, "b"),
    ]


def test_the_depth_bound_never_opens_a_directory_at_the_limit(tmp_path: Path) -> None:
    _chain(tmp_path, 5)
    steps = _steps(tmp_path, Bounds(3, 100))
    entered = [step.rel for step in steps if step.kind == ENTER]
    assert entered == [(), ("d",), ("d", "d")]
    assert [(k, r) for k, r in _kinds(steps) if k == TOO_DEEP] == [(TOO_DEEP, "d/d/d")]
    assert not any(len(step.rel) > 3 for step in steps)


def test_the_entry_bound_ends_the_walk_before_the_listing_that_passes_it(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    for i in range(5):
        (tmp_path / "a" / f"f{i}").write_text("")
    (tmp_path / "z").write_text("")
    with _top(tmp_path) as top:
        walk = below(top, "t", bounds=Bounds(8, 4))
        steps = list(walk)
    assert _kinds(steps) == [(ENTER, ""), (ENTRY, "a"), (TOO_MANY, "a")]
    assert walk.visited == 7  # the two at the top, the five of the listing that passed it
    assert _kinds(_steps(tmp_path, Bounds(8, 7)))[-1] == (ENTRY, "z")  # 7 fit


def test_every_directory_read_is_a_step_of_the_watch(tmp_path: Path) -> None:
    """The time bound: a call's watch times each opening and listing (a stalled one
    abandons the call), so every read of a directory happens inside a step."""
    _chain(tmp_path, 3)
    (tmp_path / "e").mkdir()
    reads: list[bool] = []

    class Recording(Watch):
        inside = False

        @contextmanager
        def step(self, path: str) -> Iterator[None]:
            self.inside = True
            try:
                yield
            finally:
                self.inside = False

    watch = Recording()

    def read(directory: Directory) -> list[Entry]:
        reads.append(watch.inside)
        return read_entries(directory, with_stat=False)

    with _top(tmp_path) as top:
        list(below(top, "t", bounds=Bounds(8, 100), watch=watch, read=read))
    assert reads == [True] * 5  # the top, d, d/d, d/d/d and e


def test_a_symlink_is_never_followed_even_to_a_directory_inside(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "inner").write_text("")
    (tmp_path / "link").symlink_to("real")
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    outside.mkdir()
    (outside / "secret").write_text("")
    (tmp_path / "out").symlink_to(outside)
    steps = _steps(tmp_path, Bounds(8, 100))
    assert [r for k, r in _kinds(steps) if k == ENTER] == ["", "real"]
    assert {"link", "out"} <= {r for k, r in _kinds(steps) if k == ENTRY}
    assert all(step.rel[:1] not in (("link",), ("out",)) or len(step.rel) == 1 for step in steps)
    assert not any("secret" in step.rel for step in steps)


def test_a_directory_swapped_for_a_symlink_is_unreadable_not_followed(tmp_path: Path) -> None:
    """The entry listed as a directory is a symlink by the time it is opened: the
    exact open refuses it (ELOOP), the walk says so and goes on."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").write_text("")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "inner").write_text("")
    with _top(tmp_path) as top:
        walk = below(top, "t", bounds=Bounds(8, 100), unreadable=lambda e: True)
        steps = []
        for step in walk:
            steps.append(step)
            if step.kind == ENTRY and step.rel == ("a",):
                (tmp_path / "a").rmdir()
                (tmp_path / "a").symlink_to("elsewhere")
    unreadable = [step for step in steps if step.kind == UNREADABLE]
    assert [step.rel for step in unreadable] == [("a",)]
    assert isinstance(unreadable[0].error, OSError)
    assert not any(step.rel[:1] == ("a",) and len(step.rel) > 1 for step in steps)


def test_an_entry_the_policy_hides_is_never_visited(tmp_path: Path) -> None:
    (tmp_path / "vault").mkdir()
    (tmp_path / "vault" / "inside").write_text("")
    (tmp_path / "keep").mkdir()
    (tmp_path / "keep" / "x.secret").write_text("")
    (tmp_path / "keep" / "y").write_text("")
    steps = _steps(tmp_path, Bounds(8, 100), policy=Policy.of(hide=["vault", "**/*.secret"]))
    seen = {"/".join(step.rel) for step in steps}
    assert seen == {"", "keep", "keep/y"}


def test_no_descriptor_is_left_open_when_the_caller_stops_or_raises(tmp_path: Path) -> None:
    _chain(tmp_path, 6)
    with _top(tmp_path) as top:
        before = len(os.listdir("/proc/self/fd"))
        walk = iter(below(top, "t", bounds=Bounds(16, 100)))
        for step in walk:
            if len(step.rel) == 5:
                break
        del walk
        with pytest.raises(RuntimeError):
            for step in below(top, "t", bounds=Bounds(16, 100)):
                if len(step.rel) == 4:
                    raise RuntimeError
        assert len(os.listdir("/proc/self/fd")) == before


def test_pruning_keeps_the_walk_out_of_a_directory(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    _chain(tmp_path / "a", 2)
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "f").write_text("")
    with _top(tmp_path) as top:
        walk = below(top, "t", bounds=Bounds(8, 100))
        seen = []
        for step in walk:
            seen.append((step.kind, "/".join(step.rel)))
            if step.kind == ENTRY and step.rel == ("a",):
                walk.prune()
            if step.kind == ENTER and step.rel == ("b",):
                walk.prune()
    assert seen == [(ENTER, ""), (ENTRY, "a"), (ENTRY, "b"), (ENTER, "b"), (LEAVE, "b")]


def test_a_batched_walk_gives_what_is_not_a_subdirectory_in_runs(tmp_path: Path) -> None:
    """The tools' walks: the entries between two subdirectories come as one RUN step
    (in order, right where a per-entry walk gives them), each subdirectory an ENTRY."""
    for name in ("a1", "a2", "c1"):
        (tmp_path / name).write_text("")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "inner").write_text("")
    (tmp_path / "d").mkdir()
    with _top(tmp_path) as top:
        walk = Traversal(
            top,
            bounds=Bounds(8, 100),
            listing=lambda directory, rel: read_entries(directory, with_stat=False),
            is_dir=lambda entry: entry.kind == "directory",
            opening=lambda directory, rel, entry: directory.child(entry.name, "t"),
            closing=Directory.close,
            batched=True,
        )
        seen = [
            (step.kind, "/".join(step.rel), [entry.name for entry in step.entries])
            for step in walk
            if step.kind != ENTER
        ]
    assert seen == [
        (RUN, "", ["a1", "a2"]),
        (ENTRY, "b", []),
        (RUN, "b", ["inner"]),
        (LEAVE, "b", []),
        (RUN, "", ["c1"]),
        (ENTRY, "d", []),
        (LEAVE, "d", []),
    ]
