"""The benchmark's JSON-RPC-over-stdio client and process bookkeeping (bench/run.py).

One JSON object per line; every process started here is killed at exit, whatever happens.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import re
import select
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

KiB = 1024
MiB = 1024 * KiB

PROTOCOL_VERSION = "2025-06-18"
STATELESS_VERSION = "2026-07-28"  # no handshake: every request carries params._meta
CLIENT_INFO = {"name": "sandboxfs-bench", "version": "1"}


class BenchError(Exception):
    """A benchmark step failed; the message says which and why."""


class Unsupported(BenchError):
    """The server does not speak what the workload needs: its cell says n/a, and why."""


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------
# Process bookkeeping: every process we start is killed at exit, whatever happens.

_LIVE: dict[int, subprocess.Popen[bytes]] = {}


def _kill(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)  # its own session: helpers die too
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)
    _LIVE.pop(proc.pid, None)


def kill_all() -> None:
    for proc in list(_LIVE.values()):
        _kill(proc)


def _on_signal(signum: int, _frame: Any) -> None:
    raise SystemExit(128 + signum)


atexit.register(kill_all)


def run_text(argv: list[str]) -> str:
    """The stripped stdout of a short command, or "?"."""
    try:
        done = subprocess.run(  # noqa: S603 - commands come from our own options
            argv, capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return "?"
    return done.stdout.strip() or "?"


def supported_flags(cmd: list[str], wanted: dict[str, object]) -> list[str]:
    """``flag value`` pairs for the options of ``wanted`` that ``cmd --help`` mentions."""
    help_text = run_text([*cmd, "--help"])
    flags: list[str] = []
    for flag, value in wanted.items():
        if re.search(re.escape(flag) + r"\b", help_text):
            flags += [flag, str(value)]
    return flags


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` (children, their children, ...)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rpartition(")")[2].split()
        except OSError:
            continue
        if fields[0] != "Z":
            parents[int(entry)] = int(fields[1])
    found: list[int] = []
    wanted = {pid}
    while wanted:
        wanted = {child for child, parent in parents.items() if parent in wanted}
        found += sorted(wanted)
    return found


def proc_pss_kib(pid: int) -> int | None:
    """Pss (kB) of /proc/PID/smaps_rollup: RSS with shared pages split among sharers."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def proc_status_kib(pid: int, key: str) -> int | None:
    """A ``kB`` field of /proc/PID/status (VmRSS, VmHWM), or None if unavailable."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


# --------------------------------------------------------------------------------------
# Raw JSON-RPC over stdio


def stateless_meta() -> dict[str, Any]:
    """params._meta of a 2026-07-28 request: there is no handshake to carry these."""
    return {
        "io.modelcontextprotocol/protocolVersion": STATELESS_VERSION,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": CLIENT_INFO,
    }


def describe_error(error: Any) -> str:
    if not isinstance(error, dict):
        return repr(error)[:200]
    text = f"{error.get('code')} {error.get('message')!r}"
    if "data" in error:
        text += f" (data {json.dumps(error['data'])[:200]})"
    return text


def encode(msg: dict[str, Any]) -> bytes:
    return (json.dumps(msg, separators=(",", ":"), ensure_ascii=False) + "\n").encode()


def result_text(result: dict[str, Any]) -> str:
    return "".join(c.get("text", "") for c in result.get("content", []) if c.get("type") == "text")


def check_result(label: str, tool: str, result: dict[str, Any]) -> None:
    if result.get("isError"):
        raise BenchError(f"{label}: {tool} returned an error: {result_text(result)[:500]}")


class Conn:
    """One server process and a JSON-lines connection to it on its stdin/stdout."""

    def __init__(self, label: str, argv: list[str], *, log_path: Path, timeout: float) -> None:
        self.label = label
        self.timeout = timeout
        self.log_path = log_path
        self._log: IO[bytes] = open(log_path, "wb")  # noqa: SIM115 - closed in close()
        self.t_spawn = time.perf_counter()
        try:
            self.proc = subprocess.Popen(  # noqa: S603 - commands come from our own options
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self._log,
                bufsize=0,
                start_new_session=True,
            )
        except OSError as exc:
            self._log.close()
            raise BenchError(f"{label}: cannot start {shlex.join(argv)}: {exc}") from exc
        _LIVE[self.proc.pid] = self.proc
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.fd_in = self.proc.stdin.fileno()
        self.fd_out = self.proc.stdout.fileno()
        os.set_blocking(self.fd_in, False)
        os.set_blocking(self.fd_out, False)
        self._buf = bytearray()
        self._scan = 0
        self.next_id = 0
        self.tools: dict[str, dict[str, Any]] = {}
        self.startup_ms = float("nan")
        self.init_ms = float("nan")

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _stderr_tail(self, n: int = 15) -> str:
        with contextlib.suppress(OSError):
            self._log.flush()
            lines = self.log_path.read_bytes().decode("utf-8", "replace").splitlines()
            if lines:
                return "\n    ".join(["server stderr (last lines):", *lines[-n:]])
        return "(no stderr output)"

    def _died(self, what: str) -> BenchError:
        code = self.proc.poll()
        state = f"exited with status {code}" if code is not None else "closed its stdout"
        return BenchError(f"{self.label}: server {state} while {what}\n    {self._stderr_tail()}")

    def _timed_out(self, what: str) -> BenchError:
        return BenchError(
            f"{self.label}: no answer within {self.timeout:.0f} s {what}\n    "
            + self._stderr_tail()
        )

    def _read_available(self, what: str) -> None:
        """What the server has written so far: 64 KiB reads (a 4 MiB one allocates a
        mapping each time, ~12 us a call), 4 MiB ones while they come back full."""
        size = 64 * KiB
        while True:
            try:
                chunk = os.read(self.fd_out, size)
            except BlockingIOError:
                return
            if not chunk:
                raise self._died(what)
            self._buf += chunk
            if len(chunk) < size:
                return
            size = 4 * MiB

    def write(self, data: bytes, what: str = "sending a request") -> None:
        """Write all of ``data``, reading the server's output meanwhile (no deadlock)."""
        view = memoryview(data)
        deadline = time.perf_counter() + self.timeout
        while view:
            try:
                view = view[os.write(self.fd_in, view) :]
                continue
            except BlockingIOError:
                pass
            except BrokenPipeError:
                raise self._died(what) from None
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                raise self._timed_out(what)
            readable, _, _ = select.select([self.fd_out], [self.fd_in], [], remaining)
            if readable:
                self._read_available(what)

    def read_line(self, deadline: float, what: str) -> bytes:
        while True:
            i = self._buf.find(b"\n", self._scan)
            if i >= 0:
                line = bytes(self._buf[:i])
                del self._buf[: i + 1]
                self._scan = 0
                return line
            self._scan = len(self._buf)
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                raise self._timed_out(what)
            readable, _, _ = select.select([self.fd_out], [], [], remaining)
            if readable:
                self._read_available(what)

    def send(self, method: str, params: dict[str, Any] | None = None) -> int:
        self.next_id += 1
        msg: dict[str, Any] = {"jsonrpc": "2.0", "id": self.next_id, "method": method}
        if params is not None:
            msg["params"] = params
        self.write(encode(msg))
        return self.next_id

    def recv_response(self, what: str) -> dict[str, Any]:
        """The next response; server-to-client requests are refused, notifications skipped."""
        deadline = time.perf_counter() + self.timeout
        while True:
            line = self.read_line(deadline, what)
            if not line.strip():
                continue
            try:
                msg = json.loads(line)
            except ValueError:
                raise BenchError(
                    f"{self.label}: non-JSON line from the server while {what}: {line[:200]!r}"
                ) from None
            if not isinstance(msg, dict):
                raise BenchError(f"{self.label}: unexpected message {line[:200]!r}")
            if "method" in msg:
                if "id" in msg:  # e.g. roots/list: we declared no capabilities
                    error = {"code": -32601, "message": "Method not found"}
                    self.write(encode({"jsonrpc": "2.0", "id": msg["id"], "error": error}))
                continue
            return msg

    def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        rid = self.send(method, params)
        msg = self.recv_response(f"waiting for {method} (id {rid})")
        if msg.get("id") != rid:
            raise BenchError(f"{self.label}: expected response id {rid}, got {msg.get('id')!r}")
        if "error" in msg:
            raise BenchError(f"{self.label}: {method} failed: {msg['error']}")
        result: dict[str, Any] = msg["result"]
        return result

    def call(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        result = self.request("tools/call", {"name": name, "arguments": arguments})
        check_result(self.label, name, result)
        return result

    def handshake(self) -> None:
        """initialize, notifications/initialized, tools/list; times spawn -> answers."""
        params = {
            "protocolVersion": PROTOCOL_VERSION,
            "capabilities": {},
            "clientInfo": CLIENT_INFO,
        }
        self.request("initialize", params)
        self.init_ms = (time.perf_counter() - self.t_spawn) * 1e3
        self.write(encode({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        listed = self.request("tools/list")
        self.startup_ms = (time.perf_counter() - self.t_spawn) * 1e3
        self.tools = {t["name"]: t for t in listed.get("tools", [])}

    def stateless_start(self) -> None:
        """The 2026-07-28 era: the first request is tools/list carrying params._meta, no
        handshake; times spawn -> answer.  Raises Unsupported unless the answer is a
        2026-07-28 result (one with ``resultType``)."""
        meta = stateless_meta()
        rid = self.send("tools/list", {"_meta": meta})
        msg = self.recv_response(f"waiting for a {STATELESS_VERSION} tools/list (id {rid})")
        self.startup_ms = (time.perf_counter() - self.t_spawn) * 1e3
        if msg.get("id") != rid:
            raise BenchError(f"{self.label}: expected response id {rid}, got {msg.get('id')!r}")
        if "error" in msg:
            raise Unsupported(
                f"a first tools/list with {STATELESS_VERSION} _meta is refused: "
                + describe_error(msg["error"])
            )
        result = msg.get("result") or {}
        if "resultType" not in result:
            why = (
                f"a first tools/list with {STATELESS_VERSION} _meta gets a 2025-era answer "
                f"(no resultType; after {self.startup_ms:.0f} ms): _meta is ignored"
            )
            rid = self.send("server/discover", {"_meta": meta})
            reply = self.recv_response(f"waiting for server/discover (id {rid})")
            if "error" in reply:
                why += "; server/discover: " + describe_error(reply["error"])
            else:
                versions = (reply.get("result") or {}).get("supportedVersions")
                why += f"; server/discover lists {versions}"
            raise Unsupported(why)
        self.tools = {t["name"]: t for t in result.get("tools", [])}

    def rss_kib(self) -> int | None:
        return proc_status_kib(self.pid, "VmRSS")

    def pss_mib(self) -> float:
        return (proc_pss_kib(self.pid) or 0) / 1024

    def helpers_kib(self) -> tuple[int, int, int]:
        """The server's own processes (code_map's parse supervisor and helpers): how
        many, their summed RSS and their summed PSS (kB; shared pages counted once)."""
        pids = descendants(self.pid)
        rss = sum(proc_status_kib(p, "VmRSS") or 0 for p in pids)
        pss = sum(proc_pss_kib(p) or 0 for p in pids)
        return len(pids), rss, pss

    def hwm_kib(self) -> int | None:
        return proc_status_kib(self.pid, "VmHWM")

    def close(self) -> None:
        """End of input; kill the server if it has not exited within 5 s."""
        with contextlib.suppress(OSError):
            self.proc.stdin.close()  # type: ignore[union-attr]
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            _kill(self.proc)
        with contextlib.suppress(OSError):
            self.proc.stdout.close()  # type: ignore[union-attr]
        self._log.close()
        _LIVE.pop(self.proc.pid, None)
