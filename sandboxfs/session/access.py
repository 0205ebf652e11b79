"""Which directories are allowed right now, and how a 2025-era client's Roots change it.

The allow-list in force is an immutable :class:`~sandboxfs.core.allowlist.AllowList`;
an update builds a new one and swaps it in.  While client Roots are being
fetched, tool calls wait (:meth:`AccessControl.ready`), so none runs against a
root the client has just withdrawn.

Rules (the seed README, "How It Works"):

* Without ``confine``, valid client Roots replace the command-line directories.
* With ``confine`` (``--confine-roots``, or forced by Landlock), a root inside a
  command-line directory is allowed as given, a root containing command-line
  directories is narrowed to them, and a root outside all of them is ignored
  and logged.
* An update with no valid root keeps the command-line directories if no root
  was ever in force; once one was, it revokes access until the client exposes
  a root again.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, final
from urllib.parse import unquote, urlsplit

import trio

from sandboxfs.binding import syscalls
from sandboxfs.core.allowlist import AllowList, Root
from sandboxfs.core.errors import TimedOut
from sandboxfs.core.pathnames import join, normalize_absolute, relative_to

log = logging.getLogger("sandboxfs")

#: How long a tool call waits for the client's Roots before failing.
ROOTS_WAIT_TIMEOUT: Final = 30.0


@final
@dataclass(frozen=True, slots=True)
class Effective:
    """The allowed directories in force and where they came from."""

    allow: AllowList
    source: str

    def describe(self) -> str:
        lines = [f"Effective allowed directories ({self.source}):"]
        lines.extend(f"  {name}" for name in self.allow.display())
        return "\n".join(lines)


def local_path(uri: str) -> str | None:
    """The absolute path of a local ``file://`` URI, or None for anything else."""
    parts = urlsplit(uri)
    if parts.scheme != "file" or parts.netloc not in ("", "localhost"):
        return None
    path = unquote(parts.path)
    if not path.startswith("/") or "\0" in path:
        return None
    return normalize_absolute(path)


def _open_beneath(cli_root: Root, below: tuple[str, ...], real: str, given: str) -> Root:
    """A client root inside a command-line directory, opened beneath that directory's
    descriptor so it cannot be anywhere else."""
    fd = syscalls.openat2(
        cli_root.fd,
        join(below),
        os.O_PATH | os.O_DIRECTORY,
        resolve=syscalls.RESOLVE_BENEATH | syscalls.RESOLVE_NO_MAGICLINKS,
    )
    return Root(fd, real, given)


def roots_from_uris(uris: Sequence[str], cli: AllowList, *, confine: bool) -> list[Root]:
    """Open the directories a client's Roots name (blocking: run it in a worker thread).

    Each problem with a root is logged and the root skipped.
    """
    roots: list[Root] = []
    for uri in uris:
        given = local_path(uri)
        if given is None:
            log.warning("Skipping client root that is not a local file:// URI: %s", uri)
            continue
        try:
            real = os.path.realpath(given, strict=True)
            if not os.path.isdir(real):
                log.warning("Skipping client root that is not a directory: %s", uri)
                continue
            if not confine:
                roots.append(Root.open(given))
                continue
            inside = cli.map(real)
            if inside is not None:
                roots.append(_open_beneath(inside[0], inside[1], real, given))
                continue
        except OSError as exc:
            log.warning("Skipping client root that cannot be opened: %s (%s)", uri, exc.strerror)
            continue
        narrowed = [r for r in cli.roots if relative_to(r.path, real) is not None]
        if narrowed:
            log.info("Client root %s narrowed to the command-line directories inside it", uri)
            roots.extend(narrowed)
        else:
            log.warning("Ignoring client root outside the command-line directories: %s", uri)
    unique: list[Root] = []
    for root in roots:
        if all(root is not kept for kept in unique):
            unique.append(root)
    return unique


@final
class AccessControl:
    """The allow-list in force for this connection, and its Roots updates."""

    def __init__(self, cli: AllowList, *, confine: bool, notes: tuple[str, ...] = ()) -> None:
        self.cli = cli
        self.confine = confine
        #: Lines list_allowed_directories adds after the directories.
        self.notes = notes
        source = "from the command line" if not cli.empty else "none yet: waiting for Roots"
        self._current = Effective(cli, source)
        self._roots_in_force = False
        self._pending: trio.Event | None = None
        self._generation = 0

    @property
    def current(self) -> Effective:
        return self._current

    def announce(self) -> None:
        """Log the effective allowed directories (at startup and on every change)."""
        log.info("%s", self._current.describe())

    def begin_update(self) -> int:
        """Mark a Roots update as under way: tool calls wait until it ends."""
        self._generation += 1
        if self._pending is None:
            self._pending = trio.Event()
        return self._generation

    def _release(self) -> None:
        if self._pending is not None:
            self._pending.set()
            self._pending = None

    def fail_update(self, generation: int, reason: str) -> None:
        """The Roots could not be fetched: keep what is in force."""
        log.warning(
            "Could not get the client's Roots (%s); keeping the current directories", reason
        )
        if generation == self._generation:
            self._release()

    def finish_update(self, generation: int, roots: list[Root]) -> None:
        """Install the directories of a Roots answer (stale answers are dropped)."""
        if generation != self._generation:
            log.info("Discarded a stale Roots answer: a newer update has started")
            return
        if roots:
            self._roots_in_force = True
            if self.confine and not self.cli.empty:
                source = "from the client's Roots, confined to the command-line directories"
            elif self.cli.empty:
                source = "from the client's Roots"
            else:
                source = "from the client's Roots, which replaced the command-line directories"
            self._current = Effective(AllowList.of(roots), source)
        elif self._roots_in_force:
            self._current = Effective(
                AllowList.of(()),
                "none: the client's Roots name no usable directory; access is revoked until "
                "it exposes one again",
            )
        else:
            source = "from the command line; the client's Roots name no usable directory"
            self._current = Effective(self.cli, source)
        self.announce()
        self._release()

    def client_without_roots(self) -> None:
        """A 2025-era client without the Roots capability: the command line stays."""
        self._current = Effective(self.cli, "from the command line; the client does not use Roots")
        self.announce()

    async def ready(self) -> Effective:
        """The allow-list to check a call against, once any Roots update has landed."""
        pending = self._pending
        if pending is not None:
            with trio.move_on_after(ROOTS_WAIT_TIMEOUT):
                await pending.wait()
            if not pending.is_set():
                raise TimedOut("Timed out waiting for the client's Roots; try again")
        return self._current
