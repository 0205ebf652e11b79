"""Health tells the truth, and Ctrl-C ends an HTTP server in one line.

``/readyz`` is 503 while anything configured is not served (here: a server whose
allow-list is empty, which only a configuration the command line now refuses
could start, so it is built in-process and served over real HTTP), 200
otherwise; ``/healthz`` is liveness alone.  SIGINT drains like SIGTERM, then the
server exits 130 with one line on stderr.
"""

from __future__ import annotations

import http.client
import signal
from pathlib import Path

import pytest
import trio
from sidecar_helpers import sidecar

from sandboxfs.core.allowlist import AllowList, Root
from sandboxfs.session.access import AccessControl
from sandboxfs.session.dispatcher import SandboxfsServer, ServerOptions
from sandboxfs.transports.http.server import Endpoint, SidecarOptions, listen, serve_http


def _get(port: int, path: str) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def _probes(roots: list[Root]) -> dict[str, tuple[int, bytes]]:
    """/healthz and /readyz of serve_http, in this process, for a server of ``roots``."""
    server = SandboxfsServer(ServerOptions(), AccessControl(AllowList.of(roots), confine=False))
    listener = listen(Endpoint(host="127.0.0.1", port=0))
    port = listener.getsockname()[1]
    options = SidecarOptions(endpoint=Endpoint(host="127.0.0.1", port=port), token=None)
    answers = {}

    async def main() -> None:
        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(serve_http, server, listener, options)
                for path in ("/healthz", "/readyz"):
                    answers[path] = await trio.to_thread.run_sync(_get, port, path)
                nursery.cancel_scope.cancel()

    try:
        trio.run(main)
    finally:
        listener.close()
    return answers


def test_readyz_is_503_while_no_directory_is_served(tmp_path: Path) -> None:
    answers = _probes([])
    assert answers["/healthz"] == (200, b"ok\n")  # alive ...
    assert answers["/readyz"] == (  # ... but serving nothing
        503,
        b"not ready: no directory is served (the allow-list is empty)\n",
    )
    answers = _probes([Root.open(str(tmp_path))])
    assert answers == {"/healthz": (200, b"ok\n"), "/readyz": (200, b"ready\n")}


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_sigint_exits_130_in_one_line(tmp_path: Path, signum: signal.Signals) -> None:
    (tmp_path / "served").mkdir()
    with sidecar(str(tmp_path / "served"), tmp=tmp_path) as s:
        before = len(s.log.read_text())
        s.process.send_signal(signum)
        code = s.process.wait(timeout=60)
        after = s.log.read_text()[before:]
    assert "Traceback" not in after
    if signum == signal.SIGINT:
        assert code == 130 and after == "sandboxfs: interrupted\n", after
    else:
        assert code == 0 and "SIGTERM: refusing new requests" in after
