"""The one exception tree of sandboxfs.

Every :class:`SandboxError` message is safe to show to the client: it names
only the path as the client gave it, never a resolved path, a symlink's target
or the allow-list.  Every errno text (``"ENOENT: no such file or directory: a/b"``)
comes from one table here (:func:`errno_error`, :func:`from_oserror`); what the OS said
beyond the errno (its words, the names a call was given) goes to the debug log, never
into a message.
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar, Final, Literal, final

from sandboxfs.core.policy import PolicyRefusal

log = logging.getLogger(__name__)


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


#: A situation whose words say more than the errno's own ("" is the errno's own words,
#: which the converter uses).  Each is an entry of :data:`_TEXTS`; mypy checks the names.
Form = Literal[
    "",
    "hop limit",
    "destination exists",
    "not a directory there",
    "into itself",
    "not recursive",
    "not a file",
    "read-only file",
    "append left bytes",
    "patch changes twice",
    "patch would create",
    "patch creates",
    "patch file missing",
    "patch changes missing",
    "special file",
]

#: The errno of a form that fits any errno: the caller's.
ANY_ERRNO: Final = 0


@final
@dataclass(frozen=True, slots=True)
class _Text:
    """One entry: the error's class and its words, a template over ``{path}`` (as the
    client gave it) and the caller's details; the message is ``"<ERRNO>: <words>"``."""

    kind: type[SandboxError]
    words: str
    #: The code clients get, when it is not the errno's name.
    code: str | None = None


#: Every errno text a client can read, by errno and form: the one table.  Where a
#: situation needs its own words (or class, or code), it has its own form here.
_TEXTS: Final[Mapping[tuple[int, Form], _Text]] = {
    (errno.ENOENT, ""): _Text(NotFound, "no such file or directory: {path}"),
    (errno.ENOTDIR, ""): _Text(NotADirectory, "not a directory: {path}"),
    (errno.EISDIR, ""): _Text(IsADirectory, "is a directory: {path}"),
    (errno.EEXIST, ""): _Text(AlreadyExists, "file already exists: {path}"),
    (errno.ENOTEMPTY, ""): _Text(DirectoryNotEmpty, "directory not empty: {path}"),
    (errno.EACCES, ""): _Text(PermissionDenied, "permission denied: {path}"),
    (errno.EPERM, ""): _Text(PermissionDenied, "operation not permitted: {path}"),
    (errno.EROFS, ""): _Text(PermissionDenied, "read-only file system: {path}"),
    (errno.ETXTBSY, ""): _Text(PermissionDenied, "text file busy: {path}"),
    (errno.ELOOP, ""): _Text(LimitExceeded, "too many levels of symbolic links: {path}"),
    (errno.ENAMETOOLONG, ""): _Text(InvalidPath, "name too long: {path}"),
    (errno.ENOSPC, ""): _Text(SandboxError, "no space left on device: {path}"),
    (errno.EDQUOT, ""): _Text(SandboxError, "disk quota exceeded: {path}"),
    (errno.EFBIG, ""): _Text(LimitExceeded, "file too large: {path}"),
    (errno.EMLINK, ""): _Text(LimitExceeded, "too many links: {path}"),
    (errno.EOPNOTSUPP, ""): _Text(Unsupported, "operation not supported: {path}"),
    (errno.ENXIO, ""): _Text(NotARegularFile, "no such device or address: {path}"),
    (errno.EBUSY, ""): _Text(PermissionDenied, "resource busy: {path}"),
    # The resolver's own count of symlinks ran out (--symlink-hops), not the kernel's.
    (errno.ELOOP, "hop limit"): _Text(
        LimitExceeded, "too many levels of symbolic links: {path}", LimitExceeded.default_code
    ),
    # A rename, copy or new file refused: the destination's name is taken.
    (errno.EEXIST, "destination exists"): _Text(
        AlreadyExists, "destination already exists: {path}"
    ),
    # create_directory: the name is taken by something that is not a directory.
    (errno.EEXIST, "not a directory there"): _Text(
        AlreadyExists, "a file that is not a directory already exists: {path}"
    ),
    (errno.EINVAL, "into itself"): _Text(
        SandboxError,
        "cannot move a directory into itself, or the filesystem cannot rename without "
        "replacing: {source} -> {path}",
    ),
    (errno.ENOTEMPTY, "not recursive"): _Text(
        DirectoryNotEmpty,
        "directory not empty: {path}; set recursive to delete it and everything below it",
    ),
    (errno.EISDIR, "not a file"): _Text(IsADirectory, "is a directory, not a file: {path}"),
    (errno.EACCES, "read-only file"): _Text(
        PermissionDenied, "permission denied (the file is read-only): {path}"
    ),
    # A failed append whose bytes could not be cut back off: the append's own errno.
    (ANY_ERRNO, "append left bytes"): _Text(
        SandboxError,
        "the append failed after {written} of its bytes were written, and they could not "
        "be removed again (the file changed meanwhile): {path}",
    ),
    (errno.EINVAL, "patch changes twice"): _Text(
        SandboxError, "the patch changes one file twice: {first} and {path}"
    ),
    (errno.EEXIST, "patch would create"): _Text(
        AlreadyExists, "the patch would create {path}, which exists"
    ),
    (errno.EEXIST, "patch creates"): _Text(SandboxError, "the patch creates {path}, which exists"),
    (errno.ENOENT, "patch file missing"): _Text(NotFound, "no such file: {path}"),
    (errno.ENOENT, "patch changes missing"): _Text(
        NotFound, "no such file: {path} (the patch changes it)"
    ),
    (errno.EINVAL, "special file"): _Text(
        SandboxError, "a special file below {path} cannot be made again"
    ),
}


def errno_name(number: int | None) -> str:
    """The errno's name (``ENOENT``); ``EIO`` for none or one Python does not know."""
    return errno.errorcode.get(number or errno.EIO, "EIO")


def errno_error(number: int, path: str, form: Form = "", **details: object) -> SandboxError:
    """The error for errno ``number`` about ``path`` (as the client gave it), in the
    words of ``form``, which may take ``details`` (only ever the client's own text or
    numbers of ours).  An errno the table does not list speaks the OS's words."""
    name = errno_name(number)
    text = _TEXTS.get((number, form)) or _TEXTS.get((ANY_ERRNO, form))
    if text is None:
        if form:
            raise KeyError(f"no form {form!r} for {name}")
        return SandboxError(f"{name}: {os.strerror(number).lower()}: {path}", name)
    return text.kind(f"{name}: {text.words.format(path=path, **details)}", text.code or name)


def errno_words(number: int | None) -> str:
    """An errno as a report of a step that failed quotes it: ``EIO: Input/output
    error`` (the OS's own words, as they are)."""
    number = number or errno.EIO
    return f"{errno_name(number)}: {os.strerror(number)}"


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
    _log_context(exc, path)
    return errno_error(number, path)


def _log_context(exc: OSError, path: str) -> None:
    """What the OS said beyond the errno (its words, the names it was given): the
    debug log's, never the client's."""
    if log.isEnabledFor(logging.DEBUG):
        log.debug(
            "%s for %r: %s (%s)",
            errno_name(exc.errno),
            path,
            exc.strerror,
            ", ".join(repr(f) for f in (exc.filename, exc.filename2) if f is not None)
            or "no file names",
        )
