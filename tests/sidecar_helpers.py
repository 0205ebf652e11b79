"""Start sandboxfs as an HTTP sidecar for a test, and talk to it."""

from __future__ import annotations

import contextlib
import http.client
import os
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import httpx2
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client

from mcp_client import SERVER, server_env

TOKEN = "test-token-0123456789"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Sidecar:
    process: subprocess.Popen[bytes]
    port: int
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def request(
        self, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None
    ) -> tuple[int, bytes]:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            connection.request(method, path, body=body, headers=headers or {})
            response = connection.getresponse()
            return response.status, response.read()
        finally:
            connection.close()


def wait_healthy(port: int, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"sidecar exited {process.returncode}: {log.read_text()}")
        with contextlib.suppress(OSError):
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            connection.request("GET", "/healthz")
            if connection.getresponse().status == 200:
                connection.close()
                return
        time.sleep(0.1)
    raise AssertionError("sidecar never became healthy")


@contextmanager
def sidecar(
    *args: str, tmp: Path, token: str | None = TOKEN, env: dict[str, str] | None = None
) -> Iterator[Sidecar]:
    port = free_port()
    log = tmp / f"sidecar-{port}.log"
    environment = server_env({**({"SANDBOXFS_TOKEN": token} if token else {}), **(env or {})})
    with log.open("wb") as errlog:
        process = subprocess.Popen(
            [*SERVER, "--http", f"127.0.0.1:{port}", *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=errlog,
            env=environment,
        )
    try:
        wait_healthy(port, process, log)
        yield Sidecar(process, port, log)
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()


@asynccontextmanager
async def http_client(
    url: str, era: Literal["2025", "2026"], token: str | None = TOKEN, elicitation: Any = None
) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx2.AsyncClient(headers=headers, timeout=60) as transport_client:
        client = Client(
            streamable_http_client(url, http_client=transport_client),
            mode="legacy" if era == "2025" else "2026-07-28",
            cache=None,
            elicitation_callback=elicitation,
        )
        async with client:
            yield client


def unix_request(
    path: str, method: str, target: str, headers: Sequence[tuple[str, str]] = ()
) -> int:
    """One HTTP request over a unix socket; returns the status."""

    class UnixConnection(http.client.HTTPConnection):
        def connect(self) -> None:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.connect(path)

    connection = UnixConnection("localhost", timeout=10)
    try:
        connection.request(method, target, headers=dict(headers))
        return connection.getresponse().status
    finally:
        connection.close()


def mode_of(path: str) -> int:
    return os.stat(path).st_mode & 0o777
