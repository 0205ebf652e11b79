"""deploy/: the pod spec validates strictly, follows the conventions of hardened pods,
agrees with the image on paths, and its memory limit holds a read at the default cap."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
import trio
from sidecar_helpers import http_client, sidecar

from sandboxfs.fs.limits import Limits

ROOT = Path(__file__).resolve().parent.parent
POD = ROOT / "deploy" / "kubernetes" / "pod.yaml"

yaml = pytest.importorskip("yaml", reason="PyYAML comes with kubernetes-validate (test extra)")


def _pod() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(POD.read_text())
    return document


def _containers() -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in _pod()["spec"]["containers"]}


def test_the_pod_spec_validates_strictly() -> None:
    pytest.importorskip("kubernetes_validate", reason="kubernetes-validate is not installed")
    result = subprocess.run(
        [sys.executable, "-m", "kubernetes_validate", "--strict", str(POD)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_pod_is_hardened() -> None:
    spec = _pod()["spec"]
    assert spec["automountServiceAccountToken"] is False  # no API token for the agent
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    for name, container in _containers().items():
        context = container["securityContext"]
        assert context["readOnlyRootFilesystem"] is True, name
        assert context["allowPrivilegeEscalation"] is False, name
        assert context["capabilities"]["drop"] == ["ALL"], name


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
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert f'--token-file", "{token_dir}/sandboxfs-token"' in dockerfile


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
