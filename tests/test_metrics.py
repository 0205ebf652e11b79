"""/metrics: the Prometheus text format, parsed by Prometheus' own parser
(prometheus_client.parser), behind the bearer token and on --metrics' port; calls
by tool and outcome, durations as a histogram, bytes in and out, refusals by
reason, active sessions; the tenants' front's worker restarts.  No client text
ever reaches a label."""

from __future__ import annotations

import base64
import http.client
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sidecar_helpers import TOKEN, Sidecar, free_port, sidecar, wait_healthy
from test_tenants import TOKEN_A, _wait, tenants_toml

from mcp_client import SERVER, said, server_env
from sandboxfs.core.errors import (
    AccessDenied,
    NotFound,
    PolicyDenied,
    TimedOut,
    from_oserror,
    outside,
)
from sandboxfs.core.policy import PolicyRefusal
from sandboxfs.session.metrics import REASONS, refusal_reason, tool_label
from sandboxfs.tenancy.config import hash_token
from sandboxfs.tenancy.metrics import WorkerFamilies

parser = pytest.importorskip("prometheus_client.parser", reason="prometheus_client is needed")
generate_latest = pytest.importorskip("prometheus_client").generate_latest

#: A tool name a client makes up, with what a label must never carry.
FORGED = 'forged-by-client"} 1\nsandboxfs_refusals_total{reason="outside"} 4242 \\'


def _get(port: int, path: str, token: str | None = None) -> tuple[int, str, str]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        connection.request("GET", path, headers=headers)
        response = connection.getresponse()
        return response.status, response.getheader("content-type") or "", response.read().decode()
    finally:
        connection.close()


def _call(port: int, tool: str, token: str = TOKEN, **arguments: Any) -> dict[str, Any]:
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {
                "name": tool,
                "arguments": arguments,
                "_meta": {
                    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                    "io.modelcontextprotocol/clientCapabilities": {},
                },
            },
        }
    )
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        connection.request(
            "POST",
            "/mcp",
            body=body.encode(),
            headers={
                "Authorization": f"Bearer {token}",
                "Content-Type": "application/json",
                "Accept": "application/json",
                "MCP-Protocol-Version": "2026-07-28",
                "Mcp-Method": "tools/call",
                "Mcp-Name": "=?base64?" + base64.b64encode(tool.encode()).decode() + "?=",
            },
        )
        response = connection.getresponse()
        body = response.read()
        if response.getheader("content-type") != "application/json":  # refused before MCP
            return {"status": response.status, "error": body.decode()}
        answer: dict[str, Any] = json.loads(body)
        return answer
    finally:
        connection.close()


def _samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample, by name and labels, as Prometheus' parser reads the text."""
    found = {}
    for family in parser.text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return found


def _value(samples: dict[Any, float], name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Sidecar, int, Path]]:
    work, frozen = tmp_path / "work", tmp_path / "frozen"
    work.mkdir()
    frozen.mkdir()
    (work / "hello.txt").write_text("hello metrics\n")
    (work / "keep.cfg").write_text("protected\n")
    metrics_port = free_port()
    with sidecar(
        "--workers",
        "2",
        "--metrics",
        f"127.0.0.1:{metrics_port}",
        "--protect",
        "*.cfg",
        "--fs-timeout",
        "1",
        str(work),
        f"{frozen}:ro",
        tmp=tmp_path,
        env={"SANDBOXFS_TEST_STALL": "5:slow"},
    ) as s:
        yield s, metrics_port, work


def test_metrics_parse_and_count_calls_refusals_and_bytes(
    served: tuple[Sidecar, int, Path], tmp_path: Path
) -> None:
    s, _metrics_port, work = served
    frozen = tmp_path / "frozen"
    (work / "slow").mkdir()
    assert (
        _call(s.port, "read_text_file", path=str(work / "hello.txt"))["result"]["isError"] is False
    )
    assert _call(s.port, "read_text_file", path=str(work / "missing.txt"))["result"]["isError"]
    refused = {
        "outside": _call(s.port, "read_text_file", path="/etc/passwd"),
        "policy": _call(s.port, "write_file", path=str(work / "keep.cfg"), content="x"),
        "read_only": _call(s.port, "write_file", path=str(frozen / "new.txt"), content="x"),
        "timeout": _call(s.port, "list_directory", path=str(work / "slow")),
    }
    for reason, answer in refused.items():
        assert answer["result"]["isError"], reason
    forged = _call(s.port, FORGED)
    assert "error" in forged  # an unknown tool: a protocol error

    status, kind, text = _get(s.port, "/metrics", TOKEN)
    assert status == 200 and kind.startswith("text/plain; version=0.0.4")
    samples = _samples(text)
    calls = "sandboxfs_tool_calls_total"
    assert _value(samples, calls, tool="read_text_file", outcome="ok") == 1
    assert _value(samples, calls, tool="read_text_file", outcome="error") == 2
    assert _value(samples, calls, tool="write_file", outcome="error") == 2
    assert _value(samples, calls, tool="unknown", outcome="error") == 1
    assert _value(samples, calls, tool="edit_file", outcome="ok") == 0  # there from the start
    for reason in REASONS:
        assert _value(samples, "sandboxfs_refusals_total", reason=reason) == 1, reason
    # The histogram: cumulative buckets ending in +Inf, which is the count.
    histogram = "sandboxfs_tool_call_duration_seconds"
    count = _value(samples, f"{histogram}_count", tool="read_text_file")
    assert count == 3
    assert _value(samples, f"{histogram}_bucket", tool="read_text_file", le="+Inf") == count
    assert _value(samples, f"{histogram}_sum", tool="list_directory") >= 1.0  # the timeout
    assert _value(samples, f"{histogram}_bucket", tool="list_directory", le="0.5") == 0
    assert _value(samples, "sandboxfs_tool_result_bytes_total", tool="read_text_file") >= len(
        "hello metrics\n"
    )
    assert _value(samples, "sandboxfs_http_request_bytes_total") > 0
    assert _value(samples, "sandboxfs_http_response_bytes_total") > 0
    assert _value(samples, "sandboxfs_http_responses_total", code="200") == 6
    answered = [v for (name, _), v in samples.items() if name == "sandboxfs_http_responses_total"]
    assert sum(answered) == 7  # and the unknown tool's 4xx
    # Each exchange ends (the gauge falls) just after its answer is sent; another
    # process's may still be ending when this one is scraped.
    deadline = time.monotonic() + 30
    while _value(samples, "sandboxfs_active_sessions") != 0 and time.monotonic() < deadline:
        samples = _samples(_get(s.port, "/metrics", TOKEN)[2])
    assert _value(samples, "sandboxfs_active_sessions") == 0
    # Nothing the client made up is in the text: not its tool name, not a piece of it.
    assert "forged-by-client" not in text and "4242" not in text
    tools = {labels for name, labels in samples if name == calls}
    assert all(dict(labels)["tool"] != FORGED for labels in tools)


def test_metrics_need_the_token_or_the_metrics_port(served: tuple[Sidecar, int, Path]) -> None:
    s, metrics_port, _ = served
    status, _, body = _get(s.port, "/metrics")
    assert status == 401 and "sandboxfs_" not in body
    assert _get(s.port, "/metrics", "wrong-token-0123456789")[0] == 401
    status, kind, text = _get(metrics_port, "/metrics")  # its own port: no token
    assert status == 200 and kind.startswith("text/plain; version=0.0.4")
    samples = _samples(text)
    assert _value(samples, "sandboxfs_http_responses_total", code="401") == 2
    # Two server processes (--workers 2), both summed: CPU time, but no memory or
    # descriptors (a forked process cannot read its own once confined: left out).
    assert _value(samples, "sandboxfs_workers_read") == 2
    assert _value(samples, "process_cpu_seconds_total") > 0
    assert not any(name == "process_resident_memory_bytes" for name, _ in samples)
    # Only /metrics is there, and only to GET: not MCP, not the probes.
    assert _get(metrics_port, "/mcp")[0] == 404
    connection = http.client.HTTPConnection("127.0.0.1", metrics_port, timeout=30)
    connection.request("POST", "/metrics", body=b"{}")
    assert connection.getresponse().status == 405
    connection.close()


def test_one_server_process_shows_its_memory_and_descriptors(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    with sidecar("--workers", "1", str(work), tmp=tmp_path) as s:
        status, _, text = _get(s.port, "/metrics", TOKEN)
    assert status == 200, text
    samples = _samples(text)
    # The process's own, though Landlock forbids opening /proc once serving.
    assert _value(samples, "process_resident_memory_bytes") > 10 * 2**20
    assert 3 < _value(samples, "process_open_fds") < 1000
    assert _value(samples, "process_cpu_seconds_total") > 0
    assert not any(name == "sandboxfs_workers_read" for name, _ in samples)


def test_a_session_being_served_is_counted_while_it_runs(tmp_path: Path) -> None:
    work = tmp_path / "work"
    (work / "slow").mkdir(parents=True)
    with sidecar(str(work), tmp=tmp_path, env={"SANDBOXFS_TEST_STALL": "60:slow"}) as s:
        connection = http.client.HTTPConnection("127.0.0.1", s.port, timeout=120)
        body = json.dumps(
            {
                "jsonrpc": "2.0",
                "id": 7,
                "method": "tools/call",
                "params": {"name": "list_directory", "arguments": {"path": str(work / "slow")}},
            }
        )
        connection.request(
            "POST",
            "/mcp",
            body=body.encode(),
            headers={
                "Authorization": f"Bearer {TOKEN}",
                "Content-Type": "application/json",
                "Accept": "application/json",
            },
        )
        try:
            _wait(
                lambda: (
                    _value(
                        _samples(_get(s.port, "/metrics", TOKEN)[2]), "sandboxfs_active_sessions"
                    )
                    == 1
                )
            )
        finally:
            connection.close()
        _wait(
            lambda: (
                _value(_samples(_get(s.port, "/metrics", TOKEN)[2]), "sandboxfs_active_sessions")
                == 0
            )
        )


def test_the_reasons_come_from_the_kind_of_error() -> None:
    assert refusal_reason(outside("x")) == "outside"
    assert refusal_reason(AccessDenied("Access denied - no allowed directories")) == "outside"
    protected = from_oserror(PolicyRefusal(13, "protected by policy"), "x")
    assert isinstance(protected, PolicyDenied) and refusal_reason(protected) == "policy"
    frozen = from_oserror(PolicyRefusal(30, "read-only directory"), "x")
    assert refusal_reason(frozen) == "read_only"
    assert refusal_reason(from_oserror(OSError(30, "Read-only file system"), "x")) == "read_only"
    assert refusal_reason(from_oserror(OSError(18, "xdev"), "x", no_xdev=True)) == "policy"
    assert refusal_reason(TimedOut("slow")) == "timeout"
    assert refusal_reason(NotFound("gone")) is None
    assert tool_label("read_text_file", {"read_text_file"}) == "read_text_file"
    assert tool_label(FORGED, {"read_text_file"}) == "unknown"


def test_the_tenants_front_counts_its_workers_restarts(tmp_path: Path) -> None:
    served = tmp_path / "alice"
    served.mkdir()
    (served / "hello.txt").write_text("hello alice\n")
    tenants_file = tmp_path / "tenants.toml"
    tenants_file.write_text(
        tenants_toml(
            {"name": "alice", "token_sha256": hash_token(TOKEN_A), "directories": [str(served)]}
        )
    )
    port, metrics_port = free_port(), free_port()
    log = tmp_path / "front.log"
    with log.open("wb") as errlog:
        process = subprocess.Popen(
            [
                *SERVER,
                "--tenants",
                str(tenants_file),
                "--http",
                f"127.0.0.1:{port}",
                "--metrics",
                f"127.0.0.1:{metrics_port}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=errlog,
            env=server_env(),
        )
    try:
        wait_healthy(port, process, log)

        def front() -> dict[Any, float]:
            return _samples(_get(metrics_port, "/metrics")[2])

        _wait(lambda: _value(front(), "sandboxfs_tenant_worker_up", tenant="alice") == 1)
        assert _value(front(), "sandboxfs_tenant_worker_restarts_total", tenant="alice") == 0
        answer = _call(port, "read_text_file", TOKEN_A, path=str(served / "hello.txt"))
        assert answer["result"]["content"][0]["text"] == "hello alice\n"
        # The worker's own tool metrics, read at the scrape, labelled with the tenant.
        samples = front()
        assert _value(samples, "sandboxfs_tenant_metrics_read", tenant="alice") == 1
        calls = "sandboxfs_tool_calls_total"
        assert _value(samples, calls, tenant="alice", tool="read_text_file", outcome="ok") == 1
        assert _value(samples, "sandboxfs_refusals_total", tenant="alice", reason="outside") == 0
        histogram = "sandboxfs_tool_call_duration_seconds_count"
        assert _value(samples, histogram, tenant="alice", tool="read_text_file") == 1
        pid = next(
            int(said(line).rsplit("pid ", 1)[1].rstrip(")"))
            for line in log.read_text().splitlines()
            if "alice" in line and "worker ready (pid" in line
        )
        os.kill(pid, signal.SIGKILL)
        _wait(
            lambda: _value(front(), "sandboxfs_tenant_worker_restarts_total", tenant="alice") == 1
        )
        _wait(lambda: _value(front(), "sandboxfs_tenant_worker_up", tenant="alice") == 1)
        samples = front()
        assert _value(samples, "sandboxfs_tenant_requests_total", tenant="alice") == 1
        assert _value(samples, "sandboxfs_http_responses_total", code="200") >= 1
        # Behind a tenant's token on the front's own port, too.
        assert _get(port, "/metrics")[0] == 401
        assert _get(port, "/metrics", TOKEN_A)[0] == 200
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0


def test_the_front_passes_on_only_what_a_server_makes() -> None:
    """A worker's text is not trusted: other families, other label values, and text
    that does not parse stay out of the front's metrics."""
    good = (
        b"# TYPE sandboxfs_tool_calls_total counter\n"
        b'sandboxfs_tool_calls_total{outcome="ok",tool="read_text_file"} 3.0\n'
        b'sandboxfs_tool_calls_total{outcome="ok",tool="forged-by-client"} 4242.0\n'
        b"# TYPE sandboxfs_evil_total counter\n"
        b"sandboxfs_evil_total 4242.0\n"
        b"# TYPE sandboxfs_tool_call_duration_seconds histogram\n"
        b'sandboxfs_tool_call_duration_seconds_bucket{le="0.5",tool="read_file"} 1.0\n'
        b'sandboxfs_tool_call_duration_seconds_bucket{le="0.3",tool="read_file"} 4242.0\n'
        b'sandboxfs_tool_call_duration_seconds_bucket{le="+Inf",tool="read_file"} 1.0\n'
        b'sandboxfs_tool_call_duration_seconds_count{tool="read_file"} 1.0\n'
    )
    texts = {"a": good, "b": b"not { the text format", "c": None}
    families = WorkerFamilies(texts)
    text = generate_latest(_registry(families)).decode()
    samples = _samples(text)
    assert _value(samples, "sandboxfs_tenant_metrics_read", tenant="a") == 1
    assert _value(samples, "sandboxfs_tenant_metrics_read", tenant="b") == 0
    assert _value(samples, "sandboxfs_tenant_metrics_read", tenant="c") == 0
    calls = "sandboxfs_tool_calls_total"
    assert _value(samples, calls, tenant="a", outcome="ok", tool="read_text_file") == 3
    bucket = "sandboxfs_tool_call_duration_seconds_bucket"
    assert _value(samples, bucket, tenant="a", tool="read_file", le="0.5") == 1
    assert "4242" not in text and "forged" not in text and "evil" not in text


def _registry(collector: Any) -> Any:
    from prometheus_client import CollectorRegistry  # noqa: PLC0415

    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return registry
