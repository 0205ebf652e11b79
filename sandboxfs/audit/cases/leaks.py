"""Leaks: existence oracles, outside paths and sizes in replies, forged listing lines."""

from __future__ import annotations

import os

from sandboxfs.audit.cases.base import (
    case,
    links,
    size_pattern,
)
from sandboxfs.audit.harness import (
    CANARY_SIZE,
    CaseFailed,
    Fixture,
    Reply,
    Session,
)

# -- leaks -----------------------------------------------------------------------------------------


def _normalized(reply: Reply, *paths: str) -> str:
    text = reply.text
    for path in paths:
        text = text.replace(path, "<path>")
    return text


@case("leaks", "outside-existence-oracle")
async def _oracle(s: Session, fx: Fixture) -> None:
    existing = str(fx.outside / "secret.txt")
    missing = str(fx.outside / "no-such-file.txt")
    for tool in ("read_text_file", "get_file_info", "list_directory"):
        a = await s.call(tool, path=existing)
        b = await s.call(tool, path=missing)
        if _normalized(a, existing) != _normalized(b, missing):
            raise CaseFailed(f"{tool} tells an existing outside file from a missing one")


@case("leaks", "symlink-existence-oracle")
async def _link_oracle(s: Session, fx: Fixture) -> None:
    (fx.root / "to-existing").symlink_to(fx.outside / "secret.txt")
    (fx.root / "to-missing").symlink_to(fx.outside / "no-such-file.txt")
    for tool in ("read_text_file", "get_file_info"):
        a = await s.call(tool, path=fx.rel("to-existing"))
        b = await s.call(tool, path=fx.rel("to-missing"))
        differs = a.error != b.error or (
            a.error
            and _normalized(a, fx.rel("to-existing")) != _normalized(b, fx.rel("to-missing"))
        )
        if differs:  # a successful description of the links themselves may differ freely
            raise CaseFailed(f"{tool} tells a link to an existing outside file from a dangling one")


@case("leaks", "error-names-symlink-target")
async def _target_named(s: Session, fx: Fixture) -> None:
    links(fx)
    for target in ("abs-file", "rel-file", "abs-dir/secret.txt"):
        reply = await s.call("read_text_file", path=fx.rel(target))
        if str(fx.outside) in reply.text:
            raise CaseFailed(f"an error names where {target} points: {reply.text[:160]!r}")


@case("leaks", "size-of-outside-file")
async def _size_leak(s: Session, fx: Fixture) -> None:
    links(fx)
    reply = await s.call("list_directory_with_sizes", path=str(fx.root))
    # A size, as such: the digits may well turn up inside a revision or a timestamp.
    sized = size_pattern(CANARY_SIZE)
    if sized.search(reply.raw) or sized.search(reply.text):
        raise CaseFailed("list_directory_with_sizes reports the size of a file outside")
    info = await s.call("get_file_info", path=fx.rel("abs-file"))
    if sized.search(info.text):
        raise CaseFailed("get_file_info reports the size of a file outside")


@case("leaks", "symlink-size-is-its-target-length")
async def _link_size(s: Session, fx: Fixture) -> None:
    """A symlink's own size is the length of its text: for a link leading outside,
    that tells how long the outside path is."""
    target = str(fx.outside) + "/." * 1000 + "/secret.txt"
    (fx.root / "long-link").symlink_to(target)
    length = len(os.fsencode(target))
    sized = size_pattern(length)
    for tool, path in (
        ("get_file_info", fx.rel("long-link")),
        ("list_directory_with_sizes", fx.rel()),
    ):
        reply = await s.call(tool, path=path)
        if sized.search(reply.raw) or sized.search(reply.text):
            raise CaseFailed(f"{tool} gives an outside link's size ({length}: its text's length)")


@case("leaks", "newline-name-forges-entries")
async def _forged_lines(s: Session, fx: Fixture) -> None:
    """A name holding a newline must not make a listing or a search show an entry
    that does not exist (here ``[DIR] forged`` and ``[FILE] passwd``)."""
    (fx.root / "plain\n[DIR] forged").write_bytes(b"x")
    (fx.root / "other").mkdir()
    (fx.root / "other" / "y\n[FILE] passwd").write_bytes(b"y")
    forgeries = ("[DIR] forged", "[FILE] passwd")
    for tool, arguments in (
        ("list_directory", {"path": fx.rel()}),
        ("list_directory_with_sizes", {"path": fx.rel()}),
        ("search_files", {"path": fx.rel(), "pattern": "**/*"}),
    ):
        if not s.has(tool):
            continue
        reply = await s.call(tool, **arguments)
        forged = [ln.strip() for ln in reply.text.splitlines() if ln.strip().startswith(forgeries)]
        if forged:
            raise CaseFailed(f"{tool} shows an entry that does not exist: {forged[0]!r}")
