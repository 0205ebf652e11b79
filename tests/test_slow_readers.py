"""A reader that does not read is cut off, over HTTP, and its answer's memory released.

Clients send ``read_text_file`` of a 24 MiB file (of control characters, which
escape to six times their size) and never read the answer: each held about
174 MiB of the server's memory for as long as it kept its connection open.  With
``--send-timeout`` the server cuts each one off once it has taken nothing for
that long, the memory goes back (RSS near where it was before), and a client
that reads is served as before.  Through the tenants' front too, which never
holds more than a chunk of an answer it relays.

Memory is read from /proc (RSS, and the peak after resetting it): bounds are
generous, and nothing waits on a clock but the server's own deadline.
"""

from __future__ import annotations

import http.client
import json
import re
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sidecar_helpers import TOKEN, Sidecar, sidecar
from test_tenants import TOKEN_A, front

from sandboxfs.cli.main import main

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")

MiB = 1024 * 1024
#: One line of the big file: control characters, each escaped as six bytes in JSON.
LINE = b"\x01" * 99 + b"\n"
SIZE = 24 * MiB
STALLED = 4
CUT = "cut off a client"


def _status(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no {field} for {pid}")


def rss(pid: int) -> int:
    return _status(pid, "VmRSS")


def reset_peak(pid: int) -> None:
    """Start VmHWM over from the current RSS (Linux 4.0 and later)."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")


def _request(port: int, token: str, path: str) -> bytes:
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "read_text_file", "arguments": {"path": path}},
        }
    ).encode()
    head = (
        f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {token}\r\n"
        "Content-Type: application/json\r\nAccept: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


def read_whole(port: int, token: str, path: str) -> str:
    """A client that reads: the file's text, from the whole answer."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        data = _request(port, token, path)
        head, body = data.split(b"\r\n\r\n", 1)
        headers = dict(line.split(": ", 1) for line in head.decode().split("\r\n")[1:])
        connection.request("POST", "/mcp", body=body, headers=headers)
        response = connection.getresponse()
        assert response.status == 200
        answer = json.loads(response.read())
    finally:
        connection.close()
    return str(answer["result"]["content"][0]["text"])


def stall(port: int, token: str, path: str) -> socket.socket:
    """A client that asks for the file and never reads its answer."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    sock.sendall(_request(port, token, path))
    return sock


def taken_until_closed(sock: socket.socket) -> int:
    """Read what is left until the server's end of the connection: the bytes read."""
    received = 0
    sock.settimeout(60)  # a guard: a cut connection ends at once
    try:
        while chunk := sock.recv(1 << 20):
            received += len(chunk)
    except ConnectionResetError:
        pass
    return received


@pytest.fixture(scope="module")
def big_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("slow") / "served"
    directory.mkdir()
    (directory / "big.txt").write_bytes(LINE * (SIZE // len(LINE)))
    (directory / "small.txt").write_text("small\n")
    return directory


@pytest.fixture
def slow_sidecar(big_file: Path, tmp_path: Path) -> Iterator[Sidecar]:
    with sidecar("--send-timeout", "1", "--audit-log", "off", str(big_file), tmp=tmp_path) as s:
        yield s


def test_a_reader_that_does_not_read_is_cut_off_and_its_memory_released(
    slow_sidecar: Sidecar,
) -> None:
    s, pid = slow_sidecar, slow_sidecar.process.pid
    expected = (LINE * (SIZE // len(LINE))).decode()
    assert read_whole(s.port, TOKEN, "small.txt") == "small\n"  # warms the server up
    baseline = rss(pid)
    stalled = [stall(s.port, TOKEN, "big.txt") for _ in range(STALLED)]
    try:
        wait_for_sync(lambda: s.log.read_text().count(CUT) >= STALLED)
        # Each was cut off before its answer (six times the file, twice) was taken.
        for sock in stalled:
            assert taken_until_closed(sock) < 6 * SIZE
    finally:
        for sock in stalled:
            sock.close()
    assert re.search(rf"{CUT} \(127\.0\.0\.1:\d+\) that took none of its answer", s.log.read_text())
    # The answers' memory went back (each held ~174 MiB before the fix, ~27 MiB after
    # it, as long as its client kept the connection open).
    wait_for_sync(lambda: rss(pid) < baseline + 48 * MiB)
    assert read_whole(s.port, TOKEN, "big.txt") == expected  # and a reader is served


def wait_for_sync(condition: Callable[[], bool], seconds: float = 120) -> None:
    """Wait (polling) for ``condition()``; a guard against hanging, not a timing."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "condition never held"
        time.sleep(0.01)


def test_the_front_holds_a_chunk_at_most_and_cuts_off_a_reader_that_does_not(
    tmp_path: Path,
) -> None:
    """Through the tenants' front: the front's memory does not grow with the answers
    it relays to clients that do not read, it cuts them off, and the worker that made
    the answers lets them go (the front closed their connections)."""
    with front(tmp_path, None, "--send-timeout", "1") as f:
        big = f.a / "big.txt"
        big.write_bytes(LINE * (SIZE // len(LINE)))
        (f.a / "small.txt").write_text("small\n")
        assert read_whole(f.port, TOKEN_A, str(f.a / "small.txt")) == "small\n"
        worker = f.pid("a")
        worker_baseline, front_baseline = rss(worker), rss(f.process.pid)
        reset_peak(f.process.pid)
        stalled = [stall(f.port, TOKEN_A, str(big)) for _ in range(STALLED)]
        try:
            front_cuts = rf"^{CUT} \(127\.0\.0\.1:\d+\)"
            wait_for_sync(lambda: len(re.findall(front_cuts, f.log_text(), re.M)) >= STALLED)
            for sock in stalled:
                assert taken_until_closed(sock) < 6 * SIZE
            front_peak = _status(f.process.pid, "VmHWM")
        finally:
            for sock in stalled:
                sock.close()
        # Four answers of ~290 MiB of JSON each went through the front: it held chunks.
        assert front_peak < front_baseline + 16 * MiB, (front_peak, front_baseline)
        wait_for_sync(lambda: rss(worker) < worker_baseline + 48 * MiB)
        expected = (LINE * (SIZE // len(LINE))).decode()
        assert read_whole(f.port, TOKEN_A, str(big)) == expected
        assert f.pid("a") == worker  # the same worker all along


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("nan", "--send-timeout needs a number from 0.001 to 3600, got 'nan'"),
        ("inf", "--send-timeout needs a number from 0.001 to 3600, got 'inf'"),
        ("-1", "--send-timeout needs a number from 0.001 to 3600, got '-1'"),
        ("soon", "--send-timeout needs a number from 0.001 to 3600, got 'soon'"),
        ("3601", "--send-timeout must be from 0.001 to 3600, got 3601"),
        ("0", "--send-timeout must be from 0.001 to 3600, got 0"),
    ],
)
def test_a_send_timeout_is_a_finite_number_of_seconds(
    value: str, problem: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--http", "127.0.0.1:1", "--send-timeout", value, str(tmp_path)]) == 2
    assert problem in capsys.readouterr().err
    assert main(["--send-timeout", "5", str(tmp_path)]) == 2  # stdio: no effect, refused
    assert "--send-timeout only applies when serving HTTP" in capsys.readouterr().err
