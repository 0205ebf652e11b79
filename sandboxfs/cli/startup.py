"""What every serving process does on its way up: fail in one line, and listen.

Shared by a server (:mod:`sandboxfs.cli.main`) and the tenants' front
(:mod:`sandboxfs.cli.front`).
"""

from __future__ import annotations

import socket
import sys
from typing import NoReturn

from sandboxfs.cli.arguments import EXIT_FAILED
from sandboxfs.transports.http.server import Endpoint, listen


def fail(message: str) -> NoReturn:
    """Stop: the server cannot start.  One line on stderr, exit status 1."""
    print(f"sandboxfs: error: {message}", file=sys.stderr)
    raise SystemExit(EXIT_FAILED)


def listen_on(endpoint: Endpoint) -> tuple[socket.socket, Endpoint]:
    """The listening socket and the endpoint it really has (its port, for port 0)."""
    try:
        sock = listen(endpoint)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        fail(f"cannot listen on {endpoint.describe()}: {reason}")
    except (OverflowError, ValueError) as exc:  # what the socket module says of odd input
        fail(f"cannot listen on {endpoint.describe()}: {exc}")
    return sock, endpoint.bound(sock)
