"""Safe wrappers over the native shim: the only module that imports ``sandboxfs._native``.

Every C result passes through :func:`_check`, which turns ``-errno`` into
:class:`OSError`.  Paths are refused if they contain NUL (C would silently
truncate them).  No policy lives here: which flags to pass is the caller's
business; this module only makes the calls safe to make from Python.
"""

from __future__ import annotations

import errno
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, final

from sandboxfs._native import ffi, lib

RESOLVE_NO_XDEV: Final = lib.SFS_RESOLVE_NO_XDEV
RESOLVE_NO_MAGICLINKS: Final = lib.SFS_RESOLVE_NO_MAGICLINKS
RESOLVE_NO_SYMLINKS: Final = lib.SFS_RESOLVE_NO_SYMLINKS
RESOLVE_BENEATH: Final = lib.SFS_RESOLVE_BENEATH
RESOLVE_IN_ROOT: Final = lib.SFS_RESOLVE_IN_ROOT
RENAME_NOREPLACE: Final = lib.SFS_RENAME_NOREPLACE
RENAME_EXCHANGE: Final = lib.SFS_RENAME_EXCHANGE
PROC_SUPER_MAGIC: Final = lib.SFS_PROC_SUPER_MAGIC
FALLOC_FL_KEEP_SIZE: Final = lib.SFS_FALLOC_FL_KEEP_SIZE

#: Test-only switch: makes :func:`probe_openat2` behave as if the kernel answered
#: with this errno name (``ENOSYS`` or ``EPERM``).  Read only by the probe.
TEST_OPENAT2_ERRNO_ENV: Final = "SANDBOXFS_TEST_OPENAT2_ERRNO"


def _check(rc: int) -> int:
    """Pass a non-negative result through; raise OSError for ``-errno``."""
    if rc < 0:
        raise OSError(-rc, os.strerror(-rc))
    return rc


def _path_bytes(path: str | bytes) -> bytes:
    raw = os.fsencode(path)
    if b"\0" in raw:
        raise ValueError("path contains a NUL byte")
    return raw


def openat2(dirfd: int, path: str | bytes, flags: int, *, resolve: int, mode: int = 0) -> int:
    """``openat2(2)``; the new descriptor is always close-on-exec."""
    return _check(lib.sfs_openat2(dirfd, _path_bytes(path), flags, mode, resolve))


def renameat2(
    olddirfd: int, oldname: str | bytes, newdirfd: int, newname: str | bytes, flags: int
) -> None:
    """``renameat2(2)``."""
    _check(lib.sfs_renameat2(olddirfd, _path_bytes(oldname), newdirfd, _path_bytes(newname), flags))


def link_fd(fd: int, newdirfd: int, newname: str | bytes) -> None:
    """``linkat(fd, "", newdirfd, newname, AT_EMPTY_PATH)``: name an ``O_TMPFILE`` file."""
    _check(lib.sfs_link_fd(fd, newdirfd, _path_bytes(newname)))


_FS_ENCODING: Final = sys.getfilesystemencoding()
_FS_ERRORS: Final = sys.getfilesystemencodeerrors()


def read_dir(fd: int) -> tuple[list[str], str]:
    """The entries of the directory open at ``fd`` (not ``.`` or ``..``): their names
    in byte order, decoded as :func:`os.fsdecode` decodes them, and one kind letter
    per name: ``f`` (regular file), ``d`` (directory), ``l`` (symlink), ``o``
    (other).  Nothing is opened or followed; the descriptor's offset is left at the
    start.  One call into C (the GIL released), and no Python code per entry."""
    out = ffi.new("char **")
    count = ffi.new("int64_t *")
    size = _check(lib.sfs_read_dir(fd, out, count))
    if size == 0:
        return [], ""
    try:
        raw = ffi.unpack(out[0], size)
    finally:
        lib.sfs_free(out[0])
    # NUL and the kind letters are ASCII, so decoding the whole buffer at once is
    # decoding each name on its own.
    text = raw.decode(_FS_ENCODING, _FS_ERRORS)
    n = count[0]
    return text[n:-1].split("\0"), text[:n]


@final
@dataclass(frozen=True, slots=True)
class Statx:
    """The fields of ``statx(2)`` that sandboxfs reports; times are in nanoseconds."""

    mode: int
    nlink: int
    uid: int
    gid: int
    ino: int
    size: int
    blocks: int
    dev: tuple[int, int]
    atime_ns: int
    mtime_ns: int
    ctime_ns: int
    #: ``None`` when the filesystem does not record a birth time.
    btime_ns: int | None


_AT_EMPTY_PATH: Final = 0x1000
_AT_SYMLINK_NOFOLLOW: Final = 0x100


def fstatx(fd: int) -> Statx:
    """``statx(fd, "", AT_EMPTY_PATH)``: works on ``O_PATH`` descriptors, symlinks included."""
    out = ffi.new("struct sfs_statx *")
    mask = lib.SFS_STATX_BASIC_STATS | lib.SFS_STATX_BTIME
    _check(lib.sfs_statx(fd, b"", _AT_EMPTY_PATH | _AT_SYMLINK_NOFOLLOW, mask, out))
    btime = None
    if out.mask & lib.SFS_STATX_BTIME:
        btime = out.btime_sec * 1_000_000_000 + out.btime_nsec
    return Statx(
        mode=out.mode,
        nlink=out.nlink,
        uid=out.uid,
        gid=out.gid,
        ino=out.ino,
        size=out.size,
        blocks=out.blocks,
        dev=(out.dev_major, out.dev_minor),
        atime_ns=out.atime_sec * 1_000_000_000 + out.atime_nsec,
        mtime_ns=out.mtime_sec * 1_000_000_000 + out.mtime_nsec,
        ctime_ns=out.ctime_sec * 1_000_000_000 + out.ctime_nsec,
        btime_ns=btime,
    )


def fallocate(fd: int, mode: int, offset: int, length: int) -> None:
    """``fallocate(2)``: with ``FALLOC_FL_KEEP_SIZE``, reserve space past the end of
    the file without changing its size."""
    _check(lib.sfs_fallocate(fd, mode, offset, length))


#: ``stx_attributes`` bit: the object is the root of a mount (Linux 5.8).
STATX_ATTR_MOUNT_ROOT: Final = 0x2000
_AT_NO_AUTOMOUNT: Final = 0x800


def is_mount_root(dirfd: int, name: str) -> bool:
    """Whether the entry ``name`` of ``dirfd`` is a mount point (a bind mount on the
    same filesystem included, which ``st_dev`` cannot show).  Not followed."""
    out = ffi.new("struct sfs_statx *")
    flags = _AT_SYMLINK_NOFOLLOW | _AT_NO_AUTOMOUNT
    _check(lib.sfs_statx(dirfd, _path_bytes(name), flags, lib.SFS_STATX_BASIC_STATS, out))
    return bool(out.attributes & STATX_ATTR_MOUNT_ROOT)


def fstatfs_type(fd: int) -> int:
    """The filesystem magic number of the filesystem ``fd`` lives on."""
    return _check(lib.sfs_fstatfs_type(fd))


def landlock_abi_version() -> int:
    """The kernel's Landlock ABI version; OSError (ENOSYS/EOPNOTSUPP) without Landlock."""
    return _check(lib.sfs_landlock_abi_version())


def landlock_create_ruleset(handled_fs: int, handled_net: int, scoped: int) -> int:
    """A new Landlock ruleset fd handling the given rights."""
    return _check(lib.sfs_landlock_create_ruleset(handled_fs, handled_net, scoped))


def landlock_add_path_rule(ruleset_fd: int, allowed: int, parent_fd: int) -> None:
    """Allow ``allowed`` beneath the directory (or file) ``parent_fd``."""
    _check(lib.sfs_landlock_add_path_rule(ruleset_fd, allowed, parent_fd))


def landlock_add_net_rule(ruleset_fd: int, allowed: int, port: int) -> None:
    """Allow ``allowed`` (bind/connect) on TCP ``port``."""
    _check(lib.sfs_landlock_add_net_rule(ruleset_fd, allowed, port))


def set_no_new_privs() -> None:
    """``prctl(PR_SET_NO_NEW_PRIVS, 1)``."""
    _check(lib.sfs_set_no_new_privs())


def landlock_restrict_self(ruleset_fd: int) -> None:
    """Confine the calling thread (and threads it starts later) to the ruleset."""
    _check(lib.sfs_landlock_restrict_self(ruleset_fd))


# -- seccomp (native/seccomp.h) -------------------------------------------------------

SECCOMP_FILTER_FLAG_TSYNC: Final = lib.SFS_SECCOMP_FILTER_FLAG_TSYNC


def seccomp_arch() -> int:
    """The ``AUDIT_ARCH_*`` value of this build's architecture; 0 if unsupported."""
    return int(lib.sfs_seccomp_arch())


def seccomp_x32_bit() -> int:
    """The bit x32 syscall numbers carry on x86_64; 0 on other architectures."""
    return int(lib.sfs_seccomp_x32_bit())


def syscall_number(name: str) -> int | None:
    """This architecture's number for the syscall ``name``, or None if it has no such
    call.  A name the shim's table (native/syscalls.txt) does not list is a
    programming error: ValueError, never a silently skipped rule."""
    number = int(lib.sfs_syscall_number(name.encode("ascii")))
    if number == -1:
        raise ValueError(f"syscall {name!r} is not in native/syscalls.txt")
    return None if number == -2 else number


def seccomp_install(program: Sequence[tuple[int, int, int, int]], *, tsync: bool) -> None:
    """Install ``program`` (BPF instructions: code, jt, jf, k) as a seccomp filter of
    the calling thread, or with ``tsync`` of every thread of the process.  Needs
    no_new_privs (or CAP_SYS_ADMIN).  Irreversible."""
    if not 0 < len(program) <= 4096:
        raise ValueError(f"a seccomp program has 1 to 4096 instructions, not {len(program)}")
    buffer = ffi.new("struct sfs_sock_filter[]", len(program))
    for i, (code, jt, jf, k) in enumerate(program):
        slot = buffer[i]
        slot.code, slot.jt, slot.jf, slot.k = code, jt, jf, k
    flags = SECCOMP_FILTER_FLAG_TSYNC if tsync else 0
    rc = _check(lib.sfs_seccomp_install(buffer, len(program), flags))
    if rc > 0:
        raise OSError(errno.EBUSY, f"thread {rc} could not take the seccomp filter")


def seccomp_action_available(action: int) -> bool:
    """Whether the kernel filters syscalls with seccomp and knows ``action``."""
    rc = int(lib.sfs_seccomp_action_available(action))
    if rc in (-errno.ENOSYS, -errno.EINVAL, -errno.EOPNOTSUPP):
        return False
    _check(rc)
    return True


@final
class Openat2Unavailable(RuntimeError):
    """The kernel cannot confine path resolution; the server must not start."""


def probe_openat2() -> None:
    """Check that ``openat2`` with ``RESOLVE_BENEATH`` works, or explain why not.

    Raises :class:`Openat2Unavailable` with a message for the operator.  There
    is no fallback: without ``openat2`` sandboxfs cannot confine paths.
    """
    simulated = os.environ.get(TEST_OPENAT2_ERRNO_ENV)
    root_fd = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        if simulated:
            code = getattr(errno, simulated)
            raise OSError(code, os.strerror(code))
        os.close(
            openat2(
                root_fd,
                ".",
                os.O_PATH | os.O_DIRECTORY,
                resolve=RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS,
            )
        )
    except OSError as exc:
        if exc.errno == errno.ENOSYS:
            reason = (
                "the kernel does not provide openat2(2) (ENOSYS); it needs Linux 5.6 or newer. "
                "Run sandboxfs on a newer kernel."
            )
        elif exc.errno == errno.EPERM:
            reason = (
                "openat2(2) is blocked (EPERM), probably by a seccomp profile such as an old "
                "container runtime default. Allow the openat2 syscall (for Docker: update "
                "Docker/libseccomp or pass a seccomp profile that permits it)."
            )
        else:
            reason = f"openat2(2) failed: {exc.strerror} ({errno.errorcode.get(exc.errno or 0)})."
        raise Openat2Unavailable(
            f"sandboxfs cannot start: {reason} sandboxfs never falls back to checking path "
            "strings, so it refuses to run without openat2."
        ) from None
    finally:
        os.close(root_fd)


def set_mmap_threshold(size: int) -> None:
    """Map allocations of at least ``size`` bytes on their own, so a big buffer's
    memory goes back to the kernel when it is freed (glibc ``M_MMAP_THRESHOLD``)."""
    _check(lib.sfs_set_mmap_threshold(size))


# -- grep's batch helpers (native/scan.h) ------------------------------------------------

#: What :func:`read_leaves` found for one name (see native/scan.h).
LEAF_GONE: Final = lib.SFS_LEAF_GONE
LEAF_TEXT: Final = lib.SFS_LEAF_TEXT
LEAF_BINARY: Final = lib.SFS_LEAF_BINARY
LEAF_SEARCH: Final = lib.SFS_LEAF_SEARCH
LEAF_LATER: Final = lib.SFS_LEAF_LATER


@final
class LeafBatch:
    """The buffers one :func:`read_leaves` call fills: an arena of ``arena_len`` bytes
    for the files kept, and a result for each of up to ``slots`` names.  Results are
    valid until the next call with the same batch; one thread uses a batch at a time."""

    __slots__ = ("_arena", "_errors", "_kinds", "_spans", "arena_len", "slots", "spans", "view")

    def __init__(self, arena_len: int, slots: int) -> None:
        if arena_len < 1 or slots < 1:
            raise ValueError("a batch needs an arena and at least one slot")
        self._arena = ffi.new("char[]", arena_len)
        self._kinds = ffi.new("uint8_t[]", slots)
        self._spans = ffi.new("int64_t[]", 2 * slots)
        self._errors = ffi.new("int32_t[]", slots)
        self.arena_len = arena_len
        self.slots = slots
        #: The arena (read-only): the bytes of name ``i`` are ``view[spans[2i]:][:spans[2i+1]]``.
        self.view = memoryview(ffi.buffer(self._arena)).toreadonly()
        #: Offset and length in the arena of each name kept (``LEAF_SEARCH``), else 0, 0.
        self.spans = memoryview(ffi.buffer(self._spans)).cast("q")

    def kinds(self, count: int) -> bytes:
        """The kinds (``LEAF_*``) of the first ``count`` names of the last call."""
        return bytes(ffi.buffer(self._kinds, min(count, self.slots)))

    def error(self, index: int) -> int:
        """The errno of name ``index`` (``LEAF_GONE``, ``LEAF_LATER``), or 0."""
        if not 0 <= index < self.slots:
            raise IndexError(index)
        return int(self._errors[index])


def read_leaves(
    batch: LeafBatch,
    dirfd: int,
    names: bytes,
    flags: int,
    *,
    resolve: int,
    retries: int,
    block: int,
    probe: int,
    needle: bytes = b"",
) -> int:
    """``sfs_read_leaves`` (native/scan.h): open (``flags`` plus ``O_CLOEXEC |
    O_NOFOLLOW | O_NONBLOCK | O_NOCTTY``, ``resolve``), check and read the regular
    files named by ``names`` (leaf names, each ended by a NUL) beneath ``dirfd``, in
    one call with the GIL released.  Returns how many names the batch now describes
    (call again with the rest); ValueError for a name that is not a leaf name."""
    rc = lib.sfs_read_leaves(
        dirfd,
        names,
        len(names),
        flags,
        resolve,
        retries,
        block,
        probe,
        needle,
        len(needle),
        batch._arena,
        batch.arena_len,
        batch._kinds,
        batch._spans,
        batch._errors,
        batch.slots,
    )
    if rc == -errno.EINVAL:
        raise ValueError("read_leaves: flags other than reading, or a name that is not a leaf")
    return _check(rc)


def _span(buffer: bytes | bytearray | memoryview, start: int, end: int) -> tuple[object, int]:
    """A C pointer to ``buffer[start:end]`` and its length, bounds checked."""
    if not 0 <= start <= end <= len(buffer):
        raise ValueError(f"span {start}:{end} outside a buffer of {len(buffer)} bytes")
    return ffi.from_buffer(buffer) + start, end - start


def find(buffer: bytes | bytearray | memoryview, needle: bytes, start: int, end: int) -> int:
    """``buffer.find(needle, start, end)`` in C (rare-byte ``memchr``, linear at worst)."""
    pointer, length = _span(buffer, start, end)
    at = lib.sfs_find(pointer, length, needle, len(needle))
    return at + start if at >= 0 else -1


def count_byte(buffer: bytes | bytearray | memoryview, byte: int, start: int, end: int) -> int:
    """``buffer.count(bytes([byte]), start, end)`` in C (vectorized)."""
    if not 0 <= byte <= 255:
        raise ValueError("not a byte")
    pointer, length = _span(buffer, start, end)
    return int(lib.sfs_count_byte(pointer, length, byte))
