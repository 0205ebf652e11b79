"""deploy/: every manifest validates strictly; the pod spec and the scale-out
Deployment follow the conventions of hardened pods and agree with the image on
paths; the scale-out replicas share one ReadWriteMany claim behind a Service;
the tenants' Deployment gives the workers' sockets a volume of their own (the
root filesystem is read-only) and its command line serves as written, under a
read-only /tmp; and the memory limit holds a read at the default cap."""

from __future__ import annotations

import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
import trio
from sidecar_helpers import free_port, http_client, sidecar, wait_healthy
from test_tenants import TOKEN_A, Front, _wait, tenants_toml
from test_tenants_runtime import can_unshare, read_only_tmp

from mcp_client import SERVER, server_env
from sandboxfs.fs.limits import Limits
from sandboxfs.transports.tenants import hash_token

ROOT = Path(__file__).resolve().parent.parent
KUBERNETES = ROOT / "deploy" / "kubernetes"
POD = KUBERNETES / "pod.yaml"
SCALE_OUT = KUBERNETES / "scale-out.yaml"
CLAIM = KUBERNETES / "shared-workspace-pvc.yaml"
TENANTS = KUBERNETES / "tenants.yaml"
MANIFESTS = sorted(KUBERNETES.glob("*.yaml"))

yaml = pytest.importorskip("yaml", reason="PyYAML comes with kubernetes-validate (test extra)")


def _pod() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(POD.read_text())
    return document


def _containers() -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in _pod()["spec"]["containers"]}


def _documents(path: Path) -> dict[str, dict[str, Any]]:
    """A manifest's documents by kind."""
    return {d["kind"]: d for d in yaml.safe_load_all(path.read_text()) if d}


def _scale_out() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    documents = _documents(SCALE_OUT)
    return documents["Deployment"], documents["Service"], _documents(CLAIM)["PersistentVolumeClaim"]


def test_the_manifests_are_the_ones_checked_here() -> None:
    assert sorted([POD, SCALE_OUT, CLAIM, TENANTS]) == MANIFESTS


@pytest.mark.parametrize("manifest", MANIFESTS, ids=lambda p: p.name)
def test_every_manifest_validates_strictly(manifest: Path) -> None:
    pytest.importorskip("kubernetes_validate", reason="kubernetes-validate is not installed")
    result = subprocess.run(
        [sys.executable, "-m", "kubernetes_validate", "--strict", str(manifest)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def _assert_hardened(spec: dict[str, Any]) -> None:
    assert spec["automountServiceAccountToken"] is False  # no API token for the agent
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    assert spec["containers"]
    for container in spec["containers"]:
        name = container["name"]
        context = container["securityContext"]
        assert context["readOnlyRootFilesystem"] is True, name
        assert context["allowPrivilegeEscalation"] is False, name
        assert context["capabilities"]["drop"] == ["ALL"], name


def _assert_sandboxfs_container(spec: dict[str, Any]) -> dict[str, str]:
    """sandboxfs's probes, limits and token; its mounts by volume name."""
    [container] = [c for c in spec["containers"] if c["name"] == "sandboxfs"]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "mcp"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "mcp"}
    assert container["resources"]["limits"]["memory"]
    assert container["resources"]["requests"]["cpu"]
    assert [p["containerPort"] for p in container["ports"] if p["name"] == "mcp"] == [8080]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    served = container["args"][-1]
    assert mounts["workspace"] == served
    token_dir = mounts["sandboxfs-token"]
    assert not (token_dir + "/").startswith(served + "/")  # not served
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["sandboxfs-token"]["secret"]["secretName"] == "sandboxfs-token"
    # The image serves stdio by default: the sidecar's arguments are the container's.
    assert _option(container["args"], "--http") == "0.0.0.0:8080"
    assert _option(container["args"], "--token-file") == f"{token_dir}/sandboxfs-token"
    return mounts


def test_the_pod_is_hardened() -> None:
    spec = _pod()["spec"]
    _assert_hardened(spec)
    _assert_sandboxfs_container(spec)


def test_the_scale_out_deployment_is_hardened_like_the_pod() -> None:
    deployment, _, _ = _scale_out()
    spec = deployment["spec"]["template"]["spec"]
    _assert_hardened(spec)
    _assert_sandboxfs_container(spec)
    [container] = spec["containers"]
    pod_container = _containers()["sandboxfs"]
    # The memory limit test_the_memory_limit_holds_a_read_at_the_default_cap checks.
    assert container["resources"] == pod_container["resources"]
    assert container["securityContext"] == pod_container["securityContext"]
    assert spec["securityContext"] == _pod()["spec"]["securityContext"]


def test_the_replicas_share_one_read_write_many_claim_behind_a_service() -> None:
    deployment, service, claim = _scale_out()
    assert deployment["spec"]["replicas"] > 1
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    assert claim["spec"]["storageClassName"]  # a placeholder the comment says to replace
    comments = CLAIM.read_text()
    assert all(name in comments for name in ("NFS", "CephFS", "EFS"))
    spec = deployment["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["workspace"]["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert service["spec"]["selector"].items() <= labels.items()
    [port] = service["spec"]["ports"]
    assert port["targetPort"] == "mcp"
    # Stateless serving: no affinity is asked of the Service (see test_scale_out).
    assert "sessionAffinity" not in service["spec"]
    assert "--workspaces" not in spec["containers"][0]["args"]  # its sessions need affinity
    # Clients reach it by the Service's name: the Host check must answer to it.
    args = spec["containers"][0]["args"]
    hosts = {args[i + 1] for i, arg in enumerate(args) if arg == "--allowed-host"}
    assert f"{service['metadata']['name']}:{port['port']}" in hosts


def _tenants_container() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    documents = _documents(TENANTS)
    spec = documents["Deployment"]["spec"]["template"]["spec"]
    [container] = spec["containers"]
    return spec, container, documents["Service"]


def _option(command: list[str], name: str) -> str:
    [value] = [command[i + 1] for i, part in enumerate(command) if part == name]
    return value


def test_the_tenants_deployment_gives_the_workers_sockets_a_volume() -> None:
    spec, container, service = _tenants_container()
    _assert_hardened(spec)
    assert container["securityContext"] == _containers()["sandboxfs"]["securityContext"]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "mcp"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "mcp"}
    command = container["command"]
    assert command[0] == "sandboxfs" and "--token-file" not in command  # tokens: per tenant
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    # The run directory is a writable volume of its own (an emptyDir), not the root.
    run_dir = _option(command, "--run-dir")
    assert "emptyDir" in volumes[mounts[run_dir]]
    tenants_file = _option(command, "--tenants")
    tenants_volume = volumes[mounts[str(Path(tenants_file).parent)]]
    assert tenants_volume["configMap"]["items"] == [
        {"key": Path(tenants_file).name, "path": Path(tenants_file).name}
    ]
    port = service["spec"]["ports"][0]
    assert port["targetPort"] == "mcp"
    hosts = {command[i + 1] for i, part in enumerate(command) if part == "--allowed-host"}
    assert f"{service['metadata']['name']}:{port['port']}" in hosts
    assert service["spec"]["selector"].items() <= (
        _documents(TENANTS)["Deployment"]["spec"]["template"]["metadata"]["labels"].items()
    )


def test_the_tenants_command_line_serves_under_a_read_only_tmp(tmp_path: Path) -> None:
    """The manifest's command as written (its paths mapped to this machine's), under a
    read-only /tmp and /var/tmp with a tmpfs where the run directory volume goes."""
    if not can_unshare():
        pytest.skip("needs root and unshare -m (a private mount namespace)")
    _, container, _ = _tenants_container()
    run_volume, served = tmp_path / "run", tmp_path / "alice"
    run_volume.mkdir()
    served.mkdir()
    (served / "hello.txt").write_text("hello alice\n")
    tenants_file = tmp_path / "tenants.toml"
    tenants_file.write_text(
        tenants_toml(
            {"name": "alice", "token_sha256": hash_token(TOKEN_A), "directories": [str(served)]}
        )
    )
    port = free_port()
    command = [
        part.replace("/etc/sandboxfs/tenants.toml", str(tenants_file))
        .replace("/run/sandboxfs", str(run_volume))
        .replace("0.0.0.0:8080", f"127.0.0.1:{port}")
        for part in container["command"]
    ]
    argv = read_only_tmp([*SERVER, *command[1:]], run_volume)
    log = tmp_path / "front.log"
    with log.open("wb") as errlog:
        process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=errlog, env=server_env())
    try:
        wait_healthy(port, process, log)
        _wait(lambda: "tenant alice: worker ready" in log.read_text())
        front = Front(process, port, log, tenants_file, served, served)
        assert front.text(TOKEN_A, "read_text_file", path=str(served / "hello.txt")) == (
            "hello alice\n"
        )
        assert f"workers' sockets in {run_volume}/sandboxfs-" in log.read_text()
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0


def test_the_paths_agree_and_the_token_stays_out_of_reach() -> None:
    containers = _containers()
    served = containers["sandboxfs"]["args"][-1]
    mounts = {
        name: {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        for name, container in containers.items()
    }
    assert mounts["sandboxfs"]["workspace"] == served
    assert mounts["agent"]["workspace"] == served  # the agent sees what it names
    token_dir = mounts["sandboxfs"]["sandboxfs-token"]
    assert not (token_dir + "/").startswith(served + "/")  # not served
    assert "sandboxfs-token" not in mounts["agent"]  # the agent gets it as a variable
    args = containers["sandboxfs"]["args"]
    assert _option(args, "--token-file") == f"{token_dir}/sandboxfs-token"


def _limit_bytes(text: str) -> int:
    units = {"Ki": 1024, "Mi": 1024**2, "Gi": 1024**3}
    for suffix, factor in units.items():
        if text.endswith(suffix):
            return int(text.removesuffix(suffix)) * factor
    return int(text)


# The SDK's HTTP client leaves SSE generators to the garbage collector (as in test_sidecar).
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_the_memory_limit_holds_a_read_at_the_default_cap() -> None:
    limit = _limit_bytes(_containers()["sandboxfs"]["resources"]["limits"]["memory"])
    size = Limits().read_bytes - 1024 * 1024
    with tempfile.TemporaryDirectory() as scratch:
        base = Path(scratch)
        (base / "workspace").mkdir()
        line = b"x" * 99 + b"\n"
        (base / "workspace" / "big.txt").write_bytes(line * (size // len(line)))

        async def read(url: str, era: str) -> None:
            async with http_client(url, era) as client:  # type: ignore[arg-type]
                result = await client.call_tool("read_text_file", {"path": "big.txt"})
                assert not result.is_error

        with sidecar("--json-response", str(base / "workspace"), tmp=base) as s:
            for era in ("2026", "2025"):
                trio.run(read, s.url, era)
            status = Path(f"/proc/{s.process.pid}/status").read_text()
    peak = next(
        int(line.split()[1]) * 1024 for line in status.splitlines() if line.startswith("VmHWM")
    )
    assert peak < limit, f"peak RSS {peak / 2**20:.0f} MiB over the pod's {limit / 2**20:.0f} MiB"
