"""--log-format json|text: operator and audit lines told apart by ``log``, never
interleaved mid-line (threads, the audit log, tenants' workers relayed by the
front), client text escaped in both formats; JSON when stderr is no terminal,
text on one."""

from __future__ import annotations

import json
import logging
import os
import pty
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import trio
from sidecar_helpers import free_port, wait_healthy
from test_metrics import _call
from test_tenants import TOKEN_A, TOKEN_B, _wait, tenants_toml

from mcp_client import SERVER, server_env, session
from sandboxfs.cli import logformat
from sandboxfs.cli.arguments import parse_arguments
from sandboxfs.cli.config import build
from sandboxfs.transports.tenants import hash_token

#: A name a client might send: a line break that would forge a line, a terminal
#: escape, a C1 control (CSI), DEL, and text that is not ASCII.
HOSTILE = 'x\n{"log": "operator", "message": "forged"}\x1b[31m\x9b2J\x7fé'


def _records(stderr: bytes) -> list[dict[str, object]]:
    assert stderr.isascii(), "a JSON log line carries a raw non-ASCII byte"
    return [json.loads(line) for line in stderr.decode().splitlines()]


def test_the_default_is_text_on_a_terminal_and_json_otherwise(tmp_path: Path) -> None:
    def decided(*argv: str, terminal: bool) -> str:
        return build(parse_arguments([*argv, str(tmp_path)]), {}, terminal=terminal).log_format

    assert decided(terminal=False) == "json"
    assert decided(terminal=True) == "text"
    assert decided("--log-format", "json", terminal=True) == "json"
    assert decided("--log-format", "text", terminal=False) == "text"
    # A real terminal: the operator reads text.
    leader, follower = pty.openpty()
    try:
        done = subprocess.run(
            [*SERVER, str(tmp_path)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=follower,
            env=server_env(),
            timeout=60,
        )
        os.close(follower)
        follower = -1
        shown = b""
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the terminal's other side is closed
                break
            if not chunk:
                break
            shown += chunk
    finally:
        os.close(leader)
        if follower >= 0:
            os.close(follower)
    assert done.returncode == 0
    assert shown.startswith(b"Configuration: stdio;"), shown[:200]
    assert b"serving MCP on stdio" in shown


def test_json_lines_tell_operator_from_audit_and_escape_client_text(tmp_path: Path) -> None:
    async def main() -> None:
        async with session(str(tmp_path)) as s:
            await s.error("read_text_file", path=HOSTILE)
            await s.text("list_allowed_directories")
            await s.wait_for_log('"tool": "list_allowed_directories"')
            raw = s.stderr.read_bytes()
        records = _records(raw)
        kinds = {record["log"] for record in records}
        assert kinds == {"operator", "audit"}
        operator = [r for r in records if r["log"] == "operator"]
        assert all({"time", "level", "message"} <= r.keys() for r in operator)
        assert any("serving MCP on stdio" in str(r["message"]) for r in operator)
        audit = [r for r in records if r["log"] == "audit"]
        assert [r["tool"] for r in audit] == ["read_text_file", "list_allowed_directories"]
        assert audit[0]["paths"] == {"path": HOSTILE}  # whole, and only as data
        assert not any(r.get("message") == "forged" for r in records)
        assert b"\x1b" not in raw and b"\x9b" not in raw and b"\x7f" not in raw

    trio.run(main)


def test_text_lines_keep_client_text_on_one_line(tmp_path: Path) -> None:
    async def main() -> None:
        async with session("--log-format", "text", str(tmp_path)) as s:
            await s.error("read_text_file", path=HOSTILE)
            await s.wait_for_log('"tool": "read_text_file"')
            raw = s.stderr.read_bytes()
        assert raw.isascii()
        lines = raw.decode().splitlines()
        assert lines[0].startswith("Configuration: stdio;")
        audit = [json.loads(line) for line in lines if line.startswith("{")]
        assert [r["log"] for r in audit] == ["audit"]
        assert audit[0]["paths"] == {"path": HOSTILE}
        # Every other line is the operator's: at the margin, or indented under one.
        assert not any(line.startswith('{"log"') for line in lines)

    trio.run(main)


def test_text_escapes_control_characters_and_indents_further_lines() -> None:
    assert logformat.escape_text("a\x1b[31mb\x9bc\x7f\r") == "a\\x1b[31mb\\x9bc\\x7f\\r"
    assert logformat.escape_text("bad \udcff byte") == "bad \\udcff byte"
    assert logformat.text_lines("first\nsecond\n  third") == ["first", "  second", "  third"]
    handler = logformat.LineHandler(logformat.LineWriter(), "text")
    try:
        raise ValueError("boom\nforged line")
    except ValueError:
        record = logging.LogRecord(
            "sandboxfs", logging.ERROR, "", 0, "it failed", (), sys.exc_info()
        )
    lines = handler.render(record).splitlines()
    assert lines[0] == "it failed"
    assert all(line.startswith("  ") for line in lines[1:]) and len(lines) > 2
    as_json = json.loads(logformat.LineHandler(logformat.LineWriter(), "json").render(record))
    assert as_json["log"] == "operator" and as_json["level"] == "error"
    assert "forged line" in str(as_json["exception"])


def test_lines_from_many_threads_are_never_interleaved() -> None:
    reader, writer_fd = os.pipe()
    writer = logformat.LineWriter(writer_fd)
    threads, lines_each, size = 8, 40, 100_000  # each line far past PIPE_BUF
    received = bytearray()

    def drain() -> None:
        while chunk := os.read(reader, 1 << 20):
            received.extend(chunk)

    draining = threading.Thread(target=drain)
    draining.start()

    def write(letter: str) -> None:
        for _ in range(lines_each):
            writer.write_line(letter * size)

    workers = [threading.Thread(target=write, args=(chr(ord("a") + i),)) for i in range(threads)]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join()
    os.close(writer_fd)
    draining.join()
    os.close(reader)
    lines = bytes(received).split(b"\n")
    assert lines.pop() == b""
    assert len(lines) == threads * lines_each
    for line in lines:
        assert len(line) == size and line == line[:1] * size


def test_relayed_worker_lines_carry_their_tenant() -> None:
    operator = json.dumps({"time": "t", "log": "operator", "level": "info", "message": "up"})
    audit = json.dumps({"time": "t", "log": "audit", "event": "tool_call", "tool": "x"})
    as_json = json.loads(logformat.relayed(operator.encode(), "alice", "json"))
    assert as_json == {
        "time": "t",
        "log": "operator",
        "tenant": "alice",
        "level": "info",
        "message": "tenant alice: up",
    }
    assert logformat.relayed(operator.encode(), "alice", "text") == "tenant alice: up"
    for form in ("json", "text"):  # audit lines stay JSON, with the tenant
        relayed = json.loads(logformat.relayed(audit.encode(), "alice", form))
        assert relayed["log"] == "audit" and relayed["tenant"] == "alice"
    crash = b"Traceback (most recent call last):\x1b[2J"
    as_json = json.loads(logformat.relayed(crash, "bob", "json"))
    assert as_json["log"] == "operator" and as_json["level"] == "warning"
    assert as_json["message"] == "tenant bob: Traceback (most recent call last):\x1b[2J"
    text = logformat.relayed(crash, "bob", "text")
    assert text == "tenant bob: Traceback (most recent call last):\\x1b[2J"
    # A worker cannot pass a line off as another tenant's, or as the front's own.
    forged = json.dumps({"log": "operator", "tenant": "mallory", "message": "x"}).encode()
    assert json.loads(logformat.relayed(forged, "bob", "json"))["tenant"] == "bob"


@pytest.mark.parametrize("log_format", ["json", "text"])
def test_the_front_relays_its_workers_whole_in_its_format(tmp_path: Path, log_format: str) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    for directory in (a, b):
        directory.mkdir()
        (directory / "f.txt").write_text("x" * 10)
    tenants_file = tmp_path / "tenants.toml"
    tenants_file.write_text(
        tenants_toml(
            {"name": "alice", "token_sha256": hash_token(TOKEN_A), "directories": [str(a)]},
            {"name": "bob", "token_sha256": hash_token(TOKEN_B), "directories": [str(b)]},
        )
    )
    port = free_port()
    log = tmp_path / "front.log"
    with log.open("wb") as errlog:
        process = subprocess.Popen(
            [
                *SERVER,
                "--tenants",
                str(tenants_file),
                "--http",
                f"127.0.0.1:{port}",
                "--log-format",
                log_format,
            ],
            stdout=subprocess.DEVNULL,
            stderr=errlog,
            env=server_env(),
        )
    try:
        wait_healthy(port, process, log)
        _wait(lambda: log.read_text().count("worker ready") == 2)
        calls = 30
        errors: list[BaseException] = []

        def hammer(token: str, directory: Path) -> None:
            try:
                for _ in range(calls):
                    _call(port, "read_text_file", token, path=str(directory / HOSTILE[:1]))
            except BaseException as exc:
                errors.append(exc)

        threads = [
            threading.Thread(target=hammer, args=(TOKEN_A, a)),
            threading.Thread(target=hammer, args=(TOKEN_B, b)),
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert not errors
        _wait(lambda: log.read_text().count('"tool_call"') == 2 * calls)
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0
    raw = log.read_bytes()
    assert raw.isascii()
    lines = raw.decode().splitlines()
    audit = [json.loads(line) for line in lines if '"tool_call"' in line]
    assert sorted({r["tenant"] for r in audit}) == ["alice", "bob"]
    assert all(r["log"] == "audit" for r in audit)
    if log_format == "json":
        records = [json.loads(line) for line in lines]  # every line whole
        relayed = [r for r in records if r["log"] == "operator" and "tenant" in r]
        assert {r["tenant"] for r in relayed} == {"alice", "bob"}
        assert any(str(r["message"]).startswith("tenant alice: ") for r in relayed)
    else:
        assert lines[0].startswith("Configuration: tenants front")
        assert any(line.startswith("tenant bob: ") for line in lines)
        for line in lines:
            if line.startswith("{"):
                json.loads(line)  # an audit line, whole
