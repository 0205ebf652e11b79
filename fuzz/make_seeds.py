"""Write the hand-made seed inputs to fuzz/seeds/<target>/ (one file per input, named
by its SHA-1, as libFuzzer names corpus files).  Rerun after changing an input
format: ``python fuzz/make_seeds.py``.  The seeds are starting points only; the
invariants are in the targets.
"""

from __future__ import annotations

import hashlib
import importlib
import itertools
import json
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def resolver_seeds() -> list[bytes]:
    fuzz_resolver = importlib.import_module("fuzz_resolver")
    try:
        seeds = []
        r1, alias2 = fuzz_resolver.ROOT1 + "/", fuzz_resolver.ALIAS2 + "/"
        cases = [
            ("", ["a", "b", "file.txt"]),
            ("", ["in_rel", "file.txt"]),
            ("", ["in_abs", "up", "..", "file.txt"]),
            ("", ["esc_rel", "secret.txt"]),
            ("", ["esc_abs", "dir", "secret.txt"]),
            ("", ["to_r2_abs", "y.txt"]),
            ("", ["to_r2_rel"]),
            ("", ["loop1"]),
            ("", ["chain0"]),
            ("", ["proc_root"]),
            ("", ["a", "rel_proc"]),
            ("", ["..", "outside", "secret.txt"]),
            (r1, ["..", "root-evil", "secret.txt"]),
            (r1, ["d", "esc"]),
            (alias2, ["back", "b"]),
            ("~/", ["b"]),
            ("/proc/self/root" + r1, ["a"]),
            ("./", ["dangling"]),
        ]
        ops = fuzz_resolver.OPS
        for i, (prefix, components) in enumerate(cases):
            for op in (ops[i % len(ops)], ops[(i + 3) % len(ops)]):
                variant = (0, 1, 2, 5)[i % 4]
                seeds.append(fuzz_resolver.encode_structured(op, variant, prefix, components))
        seeds += [b"\x00a/b/../../..", b"\x02" + "in_rel/\u00e9".encode("utf-16-le"), b"\x03a/\xe9"]
        return seeds
    finally:
        fuzz_resolver.cleanup()


def textedit_seeds() -> list[bytes]:
    encode = importlib.import_module("fuzz_textedit").encode
    lf = "def f():\n    return 1\n\nprint(f())\n"
    crlf = lf.replace("\n", "\r\n")
    texts = (lf, crlf, crlf.rstrip("\r\n"), "a\nb\na\n", "\ta\n\t\tb\n")
    edit_lists = (
        [("return 1", "return 2")],
        [("return 1\n", "return 2\nreturn 3\n")],
        [("  return 1  ", "return 2")],
        [("print(f())", "x\ny")],
        [("a", "A"), ("b", "B")],
        [("def f():\n  return 1", "def g():\n  return 2")],
        [("missing", "x")],
        [("", "x")],
    )
    flags = ((False, False), (True, False), (False, True), (False, False), (True, True))
    seeds = []
    for i, (text, edits) in enumerate(itertools.product(texts, edit_lists)):
        strict, replace_all = flags[i % len(flags)]
        seeds.append(encode(text, list(edits), strict=strict, replace_all=replace_all))
    # old taken from the text: a slice, and a slice with its lines stripped
    seeds += [
        b"\x00" + lf.encode() + b"\x00\x01\x04\x0c\x00x",
        b"\x00" + lf.encode() + b"\x00\x02\x08\x14\x00y",
    ]
    return seeds


def globs_seeds() -> list[bytes]:
    glob = importlib.import_module("fuzz_globs")
    raw = [
        ("*.py", "main.py"),
        ("src/**/*.ts", "src/a/b/c.ts"),
        ("**", "a/b"),
        ("a/**", "a"),
        ("{a,b}/*.{js,ts}", "b/x.ts"),
        ("[!a-c]?.txt", "dx.txt"),
        ("\\*", "*"),
        ("!*.md", "README.md"),
        ("/abs", "abs"),
        ("trail/", "trail"),
        ("{{a,b},{c,{d,e}}}", "e"),
        ("[]]", "]"),
        ("[a-]", "-"),
        ("{,}" * 12, ""),
    ]
    seeds = [b"\x00" + p.encode() + b"\x00" + q.encode() for p, q in raw]
    seeds += [b"\x03" + p.encode() for p, _ in raw]
    simple = glob.SIMPLE_PATTERN
    seeds += [
        b"\x01"
        + bytes(simple.index(c) for c in p)
        + b"\xff"
        + bytes(glob.SIMPLE_NAME.index(c) for c in n)
        for p, n in (("a*b", "acb"), ("?*", "a"), ("*.*", "a.b"), ("a?b*", "ab"))
    ]
    tokens = glob.SEGMENT_TOKENS
    paths = glob.PATH_TOKENS

    def seg(pattern: list[str], other: list[str], path: list[str]) -> bytes:
        return (
            b"\x02"
            + bytes(tokens.index(t) for t in pattern)
            + b"\xfe"
            + bytes(tokens.index(t) for t in other)
            + b"\xff"
            + bytes(paths.index(t) for t in path)
        )

    seeds += [
        seg(["a", "/", "**", "/", "b"], ["*"], ["a", "/", "b"]),
        seg(["**", "/", "[ab]"], ["x"], ["c", "/", "a"]),
        seg(["a", "/", "**"], ["[!a]", "?"], ["a"]),
        seg(["*a", "/", "[a-c]"], ["**"], [".a", "/", "b"]),
    ]
    return seeds


def framing_seeds() -> list[bytes]:
    def line(obj: object) -> bytes:
        return json.dumps(obj).encode()

    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {"roots": {"listChanged": True}},
            "clientInfo": {"name": "fuzz", "version": "1"},
        },
    }
    lines = [
        line(initialize),
        line({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        line(
            {
                "jsonrpc": "2.0",
                "id": "a",
                "method": "tools/call",
                "params": {"name": "read_file", "arguments": {"path": "x"}},
            }
        ),
        line({"jsonrpc": "2.0", "id": 2, "result": {}}),
        line({"jsonrpc": "2.0", "id": 3, "error": {"code": -32601, "message": "no"}}),
        line({"jsonrpc": "2.0", "id": None, "method": "x"}),
        line({"jsonrpc": "2.0", "id": 1.5, "method": "x"}),
        line({"jsonrpc": "2.0", "id": True, "method": "x"}),
        line({"jsonrpc": "2.0", "id": [1], "method": "x"}),
        line({"jsonrpc": "1.0", "id": 1, "method": "x"}),
        line({"jsonrpc": "2.0", "id": 1, "method": 5}),
        line({"jsonrpc": "2.0", "id": 1, "method": "x", "params": [1, 2]}),
        line({"jsonrpc": "2.0", "id": 1}),
        line({"jsonrpc": "2.0", "id": 1, "result": []}),
        line({"jsonrpc": "2.0", "id": 1, "method": "x", "result": {}}),
        line([{"jsonrpc": "2.0", "method": "x"}]),
        b'{"jsonrpc":"2.0","id":1,"id":"dup","method":"x"}',
        b'{"jsonrpc":"2.0","id":"\\ud800","method":"\\udfff"}',
        b'{"jsonrpc":"2.0","id":NaN,"method":"x"}',
        b'{"jsonrpc":"2.0","id":' + b"9" * 5000 + b',"method":"x"}',
        b'{"jsonrpc":"2.0","id":1,"method":"x","params":{"a":' + b"[" * 3000 + b"]" * 3000 + b"}}",
        b"\xef\xbb\xbf" + line({"jsonrpc": "2.0", "method": "x"}),
        line({"jsonrpc": "2.0", "method": "x"}) + b"\r",
        b"\xff\xfe{}",
        b"   ",
        b"{",
        b"null",
        b"",
    ]
    seeds = list(lines)
    seeds.append(b"\n".join(lines[:6]) + b"\n")
    seeds.append(b"\n\n" + lines[0] + b"\r\n" + lines[1])
    return seeds


def write(target: str, seeds: list[bytes]) -> None:
    directory = HERE / "seeds" / target
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    for seed in seeds:
        (directory / hashlib.sha1(seed).hexdigest()).write_bytes(seed)
    print(f"{directory}: {len(set(seeds))} seeds")


def main() -> None:
    sys.path.insert(0, str(HERE))
    write("resolver", resolver_seeds())
    write("textedit", textedit_seeds())
    write("globs", globs_seeds())
    write("framing", framing_seeds())


if __name__ == "__main__":
    main()
