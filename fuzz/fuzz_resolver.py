"""Invariant tested: whatever path a client sends, the resolver either returns a
descriptor beneath one of the allowed directories or raises SandboxError, never
anything else; and the error's message names only the path as given.

Checked for every input, against a fixed tree built once at start-up (in a
temporary directory) with relative and absolute symlinks that stay inside,
symlinks escaping to an outside canary directory (relatively, absolutely, via a
prefix sibling ``root-evil``, via ``/``, ``/proc/self/root``,
``/proc/self/fd/0`` and ``/proc/self/cwd``), loops, a 45-link chain, dangling
links, a FIFO, a second allowed directory opened through a symlinked name and a
nested allowed directory:

* ``Resolver.resolve(path[, follow=False])``, ``open_directory``, ``parent``
  (and ``follow_leaf``), and ``resolve_link`` of a symlink's text: on success
  the descriptor, read back through ``/proc/self/fd``, lies beneath the real
  path of one of *this resolver's* allowed directories, and the returned
  location reopens the same object;
* ``Resolver.canonical``: the location is made of clean components and is
  symlink-free (checked with ``RESOLVE_NO_SYMLINKS``), its parent exists;
* the only exceptions are SandboxError subclasses, whose message is a fixed
  sentence or ``"<sentence without '/'>: <path as given>"``, and contains the
  outside directory, the prefix sibling or the temporary base only if the
  request itself did.

Input format (so a regression input can be written by hand): byte 0 picks how
the rest becomes a path (bits 0-1: 0 UTF-8 with surrogateescape, 1 structured,
2 UTF-16-LE with surrogatepass, i.e. any code point including lone surrogates
as JSON can carry them, 3 Latin-1), the operation (bits 2-4, see ``OPS``) and
the resolver variant (bits 5-7, see ``VARIANTS``).  In structured mode the next
byte picks a prefix from ``PREFIXES`` and every further byte a component from
``COMPONENTS``; components are joined with ``/``.

Known bugs can be tolerated for long runs, never by default: set
``SANDBOXFS_FUZZ_TOLERATE`` to a comma-separated list of ids from ``KNOWN_BUGS``.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import sys
import tempfile
from collections.abc import Callable
from typing import Final

import atheris

# Instrument only when fuzzing: a test that imports this module to replay
# regression inputs must not install instrumented sandboxfs modules.
with (
    atheris.instrument_imports(include=["sandboxfs"])
    if __name__ == "__main__"
    else contextlib.nullcontext()
):
    from sandboxfs.binding import syscalls
    from sandboxfs.core.allowlist import AllowList, Root
    from sandboxfs.core.chokepoint import Confinement, Location
    from sandboxfs.core.errors import SandboxError
    from sandboxfs.core.pathnames import MAX_PATH_BYTES
    from sandboxfs.core.resolver import Resolver

KNOWN_BUGS: Final[dict[str, str]] = {}  # fixed ones stay as regression inputs
TOLERATE_ENV: Final = "SANDBOXFS_FUZZ_TOLERATE"


def tolerated(bug: str) -> bool:
    return bug in os.environ.get(TOLERATE_ENV, "").split(",")


# -- the tree ------------------------------------------------------------------------

BASE: Final = os.path.realpath(tempfile.mkdtemp(prefix="sandboxfs-fuzz-resolver-"))
ROOT1: Final = BASE + "/root"
ROOT2: Final = BASE + "/root2"
ALIAS2: Final = BASE + "/alias2"  # a symlink to ROOT2: R2 is opened through it
ROOT3: Final = ROOT1 + "/d"  # nested inside ROOT1
OUTSIDE: Final = BASE + "/outside"
EVIL: Final = BASE + "/root-evil"
CANARY: Final = b"CANARY: outside content must never be reached\n"
CHAIN: Final = 45  # links in the chain chain0 -> chain1 -> ... -> a


def _watch_for_exit(directory: str) -> Callable[[], None]:
    """Remove ``directory`` once this process is gone, however it ends.

    libFuzzer leaves with exit() (and on a crash, with _exit()), so Python's
    atexit handlers never run; a forked watcher waits for end-of-file on a pipe
    only this process holds, then removes the tree.
    """
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the watcher
        try:
            os.close(write_end)
            devnull = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(devnull, fd)
            os.read(read_end, 1)
            shutil.rmtree(directory, ignore_errors=True)
        finally:
            os._exit(0)
    os.close(read_end)

    def stop() -> None:
        os.close(write_end)
        os.waitpid(pid, 0)

    return stop


def _build_tree() -> None:
    links = {
        # inside, relative and absolute
        "root/a/up": "..",
        "root/a/sib": "../d",
        "root/a/abs_in": ROOT3,
        "root/d/up2": "../a",
        "root/in_rel": "a/b",
        "root/in_abs": ROOT1 + "/a",
        "root/in_abs_dotty": ROOT1 + "/./a/../a//b",
        "root/rootself": ".",
        "root/rootabs": ROOT1,
        "root/to_r2_abs": ALIAS2 + "/x",
        "root/to_r2_real": ROOT2 + "/x",
        "root2/back": ROOT1 + "/a",
        "outside/back_in": ROOT1,
        # escaping
        "root/a/abs_updown": ROOT1 + "/in_rel/../../outside",
        "root/a/rel_proc": "../" * 12 + "proc/self/root",
        "root/d/esc": "../../outside/secret.txt",
        "root/to_r2_rel": "../root2/x",
        "root/esc_rel": "../outside",
        "root/esc_rel_deep": "a/b/../../../outside/secret.txt",
        "root/esc_abs": OUTSIDE,
        "root/esc_abs_file": OUTSIDE + "/secret.txt",
        "root/esc_evil": EVIL + "/secret.txt",
        "root/esc_base": BASE,
        "root/dotdot": "..",
        "root/root_link": "/",
        "root2/back_rel": "../root/a",
        "root2/esc": "../outside",
        "root2/to_evil": EVIL,
        # magic links
        "root/proc_root": "/proc/self/root",
        "root/proc_root_in": "/proc/self/root" + ROOT1 + "/a",
        "root/proc_fd0": "/proc/self/fd/0",
        "root/proc_cwd": "/proc/self/cwd",
        # loops, dangling, not-a-directory
        "root/loop1": "loop2",
        "root/loop2": "loop1",
        "root/self": "self",
        "root/dangling": "nonexistent",
        "root/dangling_abs": ROOT1 + "/nonexistent",
        "root/dangling_out": OUTSIDE + "/nonexistent",
        "root/file_as_dir": "file.txt/x",
    }
    for i in range(CHAIN):
        links[f"root/chain{i}"] = f"chain{i + 1}" if i + 1 < CHAIN else "a"
    for d in ("root/a/b", "root/d", "root2/x", "outside/dir", "root-evil"):
        os.makedirs(f"{BASE}/{d}")
    for f in ("root/file.txt", "root/a/b/file.txt", "root/d/f", "root2/x/y.txt"):
        with open(f"{BASE}/{f}", "wb") as out:
            out.write(b"inside\n")
    for f in ("outside/secret.txt", "outside/dir/secret.txt", "root-evil/secret.txt"):
        with open(f"{BASE}/{f}", "wb") as out:
            out.write(CANARY)
    os.mkfifo(ROOT1 + "/fifo")
    os.symlink("root2", ALIAS2)
    for name, target in links.items():
        os.symlink(target, f"{BASE}/{name}")


STOP_WATCHER: Final = _watch_for_exit(BASE) if __name__ == "__main__" else None
_build_tree()
R1: Final = Root.open(ROOT1)
R2: Final = Root.open(ALIAS2)
R3: Final = Root.open(ROOT3)


def cleanup() -> None:
    """Close the allowed directories and remove the tree (for tests that import this)."""
    for root in (R1, R2, R3):
        root._finalizer()
    if STOP_WATCHER is not None:
        STOP_WATCHER()
    shutil.rmtree(BASE, ignore_errors=True)


def _resolver(
    roots: list[Root], home: str | None, symlink_hops: int = 40, no_xdev: bool = False
) -> Resolver:
    confinement = Confinement(no_xdev=no_xdev)
    return Resolver(
        AllowList.of(roots), symlink_hops=symlink_hops, confinement=confinement, home=home
    )


#: The resolvers byte 0 chooses from: allow-lists in several orders (a nested
#: root first or last, R2 alone, none), different homes for ``~``, hop limits.
VARIANTS: Final = (
    _resolver([R1, R2], home=ROOT1 + "/a"),
    _resolver([R1, R2, R3], home=OUTSIDE),
    _resolver([R2, R1], home=None, symlink_hops=3),
    _resolver([R1, R2], home=ALIAS2, no_xdev=True),
    _resolver([R3, R1], home=None),
    _resolver([R2], home=ROOT1),
    _resolver([], home=ROOT1),
    _resolver([R1, R2], home="/", symlink_hops=0),
)

OPS: Final = (
    "open",
    "open-nofollow",
    "open-dir",
    "follow-link",
    "parent",
    "parent-follow-leaf",
    "canonical",
    "canonical-nofollow",
)

PREFIXES: Final = (
    "",
    "/",
    ROOT1 + "/",
    ALIAS2 + "/",
    ROOT2 + "/",
    ROOT3 + "/",
    OUTSIDE + "/",
    EVIL + "/",
    BASE + "/",
    ROOT1,
    "/proc/self/root" + ROOT1 + "/",
    "/proc/self/cwd/",
    "/proc/self/fd/0/",
    "~/",
    "~",
    "./",
)

COMPONENTS: Final = (
    "a",
    "b",
    "d",
    "x",
    "..",
    ".",
    "",
    "file.txt",
    "y.txt",
    "f",
    "secret.txt",
    "nonexistent",
    "outside",
    "root",
    "root2",
    "alias2",
    "root-evil",
    "-evil",
    "dir",
    "fifo",
    "up",
    "sib",
    "abs_in",
    "up2",
    "in_rel",
    "in_abs",
    "in_abs_dotty",
    "rootself",
    "rootabs",
    "to_r2_abs",
    "to_r2_real",
    "back",
    "back_in",
    "abs_updown",
    "rel_proc",
    "esc",
    "to_r2_rel",
    "esc_rel",
    "esc_rel_deep",
    "esc_abs",
    "esc_abs_file",
    "esc_evil",
    "esc_base",
    "dotdot",
    "root_link",
    "back_rel",
    "to_evil",
    "proc_root",
    "proc_root_in",
    "proc_fd0",
    "proc_cwd",
    "loop1",
    "self",
    "dangling",
    "dangling_abs",
    "dangling_out",
    "file_as_dir",
    "chain0",
    "chain5",
    "chain20",
    "proc",
    "~",
    "x" * 256,
    "\udcff",
    "\0",
)

#: Messages that carry no path at all.
FIXED_MESSAGES: Final = frozenset(
    {
        "Path must be a string",
        "Path must not be empty",
        "Path must not contain a NUL byte",
        "Path is not valid Unicode (it contains a lone surrogate)",
        f"Path is longer than {MAX_PATH_BYTES} bytes",
        "Access denied - no allowed directories",
    }
)
#: Strings an error message may contain only if the request did.
SECRETS: Final = (OUTSIDE, EVIL, BASE, "/proc/self", "nonexistent", "CANARY")


def request_path(data: bytes) -> str:
    mode, payload = data[0] & 3, data[1:]
    if mode == 0:
        return payload.decode("utf-8", "surrogateescape")
    if mode == 2:
        return payload[: len(payload) // 2 * 2].decode("utf-16-le", "surrogatepass")
    if mode == 3:
        return payload.decode("latin-1")
    if not payload:
        return ""
    prefix = PREFIXES[payload[0] % len(PREFIXES)]
    return prefix + "/".join(COMPONENTS[b % len(COMPONENTS)] for b in payload[1:])


def encode_structured(op: str, variant: int, prefix: str, components: list[str]) -> bytes:
    """The input that makes TestOneInput resolve ``prefix + "/".join(components)``."""
    head = 1 | OPS.index(op) << 2 | variant << 5
    return bytes([head, PREFIXES.index(prefix), *(COMPONENTS.index(c) for c in components)])


def _allowed_real_paths(resolver: Resolver) -> list[str]:
    return [root.path for root in resolver.allow.roots]


def _check_beneath(fd: int, resolver: Resolver, path: str) -> str:
    actual = os.readlink(f"/proc/self/fd/{fd}")
    assert any(actual == r or actual.startswith(r + "/") for r in _allowed_real_paths(resolver)), (
        f"ESCAPE: {path!r} opened {actual!r}"
    )
    return actual


def _same_object(fd: int, again: int, resolver: Resolver, path: str) -> None:
    try:
        a, b = os.fstat(fd), os.fstat(again)
        assert (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino), path
        _check_beneath(again, resolver, path)
    finally:
        os.close(again)


def _check_canonical(resolver: Resolver, loc: Location, path: str, follow: bool) -> None:
    """A canonical location is clean and symlink-free (a final link only with follow=False),
    and everything but its final component exists."""
    assert loc.root in resolver.allow.roots, (path, loc)
    for name in loc.rel:
        assert name not in ("", ".", "..") and "/" not in name and "\0" not in name, (path, loc)
    strict = syscalls.RESOLVE_BENEATH | syscalls.RESOLVE_NO_SYMLINKS
    try:
        fd = syscalls.openat2(loc.root.fd, loc.relpath, os.O_PATH | os.O_NOFOLLOW, resolve=strict)
    except OSError as exc:
        assert exc.errno == errno.ENOENT and loc.rel, (path, loc, exc)
        parent = syscalls.openat2(
            loc.root.fd, loc.parent.relpath, os.O_PATH | os.O_DIRECTORY, resolve=strict
        )
        os.close(parent)
        return
    try:
        _check_beneath(fd, resolver, path)
        if follow:
            assert not stat.S_ISLNK(os.fstat(fd).st_mode), (path, loc)
    finally:
        os.close(fd)


def _check_error(exc: SandboxError, path: str) -> None:
    message = str(exc)
    for secret in SECRETS:
        assert secret not in message or secret in path, f"LEAK of {secret!r}: {message!r}"
    if message in FIXED_MESSAGES:
        return
    assert message.endswith(": " + path), f"message does not end with the path: {message!r}"
    sentence = message[: -len(path) - 2]
    assert "/" not in sentence, f"message names more than the path: {message!r}"


def _encodable(path: str) -> bool:
    try:
        os.fsencode(path)
    except UnicodeEncodeError:
        return False
    return True


def TestOneInput(data: bytes) -> None:
    if not data:
        return
    path = request_path(data)
    op = OPS[(data[0] >> 2) & 7]
    resolver = VARIANTS[data[0] >> 5]
    follow = not op.endswith("nofollow")
    try:
        if op in ("open", "open-nofollow"):
            with resolver.resolve(path, follow=follow) as handle:
                _check_beneath(handle.fd, resolver, path)
                # The location returned reopens the same object (identity checked).
                os.close(handle.reopen(os.O_PATH))
        elif op == "open-dir":
            with resolver.open_directory(path) as directory:
                _check_beneath(directory.fd, resolver, path)
        elif op == "follow-link":
            with resolver.resolve(path, follow=False) as link:
                if link.is_symlink:
                    base = resolver.canonical_handle(link).parent
                    with resolver.resolve_link(base, link.readlink(), path) as target:
                        _check_beneath(target.fd, resolver, path)
        elif op.startswith("parent"):
            parent = resolver.parent(path)
            if op == "parent-follow-leaf":
                parent = resolver.follow_leaf(parent)
            with parent:
                fd = parent.dir.fd
                _check_beneath(fd, resolver, path)
                assert stat.S_ISDIR(os.fstat(fd).st_mode), path
                name = parent.leaf
                assert name not in ("", ".", "..") and "/" not in name
                again = parent.dir.location.open(
                    resolver.confinement, os.O_PATH | os.O_DIRECTORY, exact=False
                )
                _same_object(fd, again, resolver, path)
        else:
            _check_canonical(resolver, resolver.canonical(path, follow=follow), path, follow)
    except SandboxError as exc:
        _check_error(exc, path)
    except UnicodeEncodeError:
        if tolerated("lone-surrogate-path") and not _encodable(path):
            return
        raise


if __name__ == "__main__":
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()
