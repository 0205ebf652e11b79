"""The one exception tree of sandboxfs.

Every :class:`SandboxError` message is safe to show to the client: it names
only the path as the client gave it, never a resolved path, a symlink's target
or the allow-list.  Details worth logging go to stderr, not into the message.
"""

from __future__ import annotations

import errno
import os
from typing import ClassVar, Final

from sandboxfs.core.policy import PolicyRefusal


class SandboxError(Exception):
    """A request sandboxfs refuses or cannot complete.  ``str()`` is client-safe."""

    #: The errno-like code of this kind of failure, for structured errors.
    default_code: ClassVar[str] = "EIO"

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        #: A short, stable, errno-like code (the OS's, when the OS refused).
        self.code = code or self.default_code

    def __str__(self) -> str:
        return self.message


class AccessDenied(SandboxError):
    """The path is outside the allowed directories, or would escape them."""

    default_code = "EACCES"


class PolicyDenied(AccessDenied):
    """The operator's rules refuse it: a policy (hidden, protected, read-only
    directory) or ``--no-xdev``.  Same code and words as any AccessDenied; the class
    only lets the metrics count refusals by reason."""


class PermissionDenied(SandboxError):
    """The operating system refused the operation (file permissions, read-only mount)."""

    default_code = "EPERM"


class NotFound(SandboxError):
    """The path, or one of its parent directories, does not exist."""

    default_code = "ENOENT"


class NotADirectory(SandboxError):
    """A directory was required."""

    default_code = "ENOTDIR"


class IsADirectory(SandboxError):
    """A file was required, and the path is a directory."""

    default_code = "EISDIR"


class NotARegularFile(SandboxError):
    """The path is a FIFO, socket, device or other special file."""

    default_code = "EINVAL"


class AlreadyExists(SandboxError):
    """The destination exists and the operation never overwrites."""

    default_code = "EEXIST"


class DirectoryNotEmpty(SandboxError):
    """A non-empty directory where an empty one was required."""

    default_code = "ENOTEMPTY"


class LimitExceeded(SandboxError):
    """A size, count, depth or symlink-hop limit was reached."""

    default_code = "E2BIG"


class InvalidPath(SandboxError):
    """The path string itself is unusable (empty, NUL byte, bad final name)."""

    default_code = "EINVAL"


class InvalidArgument(SandboxError):
    """An argument other than a path is unusable."""

    default_code = "EINVAL"


class TimedOut(SandboxError):
    """A filesystem call did not finish in time."""

    default_code = "ETIMEDOUT"


class Conflict(SandboxError):
    """The file changed since the revision the client expected; nothing was changed."""

    default_code = "ESTALE"


class Unsupported(SandboxError):
    """The filesystem or kernel does not support the operation."""

    default_code = "EOPNOTSUPP"


class HardLinked(SandboxError):
    """The file has other names, possibly outside; changing it in place is refused."""

    default_code = "EMLINK"


#: Characters of a client's text (a pattern, an argument) an error message quotes.
QUOTED_CHARS: Final = 200


def quoted(text: str, limit: int = QUOTED_CHARS) -> str:
    """``text`` as an error message quotes it: its ``repr``, cut after ``limit``
    characters (saying how long it was), so that a huge argument never makes a huge
    answer (a lone surrogate is spelled as an escape, safe for any answer or log)."""
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit]!r}… ({len(text)} characters)"


def outside(path: str) -> AccessDenied:
    """The standard refusal for a path outside every allowed directory."""
    return AccessDenied(f"Access denied - path outside allowed directories: {path}")


_ERRNO_MAP: dict[int, tuple[type[SandboxError], str]] = {
    errno.ENOENT: (NotFound, "ENOENT: no such file or directory"),
    errno.ENOTDIR: (NotADirectory, "ENOTDIR: not a directory"),
    errno.EISDIR: (IsADirectory, "EISDIR: is a directory"),
    errno.EEXIST: (AlreadyExists, "EEXIST: file already exists"),
    errno.ENOTEMPTY: (DirectoryNotEmpty, "ENOTEMPTY: directory not empty"),
    errno.EACCES: (PermissionDenied, "EACCES: permission denied"),
    errno.EPERM: (PermissionDenied, "EPERM: operation not permitted"),
    errno.EROFS: (PermissionDenied, "EROFS: read-only file system"),
    errno.ETXTBSY: (PermissionDenied, "ETXTBSY: text file busy"),
    errno.ELOOP: (LimitExceeded, "ELOOP: too many levels of symbolic links"),
    errno.ENAMETOOLONG: (InvalidPath, "ENAMETOOLONG: name too long"),
    errno.ENOSPC: (SandboxError, "ENOSPC: no space left on device"),
    errno.EDQUOT: (SandboxError, "EDQUOT: disk quota exceeded"),
    errno.EFBIG: (LimitExceeded, "EFBIG: file too large"),
    errno.EMLINK: (LimitExceeded, "EMLINK: too many links"),
    errno.EOPNOTSUPP: (Unsupported, "EOPNOTSUPP: operation not supported"),
    errno.ENXIO: (NotARegularFile, "ENXIO: no such device or address"),
    errno.EBUSY: (PermissionDenied, "EBUSY: resource busy"),
}


def from_oserror(exc: OSError, path: str, *, no_xdev: bool = False) -> SandboxError:
    """The one converter: an OS error about ``path`` (as the client gave it) as a
    SandboxError whose message names only that path.

    ``no_xdev`` says whether the server refuses mount crossings, which is what an
    ``EXDEV`` then means; otherwise ``EXDEV`` is resolution leaving the allowed
    directories.
    """
    number = exc.errno or errno.EIO
    if isinstance(exc, PolicyRefusal):
        return PolicyDenied(f"Access denied - {exc.reason}: {path}", errno.errorcode[number])
    if number == errno.EXDEV:
        if no_xdev:
            return PolicyDenied(f"Access denied - path crosses a mount point (--no-xdev): {path}")
        return outside(path)
    name = errno.errorcode.get(number, "EIO")
    kind, text = _ERRNO_MAP.get(number, (SandboxError, ""))
    if not text:
        text = f"{name}: {os.strerror(number).lower()}"
    return kind(f"{text}: {path}", name)
