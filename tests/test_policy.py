"""Per-directory policy: read-only directories, hidden and protected paths.

The table below is generated like the escape table (tests/test_escapes.py):
every public operation of the façade, through each path it declares, against
each way of naming a hidden or protected entry (directly, through a symlink,
through a directory on the way, through a symlinked directory).  Hidden content
and names never come back; hidden and protected entries never change.
"""

from __future__ import annotations

import errno
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_escapes import TARGETS, _call

from helpers import Tree, exchanging, in_child, make_tree, snapshot
from sandboxfs.cli.policies import Rules, configure, load_policy_file, split_mode
from sandboxfs.core import landlock
from sandboxfs.core.allowlist import AllowList, Root, nest_policies
from sandboxfs.core.errors import AccessDenied, SandboxError
from sandboxfs.core.globs import GlobError, compile_glob, name_matcher
from sandboxfs.core.policy import PRESETS, Policy, PolicyError
from sandboxfs.core.resolver import Resolver
from sandboxfs.fs.facade import Sandbox
from sandboxfs.fs.limits import Limits
from sandboxfs.tools import CallContext, writing
from sandboxfs.tools.grepping import grep_files
from sandboxfs.tools.listing import list_directory
from sandboxfs.tools.walking import directory_tree, search_files
from sandboxfs.tools.writing import delete_file, move_file

SECRET = b"HIDDEN-CONTENT-7f3a"
KEPT = b"protected content\n"
#: Names outside ASCII are named literally and by a "?" on their last character: the
#: policy must judge the one string for the bytes the kernel opens, whatever form the
#: client used (issue 26: the quoted form with \xHH escapes once walked past both).
POLICY = Policy.of(
    hide=["*.secret", "vault", "señas.txt", "key?"], protect=["keep.txt", "frozen", "café.md"]
)


# -- the rules themselves ------------------------------------------------------------


@pytest.mark.parametrize(
    ("rel", "hidden", "protected"),
    [
        (("a.secret",), True, False),
        (("deep", "er", "a.secret"), True, False),
        (("vault",), True, False),
        (("vault", "inside.txt"), True, False),
        (("x", "vault", "y"), True, False),
        (("keep.txt",), False, True),
        (("sub", "keep.txt"), False, True),
        (("frozen", "a", "b"), False, True),
        (("secret",), False, False),
        (("a.secret.txt",), False, False),
        (("vaults",), False, False),
        ((), False, False),
    ],
)
def test_a_pattern_without_a_slash_matches_a_name_at_any_depth_and_all_below_it(
    rel: tuple[str, ...], hidden: bool, protected: bool
) -> None:
    verdict = POLICY.verdict(rel)
    assert (verdict.hidden, verdict.protected) == (hidden, protected)


def test_a_pattern_with_a_slash_is_anchored_at_the_allowed_directory() -> None:
    policy = Policy.of(hide=[".git/config"])
    assert policy.verdict((".git", "config")).hidden
    assert not policy.verdict(("sub", ".git", "config")).hidden
    assert Policy.of(hide=["**/.git/config"]).verdict(("sub", ".git", "config")).hidden


def test_a_narrower_root_keeps_the_policy_of_the_directory_it_lies_in() -> None:
    narrowed = POLICY.beneath(("deep", "vault"))
    assert narrowed.verdict(()).hidden
    assert POLICY.beneath(("deep",)).verdict(("vault", "x")).hidden
    assert not POLICY.beneath(("deep",)).verdict(("x",)).hidden


@pytest.mark.parametrize("pattern", ["", "!x", "/abs", "dir/", "[", "a" * 5000])
def test_an_unusable_pattern_is_refused_with_its_reason(pattern: str) -> None:
    try:
        Policy.of(hide=[pattern])
    except PolicyError as exc:
        assert "--hide" in str(exc)
    else:
        assert pattern == "[", "a pattern that cannot work was accepted"


def test_the_secrets_preset_hides_keys_and_environment_files() -> None:
    policy = Policy.of(presets=["secrets"])
    for rel in [(".env",), ("app", ".env.local"), ("id_rsa",), ("tls.key",), ("c.pem",)]:
        assert policy.verdict(rel).hidden, rel
    assert policy.verdict((".git", "config")).hidden
    assert policy.verdict(("lib", ".git", "config")).hidden
    assert not policy.verdict(("src", "main.py")).hidden
    with pytest.raises(PolicyError, match="unknown preset"):
        Policy.of(presets=["nope"])
    assert "secrets" in PRESETS


def test_directory_modes_and_policy_files_combine(tmp_path: Path) -> None:
    assert split_mode("/a:ro") == ("/a", False)
    assert split_mode("/a:rw") == ("/a", True)
    assert split_mode("/a:ro:rw") == ("/a:ro", True)
    assert split_mode("/a:x") == ("/a:x", None)
    file = tmp_path / "policy.toml"
    file.write_text(
        'hide = ["*.log"]\n[[directory]]\npath = "/srv/p"\nmode = "ro"\nprotect = ["README.md"]\n'
    )
    got = configure(["/a:ro", "/b"], Rules(hide=("*.pem",)), str(file), read_only=False)
    assert [(d.path, d.policy.writable) for d in got] == [
        ("/a", False),
        ("/b", True),
        ("/srv/p", False),
    ]
    assert got[0].policy.hide == ("*.pem", "*.log")
    assert got[2].policy.protect == ("README.md",)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("hide = 3\n", "hide must be a string or a list of strings"),
        ("colour = 1\n", "unknown key 'colour'"),
        ('[[directory]]\nmode = "ro"\n', "path must be a non-empty string"),
        ('[[directory]]\npath = "/x"\nmode = "rx"\n', "mode must be 'ro' or 'rw'"),
        ('[[directory]]\npath = "/x"\nowner = 1\n', "unknown key 'owner'"),
        ("hide = [\n", "not valid TOML"),
        ('hide = ["!x"]\n', "not negated"),
    ],
)
def test_a_bad_policy_file_names_its_problem(tmp_path: Path, text: str, problem: str) -> None:
    file = tmp_path / "p.toml"
    file.write_text(text)
    with pytest.raises(PolicyError, match=problem.replace("(", r"\(").replace("[", r"\[")):
        configure([], Rules(), str(file), read_only=False)


# -- the generated table -------------------------------------------------------------


def _plant(tree: Tree, *, hidden: bool = True) -> None:
    root = tree.root
    if hidden:
        (root / "a.secret").write_bytes(SECRET)
        (root / "vault").mkdir()
        (root / "vault" / "inside.txt").write_bytes(SECRET)
        (root / "señas.txt").write_bytes(SECRET)
        (root / "keyé").write_bytes(SECRET)
    (root / "keep.txt").write_bytes(KEPT)
    (root / "café.md").write_bytes(KEPT)
    (root / "frozen").mkdir()
    (root / "frozen" / "f.txt").write_bytes(KEPT)
    (root / "ln-s").symlink_to("a.secret")
    (root / "ln-v").symlink_to("vault")
    (root / "ln-k").symlink_to("keep.txt")
    (root / "ln-f").symlink_to(str(root / "frozen"))


HIDDEN_PATHS = {
    "hidden-file": "a.secret",
    "hidden-dir": "vault",
    "hidden-dir-child": "vault/inside.txt",
    "link-to-hidden-file": "ln-s",
    "link-to-hidden-dir-child": "ln-v/inside.txt",
    "fresh-hidden-name": "new.secret",
    "fresh-name-in-hidden-dir": "vault/new.txt",
    "hidden-non-ascii-name": "señas.txt",
    "hidden-by-question-mark": "keyé",
}
PROTECTED_PATHS = {
    "protected-file": "keep.txt",
    "protected-dir": "frozen",
    "protected-dir-child": "frozen/f.txt",
    "link-to-protected-file": "ln-k",
    "absolute-link-to-protected-dir-child": "ln-f/f.txt",
    "fresh-name-in-protected-dir": "frozen/new.txt",
    "protected-non-ascii-name": "café.md",
}


def _escaped(name: str, *, every_byte: bool) -> str:
    """``name`` in the quoted form the tools show and accept back, its bytes outside
    ASCII (or all of them) written ``\\xHH``."""
    return (
        '"'
        + "".join(
            f"\\x{byte:02x}" if every_byte or byte >= 0x80 else chr(byte)
            for byte in os.fsencode(name)
        )
        + '"'
    )


def _quoted_forms(paths: dict[str, str]) -> dict[str, str]:
    """Every path with each component quoted, every byte escaped; and, for a path
    outside ASCII, the form a listing would suggest (only those bytes escaped)."""
    forms = {}
    for case, path in paths.items():
        parts = path.split("/")
        forms[f"{case}~quoted"] = "/".join(_escaped(p, every_byte=True) for p in parts)
        if not path.isascii():
            forms[f"{case}~utf8-bytes"] = "/".join(_escaped(p, every_byte=False) for p in parts)
    return forms


HIDDEN_PATHS.update(_quoted_forms(HIDDEN_PATHS))
PROTECTED_PATHS.update(_quoted_forms(PROTECTED_PATHS))
HIDDEN_NAMES = ("a.secret", "inside.txt", "vault", "señas.txt", "keyé")


def _sandbox(tree: Tree, policy: Policy = POLICY) -> Sandbox:
    return Sandbox(Resolver(AllowList.of([Root.open(str(tree.root), policy)])))


def _guarded(tree: Tree) -> dict[str, Any]:
    everything = snapshot(tree.root)
    return {
        k: v
        for k, v in everything.items()
        if k.split("/")[0]
        in ("a.secret", "vault", "keep.txt", "frozen", "señas.txt", "keyé", "café.md")
    }


@pytest.mark.parametrize(("operation", "index", "role"), TARGETS)
@pytest.mark.parametrize("case", sorted(HIDDEN_PATHS) + sorted(PROTECTED_PATHS))
def test_every_operation_keeps_hidden_entries_absent_and_protected_ones_unchanged(
    tree: Tree, case: str, operation: str, index: int, role: str
) -> None:
    _plant(tree)
    (tree.root / "inside.txt").write_bytes(b"inside")
    before = _guarded(tree)
    path = HIDDEN_PATHS.get(case) or PROTECTED_PATHS[case]
    got = _outcome(_sandbox(tree), operation, index, path)
    assert SECRET.decode() not in got, f"{operation} revealed hidden content"
    assert _guarded(tree) == before, f"{operation} changed a hidden or protected entry"
    if case in HIDDEN_PATHS and not _policy_refusal(got):
        # Treated as absent: exactly what the same call gives where the hidden
        # entries really are absent (the symlinks to them left dangling).
        (tree.base / "twin").mkdir()
        twin = make_tree(tree.base / "twin")
        _plant(twin, hidden=False)
        (twin.root / "inside.txt").write_bytes(b"inside")
        assert got == _outcome(_sandbox(twin), operation, index, path)


def _outcome(sandbox: Sandbox, operation: str, index: int, path: str) -> str:
    """What a call showed: its error, or that it worked and everything it gave."""
    try:
        result = _call(sandbox, operation, index, path)
    except SandboxError as exc:
        return f"{type(exc).__name__}: {exc}"
    return "ok: " + re.sub(r"sha256:[0-9a-f]+|[a-z_]+=\d+", "#", repr(result))


def _policy_refusal(outcome: str) -> bool:
    return outcome.startswith("AccessDenied: Access denied - ") and (
        "by policy" in outcome or "policy hides or protects" in outcome
    )


# -- through the tools ---------------------------------------------------------------


def _ctx(tree: Tree, policy: Policy = POLICY) -> CallContext:
    return CallContext(_sandbox(tree, policy), Limits())


def test_listings_trees_searches_and_greps_never_show_a_hidden_entry(tree: Tree) -> None:
    _plant(tree)
    (tree.root / "plain.txt").write_bytes(b"needle\n")
    (tree.root / "vault" / "nv.txt").write_bytes(b"needle\n")
    (tree.root / "x.secret").write_bytes(b"needle\n")
    ctx = _ctx(tree)
    outputs = [
        list_directory(ctx, str(tree.root)),
        directory_tree(ctx, str(tree.root)),
        search_files(ctx, str(tree.root), "**"),
        grep_files(ctx, "needle", path=str(tree.root)),
    ]
    for result in outputs:
        shown = result.text + json.dumps(result.structured)
        for name in (*HIDDEN_NAMES, "x.secret", "nv.txt"):
            assert name not in shown, (name, shown)
    assert "plain.txt" in outputs[3].text


def test_a_move_that_would_carry_a_hidden_or_protected_entry_is_refused(tree: Tree) -> None:
    _plant(tree)
    (tree.root / "box").mkdir()
    (tree.root / "box" / "inner.secret").write_bytes(SECRET)
    (tree.root / "plain").mkdir()
    (tree.root / "plain" / "f.txt").write_bytes(b"f")
    ctx = _ctx(tree)
    before = snapshot(tree.root)
    moves = [("box", "box2"), ("plain", "frozen/x"), ("plain", "x.secret"), ("frozen", "f2")]
    for source, destination in moves:
        with pytest.raises(AccessDenied):
            move_file(ctx, str(tree.root / source), str(tree.root / destination))
    with pytest.raises(AccessDenied, match="hides or protects"):
        move_file(ctx, str(tree.root / "box"), str(tree.root / "box2"))
    with pytest.raises(AccessDenied, match="hides or protects"):
        delete_file(ctx, str(tree.root / "box"), recursive=True)
    assert snapshot(tree.root) == before
    # A directory with nothing hidden or protected below it moves.
    move_file(ctx, str(tree.root / "plain"), str(tree.root / "plain2"))
    assert (tree.root / "plain2" / "f.txt").read_bytes() == b"f"


def test_a_read_only_directory_refuses_every_change_and_says_so(tree: Tree) -> None:
    (tree.root / "f.txt").write_bytes(b"f")
    ctx = _ctx(tree, Policy.of(writable=False))
    before = snapshot(tree.root)
    calls: list[Callable[[], object]] = [
        lambda: writing.write_file(ctx, str(tree.root / "f.txt"), "x"),
        lambda: writing.write_file(ctx, str(tree.root / "g.txt"), "x"),
        lambda: writing.append_file(ctx, str(tree.root / "f.txt"), "x"),
        lambda: writing.edit_file(
            ctx, str(tree.root / "f.txt"), [{"oldText": "f", "newText": "g"}]
        ),
        lambda: writing.create_directory(ctx, str(tree.root / "d")),
        lambda: writing.move_file(ctx, str(tree.root / "f.txt"), str(tree.root / "h.txt")),
        lambda: writing.copy_file(ctx, str(tree.root / "f.txt"), str(tree.root / "h.txt")),
        lambda: writing.delete_file(ctx, str(tree.root / "f.txt")),
    ]
    for call in calls:
        with pytest.raises(AccessDenied, match="read-only directory"):
            call()
    assert snapshot(tree.root) == before


# -- Landlock alone ------------------------------------------------------------------


def _raw_changes(top: Path) -> dict[str, str]:
    """Every kind of change, made on plain paths: no openat2, no chokepoint."""
    attempts: dict[str, Callable[[], object]] = {
        "open-write": lambda: os.close(os.open(top / "f.txt", os.O_WRONLY)),
        "create": lambda: os.close(os.open(top / "new.txt", os.O_WRONLY | os.O_CREAT, 0o644)),
        "truncate": lambda: os.truncate(top / "f.txt", 0),
        "mkdir": lambda: os.mkdir(top / "newdir"),
        "rmdir": lambda: os.rmdir(top / "empty"),
        "unlink": lambda: os.unlink(top / "u.txt"),
        "rename": lambda: os.rename(top / "r.txt", top / "g.txt"),
        "symlink": lambda: os.symlink("f.txt", top / "l"),
    }
    outcome = {}
    for name, attempt in attempts.items():
        try:
            attempt()
            outcome[name] = "done"
        except OSError as exc:
            outcome[name] = errno.errorcode.get(exc.errno or 0, "?")
    return outcome


@pytest.mark.skipif(landlock.abi_version() < 3, reason="needs Landlock ABI 3 (truncate)")
def test_landlock_alone_refuses_every_change_beneath_a_read_only_directory(tmp_path: Path) -> None:
    """The openat2 layer is bypassed: the child changes plain paths with os.*, after
    the same Landlock confinement the server applies from these policies."""
    frozen, open_ = tmp_path / "frozen", tmp_path / "open"
    for top in (frozen, open_):
        top.mkdir()
        for name in ("f.txt", "u.txt", "r.txt"):
            (top / name).write_bytes(b"f")
        (top / "empty").mkdir()

    def confined() -> dict[str, dict[str, str]]:
        roots = [Root.open(str(frozen), Policy.of(writable=False)), Root.open(str(open_))]
        status = landlock.confine(roots, read_only=False)
        assert status.enforced, status.detail
        return {"frozen": _raw_changes(frozen), "open": _raw_changes(open_)}

    outcome = in_child(confined)
    assert set(outcome["frozen"].values()) == {"EACCES"}, outcome["frozen"]
    # The same changes beneath the writable directory all happen: the child could
    # change files, and only the policy's directory refused.
    assert set(outcome["open"].values()) == {"done"}, outcome["open"]
    assert (frozen / "f.txt").read_bytes() == b"f"


# -- the command line ----------------------------------------------------------------


def _sandboxfs(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sandboxfs", *args],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


def test_policy_options_without_directories_to_serve_and_bad_files_are_refused(
    tmp_path: Path,
) -> None:
    # (Over stdio, rules without directories apply to the client's Roots:
    # tests/test_config.py.)
    run = _sandboxfs("--hide", "*.pem", "--http", "127.0.0.1:0")
    assert run.returncode == 2
    assert "serving HTTP needs at least one directory" in run.stderr
    bad = tmp_path / "p.toml"
    bad.write_text("hide = 3\n")
    run = _sandboxfs("--policy", str(bad), str(tmp_path))
    assert run.returncode == 2
    assert "hide must be a string or a list of strings" in run.stderr
    run = _sandboxfs("--policy", str(tmp_path / "missing.toml"), str(tmp_path))
    assert run.returncode == 1
    assert "cannot read --policy" in run.stderr


def test_nested_directories_with_different_policies_are_refused(tmp_path: Path) -> None:
    (tmp_path / "inner").mkdir()
    run = _sandboxfs(str(tmp_path), f"{tmp_path / 'inner'}:ro")
    assert run.returncode == 1
    assert "overlap with different policies" in run.stderr


# -- nested allowed directories -------------------------------------------------------

#: Rules anchored at an allowed directory name different paths in nested ones:
#: ``x/secret`` is ``R/x/secret`` and ``R/sub/x/secret``; ``sub/y`` only ``R/sub/y``.
NESTED = Policy.of(hide=["x/secret", "sub/y"], protect=["z/keep"])
#: Paths judged only by the rules of the directory that does NOT resolve them: through
#: R (outermost, resolving R/sub/...) the inner directory's rules; through the alias
#: (a symlink given for R/sub, so only the inner directory answers to it) R's.
NESTED_PATHS = {
    "inner-rule-through-outer": ("R", "sub/x/secret"),
    "inner-rule-through-outer-link": ("R", "to-sub-x/secret"),
    "outer-rule-through-alias": ("alias", "y"),
    "inner-rule-through-alias": ("alias", "x/secret"),
    "inner-protected-through-outer": ("R", "sub/z/keep"),
    "outer-protected-through-alias": ("alias", "z/keep"),
    "fresh-inner-hidden-through-outer": ("R", "sub/x/secret/new"),
}


def _nested(tree: Tree) -> tuple[Sandbox, dict[str, Path]]:
    outer = tree.root
    for where in (outer, outer / "sub"):
        (where / "x").mkdir(parents=True)
        (where / "x" / "secret").write_bytes(SECRET)
        (where / "z").mkdir()
        (where / "z" / "keep").write_bytes(KEPT)
    (outer / "sub" / "y").write_bytes(SECRET)
    (outer / "to-sub-x").symlink_to("sub/x")
    alias = tree.base / "alias"
    alias.symlink_to(outer / "sub")
    roots = [Root.open(str(outer), NESTED), Root.open(str(alias), NESTED)]
    nest_policies(roots)
    return Sandbox(Resolver(AllowList.of(roots))), {"R": outer, "alias": alias}


@pytest.mark.parametrize(("operation", "index", "role"), TARGETS)
@pytest.mark.parametrize("case", sorted(NESTED_PATHS))
def test_nested_directories_judge_every_path_by_the_rules_of_each(
    tree: Tree, case: str, operation: str, index: int, role: str
) -> None:
    """Issue 26: with ``--hide x/secret R R/sub`` the outermost directory resolved
    ``R/sub/x/secret`` and its rules alone were judged, so the secret was read."""
    sandbox, places = _nested(tree)
    before = _guarded_nested(tree)
    top, below = NESTED_PATHS[case]
    got = _outcome(sandbox, operation, index, f"{places[top]}/{below}")
    assert SECRET.decode() not in got, f"{operation} revealed hidden content"
    assert _guarded_nested(tree) == before, f"{operation} changed a hidden or protected entry"


def _guarded_nested(tree: Tree) -> dict[str, Any]:
    return {
        k: v
        for k, v in snapshot(tree.root).items()
        if k in ("sub/y", "sub/x", "sub/z") or k.endswith(("/secret", "/keep"))
    }


def test_nested_directories_still_serve_what_no_rule_names(tree: Tree) -> None:
    sandbox, places = _nested(tree)
    (tree.root / "sub" / "plain.txt").write_bytes(b"plain")
    for top in places.values():
        path = f"{top}/plain.txt" if top.name == "alias" else f"{top}/sub/plain.txt"
        with sandbox.open_file(path) as f:
            assert f.file.read() == b"plain"
    listing = sandbox.list_dir(f"{places['alias']}")
    assert "plain.txt" in repr(listing) and "'y'" not in repr(listing)
    assert nest_policies([root := Root.open(str(tree.root), NESTED)]) is None
    assert root.policy == NESTED  # alone, a directory keeps its policy


def test_a_narrower_root_inside_nested_directories_keeps_every_ones_rules(tree: Tree) -> None:
    """A client's root narrowing R to R/sub/x still hides R/sub/x/secret (the inner
    directory's x/secret), and narrowing to R/sub still hides y (R's sub/y)."""
    sandbox, _ = _nested(tree)
    outer = sandbox.ctx.resolver.allow.roots[0].policy
    assert outer.beneath(("sub", "x")).verdict(("secret",)).hidden
    assert outer.beneath(("sub",)).verdict(("y",)).hidden
    assert outer.beneath(("sub",)).verdict(("z", "keep")).protected
    assert not outer.beneath(("sub", "z")).verdict(("other",)).hidden
    assert outer.beneath(("x",)).verdict(("secret",)).hidden  # R/x/secret: R's own rule
    assert not outer.beneath(("x",)).verdict(("x", "secret")).hidden  # R/x/x/secret: none


def test_the_readme_policy_file_is_one_the_server_reads(tmp_path: Path) -> None:
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    blocks = [
        block
        for block in re.findall(r"^```toml\n(.*?)^```\n", readme, re.S | re.M)
        if "[[directory]]" in block  # (the tenants file is another format)
    ]
    assert blocks
    for block in blocks:
        file = tmp_path / "policy.toml"
        file.write_text(block)
        rules, directories = load_policy_file(str(file))
        assert directories and not rules.empty


# -- a race ----------------------------------------------------------------------------


def test_an_attacker_exchanging_a_directory_with_a_link_to_a_hidden_one_never_gets_it(
    tree: Tree,
) -> None:
    """An attacker thread keeps exchanging the visible directory ``d`` with a symlink
    to the hidden ``vault`` (renameat2 RENAME_EXCHANGE) while reads, listings, stats,
    copies and greps run: the hidden content never comes back, and both states were
    met (served and refused calls, thousands of swaps)."""
    _plant(tree)
    (tree.root / "d").mkdir()
    (tree.root / "d" / "inside.txt").write_bytes(b"visible\n")
    (tree.root / "s").symlink_to("vault")
    sandbox = _sandbox(tree)
    ctx = _ctx(tree)
    before = _guarded(tree)

    def read() -> object:
        with sandbox.open_file("d/inside.txt") as f:
            return f.file.read()

    operations: list[Callable[[], object]] = [
        read,
        lambda: sandbox.list_dir("d"),
        lambda: sandbox.stat("d/inside.txt"),
        lambda: sandbox.copy_file("d/inside.txt", f"copy-{os.urandom(4).hex()}"),
        lambda: grep_files(ctx, "i", path="d").text,
    ]
    served = refused = 0
    with exchanging(tree.root, "d", "s") as attacker:
        for i in range(2500):
            try:
                result = operations[i % len(operations)]()
            except SandboxError as exc:
                refused += 1
                assert SECRET.decode() not in str(exc)
                continue
            served += 1
            assert SECRET not in repr(result).encode()
            assert "inside.txt" not in repr(result) or "vault" not in repr(result)
    swaps = attacker.swaps
    assert swaps > 1000 and served > 0 and refused > 0, (swaps, served, refused)
    for copy in tree.root.glob("copy-*"):
        assert copy.read_bytes() == b"visible\n"
    assert _guarded(tree) == before


@given(
    patterns=st.lists(st.text(alphabet="ab.*?[]!{},-", min_size=1, max_size=8), max_size=4),
    name=st.text(alphabet="ab.-{},", max_size=8),
)
def test_the_name_test_agrees_with_the_glob_engine(patterns: list[str], name: str) -> None:
    """The one test of a name that patterns without '/' share matches exactly what
    each pattern, as a one-segment glob, matches."""
    patterns = [p for p in patterns if not p.startswith("!")]  # the policy refuses those
    try:
        expected = any(compile_glob(p).matches(name) for p in patterns) if name else False
        matcher = name_matcher(patterns)
    except GlobError:
        return
    if name:
        assert matcher(name) == expected
