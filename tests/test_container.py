"""The container image: stdio by default, HTTP with the sidecar's arguments, a
health check on /healthz, a pinned base, a build context that holds no secret.

The image's command lines are run outside a container here (always); with a
container engine and a built image (``SANDBOXFS_ENGINE`` and ``SANDBOXFS_IMAGE``,
which .ci/run sets after building it with podman), the image itself is run as the
pod spec runs it: read-only root filesystem, every capability dropped, no new
privileges, its own unprivileged user; one call over stdio and one over HTTP.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from sidecar_helpers import TOKEN, free_port, sidecar, wait_healthy
from test_metrics import _call, _get, _samples, _value

from mcp_client import SERVER, server_env, session
from sandboxfs.cli import healthcheck

ROOT = Path(__file__).resolve().parent.parent
DOCKERFILE = (ROOT / "Dockerfile").read_text()
POD = ROOT / "deploy" / "kubernetes" / "pod.yaml"
#: As the pod spec runs the container (securityContext), on the engine's command line.
HARDENED = ["--read-only", "--cap-drop", "ALL", "--security-opt", "no-new-privileges"]
IMAGE_UID = 10001

yaml = pytest.importorskip("yaml", reason="PyYAML comes with kubernetes-validate (test extra)")


def _instruction(name: str) -> list[str]:
    match = re.search(rf"^{name} (\[.*\])$", DOCKERFILE, re.M)
    assert match is not None, f"no {name} in the Dockerfile"
    return list(json.loads(match.group(1)))


def _sidecar_args() -> list[str]:
    pod = yaml.safe_load(POD.read_text())
    [container] = [c for c in pod["spec"]["containers"] if c["name"] == "sandboxfs"]
    return list(container["args"])


def test_the_dockerfile_serves_stdio_by_default_unprivileged() -> None:
    assert re.search(r"^USER 10001:10001$", DOCKERFILE, re.M)
    assert "AS build" in DOCKERFILE and "COPY --from=build" in DOCKERFILE  # multi-stage
    assert _instruction("ENTRYPOINT") == ["sandboxfs"]  # no transport forced
    assert _instruction("CMD") == ["/projects"]
    pod = POD.read_text()
    for needed in ("readOnlyRootFilesystem: true", "runAsNonRoot: true", "/healthz", "/readyz"):
        assert needed in pod


def test_the_base_is_pinned_by_digest() -> None:
    base = re.search(r"^ARG BASE=(\S+)$", DOCKERFILE, re.M)
    assert base is not None
    assert re.fullmatch(r"debian:bookworm-slim@sha256:[0-9a-f]{64}", base.group(1))
    froms = re.findall(r"^FROM (\S+)", DOCKERFILE, re.M)
    assert froms == ["${BASE}", "${BASE}"]  # both stages, nothing unpinned


def test_the_healthcheck_asks_healthz() -> None:
    match = re.search(r"^HEALTHCHECK (.*?)\n  CMD (\[.*\])$", DOCKERFILE, re.M)
    assert match is not None
    assert "--timeout=5s" in match.group(1)
    assert json.loads(match.group(2)) == [
        "/opt/sandboxfs/bin/python",
        "-P",
        "-m",
        "sandboxfs.cli.healthcheck",
    ]


def _ignored(patterns: list[str], path: str) -> bool:
    """Docker's rule for one path of the build context: the last pattern that
    matches it (or a parent of it) decides; ``!`` takes a path back in."""
    ignored = False
    parts = path.split("/")
    for pattern in patterns:
        negated = pattern.startswith("!")
        pattern = pattern.removeprefix("!").rstrip("/")
        regex = fnmatch.translate(pattern).replace(".*", "[^/]*").replace("[^/]*[^/]*", ".*")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        if any(re.fullmatch(regex, prefix) for prefix in prefixes):
            ignored = not negated
    return ignored


def test_the_build_context_holds_no_secret_and_no_clutter() -> None:
    patterns = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    for kept in ("pyproject.toml", "setup.py", "LICENSE", "native/sfs.c", "sandboxfs/cli/main.py"):
        assert not _ignored(patterns, kept), kept
    for left_out in (
        "token",
        "sandboxfs-token",
        "tenants.toml",
        "policy.toml",
        ".venv/bin/python",
        ".git/config",
        ".ci/node/node_modules/x.js",
        "bench/.reference/audit/x",
        "dist/sandboxfs-0.1.0.tar.gz",
        "sandboxfs/__pycache__/x.pyc",
        "sandboxfs/_native.abi3.so",
        "workspace/notes.txt",
    ):
        assert _ignored(patterns, left_out), left_out
    # What the Dockerfile copies is named, file by file: never the whole context.
    copies = re.findall(r"^COPY (?!--from)(.*)$", DOCKERFILE, re.M)
    assert copies and not any(re.search(r"(^|\s)\.(/)?\s", c) for c in copies), copies
    for copy in copies:
        *sources, _ = copy.split()
        for source in sources:
            assert (ROOT / source).exists() and not _ignored(patterns, source), source


def _image_argv(tmp_path: Path, projects: Path, token_file: Path, port: int) -> list[str]:
    """The image's ENTRYPOINT and the pod's arguments, with this machine's paths."""
    return [
        part.replace("/run/secrets/sandboxfs-token", str(token_file))
        .replace("0.0.0.0:8080", f"127.0.0.1:{port}")
        .replace("/projects", str(projects))
        for part in [*_instruction("ENTRYPOINT"), *_sidecar_args()]
    ]


def test_the_image_serves_stdio_by_default_outside_a_container(tmp_path: Path) -> None:
    projects = tmp_path / "projects"
    (projects / "work").mkdir(parents=True)
    (projects / "work" / "hello.txt").write_text("from stdio\n")
    argv = [
        part.replace("/projects", str(projects))
        for part in [*_instruction("ENTRYPOINT"), *_instruction("CMD")]
    ]
    assert argv[0] == "sandboxfs"

    async def main() -> None:
        async with session(*argv[1:]) as s:
            assert await s.text("read_text_file", path="work/hello.txt") == "from stdio\n"

    trio.run(main)


def test_the_sidecar_arguments_serve_http_outside_a_container(tmp_path: Path) -> None:
    projects = tmp_path / "projects"
    (projects / "workspace").mkdir(parents=True)
    (projects / "workspace" / "hello.txt").write_text("from the sidecar\n")
    token_file = tmp_path / "sandboxfs-token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)  # as the Dockerfile's instructions make it
    port = free_port()
    argv = _image_argv(tmp_path, projects, token_file, port)
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
        hello = str(projects / "workspace" / "hello.txt")
        assert _call(port, "read_text_file", "wrong-token-0123456789", path=hello).get("error")
        answer = _call(port, "read_text_file", path=hello)
        assert answer["result"]["content"][0]["text"] == "from the sidecar\n"
        # The image's health check finds this server's port in its command line.
        assert healthcheck.probe(argv[1:]) is None
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0


def test_the_healthcheck_reads_the_servers_command_line(tmp_path: Path) -> None:
    script = ["/opt/sandboxfs/bin/python", "/opt/sandboxfs/bin/sandboxfs", "--http", ":1", "/p"]
    assert healthcheck.server_arguments(script) == ["--http", ":1", "/p"]
    assert healthcheck.server_arguments(["sandboxfs", "/p"]) == ["/p"]
    module = ["python", "-m", "sandboxfs", "--unix", "/s", "/p"]
    assert healthcheck.server_arguments(module) == ["--unix", "/s", "/p"]
    assert healthcheck.server_arguments(["python", "-m", "sandboxfs.cli.healthcheck"]) is None
    assert healthcheck.server_arguments(["/bin/sh", "-c", "sandboxfs"]) is None
    assert healthcheck.probe(["/projects"]) is None  # stdio: healthy while it runs
    port = free_port()
    problem = healthcheck.probe(["--http", f"0.0.0.0:{port}", "/p"])  # nobody listens
    assert problem is not None and problem.startswith("/healthz did not answer")
    with sidecar(str(tmp_path), tmp=tmp_path) as s:
        assert healthcheck.probe(["--http", f"0.0.0.0:{s.port}", str(tmp_path)]) is None
    socket_path = tmp_path / "s.sock"
    process = subprocess.Popen(
        [*SERVER, "--unix", str(socket_path), str(tmp_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=server_env({"SANDBOXFS_TOKEN": TOKEN}),
    )
    try:
        _until(
            lambda: socket_path.exists() and healthcheck.probe(["--unix", str(socket_path)]) is None
        )
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0


def _until(condition: Any) -> None:
    from test_tenants import _wait  # noqa: PLC0415

    _wait(condition)


# -- the image itself, under a container engine --------------------------------------------


def _engine() -> tuple[list[str], str]:
    engine, image = os.environ.get("SANDBOXFS_ENGINE"), os.environ.get("SANDBOXFS_IMAGE")
    if not engine or not image:
        pytest.skip(
            "set SANDBOXFS_ENGINE and SANDBOXFS_IMAGE to run the built image "
            "(.ci/run builds it with podman)"
        )
    return shlex.split(engine), image


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """A directory the image's user may read and change (as a volume is in a pod)."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "hello.txt").write_text("hello from the image\n")
    if os.geteuid() == 0:
        for path in (work, work / "hello.txt"):
            os.chown(path, IMAGE_UID, IMAGE_UID)
    tmp_path.chmod(0o755)
    return work


def test_the_image_serves_stdio_read_only_without_capabilities(workdir: Path) -> None:
    engine, image = _engine()
    command = [
        *engine,
        "run",
        "-i",
        "--rm",
        *HARDENED,
        "-v",
        f"{workdir}:/projects/work",
        image,
        "/projects/work",
    ]

    # The engine's own settings (CONTAINERS_CONF, in CI) reach it as they reach the tests.
    engine_env = {k: v for k, v in os.environ.items() if k.startswith("CONTAINERS_") or k == "PATH"}

    async def main() -> None:
        async with session(command=command, env=engine_env) as s:
            text = await s.text("read_text_file", path="/projects/work/hello.txt")
            assert text == "hello from the image\n"
            written = await s.text("write_file", path="/projects/work/new.txt", content="made\n")
            assert "Successfully wrote" in written
            assert "Landlock ABI" in s.log()  # the second layer holds in the container too

    trio.run(main)
    assert (workdir / "new.txt").read_text() == "made\n"
    assert (workdir / "new.txt").stat().st_uid == IMAGE_UID


@pytest.fixture
def running(workdir: Path, tmp_path: Path) -> Iterator[tuple[list[str], str, int]]:
    """The image serving HTTP with the pod's arguments, published on loopback."""
    engine, image = _engine()
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)
    if os.geteuid() == 0:
        os.chown(token_file, IMAGE_UID, IMAGE_UID)
    port = free_port()
    name = f"sandboxfs-test-{uuid.uuid4().hex[:12]}"
    args = [a.replace("/projects/workspace", "/projects/work") for a in _sidecar_args()]
    subprocess.run(
        [
            *engine,
            "run",
            "-d",
            "--name",
            name,
            *HARDENED,
            "-p",
            f"127.0.0.1:{port}:8080",
            "-v",
            f"{workdir}:/projects/work",
            "-v",
            f"{token_file}:/run/secrets/sandboxfs-token:ro",
            image,
            *args[:-1],
            "--allowed-host",
            f"127.0.0.1:{port}",
            args[-1],
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    try:
        yield engine, name, port
    finally:
        logs = subprocess.run([*engine, "logs", name], capture_output=True, text=True, timeout=60)
        subprocess.run([*engine, "rm", "-f", "-t", "30", name], capture_output=True, timeout=120)
        print(logs.stdout + logs.stderr)  # shown when the test fails


def _wait_healthy_in(port: int, engine: list[str], name: str) -> None:
    def healthy() -> bool:
        state = subprocess.run(
            [*engine, "inspect", "--format", "{{.State.Running}}", name],
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout.strip()
        assert state == "true", f"the container stopped: {state!r}"
        try:
            return _get(port, "/healthz")[0] == 200
        except OSError:
            return False

    _until(healthy)


def test_the_image_serves_http_read_only_without_capabilities(
    running: tuple[list[str], str, int], workdir: Path
) -> None:
    engine, name, port = running
    _wait_healthy_in(port, engine, name)
    assert _get(port, "/readyz")[0] == 200
    hello = "/projects/work/hello.txt"
    assert "error" in _call(port, "read_text_file", "wrong-token-0123456789", path=hello)
    answer = _call(port, "read_text_file", path=hello)
    assert answer["result"]["content"][0]["text"] == "hello from the image\n"
    # The image's HEALTHCHECK, run by the engine.
    check = subprocess.run(
        [*engine, "healthcheck", "run", name], capture_output=True, text=True, timeout=60
    )
    assert check.returncode == 0, check.stdout + check.stderr
    status, _, text = _get(port, "/metrics", TOKEN)
    assert status == 200
    assert (
        _value(_samples(text), "sandboxfs_tool_calls_total", tool="read_text_file", outcome="ok")
        == 1
    )
    # As the pod spec runs it: its own user, no capability, nothing writable but volumes.
    status_text = subprocess.run(
        [*engine, "exec", name, "cat", "/proc/1/status"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    fields = dict(line.split(":", 1) for line in status_text.splitlines())
    assert fields["Uid"].split()[0] == str(IMAGE_UID)
    assert int(fields["CapEff"], 16) == 0 and int(fields["CapBnd"], 16) == 0
    assert fields["NoNewPrivs"].strip() == "1"
    touched = subprocess.run(
        [*engine, "exec", name, "touch", "/opt/sandboxfs/x"], capture_output=True, timeout=60
    )
    assert touched.returncode != 0  # the root filesystem is read-only


def test_the_healthcheck_is_harmless_over_stdio(workdir: Path) -> None:
    engine, image = _engine()
    name = f"sandboxfs-test-{uuid.uuid4().hex[:12]}"
    subprocess.run(
        [
            *engine,
            "run",
            "-d",
            "-i",
            "--name",
            name,
            *HARDENED,
            "-v",
            f"{workdir}:/projects/work",
            image,
            "/projects/work",
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    try:
        check = subprocess.run(
            [*engine, "healthcheck", "run", name], capture_output=True, text=True, timeout=60
        )
        assert check.returncode == 0, check.stdout + check.stderr
    finally:
        subprocess.run([*engine, "rm", "-f", "-t", "5", name], capture_output=True, timeout=120)
