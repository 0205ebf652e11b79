"""The GitHub Action (action.yml) and the CI examples of docs/audit-in-ci.md.

action.yml is validated against SchemaStore's schema for action metadata, the
workflow and GitLab examples against theirs (all as check-jsonschema vendors them);
what a schema cannot see is checked here: every input used is declared, every step
that runs a script names its shell and gets its values through the environment (no
``${{ }}`` inside a script), and the audit and verdict steps' scripts do what they
say when run with bash, against a real audit."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML
from test_audit import WEAK_SERVER

from mcp_client import server_env

ROOT = Path(__file__).resolve().parent.parent
ACTION = ROOT / "action.yml"
CI_DOC = ROOT / "docs" / "audit-in-ci.md"
_EXPRESSION = re.compile(r"\$\{\{(.*?)\}\}", re.S)


def _load(text: str) -> Any:
    return YAML(typ="safe").load(io.StringIO(text))


def _check(schema: str, path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", schema, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_action_yml_is_valid_action_metadata(tmp_path: Path) -> None:
    checked = _check("vendor.github-actions", ACTION)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    # And a broken one is caught (the check is not vacuous): a composite step that
    # runs a script must name its shell.
    broken = tmp_path / "action.yml"
    broken.write_text(ACTION.read_text().replace("      shell: bash\n", "", 1))
    assert _check("vendor.github-actions", broken).returncode != 0


def test_action_yml_uses_only_what_it_declares_and_keeps_expressions_out_of_scripts() -> None:
    action = _load(ACTION.read_text())
    assert action["runs"]["using"] == "composite"
    inputs = set(action["inputs"])
    steps = action["runs"]["steps"]
    ids = {step["id"] for step in steps if "id" in step}
    text = ACTION.read_text()
    for expression in _EXPRESSION.findall(text):
        for name in re.findall(r"inputs\.([\w-]+)", expression):
            assert name in inputs, f"inputs.{name} is used but not declared"
        for step in re.findall(r"steps\.([\w-]+)\.", expression):
            assert step in ids, f"steps.{step} is used but no step has that id"
    for step in steps:
        if "run" in step:
            assert step.get("shell") == "bash", step["name"]
            # Values reach a script through its environment, never pasted into it.
            assert not _EXPRESSION.search(step["run"]), step["name"]
            for variable in set(re.findall(r"\$\{?(AUDIT_\w+)", step["run"])):
                assert variable in step.get("env", {}), (step["name"], variable)
    uploads = [s for s in steps if str(s.get("uses", "")).startswith("github/codeql-action/")]
    assert [s["uses"] for s in uploads] == ["github/codeql-action/upload-sarif@v3"]
    assert uploads[0]["with"]["sarif_file"] == "${{ steps.audit.outputs.sarif-file }}"


def _step(name: str) -> dict[str, Any]:
    steps = _load(ACTION.read_text())["runs"]["steps"]
    (step,) = [s for s in steps if s["name"] == name]
    return dict(step)


def _run_step(name: str, env: dict[str, str], cwd: Path) -> tuple[int, dict[str, str], str]:
    """Run a step's script with bash as the runner would: its env (here given
    directly), GITHUB_OUTPUT collected."""
    outputs = cwd / "github-output"
    outputs.write_text("")
    done = subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", _step(name)["run"]],
        capture_output=True,
        text=True,
        env={**env, "GITHUB_OUTPUT": str(outputs)},
        cwd=cwd,
        timeout=900,
    )
    said = dict(line.split("=", 1) for line in outputs.read_text().splitlines())
    return done.returncode, said, done.stdout + done.stderr


def test_the_actions_audit_step_audits_the_server_and_reports_what_it_found(
    tmp_path: Path,
) -> None:
    (tmp_path / "weak server.py").write_text(WEAK_SERVER)
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    env = {
        **server_env(),
        "PATH": path,
        "AUDIT_SERVER": f"{sys.executable} 'weak server.py' {{root}}",
        "AUDIT_ERA": "2025",
        "AUDIT_QUICK": "true",
        "AUDIT_LOCATION": ".mcp.json:2",
        "AUDIT_ARGS": "--category path-syntax --timeout 5",
        "AUDIT_SARIF": "findings.sarif",
    }
    status, outputs, said = _run_step("Audit the server", env, tmp_path)
    assert status == 0, said  # the verdict is the last step's to give
    assert outputs["exit-status"] == "1", said
    assert re.fullmatch(
        r"\d+ passed, [1-9]\d* failed, 0 errors, \d+ not applicable", outputs["summary"]
    )
    assert outputs["sarif-file"] == "findings.sarif"
    assert '"uri": ".mcp.json"' in (tmp_path / "findings.sarif").read_text()
    assert not (tmp_path / "sandboxfs-audit.log").exists()
    # A server that is not there: the audit says so, and writes no SARIF to upload.
    (tmp_path / "findings.sarif").unlink()
    status, outputs, said = _run_step(
        "Audit the server", {**env, "AUDIT_SERVER": "/nonexistent/server {root}"}, tmp_path
    )
    assert status == 0 and outputs["exit-status"] == "3", said
    assert outputs["summary"] == (
        "sandboxfs audit: the server command was not found: /nonexistent/server"
    )
    assert "sarif-file" not in outputs


@pytest.mark.parametrize(
    ("status", "fail_on_error", "job"),
    [("0", "true", 0), ("1", "true", 1), ("3", "true", 3), ("3", "false", 0), ("2", "true", 2)],
)
def test_the_actions_verdict_fails_the_job_on_a_failure(
    tmp_path: Path, status: str, fail_on_error: str, job: int
) -> None:
    env = {
        "PATH": os.environ["PATH"],
        "AUDIT_STATUS": status,
        "AUDIT_SUMMARY": "1 passed, 1 failed, 0 errors, 0 not applicable",
        "AUDIT_FAIL_ON_ERROR": fail_on_error,
    }
    code, _, said = _run_step("Verdict", env, tmp_path)
    assert code == job, said


def _yaml_blocks(document: Path) -> list[str]:
    return re.findall(r"^```yaml\n(.*?)^```\n", document.read_text(), re.S | re.M)


def test_the_ci_examples_are_valid_workflows_and_gitlab_jobs(tmp_path: Path) -> None:
    blocks = _yaml_blocks(CI_DOC)
    workflows = [b for b in blocks if "jobs:" in b and "runs-on:" in b]
    gitlab = [b for b in blocks if "artifacts:" in b and "runs-on:" not in b]
    assert workflows and gitlab
    for kind, schema, found in (
        ("workflow", "vendor.github-workflows", workflows),
        ("gitlab", "vendor.gitlab-ci", gitlab),
    ):
        for number, block in enumerate(found):
            path = tmp_path / f"{kind}-{number}.yml"
            path.write_text(block)
            checked = _check(schema, path)
            assert checked.returncode == 0, f"{kind} {number}:\n{block}\n{checked.stdout}"
    # The workflow that uses the action gives it what it requires and the permission
    # an upload needs.
    using = [_load(b) for b in workflows if "/sandboxfs@" in b]
    assert using
    required = {k for k, v in _load(ACTION.read_text())["inputs"].items() if v.get("required")}
    for workflow in using:
        for job in workflow["jobs"].values():
            assert job.get("permissions", {}).get("security-events") == "write"
            for step in job["steps"]:
                if "/sandboxfs@" in str(step.get("uses", "")):
                    assert required <= set(step.get("with", {}))
    # GitLab's job reads the JUnit report the audit writes.
    for block in gitlab:
        job = next(iter(_load(block).values()))
        report = job["artifacts"]["reports"]["junit"]
        assert any(f"--junit {report}" in line for line in job["script"])
