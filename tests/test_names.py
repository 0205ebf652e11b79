"""Names that would forge output or look alike are shown in one escaped form.

A file named ``notes\\n[DIR] backups`` must not show up as two entries, and a
name holding a byte that is not UTF-8 must not look like its U+FFFD twin.
Every text answer shows such names quoted (core.names), structured content
keeps the exact name where JSON can carry it, and every tool accepts the
quoted form back.
"""

from __future__ import annotations

import json
import os
import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st

from helpers import Tree
from mcp_client import run, session
from sandboxfs.core.names import (
    has_lone_surrogate,
    quote_name,
    quote_path,
    unquote_name,
    unquote_path,
)
from sandboxfs.fs.limits import Limits
from sandboxfs.tools import CallContext
from sandboxfs.tools.grepping import grep_files
from sandboxfs.tools.listing import get_file_info, list_directory, list_directory_with_sizes
from sandboxfs.tools.reading import read_text_file
from sandboxfs.tools.walking import directory_tree, search_files

FORGER = "notes\n[DIR] backups"
UNDECODABLE = os.fsdecode(b"caf\xe9")  # a Latin-1 name: not UTF-8
TWIN = "caf\ufffd"  # what the undecodable name would look like if decoded with "replace"

#: Names as the disk gives them: the bytes decoded by os.fsdecode (so a run of
#: escaped bytes that is valid UTF-8 is its characters; tests/test_canonical_names.py).
names = st.text(
    alphabet=st.characters(blacklist_characters="/\0", blacklist_categories=("Cs",))
    | st.sampled_from([chr(0xDC80 + b) for b in range(128)]),  # undecodable bytes
    min_size=1,
    max_size=30,
).map(lambda name: os.fsdecode(os.fsencode(name)))


@given(names)
def test_quoting_round_trips_and_never_leaves_a_control_character(name: str) -> None:
    shown = quote_name(name)
    if shown == name:
        assert unquote_name(shown) is None  # a plain name is never read as quoted
    else:
        assert unquote_name(shown) == name
        assert shown.startswith('"') and shown.endswith('"')
    categories = {unicodedata.category(c) for c in shown}
    assert not categories & {"Cc", "Cs", "Zl", "Zp"}, shown  # controls, raw bytes, separators
    assert "\n" not in shown and "\r" not in shown
    assert unquote_path("dir/" + shown) == "dir/" + name


def _tree(tree: Tree) -> None:
    for name in (FORGER, TWIN, "plain.txt"):
        (tree.root / name).write_text(f"content of {name!r} with NEEDLE\n")
    with open(os.path.join(os.fsencode(tree.root), b"caf\xe9"), "w") as f:
        f.write("the undecodable one with NEEDLE\n")
    (tree.root / "link").symlink_to(FORGER)


def test_every_text_answer_shows_such_names_quoted(tree: Tree) -> None:
    _tree(tree)
    ctx = CallContext(tree.sandbox(), Limits())
    listing = list_directory(ctx, ".")
    assert listing.text is not None
    lines = listing.text.splitlines()
    assert len(lines) == 5  # one line per entry: nothing forged
    assert f"[FILE] {quote_name(FORGER)}" in lines and "[DIR] backups" not in lines
    assert f"[FILE] {quote_name(UNDECODABLE)}" in lines and f"[FILE] {TWIN}" in lines
    names = {e["name"] for e in listing.structured["entries"]}  # type: ignore[index]
    assert FORGER in names and TWIN in names and quote_name(UNDECODABLE) in names
    sized = list_directory_with_sizes(ctx, ".").text or ""
    assert not any(line.startswith("[DIR] backups") for line in sized.splitlines())
    found = search_files(ctx, ".", "**/*").text or ""
    assert len(found.splitlines()) == 5 and quote_path(FORGER) in found
    tree_text = directory_tree(ctx, ".").text or ""
    assert {n["name"] for n in json.loads(tree_text)} == {
        quote_name(FORGER),
        quote_name(UNDECODABLE),
        TWIN,
        "plain.txt",
        "link",
    }
    grep = grep_files(ctx, "NEEDLE", path=".").text or ""
    assert len(grep.splitlines()) == 4 and f"{quote_name(FORGER)}:1:" in grep
    info = get_file_info(ctx, "link").text or ""
    assert f"symlinkTarget: {quote_name(FORGER)}" in info


def test_every_tool_accepts_the_quoted_form_back(tree: Tree) -> None:
    _tree(tree)
    ctx = CallContext(tree.sandbox(), Limits())
    assert "undecodable" in (read_text_file(ctx, quote_name(UNDECODABLE)).text or "")
    assert "undecodable" not in (read_text_file(ctx, TWIN).text or "")
    assert "[DIR] backups" in (read_text_file(ctx, "./" + quote_name(FORGER)).text or "")


def test_over_the_wire_the_twins_stay_apart(tree: Tree) -> None:
    _tree(tree)

    async def main() -> None:
        async with session(str(tree.root)) as s:
            listed = (await s.text("list_directory", path=".")).splitlines()
            assert f"[FILE] {quote_name(UNDECODABLE)}" in listed and f"[FILE] {TWIN}" in listed
            text = await s.text("read_text_file", path=quote_name(UNDECODABLE))
            assert "undecodable" in text

    run(main)


@pytest.mark.parametrize("size", [0, 10, 5000, (1 << 20) + 7, 3 << 20])
def test_a_lone_surrogate_is_found_anywhere_in_any_text(size: int) -> None:
    ascii_text, wide = "a" * size, "é✓" * (size // 2)
    assert not has_lone_surrogate(ascii_text) and not has_lone_surrogate(wide)
    for text in (ascii_text, wide):
        for at in {0, len(text) // 2, len(text)}:
            for lone in ("\ud800", "\udcff", "\udfff"):
                assert has_lone_surrogate(text[:at] + lone + text[at:])
    assert not has_lone_surrogate("😀" * 3000)  # a pair in UTF-16 is one code point here
