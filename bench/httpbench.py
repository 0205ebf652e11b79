"""HTTP throughput rows of bench/run.py: sandboxfs over streamable HTTP, driven by ``wrk``.

A fresh ``sandboxfs --http 127.0.0.1:PORT --workers N`` per measurement; ``wrk`` (one
thread, ``connections`` keep-alive connections, each with one request outstanding)
POSTs stateless 2025-era ``tools/call`` requests of ``read_text_file`` on the 1 KiB
files, each a different file in turn.  One request is checked first (the answer and its
size); wrk's count of non-2xx answers and socket errors must be zero.  The rate is
wrk's ``Requests/sec``; the server's processes' CPU time per call and their peak RSS
(the sum of VmHWM over the parent and its replicas) go in the detail.

``wrk`` is a C load generator (Debian's package ``wrk``): a Python client would need a
core of its own at these rates, on a machine whose two cores the server is meant to use.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

from rpc import BenchError, Unsupported, descendants

TOKEN = "bench-http-token-0123456789abcdef"  # noqa: S105 - a local benchmark's token

_SCRIPT = """
local paths = {%(paths)s}
local n = 0
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Accept"] = "application/json, text/event-stream"
wrk.headers["Authorization"] = "Bearer %(token)s"
wrk.headers["MCP-Protocol-Version"] = "2025-06-18"
request = function()
  n = n + 1
  local body = '{"jsonrpc":"2.0","id":' .. n .. ',"method":"tools/call","params":' ..
    '{"name":"read_text_file","arguments":{"path":"' .. paths[(n %% #paths) + 1] .. '"}}}'
  return wrk.format(nil, "/mcp", nil, body)
end
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _cpu_seconds(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rpartition(")")[2].split()
            total += int(fields[11]) + int(fields[12])
        except OSError:
            continue
    return total / os.sysconf("SC_CLK_TCK")


def _replicas(pid: int) -> list[int]:
    """The server's replicas: processes below it that run its own command line (not
    code_map's parse supervisors and helpers)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            own = f.read()
    except OSError:
        return []
    found = []
    for child in descendants(pid):
        try:
            with open(f"/proc/{child}/cmdline", "rb") as f:
                if f.read() == own:
                    found.append(child)
        except OSError:
            continue
    return found


def _hwm_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _post(port: int, path: str) -> dict[str, object]:
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "read_text_file", "arguments": {"path": path}},
        }
    ).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/mcp",
        data=body,
        headers={
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "Authorization": f"Bearer {TOKEN}",
            "MCP-Protocol-Version": "2025-06-18",
        },
    )
    with urllib.request.urlopen(request, timeout=60) as answer:  # noqa: S310
        reply: dict[str, object] = json.loads(answer.read())
    return reply


def http_rate(
    cmd: list[str],
    flags: list[str],
    root: Path,
    paths: list[str],
    *,
    workers: int,
    connections: int,
    seconds: float,
    log_path: Path,
) -> tuple[float, str]:
    """Calls/s of read_text_file over HTTP with ``workers`` server processes, and a
    detail line; raises Unsupported without wrk, BenchError on a wrong answer."""
    wrk = shutil.which("wrk")
    if wrk is None:
        raise Unsupported("wrk is not installed (Debian package wrk)")
    port = _free_port()
    argv = [*cmd, *flags, "--http", f"127.0.0.1:{port}", "--workers", str(workers)]
    argv += ["--audit-log", "off", "--", str(root)]
    env = {**os.environ, "SANDBOXFS_TOKEN": TOKEN}
    with open(log_path, "wb") as log:
        server = subprocess.Popen(  # noqa: S603 - our own command
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log, env=env
        )
    try:
        deadline = time.monotonic() + 60
        while b"serving MCP on" not in log_path.read_bytes():
            if server.poll() is not None or time.monotonic() > deadline:
                raise BenchError(f"sandboxfs --http did not start: {log_path.read_text()[-2000:]}")
            time.sleep(0.02)
        reply = _post(port, paths[0])
        result = reply.get("result")
        structured = result.get("structuredContent") if isinstance(result, dict) else None
        content = structured.get("content") if isinstance(structured, dict) else None
        if not isinstance(content, str) or len(content) != 1024:
            raise BenchError(f"HTTP read_text_file gave {str(reply)[:300]}")
        pids = [server.pid, *_replicas(server.pid)]
        with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as script:
            script.write(
                _SCRIPT % {"paths": ", ".join(json.dumps(p) for p in paths), "token": TOKEN}
            )
        try:
            cpu0 = _cpu_seconds(pids)
            done = subprocess.run(  # noqa: S603 - our own command
                [wrk, "-t1", f"-c{connections}", f"-d{seconds:g}s", "-s", script.name,
                 f"http://127.0.0.1:{port}/mcp"],
                capture_output=True, text=True, check=False, timeout=seconds + 120,
            )  # fmt: skip
            cpu = _cpu_seconds(pids) - cpu0
        finally:
            os.unlink(script.name)
        out = done.stdout
        rate = re.search(r"Requests/sec:\s+([0-9.]+)", out)
        total = re.search(r"([0-9]+) requests in", out)
        if done.returncode != 0 or rate is None or total is None:
            raise BenchError(f"wrk failed: {out[-1000:]} {done.stderr[-1000:]}")
        if "Non-2xx" in out or "Socket errors" in out:
            raise BenchError(f"wrk saw failed requests: {out[-1000:]}")
        hwm = sum(_hwm_kib(pid) for pid in pids)
        calls = int(total.group(1))
        detail = (
            f"{connections} connections, {workers} server process(es); server CPU "
            f"{cpu / max(calls, 1) * 1e3:.2f} ms/call; peak RSS of its processes "
            f"{hwm / 1024:.1f} MiB"
        )
        return float(rate.group(1)), detail
    finally:
        server.terminate()
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
