"""Raw JSON-RPC lines to a fresh copy of the server under audit, for the protocol
cases: what an SDK client would never send (lone surrogates, a second handshake,
thousands of requests left pending) and whether the server survives it.

:class:`RawServer` reads the server's stdout in a thread; every wait has a
deadline, so a hung server is a verdict, never a hung audit.  The process is
killed on exit from the ``with`` block if it is still running.
"""

from __future__ import annotations

import json
import queue
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any, Final, Literal

from sandboxfs.audit import leash

Era = Literal["2025", "2026"]

MODERN_META: Final = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "sandboxfs-audit", "version": "1"},
}


def request(era: Era, request_id: Any, method: str, params: dict[str, Any] | None = None) -> str:
    """One request line in ``era`` (2026-07-28 requests carry their envelope).  The
    method and params may hold text JSON can spell but UTF-8 cannot (``\\ud800``)."""
    body: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None or era == "2026":
        body["params"] = dict(params or {})
        if era == "2026":
            body["params"]["_meta"] = MODERN_META
    return json.dumps(body)  # ASCII: a lone surrogate travels as its escape


def handshake(era: Era, capabilities: dict[str, Any] | None = None) -> list[str]:
    """What a client sends before its first call (nothing at 2026-07-28)."""
    if era == "2026":
        return []
    params = {
        "protocolVersion": "2025-06-18",
        "capabilities": capabilities or {},
        "clientInfo": {"name": "sandboxfs-audit", "version": "1"},
    }
    initialized = json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"})
    return [request("2025", 0, "initialize", params), initialized]


class RawServer:
    """A server process on pipes; replies are read as they come."""

    def __init__(self, argv: Sequence[str], env: dict[str, str]) -> None:
        self.process = subprocess.Popen(
            leash.command(argv),  # it must not outlive the auditor
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            process_group=0,  # a Ctrl-C at the terminal is the auditor's to handle
        )
        self._replies: queue.Queue[dict[str, Any] | None] = queue.Queue()
        #: Answers already read while waiting for another (answers come in any order).
        self._answers: dict[Any, dict[str, Any]] = {}
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if isinstance(message, dict):
                self._replies.put(message)
        self._replies.put(None)

    def send(self, *lines: str) -> bool:
        """Write ``lines``; False if the server no longer reads."""
        assert self.process.stdin is not None
        try:
            self.process.stdin.write("".join(line + "\n" for line in lines).encode())
            self.process.stdin.flush()
        except (BrokenPipeError, OSError):
            return False
        return True

    def answer(self, request_id: Any, seconds: float) -> dict[str, Any] | None:
        """The reply to ``request_id`` within ``seconds``; None if none came (the
        server hung or ended).  A ``roots/list`` it asks is answered with no roots."""
        key = json.dumps(request_id)
        deadline = time.monotonic() + seconds
        while key not in self._answers and (left := deadline - time.monotonic()) > 0:
            try:
                message = self._replies.get(timeout=left)
            except queue.Empty:
                return None
            if message is None:
                self._replies.put(None)  # the end stays visible to later waits
                return None
            if message.get("method") == "roots/list" and "id" in message:
                self.send(
                    json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": {"roots": []}})
                )
                continue
            if "method" not in message:
                self._answers[json.dumps(message.get("id"))] = message
        return self._answers.pop(key, None)

    def close(self, seconds: float) -> int | None:
        """Close stdin and wait for the exit status; None if it did not exit in time."""
        if self.process.stdin is not None:
            with suppress(OSError):
                self.process.stdin.close()
        try:
            return self.process.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            return None


@contextmanager
def raw_server(argv: Sequence[str], env: dict[str, str]) -> Iterator[RawServer]:
    server = RawServer(argv, env)
    try:
        yield server
    finally:
        if server.process.poll() is None:
            server.process.kill()
        server.process.wait()
        server._reader.join(timeout=10)
        for pipe in (server.process.stdin, server.process.stdout):
            if pipe is not None:
                with suppress(OSError):
                    pipe.close()
