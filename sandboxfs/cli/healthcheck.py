"""The container image's health check: ``python -m sandboxfs.cli.healthcheck``.

It finds the sandboxfs server of the container (process 1, or else the first
process whose command line is sandboxfs's) and reads its options: serving HTTP
(``--http HOST:PORT``, the tenants' front too), it asks ``GET /healthz`` there
(an unspecified address, ``0.0.0.0`` or ``::``, is asked on loopback); serving a
unix socket (``--unix PATH``), it asks through the socket; serving stdio, there
is nothing to ask, and the server is healthy while it runs.  Exit status 0:
healthy; 1: not (one line on stderr says why).  It sends nothing but the probe,
and needs no token (``/healthz`` asks for none).
"""

from __future__ import annotations

import http.client
import os
import socket
import sys
from collections.abc import Sequence
from typing import Final

from sandboxfs.cli.arguments import UsageError, parse_arguments

#: Seconds the probe may take (the image's HEALTHCHECK allows 5).
TIMEOUT: Final = 4.0
#: An address that listens everywhere is asked on loopback.
_UNSPECIFIED: Final = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}  # noqa: S104


def server_arguments(argv: Sequence[str]) -> list[str] | None:
    """The options and directories of a sandboxfs command line (its program removed),
    or None if it is not sandboxfs's."""
    for i, part in enumerate(argv):
        if os.path.basename(part) == "sandboxfs" and i <= 1:  # the script, or python SCRIPT
            return list(argv[i + 1 :])
        if part == "-m" and i + 1 < len(argv) and argv[i + 1] == "sandboxfs":
            return list(argv[i + 2 :])
    return None


def _command_line(pid: str) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    return [os.fsdecode(part) for part in raw.split(b"\0") if part]


def find_server() -> list[str] | None:
    """The arguments of the container's sandboxfs (process 1 first), or None."""
    pids = sorted(int(name) for name in os.listdir("/proc") if name.isdigit())
    for pid in pids:
        argv = _command_line(str(pid))
        found = None if argv is None else server_arguments(argv)
        if found is not None and found[:1] not in (["audit"], ["workspaces"], ["hash-token"]):
            return found
    return None


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str) -> None:
        super().__init__("localhost", timeout=TIMEOUT)
        self.path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(TIMEOUT)
        sock.connect(self.path)
        self.sock = sock


def probe(arguments: Sequence[str]) -> str | None:
    """Ask the server these arguments start whether it is alive: None if it is, else
    why not."""
    try:
        args = parse_arguments(arguments)
    except UsageError as exc:
        return f"cannot read the server's command line: {exc}"
    connection: http.client.HTTPConnection
    if args.unix is not None:
        connection = _UnixConnection(args.unix)
    elif args.http is not None:
        endpoint = args.endpoint
        assert endpoint is not None and endpoint.host is not None
        host = _UNSPECIFIED.get(endpoint.host, endpoint.host)
        connection = http.client.HTTPConnection(host, endpoint.port, timeout=TIMEOUT)
    else:
        return None  # stdio: alive while it runs
    try:
        connection.request("GET", "/healthz")
        status = connection.getresponse().status
    except OSError as exc:
        return f"/healthz did not answer: {exc.strerror or exc}"
    finally:
        connection.close()
    return None if status == 200 else f"/healthz answered {status}"


def main() -> int:
    arguments = find_server()
    if arguments is None:
        print("sandboxfs healthcheck: no sandboxfs server is running", file=sys.stderr)
        return 1
    problem = probe(arguments)
    if problem is not None:
        print(f"sandboxfs healthcheck: {problem}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
