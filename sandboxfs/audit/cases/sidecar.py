"""Sidecar: a server driven over stdio must not also serve the network unauthenticated.

A filesystem server that opens an HTTP endpoint (a "sidecar" for remote clients, a
debug port) beside its stdio one hands the same directory to anyone who can reach
it.  sandboxfs's own sidecar refuses to listen beyond loopback without a bearer
token, and refuses an empty token; this case checks any server for the result, from
outside: every TCP socket the server's processes listen on beyond loopback is sent an
MCP ``initialize`` with no token and with an empty one, and must refuse both.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import trio

from sandboxfs.audit import procs
from sandboxfs.audit.cases.base import case
from sandboxfs.audit.harness import CaseFailed, Fixture, Session

_LISTEN = "0A"  # the TCP state in /proc/net/tcp


def _socket_inodes(pid: int) -> set[str]:
    inodes = set()
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    inodes.add(target[len("socket:[") : -1])
    return inodes


def _address(hex_address: str) -> tuple[str, int]:
    host, port = hex_address.split(":")
    raw = bytes.fromhex(host)
    if len(raw) == 4:
        return str(ipaddress.IPv4Address(raw[::-1])), int(port, 16)
    # /proc/net/tcp6 holds four 32-bit words, each in host (little-endian) order.
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))
    return str(ipaddress.IPv6Address(words)), int(port, 16)


def listeners(pids: set[int]) -> Iterator[tuple[str, int]]:
    """(address, port) of every TCP socket of ``pids`` in the LISTEN state."""
    seen = set()
    for pid in pids:
        inodes = _socket_inodes(pid)
        if not inodes:
            continue
        for table in ("tcp", "tcp6"):
            with contextlib.suppress(OSError):
                lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
                for line in lines:
                    fields = line.split()
                    if fields[3] == _LISTEN and fields[9] in inodes and fields[9] not in seen:
                        seen.add(fields[9])
                        yield _address(fields[1])


def _beyond_loopback(host: str) -> bool:
    address = ipaddress.ip_address(host)
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return not address.is_loopback


def _status(
    where: tuple[str, int], method: str, path: str, token: str | None, seconds: float
) -> int:
    """The HTTP status ``method path`` gets at ``where`` (0 if none came)."""
    host, port = where
    address = ipaddress.ip_address(host)
    if address.is_unspecified:  # listening on every address: reach it on loopback
        host = "::1" if address.version == 6 else "127.0.0.1"
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "sandboxfs-audit", "version": "1"},
            },
        }
    ).encode()
    authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    head = [
        f"{method} {path} HTTP/1.1",
        f"Host: {authority}",
        "Accept: application/json, text/event-stream",
        "Connection: close",
    ]
    if token is not None:
        head.append(f"Authorization: Bearer {token}")
    if method == "POST":
        head += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    request = ("\r\n".join(head) + "\r\n\r\n").encode() + (body if method == "POST" else b"")
    try:
        with socket.create_connection((host, port), timeout=seconds) as sock:
            sock.sendall(request)
            line = sock.makefile("rb").readline(200)
    except OSError:
        return 0
    parts = line.split()
    return int(parts[1]) if len(parts) >= 2 and parts[1].isdigit() else 0


@case("sidecar", "no-open-listener-beyond-loopback")
async def _open_listener(s: Session, fx: Fixture) -> None:
    """Every TCP listener of the server's processes beyond loopback refuses an MCP
    request that carries no token, or an empty one."""
    found = sorted(set(listeners(procs.descendants(os.getpid()))))
    open_ones = [(host, port) for host, port in found if _beyond_loopback(host)]
    for host, port in open_ones:
        for method, path in (("POST", "/mcp"), ("POST", "/"), ("GET", "/sse")):
            for token, said in ((None, "no token"), ("", "an empty bearer token")):
                status = await trio.to_thread.run_sync(
                    _status, (host, port), method, path, token, s.timeout, abandon_on_cancel=True
                )
                if 200 <= status < 300:
                    raise CaseFailed(
                        f"the server listens on {host} port {port}, beyond loopback, and "
                        f"answered {method} {path} with {said} (HTTP {status})"
                    )
    if open_ones:
        shown = ", ".join(f"{host} port {port}" for host, port in open_ones)
        s.notes.append(f"listens on {shown}; refused without a token")
