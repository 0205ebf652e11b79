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


def session_seeds() -> list[bytes]:
    """Whole conversations, one JSON-RPC object a line (what a client writes on stdin)."""

    def conversation(*messages: object) -> bytes:
        return b"".join(json.dumps(m).encode() + b"\n" for m in messages)

    def request(id_: object, method: str, params: object = None) -> dict[str, object]:
        message: dict[str, object] = {"jsonrpc": "2.0", "id": id_, "method": method}
        if params is not None:
            message["params"] = params
        return message

    def notification(method: str, params: object = None) -> dict[str, object]:
        message: dict[str, object] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        return message

    def initialize(id_: object, version: str = "2025-06-18", roots: bool = True) -> dict:
        capabilities = {"roots": {"listChanged": True}} if roots else {}
        info = {"name": "fuzz", "version": "1"}
        params = {"protocolVersion": version, "capabilities": capabilities, "clientInfo": info}
        return request(id_, "initialize", params)

    def roots_answer(ask: str, *uris: str) -> dict[str, object]:
        return {"jsonrpc": "2.0", "id": ask, "result": {"roots": [{"uri": u} for u in uris]}}

    def call(id_: object, name: str, meta: object = None, **arguments: object) -> dict:
        params: dict[str, object] = {"name": name, "arguments": arguments}
        if meta is not None:
            params["_meta"] = meta
        return request(id_, "tools/call", params)

    def envelope(**extra: object) -> dict[str, object]:
        return {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "fuzz", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": {},
            **extra,
        }

    initialized = notification("notifications/initialized")
    changed = notification("notifications/roots/list_changed")

    def cancelled(id_: object) -> dict[str, object]:
        return notification("notifications/cancelled", {"requestId": id_, "reason": "user"})

    seeds = [
        # 2025: the handshake, Roots asked and answered, tools, a cancellation, a change.
        conversation(
            initialize(1),
            initialized,
            roots_answer("sandboxfs-1", "file:///tmp", "file:///tmp/a%20b"),
            request(2, "tools/list"),
            call(3, "list_allowed_directories"),
            call(4, "read_text_file", {"progressToken": "p4"}, path="a.txt"),
            cancelled(4),
            changed,
            call(5, "read_text_file", path="b.txt"),
            roots_answer("sandboxfs-2", "file:///srv"),
            request(6, "resources/templates/list"),
            request(7, "resources/read", {"uri": "file:///tmp/a.txt"}),
            request(8, "ping"),
            request(9, "logging/setLevel", {"level": "debug"}),
            request(10, "resources/list", {"cursor": "x"}),
        ),
        # 2025 without Roots; unknown methods and tools; bad parameters.
        conversation(
            initialize(1, "2025-03-26", roots=False),
            initialized,
            call(2, "list_directory", path="."),
            call(3, "no_such_tool"),
            request(4, "prompts/list"),
            request(5, "tools/call", {"name": 5}),
            request(6, "logging/setLevel", {"level": "loud"}),
            request(7, "resources/read", {}),
            changed,
        ),
        # 2025: requests before the handshake, a second handshake, Roots refused.
        conversation(
            request(1, "tools/list"),
            call(0, "list_allowed_directories"),
            request(2, "ping"),
            initialize(3, "2024-11-05"),
            initialized,
            changed,
            {"jsonrpc": "2.0", "id": "sandboxfs-1", "error": {"code": -32601, "message": "no"}},
            initialize(4, "1999-01-01"),
            initialized,
            roots_answer("sandboxfs-2"),
            call(5, "get_file_info", path="x"),
        ),
        # 2025: a change while a question is out; calls wait for the newest answer.
        conversation(
            initialize(1, "2025-11-25"),
            initialized,
            call(2, "read_text_file", path="x"),
            changed,
            call(3, "read_text_file", path="y"),
            roots_answer("sandboxfs-1", "file:///old"),
            roots_answer("sandboxfs-2", "file:///new", "http://not-a-file/"),
            cancelled(3),
            {"jsonrpc": "2.0", "id": "sandboxfs-9", "result": {"roots": []}},
        ),
        # 2025: a change while an answer is being opened (the stale one releases nothing).
        conversation(
            initialize(1),
            initialized,
            roots_answer("sandboxfs-1", "file:///first"),
            changed,
            call(2, "read_text_file", path="x"),
            request(3, "ping"),
            roots_answer("sandboxfs-2", "file:///second"),
            call(4, "read_text_file", path="y"),
        ),
        # 2026-07-28: every request carries its envelope; no handshake.
        conversation(
            request(1, "server/discover", {"_meta": envelope()}),
            request(2, "tools/list", {"_meta": envelope()}),
            call(3, "read_text_file", envelope(progressToken=7), path="/tmp/a.txt"),
            cancelled(3),
            request("r", "resources/read", {"uri": "file:///tmp/a.txt", "_meta": envelope()}),
            request(5, "resources/templates/list", {"_meta": envelope()}),
            initialize(6),
            request(7, "tools/list"),
            request(
                8,
                "tools/list",
                {"_meta": {"io.modelcontextprotocol/protocolVersion": "2099-01-01"}},
            ),
            request(9, "logging/setLevel", {"level": "info", "_meta": envelope()}),
            request(
                10, "tools/list", {"_meta": envelope(**{"io.modelcontextprotocol/logLevel": 3})}
            ),
            initialized,
            changed,
        ),
        # 2026-07-28: ids reused while running ("1" correlates with 1), then cancelled.
        conversation(
            call(1, "list_directory", envelope(), path="."),
            call(1, "read_text_file", envelope(), path="a"),
            call("1", "get_file_info", envelope(), path="b"),
            request("1", "resources/read", {"uri": "file:///x", "_meta": envelope()}),
            cancelled("1"),
            call(1, "list_allowed_directories", envelope()),
        ),
        # 2025: ids reused, some cancelled while waiting for Roots.
        conversation(
            initialize(0),
            initialized,
            call(7, "read_text_file", path="a"),
            call("7", "read_text_file", path="b"),
            roots_answer("sandboxfs-1", "file:///tmp"),
            call(7, "list_allowed_directories"),
            cancelled(7),
        ),
        # Lone surrogates (escaped in JSON) where no answer echoes them.
        b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18",'
        b'"capabilities":{"roots":{}},"clientInfo":{"name":"\\ud800","version":"\\udfff"}}}\n'
        b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n'
        b'{"jsonrpc":"2.0","id":"sandboxfs-1","result":{"roots":[{"uri":"file:///\\ud800"},'
        b'{"uri":"file:///tmp/\\udcff"},{"uri":"\\udfff:x"}]}}\n'
        b'{"jsonrpc":"2.0","id":2,"method":"resources/read","params":{"uri":"file:///\\ud800"}}\n'
        b'{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"read_text_file",'
        b'"arguments":{"path":"\\ud800\\udc00\\udfff"}}}\n'
        b'{"jsonrpc":"2.0","id":4,"method":"\\udc80/list"}\n'
        b'{"jsonrpc":"2.0","method":"\\ud800"}\n'
        b'{"jsonrpc":"2.0","id":"sandboxfs-2","error":{"code":1,"message":"\\ud800\\n"}}\n',
        b'{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{"_meta":'
        b'{"io.modelcontextprotocol/protocolVersion":"2026-07-28",'
        b'"io.modelcontextprotocol/clientInfo":{"name":"\\udfff","version":"1"},'
        b'"io.modelcontextprotocol/clientCapabilities":{}}}}\n'
        b'{"jsonrpc":"2.0","id":2,"method":"resources/read","params":{"uri":"file:///\\udbff",'
        b'"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",'
        b'"io.modelcontextprotocol/clientCapabilities":{}}}}\n',
        # What decode refuses or drops, between messages that go on.
        b"\n".join(
            [
                json.dumps(initialize(1)).encode(),
                b"{",
                b'{"jsonrpc":"2.0","id":2,"method":"tools/list","result":{}}',
                b'{"jsonrpc":"2.0","id":"sandboxfs-1","result":{},"error":{}}',
                b"",
                json.dumps(initialized).encode(),
                b'{"jsonrpc":"2.0","id":3,"method":"tools/list","params":[]}',
                b'{"jsonrpc":"2.0","id":1.5,"method":"ping"}',
            ]
        ),
    ]
    return seeds


def scan_seeds() -> list[bytes]:
    def read(content: bytes, needle: bytes, names: list[int], *settings: int) -> bytes:
        knobs = bytes([*settings, 4, 3, 3, 3][:4])
        return b"\x01" + knobs + content + b"\xfe" + needle + b"\xfe" + bytes(names)

    every = list(range(12))
    return [
        b"\x00\x0a" + b"needle\xfe" + b"hay\nneedle\nhay\n" * 20,
        b"\x00\x65" + b"e" * 20 + b"Q\xfe" + b"e" * 300 + b"Q",
        b"\x00\x0a\xfe",
        read(b"a needle\n", b"needle", every),
        read(b"\0binary", b"", every),
        read(b"short\n" * 40, b"needle", [0, 1, 2, 3, 4], 3, 1, 2, 1),
        read(b"x" * 100, b"", [0, 0, 0, 1], 4, 3, 2, 0),
        read(b"", b"", [0, 12]),
        read(b"text", b"t", [0, 13, 1]),
        read(b"text", b"t", [0, 15, 16, 17]),
        read(b"text", b"t", [18, 0]),
    ]


def codemap_seeds() -> list[bytes]:
    fuzz_codemap = importlib.import_module("fuzz_codemap")
    languages = list(fuzz_codemap.LANGUAGES)
    sources = {
        "python": b"import x\n\nclass Hub:\n    def run(self, v):\n        return helper(v)\n\n"
        b"def helper(v):\n    return Hub().run(v)\nLIMIT = 3\n",
        "javascript": b"export function render(a) { return helper(a) }\nclass View { draw() {} }\n",
        "typescript": b"interface Shape { area(): number }\ntype Id = string\n"
        b"export class Box implements Shape { area() { return helper(1) } }\n",
        "tsx": b"export function App() { return <div>{helper()}</div> }\n",
        "go": b"package p\ntype Store struct{}\nfunc (s *Store) Get() int { return helper() }\n"
        b"func helper() int { return 1 }\n",
        "rust": b"struct Record;\nimpl Record { fn new() -> Self { Record } }\nfn helper() {}\n",
        "java": b"class Hub { void run() { helper(); } static void helper() {} }\n",
        "c": b"#define MAX 3\nstatic int helper(int a) { return a; }\nint run(void);\n",
        "cpp": b"namespace n { class Hub { void run(); }; }\nvoid n::Hub::run() { helper(); }\n",
        "ruby": b"module M\n  class Hub\n    def run; helper; end\n  end\nend\n",
        "bash": b"helper() { echo hi; }\nrun() { helper; }\nrun\n",
    }
    sep = fuzz_codemap.SEPARATOR
    files = [bytes([languages.index(k)]) + v for k, v in sources.items()]
    every = sep.join([b"hub helper", *files])
    broken = b"\x00" + b"def f(:\n" * 50
    many = b"\x00" + b"\n".join(b"def f%d(): pass" % i for i in range(300))
    return [
        b"\x00\x00\x00" + every,
        b"\x1f\x00\x7f" + every,
        b"\x00\x10\x00" + sep + bytes([0x80]) + sources["python"] + sep + broken,
        b"\x00\x00\x10" + sep + many,
        b"\x00\x00\x00" + sep + b"\x07" + b"\xff\xfe\x00garbage{{{" + sep + b"\x00",
    ]


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
    write("session", session_seeds())
    write("scan", scan_seeds())
    write("codemap", codemap_seeds())


if __name__ == "__main__":
    main()
