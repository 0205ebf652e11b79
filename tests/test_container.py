"""The container image's entrypoint, run outside a container (Docker cannot build
here): the same command line must start, authenticate and answer."""

from __future__ import annotations

import http.client
import json
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

from sidecar_helpers import TOKEN, free_port, wait_healthy

from mcp_client import server_env

ROOT = Path(__file__).resolve().parent.parent


def _instruction(name: str) -> list[str]:
    match = re.search(rf"^{name} (\[.*\])$", (ROOT / "Dockerfile").read_text(), re.M)
    assert match is not None, f"no {name} in the Dockerfile"
    return list(json.loads(match.group(1)))


def test_dockerfile_runs_unprivileged_with_projects() -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^USER 10001:10001$", text, re.M)
    assert "AS build" in text and "COPY --from=build" in text  # multi-stage
    assert _instruction("CMD") == ["/projects"]
    pod = (ROOT / "deploy" / "kubernetes" / "pod.yaml").read_text()
    for needed in ("readOnlyRootFilesystem: true", "runAsNonRoot: true", "/healthz", "/readyz"):
        assert needed in pod


def test_the_image_entrypoint_serves_outside_a_container(tmp_path: Path) -> None:
    projects = tmp_path / "projects"
    (projects / "workspace").mkdir(parents=True)
    (projects / "workspace" / "hello.txt").write_text("from the sidecar\n")
    token_file = tmp_path / "sandboxfs-token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)  # as the Dockerfile's instructions make it
    port = free_port()
    argv = [
        part.replace("/run/secrets/sandboxfs-token", str(token_file))
        .replace("0.0.0.0:8080", f"0.0.0.0:{port}")
        .replace("/projects", str(projects))
        for part in [*_instruction("ENTRYPOINT"), *_instruction("CMD")]
    ]
    assert argv[0] == "sandboxfs"
    log = tmp_path / "entrypoint.log"
    with log.open("wb") as errlog:
        process = subprocess.Popen(
            [*shlex.split(f"{sys.executable} -m sandboxfs"), *argv[1:]],
            stdout=subprocess.DEVNULL,
            stderr=errlog,
            env=server_env(),
        )
    try:
        wait_healthy(port, process, log)
        body = json.dumps(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/call",
                "params": {
                    "name": "read_text_file",
                    "arguments": {"path": str(projects / "workspace" / "hello.txt")},
                    "_meta": {
                        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                        "io.modelcontextprotocol/clientCapabilities": {},
                    },
                },
            }
        )
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": "2026-07-28",
            "Mcp-Method": "tools/call",
            "Mcp-Name": "read_text_file",
        }
        status, _ = _post(port, body, headers)
        assert status == 401
        status, answer = _post(port, body, {**headers, "Authorization": f"Bearer {TOKEN}"})
        assert status == 200 and "from the sidecar" in answer
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0


def _post(port: int, body: str, headers: dict[str, str]) -> tuple[int, str]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request("POST", "/mcp", body=body.encode(), headers=headers)
        response = connection.getresponse()
        return response.status, response.read().decode()
    finally:
        connection.close()
