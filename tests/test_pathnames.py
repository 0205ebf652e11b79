"""Lexical path handling: normalization, prefix mapping with a separator boundary."""

from __future__ import annotations

import pytest

from sandboxfs.core.errors import InvalidPath
from sandboxfs.core.pathnames import (
    absolute_request,
    check_leaf,
    check_request_path,
    normalize_absolute,
    relative_to,
)


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/", "/"),
        ("//srv///ws/", "/srv/ws"),
        ("/srv/./ws/.", "/srv/ws"),
        ("/srv/ws/../ws2", "/srv/ws2"),
        ("/..", "/"),
        ("/../../etc", "/etc"),
        ("/a/b/../../..", "/"),
    ],
)
def test_normalize_absolute(path: str, expected: str) -> None:
    assert normalize_absolute(path) == expected


def test_relative_requests_resolve_against_the_base() -> None:
    assert absolute_request("notes/a.md", "/srv/ws") == "/srv/ws/notes/a.md"
    assert absolute_request("../escape", "/srv/ws") == "/srv/escape"
    assert absolute_request("notes", None) is None


def test_home_expansion_only_for_leading_tilde() -> None:
    assert absolute_request("~/x", "/base", home="/home/u") == "/home/u/x"
    assert absolute_request("~", "/base", home="/home/u") == "/home/u"
    assert absolute_request("a/~/x", "/base", home="/home/u") == "/base/a/~/x"
    assert absolute_request("~other/x", "/base", home="/home/u") == "/base/~other/x"


@pytest.mark.parametrize(
    ("path", "prefix", "expected"),
    [
        ("/srv/ws", "/srv/ws", ()),
        ("/srv/ws/a/b", "/srv/ws", ("a", "b")),
        ("/srv/ws-evil", "/srv/ws", None),
        ("/srv/ws-evil/x", "/srv/ws", None),
        ("/srv/wsx", "/srv/ws", None),
        ("/srv", "/srv/ws", None),
        ("/anything/at/all", "/", ("anything", "at", "all")),
    ],
)
def test_prefix_has_a_separator_boundary(
    path: str, prefix: str, expected: tuple[str, ...] | None
) -> None:
    assert relative_to(path, prefix) == expected


@pytest.mark.parametrize("bad", ["", "a\0b", "\0", "x" * 5000])
def test_unusable_request_paths_are_refused(bad: str) -> None:
    with pytest.raises(InvalidPath):
        check_request_path(bad)


@pytest.mark.parametrize("bad", ["", ".", "..", "a/b", "a\0"])
def test_leaf_must_be_one_entry_name(bad: str) -> None:
    with pytest.raises(InvalidPath):
        check_leaf(bad, "request")
