"""``sandboxfs hash-token [TOKEN_FILE]``: the ``token_sha256`` a tenants file holds.

Reads the token from TOKEN_FILE (or, without one, from stdin), strips surrounding
whitespace as ``--token-file`` does, and prints its SHA-256 in hex.  A token that
could never be used is refused (exit 1, one line): an empty one always; a short or
well-known one, or a file its group or others may read, unless
``--allow-weak-tokens`` accepts it for tests.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Final

from sandboxfs.cli.arguments import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from sandboxfs.tenancy.config import hash_token
from sandboxfs.transports.http.credentials import (
    MAX_TOKEN_FILE_BYTES,
    WeakCredential,
    check_token,
    read_token_file,
)

USAGE: Final = "usage: sandboxfs hash-token [--allow-weak-tokens] [TOKEN_FILE]"
HELP: Final = f"""{USAGE}

Print the token_sha256 of the bearer token in TOKEN_FILE (or on stdin): what a
tenants file gives each tenant.  Surrounding whitespace is not part of the token.
Make a token with 'openssl rand -hex 32 > TOKEN_FILE && chmod 600 TOKEN_FILE'.

options:
  --allow-weak-tokens  TESTS ONLY: hash a short or well-known token, or a token
                       file its group or others may read
  -h, --help           show this help and exit

exit status:
  0  the hash was printed
  1  no usable token: unreadable, empty, weak, or in a file others may read
  2  the command line cannot be used"""


def main(argv: Sequence[str]) -> int:
    """Run the command; returns the exit status."""
    items = list(argv)
    if "-h" in items or "--help" in items:
        print(HELP)
        return EXIT_OK
    weak = "--allow-weak-tokens" in items
    items = [item for item in items if item != "--allow-weak-tokens"]
    if items[:1] == ["--"]:
        items = items[1:]
    elif items and items[0].startswith("-"):
        return _usage(f"unknown option {items[0]}")
    if len(items) > 1:
        return _usage("give one TOKEN_FILE (or the token on stdin)")
    try:
        token = _read(items[0] if items else None, allow_weak=weak)
    except WeakCredential as exc:
        print(f"sandboxfs hash-token: error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    print(hash_token(token))
    return EXIT_OK


def _read(path: str | None, *, allow_weak: bool) -> str:
    """The token in ``path`` (None: stdin), checked; WeakCredential says why not."""
    try:
        if path is not None:
            return read_token_file(path, allow_weak=allow_weak)
        data = sys.stdin.buffer.read(MAX_TOKEN_FILE_BYTES + 1)
    except OSError as exc:
        raise WeakCredential(f"cannot read {path or 'stdin'}: {exc.strerror or exc}") from None
    if not data.strip():
        raise WeakCredential("no token on stdin (e.g. sandboxfs hash-token TOKEN_FILE)")
    if len(data) > MAX_TOKEN_FILE_BYTES:
        raise WeakCredential("stdin holds more than one token")
    return check_token(data.decode("ascii", "replace"), "stdin", allow_weak=allow_weak)


def _usage(problem: str) -> int:
    print(f"sandboxfs hash-token: error: {problem}\n{USAGE}", file=sys.stderr)
    return EXIT_USAGE
