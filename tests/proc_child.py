"""Reads that fail for real: run by tests/test_read_errors.py inside a private mount
namespace (``unshare --mount --propagation private``), so nothing it mounts outlives
it or is seen by any other process.

It makes an allowed directory under ``argv[1]`` holding ``proc`` (a bind mount of
``/proc``) and ``d/`` (a readable ``d/ok.txt`` and ``d/mem``, a bind mount of this
process's ``/proc/<pid>/mem``, which opens as a regular file and fails every read at
offset 0 with ``EIO``, as a file on a failing disk, a FUSE or an NFS server may),
then answers the requests read from stdin (JSON: ``[[method, params], ...]``,
``{pid}`` and ``{root}`` replaced) through the session core in process, in both
protocol eras, and prints ``{"pid": ..., "answers": {era: [message, ...]}, "left":
[names in the allowed directory afterwards]}`` (JSON).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import trio
from test_inprocess import MODERN_META, InProcess, _server

from helpers import make_tree  # the script's directory is first on sys.path


def _mount(source: str, target: Path) -> None:
    subprocess.run(["mount", "--bind", source, str(target)], check=True)


def main() -> None:
    tree = make_tree(Path(sys.argv[1]))
    pid = str(os.getpid())
    (tree.root / "proc").mkdir()
    (tree.root / "d").mkdir()
    (tree.root / "d" / "ok.txt").write_text("a needle in a readable file\n")
    (tree.root / "d" / "mem").write_bytes(b"")
    _mount("/proc", tree.root / "proc")
    _mount(f"/proc/{pid}/mem", tree.root / "d" / "mem")
    raw = sys.stdin.read().replace("{pid}", pid).replace("{root}", str(tree.root))
    requests: list[tuple[str, dict[str, Any]]] = json.loads(raw)
    server = _server(tree)
    answers: dict[str, list[dict[str, Any]]] = {}

    async def run() -> None:
        async with trio.open_nursery() as nursery:
            for era in ("2025", "2026"):
                conversation = InProcess(server, nursery, era)
                ids = []
                for method, params in requests:
                    if method == "tools/call":
                        ids.append(conversation.call(params["name"], params["arguments"]))
                        continue
                    request_id = next(conversation._ids)
                    if era == "2026":
                        params = {**params, "_meta": MODERN_META}
                    message = {"jsonrpc": "2.0", "id": request_id, "method": method}
                    conversation.feed({**message, "params": params})
                    ids.append(request_id)
                await conversation.settle()
                answers[era] = [conversation.answers[i] for i in ids]

    trio.run(run)
    left = sorted([*os.listdir(tree.root), *(f"d/{n}" for n in os.listdir(tree.root / "d"))])
    print(json.dumps({"pid": pid, "answers": answers, "left": left}))


if __name__ == "__main__":
    main()
