"""One name, one judgement: every form a client may write a name in stands for bytes,
and the policy judges the one string for exactly the bytes the kernel is given.

A name reaches the server as typed (valid Unicode), in the quoted form listings
print (``"se\\xc3\\xb1as.txt"``, any byte escapable), or percent-encoded in a
``file://`` URI (resources, Roots).  Issue 26: unquoting once turned every
``\\xNN`` >= 0x80 into a surrogate of its own, so ``--hide 'señas.txt'`` judged
``se\\udcc3\\udcb1as.txt`` (visible) while the kernel opened ``señas.txt``.
The generated escape table in tests/test_policy.py attacks every operation with
these forms; here the property is checked for arbitrary byte names.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import quote

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st
from test_policy import HIDDEN_PATHS, KEPT, POLICY, SECRET, _plant

from helpers import Tree
from sandboxfs.core.allowlist import AllowList, Root
from sandboxfs.core.chokepoint import Confinement
from sandboxfs.core.names import has_lone_surrogate, quote_name, unquote_name
from sandboxfs.core.policy import Policy
from sandboxfs.core.resolver import Resolver
from sandboxfs.core.roots import local_path, roots_from_uris
from sandboxfs.session.access import AccessControl
from sandboxfs.session.dispatcher import SandboxfsServer, ServerOptions
from sandboxfs.session.jsonrpc import ProtocolError
from sandboxfs.session.resources import read_resource
from sandboxfs.tools.format import file_uri

#: Byte names: UTF-8 text (controls and every plane included), raw bytes that may or
#: may not be UTF-8, and mixtures of both.  Never ``/`` or NUL.
_pieces = st.one_of(
    st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=4).map(
        lambda text: text.encode("utf-8")
    ),
    st.binary(min_size=1, max_size=4),
)
byte_names = (
    st.lists(_pieces, min_size=1, max_size=6)
    .map(b"".join)
    .map(lambda raw: raw.replace(b"/", b"").replace(b"\0", b""))
    .filter(lambda raw: raw not in (b"", b".", b".."))
)

_SHORT = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t", "\r": "\\r", "\a": "\\a"}
_GLOB_SPECIAL = frozenset("*?[]{}\\!")


@st.composite
def written_forms(draw: st.DrawFn, raw: bytes) -> str:
    """One of the many quoted forms a client may write for the name ``raw``: each
    character literally, as ``\\uHHHH``, as its UTF-8 bytes ``\\xHH``, or with a short
    escape; a byte that is not UTF-8 always as ``\\xHH``."""
    out = []
    for char in os.fsdecode(raw):
        code = ord(char)
        if 0xDC80 <= code <= 0xDCFF:  # a byte that is not UTF-8
            out.append(f"\\x{code - 0xDC00:02x}")
            continue
        choices = [
            "".join(f"\\x{b:02x}" for b in char.encode("utf-8")),
            _SHORT.get(char, char),
        ]
        if code <= 0xFFFF:
            choices.append(f"\\u{code:04x}")
        out.append(draw(st.sampled_from(choices)))
    return '"' + "".join(out) + '"'


def _glob_literal(name: str) -> str:
    return "".join("\\" + c if c in _GLOB_SPECIAL else c for c in name)


@pytest.fixture(scope="module")
def directory(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("canonical")


@given(raw=byte_names, data=st.data())
def test_every_quoted_form_is_the_one_string_the_bytes_decode_to(
    raw: bytes, data: st.DataObject
) -> None:
    form = data.draw(written_forms(raw))
    assert unquote_name(form) == os.fsdecode(raw)
    assert unquote_name(quote_name(os.fsdecode(raw))) in (None, os.fsdecode(raw))


@given(raw=byte_names, data=st.data())
def test_the_policy_judges_exactly_the_bytes_the_kernel_is_given(
    directory: Path, raw: bytes, data: st.DataObject
) -> None:
    """Whatever form the client writes the name in, the location the resolver hands
    the chokepoint holds the name whose bytes the kernel opens, and the policy's
    verdict on it is its verdict on the raw bytes (decoded as a listing decodes them)."""
    canonical = os.fsdecode(raw)
    single = data.draw(st.integers(0, len(canonical) - 1))
    wildcard = _glob_literal(canonical[:single]) + "?" + _glob_literal(canonical[single + 1 :])
    hide = data.draw(st.sampled_from([_glob_literal(canonical), wildcard]))
    protect = data.draw(st.sampled_from([_glob_literal(canonical), "*", "nothing"]))
    policy = Policy.of(hide=[hide], protect=[protect])
    resolver = Resolver(AllowList.of([Root.open(str(directory), policy)]))
    form = data.draw(st.one_of(written_forms(raw), st.just(canonical)))
    if form == canonical and (has_lone_surrogate(form) or form.startswith('"')):
        form = data.draw(written_forms(raw))  # not UTF-8, or it would read as quoted
    location = resolver.locate(f"{directory}/sub/{form}")
    assert location.rel == ("sub", canonical)
    assert os.fsencode(location.rel[-1]) == raw  # what the kernel is given
    assert policy.verdict(location.rel) == policy.verdict(("sub", os.fsdecode(raw)))
    assert policy.verdict(location.rel).hidden


@given(raw=byte_names)
def test_a_percent_encoded_uri_names_the_same_bytes(raw: bytes) -> None:
    canonical = os.fsdecode(raw)
    if canonical in (".", ".."):
        return
    uri = file_uri(f"/srv/{canonical}")
    assert local_path(uri) == f"/srv/{canonical}"
    assert os.fsencode(local_path(uri) or "") == b"/srv/" + raw
    assert local_path("file:///srv/" + quote(raw)) == f"/srv/{canonical}"


# -- URIs reach nothing the policy hides ---------------------------------------------


def _uris(root: Path, path: str) -> dict[str, str]:
    """Every way a URI can name ``path`` beneath ``root``: its bytes percent-encoded
    (lower and upper case hex, with and without ``localhost``), and the quoted form
    of each component percent-encoded."""
    raw = os.fsencode(path)
    quoted = "/".join('"' + "".join(f"\\x{b:02x}" for b in part) + '"' for part in raw.split(b"/"))
    base = quote(os.fsencode(str(root)))
    return {
        "as-listed": file_uri(f"{root}/{os.fsdecode(raw)}"),
        "every-byte": f"file://{base}/" + "".join(f"%{b:02x}" for b in raw).replace("%2f", "/"),
        "localhost-upper": f"file://localhost{base}/"
        + "".join(f"%{b:02X}" for b in raw).replace("%2F", "/"),
        "quoted": file_uri(f"{root}/{quoted}"),
    }


def _plain_hidden_cases() -> list[str]:
    return sorted(case for case in HIDDEN_PATHS if "~" not in case)


@pytest.mark.parametrize("case", _plain_hidden_cases())
def test_resources_read_reaches_no_hidden_entry_under_any_encoding(tree: Tree, case: str) -> None:
    """Every hidden path of the policy table (tests/test_policy.py), in every URI
    encoding: never read, and no hidden content in the error."""
    _plant(tree)
    server = SandboxfsServer(
        ServerOptions(),
        AccessControl(AllowList.of([Root.open(str(tree.root), POLICY)]), confine=True),
    )
    for form, uri in _uris(tree.root, HIDDEN_PATHS[case]).items():
        try:
            answer = trio.run(read_resource, server, uri)
        except ProtocolError as exc:
            assert SECRET.decode() not in f"{exc.message} {exc.data}"
            continue
        raise AssertionError(f"{case} as {form} ({uri}) was read: {answer}")


def test_the_same_uri_encodings_reach_a_visible_file(tree: Tree) -> None:
    """The encodings above do work, so what refuses them is the policy."""
    _plant(tree)
    server = SandboxfsServer(
        ServerOptions(),
        AccessControl(AllowList.of([Root.open(str(tree.root), POLICY)]), confine=True),
    )
    for form, uri in _uris(tree.root, "café.md").items():
        if form == "quoted":
            continue  # a URI names bytes exactly: the quoted form is another name there
        answer = trio.run(read_resource, server, uri)
        assert answer["contents"][0]["text"] == KEPT.decode(), form


def test_a_root_a_client_offers_under_any_encoding_never_opens_a_hidden_directory(
    tree: Tree,
) -> None:
    _plant(tree)
    (tree.root / "señas-dir").mkdir()
    policy = Policy.of(hide=["señas-dir"])
    cli = AllowList.of([Root.open(str(tree.root), policy)])
    uris = list(_uris(tree.root, "señas-dir").values())
    assert roots_from_uris(uris, cli, confine=True, confinement=Confinement(), policy=policy) == []
    visible = roots_from_uris(
        [file_uri(str(tree.root))], cli, confine=True, confinement=Confinement(), policy=policy
    )
    assert [r.path for r in visible] == [str(tree.root)]


@given(st.text())
def test_any_uri_text_is_a_path_or_none_never_an_exception(text: str) -> None:
    """Lone surrogates included (no bytes stand for them): resources/read once answered
    -32603 for ``file:///\\ud800``."""
    for uri in (f"file:///{text}", f"file://localhost/{text}", text):
        got = local_path(uri)
        assert got is None or (got.startswith("/") and "\0" not in got)
