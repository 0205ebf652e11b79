"""Streamable HTTP at the wire: exact Host and Origin checks, framing that is
refused, the methods a stateless server does not serve, JSON answers (SSE only
when a stream is needed or is all the client takes), and a 5 MiB file read by
the SDK client with its default settings in both eras.

Every answer with a body goes through the SDK's models (:class:`WireOracle`).
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trio
from sidecar_helpers import TOKEN, Sidecar, http_client, sidecar
from wire_oracle import WireOracle

from helpers import make_tree
from mcp_client import run
from sandboxfs.core.allowlist import AllowList, Root
from sandboxfs.session.access import AccessControl
from sandboxfs.session.dispatcher import SandboxfsServer, ServerOptions
from sandboxfs.transports.http.endpoint import HttpPolicy, McpEndpoint

# The SDK's HTTP client (httpx2) leaves async generators for the garbage collector to
# close under trio (see test_sidecar.py).
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")

MODERN = "2026-07-28"
LEGACY = "2025-11-25"
BOTH = "application/json, text/event-stream"
ALLOWED_HOST = "mcp.example:8443"
ALLOWED_ORIGIN = "https://app.example"


#: ~3 MiB with escapes throughout: answered in pieces.
PIECES_TEXT = 'line "quoted" \\ tab\t é\n' * 120_000


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sidecar]:
    """One sidecar for the wire tests (each request is stateless)."""
    base = tmp_path_factory.mktemp("http")
    tree = make_tree(base)
    (tree.root / "a.txt").write_text("over http\n")
    (tree.root / "pieces.txt").write_text(PIECES_TEXT)
    with sidecar(
        "--allowed-host",
        ALLOWED_HOST,
        "--allowed-origin",
        ALLOWED_ORIGIN,
        str(tree.root),
        tmp=base,
    ) as s:
        yield s


# -- raw HTTP/1.1 ------------------------------------------------------------------------


@dataclass
class Answer:
    status: int
    headers: dict[str, list[str]]
    body: bytes

    def header(self, name: str) -> str | None:
        values = self.headers.get(name)
        return values[0] if values else None


def _meta() -> dict[str, Any]:
    return {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "wire", "version": "1"},
    }


def request(
    method: str, request_id: int = 1, era: str = "2026", **params: Any
) -> tuple[dict[str, Any], dict[str, str]]:
    """A JSON-RPC request of ``era`` and the headers that go with it."""
    headers = {"Content-Type": "application/json", "Accept": BOTH}
    if era == "2026":
        params["_meta"] = {**_meta(), **params.get("_meta", {})}
        headers["MCP-Protocol-Version"] = MODERN
        headers["Mcp-Method"] = method
        if method == "tools/call":
            headers["Mcp-Name"] = params["name"]
    else:
        headers["MCP-Protocol-Version"] = LEGACY
    message = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
    return message, headers


def raw(port: int, data: bytes) -> bytes:
    """Send ``data`` on a fresh connection; everything the server sends until it
    closes the connection (a request without ``Connection: close`` waits for
    Hypercorn's keep-alive timeout to end)."""
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        sock.sendall(data)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
        return received


def http_bytes(
    port: int,
    method: str,
    body: bytes = b"",
    headers: dict[str, str] | None = None,
    *,
    host: str | None = None,
    extra: list[tuple[str, str]] | None = None,
) -> bytes:
    lines = [f"{method} /mcp HTTP/1.1", f"Host: {f'127.0.0.1:{port}' if host is None else host}"]
    lines += [f"Authorization: Bearer {TOKEN}", "Connection: close"]
    lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
    lines += [f"{name}: {value}" for name, value in extra or []]
    if body:
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def parse_responses(data: bytes) -> list[Answer]:
    """Every HTTP/1.1 response in ``data`` (chunked or sized bodies)."""
    answers = []
    while data:
        head, _, data = data.partition(b"\r\n\r\n")
        status_line, *header_lines = head.decode("latin-1").split("\r\n")
        assert status_line.startswith("HTTP/1.1 "), status_line
        headers: dict[str, list[str]] = {}
        for line in header_lines:
            name, _, value = line.partition(":")
            headers.setdefault(name.strip().lower(), []).append(value.strip())
        body = b""
        if headers.get("transfer-encoding") == ["chunked"]:
            while True:
                size_line, _, data = data.partition(b"\r\n")
                size = int(size_line, 16)
                body, data = body + data[:size], data[size + 2 :]
                if size == 0:
                    break
        else:
            length = int(headers.get("content-length", ["0"])[0])
            body, data = data[:length], data[length:]
        answers.append(Answer(int(status_line.split()[1]), headers, body))
    return answers


def exchange(
    s: Sidecar,
    message: dict[str, Any],
    headers: dict[str, str],
    *,
    host: str | None = None,
    extra: list[tuple[str, str]] | None = None,
) -> Answer:
    """One POST on its own connection; exactly one response comes back."""
    body = json.dumps(message).encode()
    [answer] = parse_responses(
        raw(s.port, http_bytes(s.port, "POST", body, headers, host=host, extra=extra))
    )
    return answer


def checked(answer: Answer, message: dict[str, Any], era: str = "2026") -> list[dict[str, Any]]:
    """The messages of an answer, each checked by the SDK's models; the request is
    answered exactly once, and the body is what its Content-Type says."""
    oracle = WireOracle(version=MODERN if era == "2026" else LEGACY)
    oracle.sent(message)
    kind = (answer.header("content-type") or "").split(";")[0]
    if kind == "application/json":
        messages = [json.loads(answer.body)]
    else:
        assert kind == "text/event-stream", answer
        messages = [
            json.loads(line[len(b"data: ") :])
            for event in answer.body.split(b"\r\n\r\n")
            for line in event.split(b"\r\n")
            if line.startswith(b"data: ")
        ]
    for reply in messages:
        oracle.received(reply)
    assert oracle.unanswered() == [], (answer, messages)
    return messages


# -- Host ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "host",
    [
        "localhost:evil.com",
        "127.0.0.1:{port}.evil.com",
        "localhost:{port}.evil.com",
        "127.0.0.1:{port}0",
        "127.0.0.1:{port}@evil.com",
        "evil.com:{port}",
        "127.0.0.1.evil.com:{port}",
        "xlocalhost:{port}",
        "localhost",  # the port is part of the Host: 80 is not where this server is
        "127.0.0.1",
        "",
        f"{ALLOWED_HOST}.evil.com",
        f"evil.{ALLOWED_HOST}",
    ],
)
def test_a_host_that_is_not_exactly_this_server_is_refused(served: Sidecar, host: str) -> None:
    message, headers = request("tools/list")
    answer = exchange(served, message, headers, host=host.format(port=served.port))
    assert answer.status == 421, answer
    assert b"jsonrpc" not in answer.body  # refused before the message is read


@pytest.mark.parametrize(
    "host",
    ["127.0.0.1:{port}", "localhost:{port}", "LocalHost:{port}", "[::1]:{port}", ALLOWED_HOST],
)
@pytest.mark.parametrize("era", ["2025", "2026"])
def test_the_exact_host_is_served(served: Sidecar, host: str, era: str) -> None:
    message, headers = request("tools/list", era=era)
    answer = exchange(served, message, headers, host=host.format(port=served.port))
    assert answer.status == 200, answer
    [reply] = checked(answer, message, era)
    assert len(reply["result"]["tools"]) == 20


def test_a_repeated_host_is_refused(served: Sidecar) -> None:
    message, headers = request("tools/list")
    evil = [("Host", "evil.com")]
    answer = exchange(served, message, headers, extra=evil)
    assert answer.status in (400, 421), answer
    assert b"jsonrpc" not in answer.body


def test_a_refused_host_is_named_with_the_option_that_allows_it(served: Sidecar) -> None:
    """What ``docker run -p 9090:8080`` meets: the 421 says which Host came and what to
    add; client text in it is escaped, and the operator's log says it too (once)."""
    message, headers = request("tools/list")
    mapped = f"localhost:{served.port + 1}"
    answer = exchange(served, message, headers, host=mapped)
    assert answer.status == 421, answer
    assert answer.header("x-content-type-options") == "nosniff"
    assert (
        answer.body
        == (
            f"Misdirected request: this server does not answer to Host {mapped}; if you reach "
            f"it by that name, start it with --allowed-host {mapped}\n"
        ).encode()
    )
    odd = "\xe9vil\\.com:1 " + "x" * 300  # obs-text, a backslash, a space: client text
    answer = exchange(served, message, headers, host=odd)
    assert answer.status == 421 and answer.body.isascii()
    assert b"'\\xe9vil\\x5c.com:1\\x20xxx" in answer.body and b"x" * 201 not in answer.body
    exchange(served, message, headers, host=mapped)  # refused again: logged once
    log = served.log.read_text()
    # Once per server process (--workers: the CPUs), whichever of them refused it.
    assert 1 <= log.count(f"refused Host {mapped} (421)") <= len(os.sched_getaffinity(0))
    assert f"start it with --allowed-host {mapped}" in log and "\xe9" not in log
    no_host = f"POST /mcp HTTP/1.0\r\nAuthorization: Bearer {TOKEN}\r\n\r\n".encode()
    missing = raw(served.port, no_host)  # HTTP/1.0: the body runs to the end
    assert missing.startswith(b"HTTP/1.1 421 ") and b"no Host header" in missing


# -- Origin --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "origin",
    [
        "http://127.0.0.1:{port}.evil.com",
        "http://localhost:{port}.evil.com",
        "http://127.0.0.1.evil.com:{port}",
        "http://localhost.evil.com",
        "http://127.0.0.1:{port}?.evil.com",
        "http://127.0.0.1:{port}#.evil.com",
        "http://127.0.0.1:{port}/",
        "http://user@127.0.0.1:{port}",
        "http://evil.com",
        "file://127.0.0.1",
        "ws://localhost:{port}",
        "null",
        "",
        f"{ALLOWED_ORIGIN}.evil.com",
        f"{ALLOWED_ORIGIN}:443",
        "http://app.example",
    ],
)
def test_an_origin_that_is_not_exactly_allowed_is_refused(served: Sidecar, origin: str) -> None:
    message, headers = request("tools/list")
    headers["Origin"] = origin.format(port=served.port)
    answer = exchange(served, message, headers)
    assert answer.status == 403, answer
    assert b"jsonrpc" not in answer.body


@pytest.mark.parametrize(
    "origin",
    [
        "http://127.0.0.1:{port}",
        "http://localhost:{port}",
        "https://localhost:{port}",
        "http://[::1]:{port}",
        "http://127.0.0.1",
        ALLOWED_ORIGIN,
    ],
)
@pytest.mark.parametrize("era", ["2025", "2026"])
def test_the_exact_origin_is_served(served: Sidecar, origin: str, era: str) -> None:
    message, headers = request(
        "tools/call", era=era, name="read_text_file", arguments={"path": "a.txt"}
    )
    headers["Origin"] = origin.format(port=served.port)
    answer = exchange(served, message, headers)
    assert answer.status == 200, answer
    [reply] = checked(answer, message, era)
    assert reply["result"]["content"][0]["text"] == "over http\n"


def test_a_repeated_origin_is_refused(served: Sidecar) -> None:
    message, headers = request("tools/list")
    headers["Origin"] = f"http://127.0.0.1:{served.port}"
    answer = exchange(served, message, headers, extra=[("Origin", "http://evil.com")])
    assert answer.status == 403, answer


# -- framing and methods ---------------------------------------------------------------


def cl_te_request(port: int, after: bytes = b"") -> bytes:
    """A POST framed both by Content-Length and chunked, then ``after``."""
    message, headers = request("tools/list")
    body = json.dumps(message).encode()
    lines = [
        "POST /mcp HTTP/1.1",
        f"Host: 127.0.0.1:{port}",
        f"Authorization: Bearer {TOKEN}",
        *(f"{name}: {value}" for name, value in headers.items()),
        f"Content-Length: {len(body)}",
        "Transfer-Encoding: chunked",
    ]
    chunked = b"%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n"
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + chunked + after


def test_content_length_with_transfer_encoding_is_refused_and_the_connection_closed(
    served: Sidecar,
) -> None:
    """The request smuggling shape is refused (400) and its connection closed (the
    request asked to keep it: ``raw`` reads until the server closes)."""
    [answer] = parse_responses(raw(served.port, cl_te_request(served.port)))
    assert answer.status == 400, answer
    assert answer.header("connection") == "close"
    assert b"Content-Length and Transfer-Encoding" in answer.body
    assert b"jsonrpc" not in answer.body


def test_nothing_after_an_ambiguously_framed_body_is_served(served: Sidecar) -> None:
    """What follows the body (a request smuggled past a proxy that framed by the
    other header) is never answered: the connection closes after the refusal.
    (Hypercorn may cut the refusal itself short when more data is waiting, so only
    the absence of a second answer is asserted.)"""
    smuggled = f"GET /readyz HTTP/1.1\r\nHost: 127.0.0.1:{served.port}\r\n\r\n".encode()
    received = raw(served.port, cl_te_request(served.port, smuggled))
    statuses = [line for line in received.split(b"\r\n") if line.startswith(b"HTTP/1.1 ")]
    assert statuses in ([], [b"HTTP/1.1 400 "]), received
    assert b"ready" not in received


def test_chunked_alone_is_served(served: Sidecar) -> None:
    message, headers = request("tools/list")
    body = json.dumps(message).encode()
    data = http_bytes(served.port, "POST", b"", headers, extra=[("Transfer-Encoding", "chunked")])
    [answer] = parse_responses(
        raw(served.port, data + b"%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n")
    )
    assert answer.status == 200, answer
    checked(answer, message)


@pytest.mark.parametrize("method", ["GET", "DELETE", "PUT", "PATCH"])
@pytest.mark.parametrize("era", ["2025", "2026"])
def test_a_stateless_server_serves_only_post(served: Sidecar, method: str, era: str) -> None:
    headers = {
        "Accept": "text/event-stream",
        "MCP-Protocol-Version": MODERN if era == "2026" else LEGACY,
    }
    [answer] = parse_responses(raw(served.port, http_bytes(served.port, method, b"", headers)))
    assert answer.status == 405, answer
    assert answer.header("allow") == "POST"
    assert b"jsonrpc" not in answer.body


# -- JSON, or SSE --------------------------------------------------------------------


@pytest.mark.parametrize("era", ["2025", "2026"])
@pytest.mark.parametrize(
    "accept", [BOTH, "application/json", "text/event-stream, application/json", "*/*"]
)
def test_an_answer_is_json_when_the_client_takes_json(
    served: Sidecar, era: str, accept: str
) -> None:
    message, headers = request(
        "tools/call", era=era, name="read_text_file", arguments={"path": "a.txt"}
    )
    headers["Accept"] = accept
    answer = exchange(served, message, headers)
    assert answer.status == 200
    assert answer.header("content-type") == "application/json", answer
    [reply] = checked(answer, message, era)
    assert reply["result"]["content"][0]["text"] == "over http\n"


@pytest.mark.parametrize("era", ["2025", "2026"])
def test_progress_asked_for_with_none_due_is_still_json(served: Sidecar, era: str) -> None:
    message, headers = request(
        "tools/call",
        era=era,
        name="read_text_file",
        arguments={"path": "a.txt"},
        _meta={"progressToken": "p1"},
    )
    answer = exchange(served, message, headers)
    assert answer.header("content-type") == "application/json", answer
    checked(answer, message, era)


@pytest.mark.parametrize("era", ["2025", "2026"])
def test_a_client_that_takes_only_a_stream_gets_one(served: Sidecar, era: str) -> None:
    message, headers = request(
        "tools/call", era=era, name="read_text_file", arguments={"path": "a.txt"}
    )
    headers["Accept"] = "text/event-stream"
    answer = exchange(served, message, headers)
    assert answer.status == 200
    assert answer.header("content-type") == "text/event-stream", answer
    [reply] = checked(answer, message, era)
    assert reply["result"]["content"][0]["text"] == "over http\n"


@pytest.mark.parametrize("accept", ["application/json, text/event-stream", "text/event-stream"])
def test_a_big_answer_sent_in_pieces_arrives_whole(served: Sidecar, accept: str) -> None:
    """Answers over 1 MiB are written in pieces (never joined in memory), as JSON
    and as an SSE event."""
    text = PIECES_TEXT
    message, headers = request(
        "tools/call", name="read_text_file", arguments={"path": "pieces.txt"}
    )
    headers["Accept"] = accept
    answer = exchange(served, message, headers)
    assert answer.status == 200, answer
    [reply] = checked(answer, message, "2025")
    assert reply["result"]["content"][0]["text"] == text
    assert reply["result"]["structuredContent"]["content"] == text


def test_a_client_that_takes_neither_is_refused(served: Sidecar) -> None:
    message, headers = request("tools/list")
    headers["Accept"] = "text/html"
    assert exchange(served, message, headers).status == 406


def test_json_response_never_streams(tmp_path: Path) -> None:
    tree = make_tree(tmp_path)
    (tree.root / "a.txt").write_text("over http\n")
    with sidecar("--json-response", str(tree.root), tmp=tmp_path) as s:
        message, headers = request(
            "tools/call",
            name="read_text_file",
            arguments={"path": "a.txt"},
            _meta={"progressToken": 7},
        )
        answer = exchange(s, message, headers)
        assert answer.header("content-type") == "application/json", answer
        checked(answer, message)
        headers["Accept"] = "text/event-stream"
        refused = exchange(s, message, headers)
        assert refused.status == 406, refused
        assert b"jsonrpc" not in refused.body


# -- progress: SSE only where it is needed ---------------------------------------------


@pytest.fixture(scope="module")
def slow_served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sidecar]:
    """A sidecar whose walk of ``slow`` takes a while per directory (the test switch),
    so progress is reported well before the answer."""
    base = tmp_path_factory.mktemp("slow")
    tree = make_tree(base)
    for i in range(3):
        (tree.root / "slow" / f"d{i}").mkdir(parents=True)
        (tree.root / "slow" / f"d{i}" / "f.txt").write_text("x\n")
    with sidecar(str(tree.root), tmp=base, env={"SANDBOXFS_TEST_STALL": "0.3:slow"}) as s:
        yield s


@pytest.mark.parametrize("era", ["2025", "2026"])
def test_progress_is_streamed_as_sse_with_the_answer_last(slow_served: Sidecar, era: str) -> None:
    message, headers = request(
        "tools/call",
        era=era,
        name="directory_tree",
        arguments={"path": "slow"},
        _meta={"progressToken": "walk"},
    )
    answer = exchange(slow_served, message, headers)
    assert answer.status == 200
    assert answer.header("content-type") == "text/event-stream", answer
    *notices, reply = checked(answer, message, era)
    assert notices and all(n["method"] == "notifications/progress" for n in notices), notices
    assert {n["params"]["progressToken"] for n in notices} == {"walk"}
    assert reply["id"] == 1 and not reply["result"]["isError"]


@pytest.mark.parametrize("era", ["2025", "2026"])
def test_progress_for_a_client_that_takes_only_json_is_left_out(
    slow_served: Sidecar, era: str
) -> None:
    message, headers = request(
        "tools/call",
        era=era,
        name="directory_tree",
        arguments={"path": "slow"},
        _meta={"progressToken": "walk"},
    )
    headers["Accept"] = "application/json"
    answer = exchange(slow_served, message, headers)
    assert answer.header("content-type") == "application/json", answer
    [reply] = checked(answer, message, era)
    assert not reply["result"]["isError"]


@pytest.mark.parametrize("era", ["2025", "2026"])
def test_progress_reaches_the_sdk_client_over_http(slow_served: Sidecar, era: str) -> None:
    heard: list[float] = []
    answered = False

    async def progress(done: float, total: float | None, message: str | None) -> None:
        assert not answered, "progress after the answer"
        heard.append(done)

    async def main() -> None:
        nonlocal answered
        async with http_client(slow_served.url, era) as client:  # type: ignore[arg-type]
            await client.list_tools()
            result = await client.call_tool(
                "directory_tree", {"path": "slow"}, progress_callback=progress
            )
            answered = True
            assert not result.is_error, result

    run(main)
    assert heard and heard == sorted(heard)


# -- the SDK client with its defaults --------------------------------------------------


@pytest.mark.parametrize("era", ["2025", "2026"])
def test_a_5_mib_file_reads_with_the_sdk_clients_defaults(tmp_path: Path, era: str) -> None:
    """The SDK client caps one SSE event at 1 MiB by default: the answer must come
    as plain JSON, whole."""
    tree = make_tree(tmp_path)
    line = "0123456789abcdef" * 3 + "0123456789abcde\n"
    content = line * (5 * 1024 * 1024 // len(line))
    assert len(content) == 5 * 1024 * 1024
    (tree.root / "big.txt").write_text(content)

    async def main(url: str) -> None:
        async with http_client(url, era) as client:  # type: ignore[arg-type]
            assert client.protocol_version == (MODERN if era == "2026" else LEGACY)
            await client.list_tools()
            result = await client.call_tool("read_text_file", {"path": "big.txt"})
            assert not result.is_error, result.content[:1]
            assert result.content[0].text == content  # type: ignore[union-attr]

    with sidecar(str(tree.root), tmp=tmp_path) as s:
        run(lambda: main(s.url))


# -- an answer is sent whole even when the client leaves --------------------------------


def test_an_answer_is_not_cut_short_by_the_disconnect_it_causes(tmp_path: Path) -> None:
    """Hypercorn reports the end of a ``Connection: close`` exchange as a disconnect
    to the application while the last body is still being sent; the endpoint
    cancels the work on a disconnect, which must not cancel the send itself (that
    left the connection open, or the answer truncated)."""
    tree = make_tree(tmp_path)
    access = AccessControl(AllowList.of([Root.open(str(tree.root))]), confine=False)
    policy = HttpPolicy.for_endpoint(
        None, None, allowed_hosts=(), allowed_origins=(), max_body=1 << 20, json_only=False
    )
    endpoint = McpEndpoint(SandboxfsServer(ServerOptions(), access), policy)
    message, headers = request("tools/list")
    scope = {
        "type": "http",
        "method": "POST",
        "path": "/mcp",
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
        "client": ("127.0.0.1", 1),
    }
    sent: list[dict[str, Any]] = []
    finished: list[dict[str, Any]] = []

    async def main() -> None:
        to_app, from_client = trio.open_memory_channel[dict[str, Any]](10)
        delivered = trio.Event()
        await to_app.send({"type": "http.request", "body": json.dumps(message).encode()})

        async def receive() -> dict[str, Any]:
            event = await from_client.receive()
            if event["type"] == "http.disconnect":
                delivered.set()
            return event

        async def send(event: dict[str, Any]) -> None:
            sent.append(event)
            if event["type"] == "http.response.body" and not event.get("more_body"):
                await to_app.send({"type": "http.disconnect"})  # what Hypercorn does
                await delivered.wait()  # the application has seen it ...
                await trio.lowlevel.checkpoint()  # ... and this send goes on
                finished.append(event)

        with trio.fail_after(60):
            await endpoint(scope, receive, send)  # type: ignore[arg-type]

    trio.run(main)
    assert [e["type"] for e in sent] == ["http.response.start", "http.response.body"]
    assert finished == sent[1:]
    oracle = WireOracle(version=MODERN)
    oracle.sent(message)
    oracle.received(json.loads(sent[1]["body"]))
    assert oracle.unanswered() == []


# -- the policy on its own --------------------------------------------------------------


def _policy(host: str, port: int) -> HttpPolicy:
    return HttpPolicy.for_endpoint(
        host,
        port,
        allowed_hosts=("Mcp.Example",),
        allowed_origins=("https://App.Example",),
        max_body=1,
        json_only=False,
    )


@pytest.mark.parametrize(
    ("host", "port", "header", "ok"),
    [
        ("127.0.0.1", 8080, "127.0.0.1:8080", True),
        ("127.0.0.1", 8080, "127.0.0.1:80", False),
        ("127.0.0.1", 8080, "127.0.0.1", False),
        ("127.0.0.1", 80, "127.0.0.1", True),  # the default port may be left out
        ("127.0.0.1", 80, "localhost", True),
        ("127.0.0.1", 80, "localhost:80", True),
        ("127.0.0.1", 80, "localhost:evil.com", False),
        ("::1", 8080, "[::1]:8080", True),
        ("::1", 8080, "::1:8080", False),
        ("10.0.0.5", 8080, "10.0.0.5:8080", True),
        ("10.0.0.5", 8080, "10.0.0.5:8080.evil.com", False),
        ("10.0.0.5", 8080, "mcp.example", True),
        ("10.0.0.5", 8080, "MCP.EXAMPLE", True),
        ("10.0.0.5", 8080, "mcp.example:8080", False),  # an allowed Host is exact too
        ("10.0.0.5", 8080, "mcp.example.evil.com", False),
    ],
)
def test_host_policy(host: str, port: int, header: str, ok: bool) -> None:
    assert _policy(host, port).host_ok([header]) is ok
    assert _policy(host, port).host_ok([header, header]) is False  # never twice


def test_host_policy_on_a_unix_socket_takes_any_single_host() -> None:
    policy = HttpPolicy.for_endpoint(
        None, None, allowed_hosts=(), allowed_origins=(), max_body=1, json_only=False
    )
    assert policy.host_ok(["anything"]) and policy.host_ok([])
    assert not policy.host_ok(["a", "b"])


@pytest.mark.parametrize(
    ("origin", "ok"),
    [
        ("https://app.example", True),
        ("https://APP.example", True),
        ("https://app.example:443", False),
        ("https://app.example.evil.com", False),
        ("http://localhost:5173", True),
        ("http://LOCALHOST:5173", True),
        ("http://localhost:5173.evil.com", False),
        ("http://localhost:123456", False),
        ("http://127.0.0.1:5173\n", False),
        ("http://127.0.0.1:5173 ", False),
        ("http://127.0.0.2:5173", False),
        ("http://0.0.0.0:5173", False),
    ],
)
def test_origin_policy(origin: str, ok: bool) -> None:
    policy = _policy("127.0.0.1", 8080)
    assert policy.origin_ok([origin]) is ok
    assert policy.origin_ok([]) is True
    assert policy.origin_ok([origin, origin]) is False
