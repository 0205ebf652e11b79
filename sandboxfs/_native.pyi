"""Type stub for the cffi-compiled shim (native/sfs.c); only sandboxfs.binding.syscalls
imports it."""

from typing import Any

class _Lib:
    SFS_RESOLVE_NO_XDEV: int
    SFS_RESOLVE_NO_MAGICLINKS: int
    SFS_RESOLVE_NO_SYMLINKS: int
    SFS_RESOLVE_BENEATH: int
    SFS_RESOLVE_IN_ROOT: int
    SFS_RENAME_NOREPLACE: int
    SFS_RENAME_EXCHANGE: int
    SFS_FALLOC_FL_KEEP_SIZE: int
    SFS_STATX_BASIC_STATS: int
    SFS_STATX_BTIME: int
    SFS_PROC_SUPER_MAGIC: int
    def sfs_openat2(self, dirfd: int, path: bytes, flags: int, mode: int, resolve: int) -> int: ...
    def sfs_renameat2(
        self, olddirfd: int, oldpath: bytes, newdirfd: int, newpath: bytes, flags: int
    ) -> int: ...
    def sfs_link_fd(self, fd: int, newdirfd: int, newpath: bytes) -> int: ...
    def sfs_statx(self, dirfd: int, path: bytes, flags: int, mask: int, out: Any) -> int: ...
    def sfs_fallocate(self, fd: int, mode: int, offset: int, len: int) -> int: ...
    def sfs_fstatfs_type(self, fd: int) -> int: ...
    def sfs_landlock_abi_version(self) -> int: ...
    def sfs_landlock_create_ruleset(
        self, handled_access_fs: int, handled_access_net: int, scoped: int
    ) -> int: ...
    def sfs_landlock_add_path_rule(
        self, ruleset_fd: int, allowed_access: int, parent_fd: int
    ) -> int: ...
    def sfs_landlock_add_net_rule(self, ruleset_fd: int, allowed_access: int, port: int) -> int: ...
    def sfs_set_no_new_privs(self) -> int: ...
    def sfs_landlock_restrict_self(self, ruleset_fd: int) -> int: ...
    def sfs_set_mmap_threshold(self, bytes: int) -> int: ...
    def sfs_read_dir(self, dirfd: int, out: Any, count: Any) -> int: ...
    def sfs_free(self, buffer: Any) -> None: ...

    SFS_LEAF_GONE: int
    SFS_LEAF_TEXT: int
    SFS_LEAF_BINARY: int
    SFS_LEAF_SEARCH: int
    SFS_LEAF_LATER: int
    def sfs_read_leaves(
        self,
        dirfd: int,
        names: bytes,
        names_len: int,
        flags: int,
        resolve: int,
        retries: int,
        block: int,
        probe: int,
        needle: bytes,
        needle_len: int,
        arena: Any,
        arena_len: int,
        kinds: Any,
        spans: Any,
        errors: Any,
        out_len: int,
    ) -> int: ...
    def sfs_find(self, hay: Any, hay_len: int, needle: bytes, needle_len: int) -> int: ...
    def sfs_count_byte(self, buf: Any, len: int, byte: int) -> int: ...

class _FFI:
    def new(self, cdecl: str, init: Any = ...) -> Any: ...
    def buffer(self, cdata: Any, size: int = ...) -> Any: ...
    def from_buffer(self, python_buffer: Any) -> Any: ...
    def unpack(self, cdata: Any, length: int) -> bytes: ...

ffi: _FFI
lib: _Lib
