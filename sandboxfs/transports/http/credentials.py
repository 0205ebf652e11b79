"""Bearer tokens: what counts as a credential, and reading one from a token file.

Weak credentials are refused unless the operator accepts them for tests
(``--allow-weak-tokens``):

* a token shorter than :data:`MIN_TOKEN_BYTES` (``openssl rand -hex 32`` gives 64);
* one of a short list of well-known test tokens (:data:`WELL_KNOWN_TOKENS`), or a
  tenants file's ``token_sha256`` that is the hash of one;
* a token file its group or others may read.  One exception: a file owned by
  another user (root, as a Kubernetes Secret volume is) whose group is one of this
  process's groups and that others cannot read: the kubelet makes a Secret
  mounted for the pod's ``fsGroup`` exactly so (mode 0440 whatever ``defaultMode``
  says), and this process could not make it any tighter.

Never a credential, whatever the options: an empty (or blank) token, and the hash
of the empty string as a ``token_sha256`` (what ``sha256sum`` of an empty or
failed token file gives): ``Authorization: Bearer`` with nothing after it must
never authenticate anyone.
"""

from __future__ import annotations

import hashlib
import os
import stat
from typing import Final, final

#: The shortest token accepted, in bytes (UTF-8, surrounding whitespace stripped).
MIN_TOKEN_BYTES: Final = 16
#: Bytes a token file may hold: one token, not a document.
MAX_TOKEN_FILE_BYTES: Final = 64 * 1024
#: Tokens found in examples, tutorials and test suites (each also capitalized and in
#: capitals).  Only their hashes matter for tenants files: the rest are short anyway.
WELL_KNOWN_TOKENS: Final = (
    "test",
    "test1",
    "test2",
    "test3",
    "testing",
    "token",
    "mytoken",
    "my-token",
    "secret",
    "s3cret",
    "password",
    "passw0rd",
    "changeme",
    "change-me",
    "admin",
    "example",
    "default",
    "dev",
    "demo",
    "foo",
    "bar",
    "letmein",
    "qwerty",
    "123456",
    "12345678",
    "1234567890",
    "sandboxfs",
    "test-token",
    "secret-token",
    "your-token-here",
)
#: The SHA-256 of the empty string: never a tenant's token_sha256.
EMPTY_SHA256: Final = hashlib.sha256(b"").hexdigest()
_WELL_KNOWN_HASHES: Final = {
    hashlib.sha256(form.encode()).hexdigest(): word
    for word in WELL_KNOWN_TOKENS
    for form in (word, word.capitalize(), word.upper())
}
#: Accepting weak credentials: the one line the server logs when it does.
WEAK_WARNING: Final = (
    "WARNING: --allow-weak-tokens: short or well-known tokens and token files others "
    "may read are accepted; this is for tests, never use it in production"
)


@final
class WeakCredential(Exception):
    """A credential that is refused; the message says why and what to do."""


def token_weakness(token: str) -> str | None:
    """Why ``token`` (already stripped) is weak, or None.  The empty token is not
    weak but no token at all: callers refuse it on its own."""
    if token in WELL_KNOWN_TOKENS or token.lower() in WELL_KNOWN_TOKENS:
        return "is a well-known test token"
    size = len(token.encode("utf-8", "surrogatepass"))
    if size < MIN_TOKEN_BYTES:
        return f"is {size} bytes long, under {MIN_TOKEN_BYTES}"
    return None


def check_token(token: str, where: str, *, allow_weak: bool) -> str:
    """``token`` stripped, if it may be used; else WeakCredential naming ``where``."""
    token = token.strip()
    if not token:
        raise WeakCredential(f"{where} is empty: an empty token is no credential")
    if not (token.isascii() and token.isprintable()) or len(token.split()) != 1:
        raise WeakCredential(
            f"the bearer token from {where} is not one word of printable ASCII, so no "
            "client could send it in an Authorization header"
        )
    weakness = token_weakness(token)
    if weakness is not None and not allow_weak:
        raise WeakCredential(
            f"the bearer token from {where} {weakness}: make one with "
            "'openssl rand -hex 32' (or accept it for tests with --allow-weak-tokens)"
        )
    return token


def hash_weakness(digest: str) -> tuple[str, bool] | None:
    """Why a ``token_sha256`` (64 lowercase hex digits) is refused, and whether any
    option could accept it (the empty token's hash: never); None if it is fine."""
    if digest == EMPTY_SHA256:
        return "is the SHA-256 of the empty string (an empty or unreadable token file)", False
    word = _WELL_KNOWN_HASHES.get(digest)
    if word is not None:
        return f"is the SHA-256 of the well-known test token {word!r}", True
    return None


def file_exposure(st: os.stat_result) -> str | None:
    """Who else may read a token file with this status, or None if nobody may."""
    mode = stat.S_IMODE(st.st_mode)
    if mode & stat.S_IROTH:
        return f"others may read it (mode {mode:04o})"
    if not mode & stat.S_IRGRP:
        return None
    ours = st.st_gid == os.getegid() or st.st_gid in os.getgroups()
    if st.st_uid != os.geteuid() and ours:
        return None  # a Secret volume's file: another owner, our own group
    return f"its group may read it (mode {mode:04o})"


def read_token_file(path: str, *, allow_weak: bool) -> str:
    """The token in the file ``path``, checked.  Raises OSError if it cannot be read,
    WeakCredential if it may not be used."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOCTTY)
    try:
        exposure = file_exposure(os.fstat(fd))
        data = b""
        while len(data) <= MAX_TOKEN_FILE_BYTES:
            chunk = os.read(fd, MAX_TOKEN_FILE_BYTES + 1 - len(data))
            if not chunk:
                break
            data += chunk
    finally:
        os.close(fd)
    where = f"--token-file {path}"
    if exposure is not None and not allow_weak:
        raise WeakCredential(
            f"{where}: {exposure}; make it readable by this user alone (chmod 600), "
            "or accept it for tests with --allow-weak-tokens"
        )
    if len(data) > MAX_TOKEN_FILE_BYTES:
        raise WeakCredential(f"{where} holds more than one token ({MAX_TOKEN_FILE_BYTES} bytes+)")
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError:
        raise WeakCredential(
            f"{where} is not ASCII text: a bearer token is printable ASCII"
        ) from None
    return check_token(text, where, allow_weak=allow_weak)
