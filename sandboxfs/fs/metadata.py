"""Carrying a file's metadata over to its replacement or copy, through descriptors only."""

from __future__ import annotations

import errno
import logging
import os
import stat
from typing import Final

log = logging.getLogger(__name__)

#: Mode bits a written or copied file may carry: never setuid or setgid.
SAFE_MODE_BITS: Final = 0o1777

#: Extended attributes never carried over: file capabilities are privileges,
#: like setuid, and must not survive new content.
_NEVER_COPIED: Final = frozenset({"security.capability"})

#: Errors that mean "this filesystem or process cannot hold that attribute".
_SKIPPABLE: Final = frozenset({errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EACCES})


def copy_xattrs(src_fd: int, dst_fd: int) -> None:
    """Copy extended attributes from ``src_fd`` to ``dst_fd`` (both real fds).

    Attributes the destination cannot hold (no permission, unsupported by its
    filesystem) are skipped and logged; any other failure raises OSError.
    """
    try:
        names = os.listxattr(src_fd)
    except OSError as exc:
        if exc.errno in _SKIPPABLE:
            return
        raise
    for name in names:
        if name in _NEVER_COPIED:
            continue
        try:
            os.setxattr(dst_fd, name, os.getxattr(src_fd, name))
        except OSError as exc:
            if exc.errno not in _SKIPPABLE:
                raise
            log.warning("extended attribute %r not carried over: %s", name, exc.strerror)


def read_xattrs(fd: int) -> dict[str, bytes]:
    """All extended attributes of ``fd`` that can be read, by name."""
    try:
        names = os.listxattr(fd)
    except OSError as exc:
        if exc.errno in _SKIPPABLE:
            return {}
        raise
    result: dict[str, bytes] = {}
    for name in names:
        try:
            result[name] = os.getxattr(fd, name)
        except OSError as exc:
            if exc.errno not in _SKIPPABLE and exc.errno != errno.ENODATA:
                raise
    return result


def carry_owner_and_mode(src: os.stat_result, dst_fd: int) -> None:
    """Give ``dst_fd`` the permissions (minus setuid/setgid) and, where the process
    may, the owner of ``src``.  Ownership we may not give is left as is."""
    if (src.st_uid, src.st_gid) != (os.geteuid(), os.getegid()):
        try:
            os.fchown(dst_fd, src.st_uid, src.st_gid)
        except PermissionError:
            log.info("owner not carried over (not permitted)")
    os.fchmod(dst_fd, stat.S_IMODE(src.st_mode) & SAFE_MODE_BITS)
