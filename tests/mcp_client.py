"""Drive the real sandboxfs server through the real MCP SDK client, over stdio.

``session(...)`` starts ``python -m sandboxfs ARGS`` as a subprocess and yields a
connected SDK ``Client`` in the requested protocol era; the server's stderr is
collected in a file the test can read.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import mcp_types as types
import trio
from mcp.client import Client, ClientRequestContext
from mcp.client.stdio import StdioServerParameters, stdio_client
from wire_oracle import check_conversation

Era = Literal["2025", "2026"]
ERAS: tuple[Era, ...] = ("2025", "2026")
SERVER = [sys.executable, "-m", "sandboxfs"]
#: The server with test-only patches (tests/patched_server.py): PATCHED + [PATCHES, *ARGS].
PATCHED = [sys.executable, str(Path(__file__).resolve().parent / "patched_server.py")]


@dataclass
class Roots:
    """The Roots a 2025-era test client advertises; change them and notify."""

    paths: list[str] = field(default_factory=list)
    asked: int = 0

    async def answer(self, ctx: ClientRequestContext) -> types.ListRootsResult:
        self.asked += 1
        return types.ListRootsResult(
            roots=[
                types.Root(uri=p if "://" in p else Path(p).as_uri(), name=Path(p).name)
                for p in self.paths
            ]
        )


@dataclass
class Session:
    client: Client
    stderr: Path

    async def call(self, tool: str, **arguments: Any) -> types.CallToolResult:
        return await self.client.call_tool(tool, arguments)

    async def text(self, tool: str, **arguments: Any) -> str:
        """The text of a successful call (fails the test on isError)."""
        result = await self.call(tool, **arguments)
        assert not result.is_error, _text(result)
        return _text(result)

    async def error(self, tool: str, **arguments: Any) -> str:
        """The text of a call that must fail with isError."""
        result = await self.call(tool, **arguments)
        assert result.is_error, _text(result)
        return _text(result)

    def log(self) -> str:
        """The server's log as its operator reads it: a JSON line's message (with its
        own line breaks), an audit line as it is."""
        return "\n".join(said(line) for line in self.stderr.read_text().splitlines())

    async def wait_for_log(self, text: str, count: int = 1) -> None:
        """Wait until the server's log holds ``text`` (``count`` times)."""
        await wait_for(lambda: self.log().count(text) >= count)


async def wait_for(condition: Callable[[], bool], *, seconds: float = 60) -> None:
    """Wait until ``condition()`` holds (polled): how a test waits for the server,
    never a fixed sleep.  Fails the test after ``seconds``."""
    with trio.fail_after(seconds):
        while not condition():
            await trio.sleep(0.01)


def _text(result: types.CallToolResult) -> str:
    return "".join(c.text for c in result.content if isinstance(c, types.TextContent))


def said(line: str) -> str:
    """What a server's log line says: the message of a JSON line (the log's format
    when stderr is no terminal), or the text line itself."""
    if line.startswith("{"):
        try:
            record = json.loads(line)
        except ValueError:  # a line still being written, read in the middle
            return line.rstrip("\n")
        if isinstance(record, dict) and record.get("log") == "operator":
            return str(record["message"])
    return line.rstrip("\n")


def server_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The server's environment: this interpreter's import path, HOME, and ``extra``."""
    env = {"PYTHONPATH": os.pathsep.join(sys.path), "HOME": os.environ.get("HOME", "/root")}
    env.update(extra or {})
    return env


def spawn_stdio(
    *args: str, env: dict[str, str] | None = None, stderr: int = subprocess.PIPE
) -> subprocess.Popen[bytes]:
    """A server on pipes, for tests that speak raw JSON-RPC lines to it."""
    return subprocess.Popen(
        [*SERVER, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=stderr,
        env=server_env(env),
    )


@asynccontextmanager
async def session(
    *args: str,
    era: Era = "2026",
    roots: Roots | None = None,
    env: dict[str, str] | None = None,
    command: Sequence[str] | None = None,
    elicitation: Any = None,
) -> AsyncIterator[Session]:
    """A connected client; ``command`` replaces ``python -m sandboxfs ARGS`` entirely;
    ``elicitation`` answers the server's questions to the user (elicitation/create)."""
    argv = list(command) if command is not None else [*SERVER, *args]
    params = StdioServerParameters(command=argv[0], args=argv[1:], env=server_env(env))
    with tempfile.NamedTemporaryFile("w+", suffix=".stderr", delete=False) as log:
        stderr = Path(log.name)
        transport = stdio_client(params, errlog=log)
        client = Client(
            transport,
            mode="legacy" if era == "2025" else "2026-07-28",
            list_roots_callback=roots.answer if roots is not None else None,
            elicitation_callback=elicitation,
            cache=None,
            read_timeout_seconds=60,
        )
        try:
            async with client:
                yield Session(client, stderr)
        finally:
            stderr.unlink()


def run(fn: Callable[[], Awaitable[None]]) -> None:
    trio.run(fn)


def raw_exchange(
    args: Sequence[str],
    lines: Sequence[str | bytes],
    timeout: float = 30,
    env: dict[str, str] | None = None,
) -> tuple[list[dict[str, Any]], str, int]:
    """Write raw lines to a server's stdin, close it, and collect every reply line.

    Every reply is checked by the SDK's models (:mod:`wire_oracle`): answers only to
    requests that were sent, each at most once, each valid for its method."""
    data = b"".join((x if isinstance(x, bytes) else x.encode()) + b"\n" for x in lines)
    proc = subprocess.run(
        [*SERVER, *args], input=data, capture_output=True, timeout=timeout, env=server_env(env)
    )
    replies = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    check_conversation([_parsed(x) for x in lines], replies)
    return replies, proc.stderr.decode(), proc.returncode


def _parsed(line: str | bytes) -> Any:
    try:
        return json.loads(line)
    except ValueError:
        return None


INIT_2025 = json.dumps(
    {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "raw", "version": "1"},
        },
    }
)
INITIALIZED = json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"})


def call_line(request_id: int, tool: str, **arguments: Any) -> str:
    return json.dumps(
        {
            "jsonrpc": "2.0",
            "id": request_id,
            "method": "tools/call",
            "params": {"name": tool, "arguments": arguments},
        }
    )
