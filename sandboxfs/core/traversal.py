"""The one bounded, depth-first traversal every walk of sandboxfs is written on.

A :class:`Traversal` visits the tree below one directory, depth first, pre-order,
in the order its listings give, and tells what it meets as :class:`Step` values:

* ``ENTER``: a directory was listed (``entries``); :meth:`Traversal.prune` now skips them;
* ``ENTRY``: one entry of the directory ``parent``; for a subdirectory,
  :meth:`Traversal.prune` now keeps the traversal out of it;
* ``RUN`` (only when ``batched``): the entries of the directory ``parent`` (at
  ``rel``) between two of its subdirectories that are not subdirectories, in one
  step (``entries``); each subdirectory is then an ``ENTRY`` step of its own;
* ``LEAVE``: everything below the subdirectory ``directory`` was visited (post-order:
  a removal removes it now, from ``parent``); its descriptor is closed next;
* ``UNREADABLE``: the subdirectory at ``rel`` could not be opened or listed (``error``);
* ``TOO_DEEP``: the subdirectory at ``rel`` lies ``depth`` levels below the start:
  it is neither opened nor listed;
* ``TOO_MANY``: a listing took the entries visited past the cap: the traversal
  ends there, before any entry of that listing is visited.

What it guarantees, whatever the caller's listing and opening are:

* bounded: at most ``Bounds.depth`` levels are opened (the start is level 0), at
  most ``Bounds.entries`` entries are visited (counted a listing at a time), and
  every opening and listing of a directory is one step of the call's
  :class:`~sandboxfs.core.watch.Watch` (its time bound);
* one descriptor per level: a subdirectory is opened from the directory holding it
  (``open``), kept while what is below it is visited, then closed (also when the
  caller stops early or raises);
* what may be opened, and what a listing shows, is the caller's: the filesystem
  layer (:mod:`sandboxfs.fs.below`) opens each subdirectory exactly (never through
  a symlink) and lists it through the policy's judgement (hidden entries are
  never listed, so never visited); the chokepoint's rename check lists raw names
  and judges each itself.

It imports nothing of the chokepoint, so the chokepoint can use it: the layer below
the filesystem operations is where both may import it.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator, Sequence
from typing import Final, Generic, NamedTuple, TypeVar, final

from sandboxfs.core.watch import NO_WATCH, Watch

#: A directory as the caller holds it (a descriptor wrapper, or a relative path).
D = TypeVar("D")
#: An entry as the caller's listing gives it (its name first).
E = TypeVar("E", bound=tuple[object, ...])
Rel = tuple[str, ...]

ENTER: Final = "enter"
ENTRY: Final = "entry"
RUN: Final = "run"
LEAVE: Final = "leave"
UNREADABLE: Final = "unreadable"
TOO_DEEP: Final = "too deep"
TOO_MANY: Final = "too many"


@final
class Bounds(NamedTuple):
    """How far a traversal goes: ``depth`` levels below the start are never opened
    (``depth=1``: only the start is listed); at most ``entries`` entries visited."""

    depth: int
    entries: int


class Step(NamedTuple, Generic[D, E]):
    """What a traversal met (see the module's docstring for each ``kind``)."""

    kind: str
    #: The entry's, or the directory's, path below the start as names.
    rel: Rel
    entry: E | None = None
    #: The directory holding the entry (or the subdirectory left, or not read).
    parent: D | None = None
    #: The directory entered or left.
    directory: D | None = None
    entries: Sequence[E] = ()
    error: BaseException | None = None

    @property
    def name(self) -> str:
        return self.rel[-1]


_new_step = tuple.__new__  # a Step from all its fields, without NamedTuple's Python frame


@final
class _Level(Generic[D, E]):
    """A directory being visited: its entries, the indexes of those that are each a
    step of their own (all, or its subdirectories), and the index of the first entry
    not given yet."""

    __slots__ = ("at", "directory", "entries", "points", "rel")

    def __init__(
        self,
        directory: D,
        rel: Rel,
        entries: Sequence[E],
        subdirectories: Callable[[E], bool] | None,
    ) -> None:
        self.directory = directory
        self.rel = rel
        self.entries = entries
        self.at = 0
        if subdirectories is None:
            self.points: Iterator[int] = iter(range(len(entries)))
        else:
            self.points = iter([at for at, entry in enumerate(entries) if subdirectories(entry)])

    def skip(self) -> None:
        """Give none of its entries."""
        self.points = iter(())
        self.at = len(self.entries)


@final
class Traversal(Generic[D, E]):
    """The tree below ``top`` (owned by the caller), depth first.

    ``listing(directory, rel)`` gives a directory's entries (each a tuple, its name
    first); ``is_dir(entry)`` says which are subdirectories; ``opening(parent, rel,
    entry)`` opens one (raising for what cannot be), ``closing`` closes it.
    ``unreadable(error)`` says which errors of opening or listing a subdirectory
    are an ``UNREADABLE`` step (the traversal goes on); any other is raised.
    ``first``: the start's entries, already listed.  ``shown(rel)`` names a
    directory in the watch's steps.  ``check(step)`` hears every step but ``ENTRY``
    and ``RUN`` before it is given (it may raise: a bound turned into the caller's
    error).  ``batched``: the entries that are not subdirectories come in ``RUN``
    steps (a walk that looks at each entry costs a step per directory and
    subdirectory, not per entry)."""

    __slots__ = (
        "_batched",
        "_first",
        "_is_dir",
        "_pruned",
        "bounds",
        "check",
        "closing",
        "listing",
        "opening",
        "shown",
        "top",
        "unreadable",
        "visited",
        "watch",
    )

    def __init__(
        self,
        top: D,
        *,
        bounds: Bounds,
        listing: Callable[[D, Rel], Sequence[E]],
        is_dir: Callable[[E], bool],
        opening: Callable[[D, Rel, E], D],
        closing: Callable[[D], None],
        unreadable: Callable[[BaseException], bool] = lambda error: False,
        watch: Watch = NO_WATCH,
        shown: Callable[[Rel], str] = lambda rel: "/".join(rel) or ".",
        first: Sequence[E] | None = None,
        check: Callable[[Step[D, E]], None] | None = None,
        batched: bool = False,
    ) -> None:
        self.top = top
        self._batched = batched
        self.check = check
        self.bounds = bounds
        self.listing = listing
        self._is_dir = is_dir
        self.opening = opening
        self.closing = closing
        self.unreadable = unreadable
        self.watch = watch
        self.shown = shown
        self._first = first
        #: Entries visited so far (those of a listing that passed the cap included).
        self.visited = 0
        self._pruned = False

    def prune(self) -> None:
        """Skip what the step just given leads to: an ``ENTER``'s entries, or the
        subdirectory of an ``ENTRY``."""
        self._pruned = True

    def __iter__(self) -> Iterator[Step[D, E]]:
        is_dir, batched = self._is_dir, self._batched
        # The directories being visited, the start first, each with its entries left.
        levels: list[_Level[D, E]] = []
        try:
            if (yield from self._begin(levels)):
                return
            while levels:
                level = levels[-1]
                directory, rel, entries = level.directory, level.rel, level.entries
                for at in level.points:  # resumed where it stopped, after a descent
                    if level.at < at:  # batched: the entries before this subdirectory
                        yield _new_step(
                            Step, (RUN, rel, None, directory, None, entries[level.at : at], None)
                        )
                    level.at = at + 1
                    entry = entries[at]
                    here = (*rel, str(entry[0]))
                    self._pruned = False
                    yield _new_step(Step, (ENTRY, here, entry, directory, None, (), None))
                    if self._pruned:
                        self._pruned = False
                    elif batched or is_dir(entry):
                        if (yield from self._descend(directory, here, entry, levels)):
                            return
                        if levels[-1] is not level:
                            break  # depth first: what it holds comes next
                else:
                    yield from self._leave(levels)
        finally:
            for level in levels[1:]:
                self.closing(level.directory)

    def _leave(self, levels: list[_Level[D, E]]) -> Iterator[Step[D, E]]:
        """The last level's entries after its last subdirectory (batched), then its
        ``LEAVE`` step (none for the start) and its descriptor closed."""
        level = levels[-1]
        directory, rel, entries = level.directory, level.rel, level.entries
        if level.at < len(entries):
            yield _new_step(Step, (RUN, rel, None, directory, None, entries[level.at :], None))
        levels.pop()
        if levels:
            try:
                yield self._told(LEAVE, rel, parent=levels[-1].directory, directory=directory)
            finally:
                self.closing(directory)

    def _begin(self, levels: list[_Level[D, E]]) -> Generator[Step[D, E], None, bool]:
        """List the start onto ``levels`` (its ``ENTER`` step); True when the
        traversal ends there (``TOO_MANY``)."""
        top = self.top
        if self._first is not None:
            entries = self._first
        else:
            with self.watch.step(self.shown(())):
                entries = self.listing(top, ())
        step = self._entered(top, (), entries)
        yield step
        if step.kind == TOO_MANY:
            return True
        if self._pruned:
            self._pruned = False
        else:
            levels.append(self._level(top, (), entries))
        return False

    def _told(
        self,
        kind: str,
        rel: Rel,
        *,
        entry: E | None = None,
        parent: D | None = None,
        directory: D | None = None,
        entries: Sequence[E] = (),
        error: BaseException | None = None,
    ) -> Step[D, E]:
        """A step other than ``ENTRY``, heard by ``check`` first."""
        step: Step[D, E] = _new_step(Step, (kind, rel, entry, parent, directory, entries, error))
        if self.check is not None:
            self.check(step)
        return step

    def _descend(
        self, parent: D, here: Rel, entry: E, levels: list[_Level[D, E]]
    ) -> Generator[Step[D, E], None, bool]:
        """Open and list the subdirectory ``here`` onto ``levels`` (its ``ENTER``
        step), or say why not; True when the traversal ends there (``TOO_MANY``)."""
        if len(here) >= self.bounds.depth:
            yield self._told(TOO_DEEP, here, entry=entry, parent=parent)
            return False
        child = self._open(parent, here, entry)
        if isinstance(child, Step):
            yield child
            return False
        below, listed = child
        level = self._level(below, here, listed)
        levels.append(level)  # closed when it is left, or when the traversal ends
        step = self._entered(below, here, listed)
        yield step
        if step.kind == TOO_MANY:
            return True
        if self._pruned:
            self._pruned = False
            level.skip()
        return False

    def _level(self, directory: D, rel: Rel, entries: Sequence[E]) -> _Level[D, E]:
        return _Level(directory, rel, entries, self._is_dir if self._batched else None)

    def _entered(self, directory: D, rel: Rel, entries: Sequence[E]) -> Step[D, E]:
        """The ``ENTER`` step of a listing, or ``TOO_MANY`` when it took the count
        past the cap (the traversal ends there)."""
        self.visited += len(entries)
        kind = TOO_MANY if self.visited > self.bounds.entries else ENTER
        return self._told(kind, rel, directory=directory, entries=entries)

    def _open(self, parent: D, rel: Rel, entry: E) -> tuple[D, Sequence[E]] | Step[D, E]:
        """The subdirectory ``rel`` opened and listed (one watched step), or the
        ``UNREADABLE`` step saying why it could not be."""
        with self.watch.step(self.shown(rel)):
            try:
                child = self.opening(parent, rel, entry)
            except Exception as exc:
                if not self.unreadable(exc):
                    raise
                return self._told(UNREADABLE, rel, entry=entry, parent=parent, error=exc)
            try:
                return child, self.listing(child, rel)
            except BaseException as exc:
                self.closing(child)
                if not isinstance(exc, Exception) or not self.unreadable(exc):
                    raise
                return self._told(UNREADABLE, rel, entry=entry, parent=parent, error=exc)
