"""`sandboxfs audit` against sandboxfs itself: every case passes, in both eras, also
when run from a clone's root; and the audit's verdicts mean what they say.

A deliberately weak "server" (the reference tool names, but path checks done on
strings) is caught (FAIL, exit 1); a server that cannot start stops the audit with
one line (exit 3); a case the audit could not run is an ERROR (exit 3), never a
FAIL; Ctrl-C and SIGTERM leave no server, attacker or scratch directory behind.
Whole audits here run with ``--quick`` or a chosen subset (the default budget is
measured by bench/audit_servers.py, not timed here)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

import pytest

from mcp_client import SERVER, server_env

ROOT = Path(__file__).resolve().parent.parent
#: The installed console script, as a user runs it (it puts no working directory on
#: sys.path, unlike ``python -m``).
SANDBOXFS = str(Path(sys.executable).parent / "sandboxfs")
SUMMARY = re.compile(r"(\d+) passed, (\d+) failed, (\d+) errors, (\d+) not applicable")


def _audit(
    tmp_path: Path,
    *args: str,
    server: list[str],
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
) -> tuple[int, str, list[dict[str, object]]]:
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
        env=env or server_env(),
        timeout=900,
        cwd=cwd,
    )
    assert "Traceback" not in result.stderr, result.stderr
    results = json.loads(report.read_text()) if report.exists() else []
    return result.returncode, result.stdout + result.stderr, results


@pytest.mark.parametrize("era", ["2025", "2026"])
def test_sandboxfs_passes_its_own_quick_audit(tmp_path: Path, era: str) -> None:
    code, output, results = _audit(tmp_path, "--quick", "--era", era, server=[*SERVER, "{root}"])
    assert code == 0, output
    not_applicable = [r["case"] for r in results if r["status"] == "N/A"]
    # Only what the era lacks does not apply: 2026-07-28 has no handshake to repeat,
    # and no Roots.
    assert not_applicable == (
        []
        if era == "2025"
        else [
            "protocol/second-initialize",
            "roots/client-roots-at-initialize-cannot-widen",
            "roots/roots-list-changed-cannot-widen",
        ]
    )
    passed = len(results) - len(not_applicable)
    assert output.splitlines()[-1] == (
        f"{passed} passed, 0 failed, 0 errors, {len(not_applicable)} not applicable"
    )
    # Every race attacked its whole (quick) budget, its attacker made changes, and the
    # verdict says what the attempts prove.
    races = [r for r in results if r["case"].startswith("races/")]
    assert len(races) == 6
    for race in races:
        assert race["trials"] == {"attempts": 200, "planned": 200, "escaped": False}, race
        held = re.fullmatch(
            r"held 200 attempts: with 95% confidence an attempt gets through less than "
            r"once in 67; the attacker made ([\d,]+) changes",
            str(race["reason"]),
        )
        assert held and int(held[1].replace(",", "")) > 0, race
    categories = {str(r["case"]).split("/")[0] for r in results}
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


SHADOWED = "the clone's uncompiled source tree was imported"


def _clone_without_the_extension(into: Path) -> None:
    """A ``sandboxfs/`` source tree as a fresh clone has it: no compiled extension.
    Importing its auditor fails as such a tree does under a ``pip install .`` (its
    ``_native`` is missing; an editable install would find the real one, so the
    failure is made explicit here)."""
    shutil.copytree(
        ROOT / "sandboxfs",
        into / "sandboxfs",
        ignore=shutil.ignore_patterns("*.so", "__pycache__", "_native.c"),
    )
    with (into / "sandboxfs" / "audit" / "__init__.py").open("a") as f:
        f.write(f"raise ImportError({SHADOWED!r})\n")


def test_the_audit_runs_from_a_clone_whose_source_tree_would_shadow_the_package(
    tmp_path: Path,
) -> None:
    """The README's quick start installs sandboxfs and runs it from the clone's root:
    the auditor's helper processes (attacker, leash) must import the installed
    package, not the uncompiled tree in the working directory."""
    clone = tmp_path / "clone"
    clone.mkdir()
    _clone_without_the_extension(clone)
    env = {"HOME": os.environ.get("HOME", "/root"), "PATH": os.environ["PATH"]}
    # The attack is real: a helper started the old way dies on the clone's tree.
    shadowed = subprocess.run(
        [sys.executable, "-m", "sandboxfs.audit.attacker", "swap-file", "x", "y", "1"],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shadowed.returncode != 0 and SHADOWED in shadowed.stderr, shadowed.stderr
    report = tmp_path / "audit.json"
    audit = subprocess.run(
        [
            SANDBOXFS,
            "audit",
            "--quick",
            "--json",
            str(report),
            "--only",
            "races/*",
            "--only",
            "protocol/lone-surrogate-method",
            "--",
            SANDBOXFS,
            "{root}",
        ],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert audit.returncode == 0, audit.stdout + audit.stderr
    assert audit.stdout.splitlines()[-1] == "7 passed, 0 failed, 0 errors, 0 not applicable"
    assert {r["status"] for r in json.loads(report.read_text())} == {"PASS"}


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
    assert code == 1, output
    failed = {r["case"] for r in results if r["status"] == "FAIL"}
    assert "path-syntax/prefix-sibling" in failed  # "/x/root-evil" starts with "/x/root"
    assert "symlinks/read-read_text_file" in failed  # symlinks are followed out
    assert "sidecar/no-open-listener-beyond-loopback" in failed  # 0.0.0.0, no token
    assert not [r for r in results if r["status"] == "ERROR"], output
    last = SUMMARY.fullmatch(output.splitlines()[-1])
    assert last and int(last[2]) == len(failed), output
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
    run = log["runs"][0]
    # One result per FAIL (code scanning makes an alert of every result), each under
    # its category's rule, all of them at the file that starts the server.
    assert {r["properties"]["case"] for r in run["results"]} == failed
    rules = run["tool"]["driver"]["rules"]
    assert all(rules[r["ruleIndex"]]["id"] == r["ruleId"] for r in run["results"])
    assert {r["ruleId"] for r in run["results"]} == {
        "sandboxfs-audit/path-syntax",
        "sandboxfs-audit/symlinks",
        "sandboxfs-audit/sidecar",
    }
    assert run["invocations"][0]["properties"]["verdicts"] == {
        r["case"]: r["status"] for r in results
    }


def test_only_category_and_list_select_cases_and_a_selection_of_nothing_is_a_usage_error(
    tmp_path: Path,
) -> None:
    code, output, results = _audit(
        tmp_path, "--quick", "--only", "path-syntax/absolute-*", server=[*SERVER, "{root}"]
    )
    assert code == 0, output
    assert [r["case"] for r in results] == ["path-syntax/absolute-outside"]
    listed = subprocess.run(
        [sys.executable, "-m", "sandboxfs", "audit", "--list", "--category", "races"],
        capture_output=True,
        text=True,
        env=server_env(),
        timeout=120,
    )
    assert listed.returncode == 0
    # Every race says it is probabilistic.
    assert listed.stdout.splitlines() == [
        f"races/{name}  (probabilistic)"
        for name in (
            "exchange-dir-during-reads-and-walks",
            "exchange-dir-during-writes",
            "file-symlink-swap-during-write-edit-copy",
            "directory-renamed-away-during-walks",
            "hard-links-planted-during-writes",
            "symlink-flipped-within-one-call",
        )
    ]
    for wrong, said in (
        (["--only", "nope/*", "--", *SERVER], "no case matches"),
        (["--jobs", "0", "--", *SERVER], "--jobs"),
        (["--timeout", "nan", "--", *SERVER], "--timeout"),
        (["--max-memory-growth", "0", "--", *SERVER], "--max-memory-growth"),
        ([], "give the server's command"),
    ):
        usage = subprocess.run(
            [sys.executable, "-m", "sandboxfs", "audit", *wrong],
            capture_output=True,
            text=True,
            env=server_env(),
            timeout=120,
        )
        assert usage.returncode == 2 and said in usage.stderr, (wrong, usage.stderr)


DYING_SERVER = """
import sys
sys.stderr.write("boom: no configuration in /etc/weak\\n")
sys.exit(4)
"""
MUTE_SERVER = """
import sys, time
sys.stdin.read()  # never answers initialize
"""


@pytest.mark.parametrize(
    ("server", "said"),
    [
        ("/nonexistent/server", "the server command was not found: /nonexistent/server"),
        (
            "dying",
            "the server did not start: it ended or broke off before answering tools/list "
            "(Connection closed); its last word on stderr: "
            "'boom: no configuration in /etc/weak'",
        ),
        (
            "mute",
            "the server did not start: it did not answer initialize and tools/list within 2 s",
        ),
    ],
)
def test_a_server_that_cannot_start_stops_the_audit_with_one_line_and_status_3(
    tmp_path: Path, server: str, said: str
) -> None:
    scripts = {"dying": DYING_SERVER, "mute": MUTE_SERVER}
    if server in scripts:
        (tmp_path / "server.py").write_text(scripts[server])
        command = [sys.executable, str(tmp_path / "server.py"), "{root}"]
    else:
        command = [server, "{root}"]
    sarif = tmp_path / "audit.sarif"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "sandboxfs",
            "audit",
            "--timeout",
            "2",
            "--sarif",
            str(sarif),
            "--",
            *command,
        ],
        capture_output=True,
        text=True,
        env={**server_env(), "TMPDIR": str(tmp_path)},
        timeout=300,
    )
    assert result.returncode == 3
    assert result.stdout == ""  # no case ran
    assert result.stderr == f"sandboxfs audit: {said}\n"
    assert not sarif.exists()
    assert not list(tmp_path.glob("sandboxfs-audit-*"))  # its scratch directory went too


#: A wrapper that registers two test cases before the audit runs: one the harness
#: cannot run (its own attacker, say, never started) and one whose server dies.
WITH_TEST_CASES = """
import sys
from sandboxfs.audit.cases.base import case
from sandboxfs.audit.harness import CaseError
from sandboxfs.audit import runner

@case("leaks", "test-harness-breaks")
async def breaks(s, fx):
    raise CaseError("the test's attacker never got ready")

@case("leaks", "test-harness-trips")
async def trips(s, fx):
    raise KeyError("a bug in the harness")

@case("leaks", "test-server-dies")
async def dies(s, fx):
    await s.call("die")

sys.exit(runner.main(sys.argv[1:]))
"""
DIES_ON_CALL = """
import os
from mcp.server.mcpserver import MCPServer
app = MCPServer("dies")

@app.tool()
def die() -> str:
    os._exit(9)

app.run()
"""


def test_a_case_the_audit_could_not_run_is_an_error_not_a_failure(tmp_path: Path) -> None:
    wrapper, server = tmp_path / "audit_with_test_cases.py", tmp_path / "dies.py"
    wrapper.write_text(WITH_TEST_CASES)
    server.write_text(DIES_ON_CALL)
    junit, sarif = tmp_path / "audit.xml", tmp_path / "audit.sarif"

    def audit(*only: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, str(wrapper), "--json", str(tmp_path / "audit.json")]
            + ["--junit", str(junit), "--sarif", str(sarif)]
            + [arg for pattern in only for arg in ("--only", pattern)]
            + ["--", sys.executable, str(server), "{root}"],
            capture_output=True,
            text=True,
            env=server_env(),
            timeout=300,
        )

    erred = audit("leaks/test-harness-*")
    assert erred.returncode == 3, erred.stdout + erred.stderr
    assert erred.stdout.splitlines()[-1] == "0 passed, 0 failed, 2 errors, 0 not applicable"
    reasons = {r["case"]: r["reason"] for r in json.loads((tmp_path / "audit.json").read_text())}
    assert reasons == {
        "leaks/test-harness-breaks": "the test's attacker never got ready",
        "leaks/test-harness-trips": "the audit broke off: KeyError: 'a bug in the harness'",
    }
    errors = ET.parse(junit).getroot()
    assert (errors.get("errors"), errors.get("failures")) == ("2", "0")
    assert len(list(errors.iter("error"))) == 2
    run = json.loads(sarif.read_text())["runs"][0]
    assert run["results"] == []  # nothing the server did is known: no alert
    invocation = run["invocations"][0]
    assert invocation["executionSuccessful"] is False
    assert len(invocation["toolExecutionNotifications"]) == 2
    # A server that dies under a case failed it: what it did is known.
    died = audit("leaks/test-harness-breaks", "leaks/test-server-dies")
    assert died.returncode == 1, died.stdout + died.stderr
    statuses = {r["case"]: r["status"] for r in json.loads((tmp_path / "audit.json").read_text())}
    assert statuses == {"leaks/test-harness-breaks": "ERROR", "leaks/test-server-dies": "FAIL"}
    assert "1 failed, 1 errors" in died.stdout.splitlines()[-1]


#: A server that reads a device the way a careless one does: all of it (here it
#: stops at 300 MiB, so the test stays kind to the machine).
GREEDY_SERVER = """
from mcp.server.mcpserver import MCPServer
app = MCPServer("greedy")

@app.tool()
def read_text_file(path: str) -> str:
    with open(path, "rb") as f:
        data = f.read(300 << 20)
    return f"read {len(data)} bytes"

app.run()
"""


def test_a_server_whose_memory_grows_without_bound_on_an_endless_device_fails(
    tmp_path: Path,
) -> None:
    script = tmp_path / "greedy.py"
    script.write_text(GREEDY_SERVER)
    code, output, results = _audit(
        tmp_path,
        "--timeout",
        "5",
        "--max-memory-growth",
        "100",
        "--only",
        "special-files/read-endless-device",
        "--only",
        "special-files/read-fifo",
        server=[sys.executable, str(script), "{root}"],
    )
    assert code == 1, output
    verdicts = {r["case"]: (r["status"], r["reason"]) for r in results}
    status, reason = verdicts["special-files/read-endless-device"]
    assert status == "FAIL" and "the server's peak memory grew by" in reason, reason
    # The FIFO read hangs instead; a hang is its own verdict.
    status, reason = verdicts["special-files/read-fifo"]
    assert status == "FAIL" and "got no answer within" in reason, reason


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


def _attackers_of(auditor: int) -> list[int]:
    """The attacker processes the auditor started that still run."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            words = (entry / "cmdline").read_bytes().split(b"\0")
            parent = int((entry / "stat").read_text().rpartition(")")[2].split()[1])
        except (OSError, ValueError):
            continue
        if parent == auditor and b"sandboxfs.audit.attacker" in words:
            found.append(int(entry.name))
    return [pid for pid in found if not _ended(pid)]


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
def test_the_servers_of_an_audit_end_with_it(tmp_path: Path, signum: int) -> None:
    """An auditor that is interrupted (Ctrl-C: SIGINT to its whole process group, as a
    terminal sends it), terminated or killed mid-case leaves no server running, not
    even one that hangs in a call, ignores SIGTERM and outlives end of input; an
    interrupted or terminated one also removes its scratch directory and ends with
    one line and 130 or 143, no traceback."""
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
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**server_env(), "TMPDIR": str(scratch)},
        start_new_session=True,  # its own process group, as a shell's job has
    )
    try:
        _wait_for(lambda: pidfile.exists() and pidfile.read_text() != "", "the call to hang")
        server = int(pidfile.read_text())
        assert not _ended(server)
        if signum == signal.SIGINT:
            os.killpg(auditor.pid, signum)
        else:
            auditor.send_signal(signum)
        out, err = auditor.communicate(timeout=120)
        _wait_for(lambda: _ended(server), f"server {server} to end after the auditor")
        if signum != signal.SIGKILL:
            assert auditor.returncode == 128 + signum
            assert out == ""
            name = "Ctrl-C (SIGINT)" if signum == signal.SIGINT else "SIGTERM"
            assert err == (
                f"sandboxfs audit: interrupted by {name} after 0 of 1 cases "
                "(0 passed, 0 failed, 0 errors, 0 not applicable); every server stopped\n"
            )
            assert list(scratch.iterdir()) == []
    finally:
        auditor.kill()
        auditor.communicate()


def test_ctrl_c_during_a_race_leaves_no_attacker_and_no_scratch(tmp_path: Path) -> None:
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    auditor = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sandboxfs",
            "audit",
            "--only",
            "races/exchange-dir-during-writes",
            "--",
            *SERVER,
            "{root}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**server_env(), "TMPDIR": str(scratch)},
        start_new_session=True,
    )
    try:
        _wait_for(
            lambda: auditor.poll() is not None or bool(_attackers_of(auditor.pid)), "the attacker"
        )
        attackers = _attackers_of(auditor.pid)
        assert attackers, "the race ended before it could be interrupted"
        os.killpg(auditor.pid, signal.SIGINT)
        _out, err = auditor.communicate(timeout=120)
        assert auditor.returncode == 130, err
        assert len(err.splitlines()) == 1 and "interrupted by Ctrl-C" in err, err
        for pid in attackers:
            _wait_for(lambda pid=pid: _ended(pid), f"attacker {pid} to end")
        assert list(scratch.iterdir()) == []
    finally:
        auditor.kill()
        auditor.communicate()


#: A server that runs only once at a time (it holds a lock for its life), as some do
#: (a fixed port, a lock file): the lanes whose server will not start retire, and the
#: first lane runs every case.
SINGLE_INSTANCE = """
import fcntl, os, sys
lock = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
try:
    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
except BlockingIOError:
    sys.exit("another instance holds the lock")
os.set_inheritable(lock, True)
os.execv(sys.executable, [sys.executable, "-m", "sandboxfs", sys.argv[2]])
"""


def test_lanes_whose_server_will_not_start_retire_and_the_others_run_every_case(
    tmp_path: Path,
) -> None:
    script = tmp_path / "single.py"
    script.write_text(SINGLE_INSTANCE)
    code, output, results = _audit(
        tmp_path,
        "--quick",
        "--jobs",
        "3",
        "--category",
        "symlinks",
        server=[sys.executable, str(script), str(tmp_path / "lock"), "{root}"],
    )
    assert code == 0, output
    assert len(results) == 12 and {r["status"] for r in results} == {"PASS"}, output
    assert "another instance holds the lock" in (tmp_path / "server.log").read_text()


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--timeout", "nan"),
        ("--timeout", "inf"),
        ("--timeout", "-1"),
        ("--timeout", "0"),
        ("--jobs", "0"),
        ("--jobs", "-3"),
        ("--jobs", "1.5"),
        ("--max-memory-growth", "-1"),
        ("--max-memory-growth", "inf"),
    ],
)
def test_every_number_of_the_audit_is_finite_and_in_range(option: str, value: str) -> None:
    """Issue 26: a number that is not finite or not in range is a usage error (exit 2,
    one line naming the option), before any server is started."""
    run = subprocess.run(
        [sys.executable, "-m", "sandboxfs", "audit", option, value, "--", "/nonexistent", "{root}"],
        capture_output=True,
        text=True,
        env=server_env(),
        timeout=120,
    )
    assert run.returncode == 2, run.stderr
    assert f"argument {option}:" in run.stderr.splitlines()[-1]
    assert "Traceback" not in run.stderr
