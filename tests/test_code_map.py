"""code_map in process: the ranking of a small polyglot tree (one right answer), the
budget, what the walk skips and where it stops, the parse cache, and what it never
follows or opens."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from helpers import Tree
from sandboxfs.core.allowlist import AllowList, Root
from sandboxfs.core.errors import AccessDenied, InvalidArgument
from sandboxfs.core.policy import Policy
from sandboxfs.core.resolver import Resolver
from sandboxfs.fs.facade import Sandbox
from sandboxfs.fs.limits import Limits
from sandboxfs.fs.walks import TreeWalk
from sandboxfs.tools.codecache import ParseCache
from sandboxfs.tools.codemap import FILE_BYTES, FILE_CAP, code_map
from sandboxfs.tools.parserun import ParseRun
from sandboxfs.tools.spec import CallContext

HUB = (
    '"""The hub everything else leans on."""\n'
    + "".join(f"\n\ndef unused_helper_{i:02d}():\n    return {i}\n" for i in range(1, 9))
    + """

def frobnicate(value):
    return value * 2


class Dispatcher:
    def dispatch(self, event):
        return frobnicate(event)
"""
)

POLYGLOT = {
    "core/hub.py": HUB,
    "app/cli.py": "from core.hub import Dispatcher, frobnicate\n\n\n"
    "def main(argv):\n    Dispatcher().dispatch(frobnicate(argv[0]))\n",
    "web/view.js": "export function render(state) {\n"
    "  return frobnicate(state) + new Dispatcher().dispatch(state);\n}\n",
    "svc/server.go": 'package svc\n\nfunc Serve() {\n\tfrobnicate("x")\n}\n',
    "scripts/deploy.sh": "deploy() {\n  main --prod\n}\n",
    "lib/record.rs": "pub struct Record {\n    id: u64,\n}\n",
}

#: hub.py is what three files call (frobnicate, Dispatcher, dispatch); cli.py is what
#: deploy.sh calls (main); nothing refers to the other four, which follow by path.
#: Within hub.py the lines nobody refers to come in line order, after the others.
FULL_MAP = """\
./core/hub.py:
   4: def unused_helper_01():
⋮
   8: def unused_helper_02():
⋮
  12: def unused_helper_03():
⋮
  16: def unused_helper_04():
⋮
  20: def unused_helper_05():
⋮
  24: def unused_helper_06():
⋮
  28: def unused_helper_07():
⋮
  32: def unused_helper_08():
⋮
  36: def frobnicate(value):
⋮
  40: class Dispatcher:
  41:     def dispatch(self, event):

./app/cli.py:
   4: def main(argv):

./lib/record.rs:
   1: pub struct Record {

./scripts/deploy.sh:
   1: deploy() {

./svc/server.go:
   3: func Serve() {

./web/view.js:
   1: export function render(state) {

[mapped 6 files, 16 definitions; ranked by references]"""

#: At 512 characters hub.py keeps what is referred to and loses six of its unreferenced
#: helpers (the last ones first): no file has to go.
SMALL_MAP = """\
./core/hub.py:
   4: def unused_helper_01():
⋮
   8: def unused_helper_02():
⋮
  36: def frobnicate(value):
⋮
  40: class Dispatcher:
  41:     def dispatch(self, event):

./app/cli.py:
   4: def main(argv):

./lib/record.rs:
   1: pub struct Record {

./scripts/deploy.sh:
   1: deploy() {

./svc/server.go:
   3: func Serve() {

./web/view.js:
   1: export function render(state) {

[mapped 6 files, 16 definitions; left out to fit maxChars 512: 0 files, 6 definitions; \
ranked by references]"""


def write(root: Path, files: dict[str, str | bytes]) -> None:
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)


def context(
    tree: Tree, cache: ParseCache | None = None, sandbox: Sandbox | None = None, **limits: Any
) -> CallContext:
    return CallContext(
        sandbox or tree.sandbox(),
        Limits(**limits),
        parses=ParseCache() if cache is None else cache,
    )


def mapped(result: Any) -> list[str]:
    return [f["path"] for f in result.structured["files"]]


def test_the_polyglot_tree_has_one_right_map(tree: Tree) -> None:
    write(tree.root, POLYGLOT)
    ctx = context(tree)
    full = code_map(ctx, ".")
    assert full.text == FULL_MAP
    ranks = [f["rank"] for f in full.structured["files"]]
    assert ranks[0] > ranks[1] > ranks[2] == ranks[-1]  # the unreferenced four tie
    assert code_map(ctx, ".", maxChars=512).text == SMALL_MAP


def test_query_and_focus_steer_the_map(tree: Tree) -> None:
    write(tree.root, POLYGLOT)
    ctx = context(tree)
    asked = code_map(ctx, ".", query="where is a Record stored?", maxChars=512)
    assert mapped(asked)[0] == "./lib/record.rs"
    assert asked.text.endswith("ranked by references, steered by the query]")
    # The query's words put matching definitions first within a file.
    hub = code_map(ctx, "core", query="unused helper 07", maxChars=512)
    assert "  28: def unused_helper_07():" in hub.text
    focused = code_map(ctx, ".", focus=["scripts/deploy.sh"])
    assert "./scripts/deploy.sh" not in mapped(focused)
    assert mapped(focused)[:2] == ["./core/hub.py", "./app/cli.py"]
    assert "1 focus file not shown" in focused.text
    assert focused.text.endswith("ranked by references, steered by focus]")
    # Focus without the walk's start: the agent's file elsewhere still steers.
    alone = code_map(ctx, "core", focus=["app/cli.py"])
    assert mapped(alone) == ["core/hub.py"]
    assert "1 focus file not shown" in alone.text


def test_a_focus_path_is_resolved_like_any_path(tree: Tree) -> None:
    write(tree.root, POLYGLOT)
    (tree.root / "escape.py").symlink_to(tree.outside / "secret.txt")
    ctx = context(tree)
    with pytest.raises(AccessDenied):
        code_map(ctx, ".", focus=[str(tree.outside / "secret.txt")])
    with pytest.raises(AccessDenied):
        code_map(ctx, ".", focus=["escape.py"])


def test_a_name_most_of_the_map_refers_to_is_set_aside(tree: Tree) -> None:
    # Twelve Rust files: each defines its own type with a `new`, and calls the next
    # one's `new`.  Without the rule, `new` (called everywhere, defined everywhere)
    # would be each file's best line.
    count = 12
    files: dict[str, str | bytes] = {}
    for i in range(count):
        other = (i + 1) % count
        files[f"src/thing{i:02d}.rs"] = (
            f"fn helper{i:02d}() {{}}\n"
            f"pub struct Thing{i:02d};\n"
            f"impl Thing{i:02d} {{\n"
            f"    fn new() -> Self {{ Thing{other:02d}::new(); helper{other:02d}(); Thing{i:02d} }}\n"
            "}\n"
        )
    write(tree.root, files)
    result = code_map(context(tree), "src", maxChars=512)
    assert result.structured["setAside"] == ["new"]
    shown = result.structured["files"]
    assert shown and result.structured["filesLeftOut"] > 0  # it had to choose
    for block in shown:
        assert "new" not in [name for line in block["lines"] for name in line["names"]], block


def test_references_are_shared_among_the_files_defining_a_name(tree: Tree) -> None:
    # `run` is defined by two files and `start` by one; one caller calls both once:
    # each `run` file gets half of what the `start` file gets.
    write(
        tree.root,
        {
            "a.py": "def run():\n    pass\n",
            "b.py": "def run():\n    pass\n",
            "c.py": "def start():\n    pass\n",
            "main.py": "def main():\n    run()\n    start()\n",
        },
    )
    files = {f["path"]: f["rank"] for f in code_map(context(tree), ".").structured["files"]}
    base = files["./main.py"]
    assert files["./a.py"] == files["./b.py"]
    assert files["./c.py"] - base == pytest.approx(2 * (files["./a.py"] - base), rel=1e-3)


def test_whole_files_are_dropped_never_cut(tree: Tree) -> None:
    files: dict[str, str | bytes] = {
        f"pkg/mod{i:02d}.py": f"def api_{i:02d}(x):\n    return x\n\n\ndef other_{i:02d}():\n    pass\n"
        for i in range(40)
    }
    files["main.py"] = "def main():\n" + "".join(f"    api_{i:02d}(1)\n" for i in range(20))
    write(tree.root, files)
    ctx = context(tree)
    full = code_map(ctx, ".", maxChars=65536)
    blocks = {f["path"]: f["lines"] for f in full.structured["files"]}
    order = list(blocks)
    for budget in (512, 700, 1000, 1500):  # 41 files of one line need 1,558
        small = code_map(ctx, ".", maxChars=budget)
        assert len(small.text) <= budget
        last = small.text.rsplit("\n", 1)[-1]
        assert last.startswith("[mapped 41 files, 81 definitions; left out to fit maxChars")
        shown = small.structured["files"]
        assert 0 < len(shown) < len(order)
        assert [f["path"] for f in shown] == [p for p in order if p in mapped(small)]
        for f in shown:
            assert f["lines"], f
            assert all(line in blocks[f["path"]] for line in f["lines"])
            assert f"{f['path']}:" in small.text
        left = small.structured["filesLeftOut"]
        assert left == len(order) - len(shown) and f"{left} file" in last


@pytest.mark.parametrize("max_chars", [0, 511, 65537, 10**9])
def test_an_out_of_range_budget_is_refused(tree: Tree, max_chars: int) -> None:
    with pytest.raises(InvalidArgument, match="maxChars must be between 512 and 65536"):
        code_map(context(tree), ".", maxChars=max_chars)


def test_an_empty_map_is_its_summary(tree: Tree) -> None:
    write(tree.root, {"README.md": "# hi\n", "empty.py": ""})
    result = code_map(context(tree), ".", maxChars=512)
    assert (
        result.text
        == "[mapped 1 file (1 skipped: 1 not source code), 0 definitions; ranked by references]"
    )


def test_skipped_directories_are_never_entered(tree: Tree) -> None:
    code = "def frobnicate(value):\n    return value\n"
    skipped = [
        ".git/hooks/x.py",
        "node_modules/pkg/index.js",
        "target/debug/build.rs",
        "build/lib/b.py",
        "dist/d.js",
        "vendor/v.go",
        "__pycache__/c.py",
        "site-packages/s.py",
        ".hidden/h.py",
        "env1/lib/python3.11/site.py",
        "conda/lib/x.py",
    ]
    write(
        tree.root,
        {
            **dict.fromkeys(skipped, code),
            "env1/pyvenv.cfg": "home = /usr\n",
            "conda/conda-meta/history": "",
            "src/app.py": "def main():\n    frobnicate(1)\n",
            ".eslintrc.js": "module.exports = {};\n",
        },
    )
    ctx = context(tree)
    everything = code_map(ctx, ".")
    assert mapped(everything) == ["./src/app.py"]
    assert everything.structured["filesMapped"] == 2  # and .eslintrc.js, a dot-file
    # Named as the start, a skipped directory is mapped.
    assert code_map(ctx, "vendor").structured["filesMapped"] == 1


def test_the_walk_stops_at_5000_source_files_and_says_so(tree: Tree) -> None:
    many = tree.root / "many"
    many.mkdir()
    for i in range(FILE_CAP + 1):
        (many / f"f{i:04d}.sh").touch()
    result = code_map(context(tree), "many")
    assert result.structured["filesMapped"] == FILE_CAP
    assert result.text.endswith("; stopped at 5,000 source files: narrow path]")
    assert result.structured["complete"] is False


def test_the_walk_stops_at_the_entry_cap_and_says_so(tree: Tree) -> None:
    write(tree.root, {f"d{i}/m.py": f"def f{i}():\n    pass\n" for i in range(10)})
    result = code_map(context(tree, walk_entries=12), ".")
    assert result.text.endswith("; stopped after visiting 12 entries: narrow path]")
    assert 0 < result.structured["filesMapped"] < 10
    assert result.structured["stoppedReason"] == "stopped after visiting 12 entries: narrow path"


def test_the_time_budget_is_the_calls(tree: Tree) -> None:
    write(tree.root, {f"m{i}.py": f"def f{i}():\n    pass\n" for i in range(5)})
    result = code_map(context(tree, search_seconds=1e-9), ".")
    assert result.structured["complete"] is False
    assert "stopped after 1e-09 s: narrow path" in result.text


def test_too_large_binary_and_unknown_files_are_counted(tree: Tree) -> None:
    write(
        tree.root,
        {
            "big.py": b"x = 1\n" * (FILE_BYTES // 6 + 1),
            "blob.c": b"int x;\0\1\2",
            "notes.txt": "text",
            "ok.go": "package p\nfunc F() {}\n",
        },
    )
    result = code_map(context(tree), ".")
    assert mapped(result) == ["./ok.go"]
    assert result.text.startswith("./ok.go:\n   2: func F() {}\n\n")
    assert "(3 skipped: 1 not source code, 1 too large, 1 binary)" in result.text


def test_only_the_edited_file_is_parsed_again(tree: Tree, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tree.root, POLYGLOT)
    parsed: list[int] = []  # the sizes of the files sent to a parse helper
    real = ParseRun.submit

    def counting(self: ParseRun, tag: int, language: str, data: bytes) -> Any:
        parsed.append(len(data))
        return real(self, tag, language, data)

    monkeypatch.setattr(ParseRun, "submit", counting)
    cache = ParseCache()
    ctx = context(tree, cache)
    first = code_map(ctx, ".")
    assert (first.structured["parsed"], first.structured["fromCache"]) == (6, 0)
    assert len(parsed) == 6
    again = code_map(ctx, ".")
    assert (again.structured["parsed"], again.structured["fromCache"]) == (0, 6)
    assert again.text == first.text and len(parsed) == 6
    # One file edited: exactly it is read and parsed again, and the map shows the edit.
    cli = tree.root / "app" / "cli.py"
    cli.write_text(cli.read_text() + "\n\ndef extra():\n    pass\n")
    edited = code_map(ctx, ".")
    assert (edited.structured["parsed"], edited.structured["fromCache"]) == (1, 5)
    assert parsed[-1] == cli.stat().st_size and len(parsed) == 7
    assert "   8: def extra():" in edited.text
    # Its modification time alone changed: parsed again; replaced by a new inode: too.
    os.utime(cli, ns=(10**18, 10**18))
    assert code_map(ctx, ".").structured["parsed"] == 1
    replacement = tree.root / "app" / "cli.new"
    replacement.write_text(cli.read_text())
    replacement.replace(cli)
    assert code_map(ctx, ".").structured["parsed"] == 1
    assert len(parsed) == 9
    # Another call context on the same server cache: nothing to parse.
    assert code_map(context(tree, cache), ".").structured["parsed"] == 0


def test_the_cache_is_bounded(tree: Tree) -> None:
    write(tree.root, {f"m{i}.py": f"def f{i}():\n    pass\n" for i in range(20)})
    cache = ParseCache(capacity_files=5)
    code_map(context(tree, cache), ".")
    assert len(cache) == 5
    small = ParseCache(capacity_bytes=2000)
    code_map(context(tree, small), ".")
    assert 0 < small.size_bytes <= 2000


def test_symlinks_are_never_followed_and_special_files_never_opened(
    tree: Tree, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tree.root, POLYGLOT)
    (tree.outside / "leak.py").write_text("def CANARY_OUTSIDE():\n    pass\n")
    (tree.outside / "pkg").mkdir()
    (tree.outside / "pkg" / "more.py").write_text("def CANARY_DIR():\n    pass\n")
    root = tree.root
    (root / "out.py").symlink_to(tree.outside / "leak.py")
    (root / "in.py").symlink_to(root / "core" / "hub.py")
    (root / "linked").symlink_to(root / "core")
    (root / "outdir").symlink_to(tree.outside / "pkg")
    os.mkfifo(root / "pipe.py")
    os.mkfifo(root / "app" / "pipe.js")
    opened: list[tuple[str, ...]] = []
    real = TreeWalk.open_file

    def recording(self: TreeWalk, rel: tuple[str, ...], shown: str) -> Any:
        opened.append(rel)
        return real(self, rel, shown)

    monkeypatch.setattr(TreeWalk, "open_file", recording)
    result = code_map(context(tree), ".")
    assert "CANARY" not in result.text and "CANARY" not in str(result.structured)
    assert sorted(mapped(result)) == sorted(f"./{name}" for name in POLYGLOT)
    assert sorted("/".join(rel) for rel in opened) == sorted(POLYGLOT)


def test_hidden_files_are_never_mapped(tree: Tree) -> None:
    write(tree.root, {**POLYGLOT, "secrets/keys.py": "def SECRET_KEY():\n    pass\n"})
    (tree.root / "app" / "token.py").write_text("def SECRET_TOKEN():\n    pass\n")
    policy = Policy.of(hide=["secrets", "token.py"])
    sandbox = Sandbox(Resolver(AllowList.of([Root.open(str(tree.root), policy)])))
    result = code_map(context(tree, sandbox=sandbox), ".")
    assert "SECRET" not in result.text and "SECRET" not in str(result.structured)
    assert sorted(mapped(result)) == sorted(f"./{name}" for name in POLYGLOT)
