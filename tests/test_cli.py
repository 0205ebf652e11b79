"""The command line as a newcomer meets it: -h and -V, one clear line for every
problem and a documented exit status, never a traceback; options that would do
nothing are refused; the URL announced is the one that works; the log speaks to
the operator."""

from __future__ import annotations

import importlib.metadata
import json
import re
import signal
import socket
import subprocess
import tomllib
import urllib.request
from pathlib import Path

import pytest

from helpers import Tree
from mcp_client import PATCHED, SERVER, run, said, server_env, session
from sandboxfs import __version__
from sandboxfs.cli.arguments import EXIT_FAILED, EXIT_USAGE, help_text
from sandboxfs.cli.main import main


def _run(
    *args: str, env: dict[str, str] | None = None, patches: str | None = None
) -> subprocess.CompletedProcess[str]:
    command = SERVER if patches is None else [*PATCHED, patches]
    return subprocess.run(
        [*command, *args], input="", capture_output=True, text=True, env=server_env(env), timeout=60
    )


@pytest.mark.parametrize("flag", ["-h", "--help"])
def test_help(flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([flag]) == 0
    out = capsys.readouterr().out
    assert out.strip() == help_text()
    assert "exit status:" in out and "-V, --version" in out


@pytest.mark.parametrize("flag", ["-V", "--version"])
def test_version(flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([flag]) == 0
    assert capsys.readouterr().out == f"sandboxfs {__version__}\n"


def test_the_version_is_the_one_pyproject_states() -> None:
    pyproject = tomllib.loads(
        (Path(__file__).resolve().parent.parent / "pyproject.toml").read_text()
    )
    assert __version__ == pyproject["project"]["version"]
    assert __version__ == importlib.metadata.version("sandboxfs")  # as installed


USAGE_ERRORS = {
    ("--bogus", "DIR"): "unknown option --bogus",
    ("-x", "DIR"): "unknown option -x",
    ("--http", "127.0.0.1:99999", "DIR"): "port 99999 is out of range",
    ("--http", "::1:8080", "DIR"): "put an IPv6 address in brackets, as in [::1]:8080",
    ("--http", "[nonsense]:80", "DIR"): "is not an IPv6 address",
    ("--http", "8080", "DIR"): "--http needs HOST:PORT",
    ("--http", "127.0.0.1:1", "--unix", "/tmp/s", "DIR"): "cannot be combined",
    ("--http", "127.0.0.1:1"): "needs at least one directory",
    ("--token-file", "t", "DIR"): "--token-file only applies when serving HTTP",
    ("--allowed-host", "h", "DIR"): "--allowed-host only applies when serving HTTP",
    ("--allowed-origin", "o", "DIR"): "--allowed-origin only applies when serving HTTP",
    ("--shutdown-grace", "5", "DIR"): "--shutdown-grace only applies when serving HTTP",
    ("--json-response", "DIR"): "--json-response only applies when serving HTTP",
    ("--http", "127.0.0.1:1", "--confine-roots", "DIR"): "HTTP never uses client Roots",
    ("--confine-roots",): "--confine-roots needs command-line directories",
    ("--require-landlock",): "--require-landlock needs command-line directories",
    ("--no-landlock", "--require-landlock", "DIR"): "contradict each other",
    ("--max-read-bytes", "0", "DIR"): "--max-read-bytes must be from 1 to",
    ("--max-read-bytes", "lots", "DIR"): "--max-read-bytes needs a whole number",
    ("--fs-timeout", "nan", "DIR"): "--fs-timeout needs a number from 0.001 to 86400",
    ("--http", "127.0.0.1:1", "--http", "127.0.0.1:2", "DIR"): "--http was given twice",
    ("--read-only", "--", ""): "an empty argument is no directory",
    ("--log-level", "loud", "DIR"): "--log-level must be one of",
    ("--http",): "--http needs a value",
    ("--read-only=yes", "DIR"): "--read-only takes no value",
}


@pytest.mark.parametrize("argv", sorted(USAGE_ERRORS))
def test_a_usage_error_is_the_one_problem_and_see_help(
    argv: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(list(argv)) == EXIT_USAGE
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 2 and lines[1] == "see 'sandboxfs --help'", captured.err
    assert lines[0].startswith("sandboxfs: error: ") and USAGE_ERRORS[argv] in lines[0]
    assert captured.out == ""


def _one_line_failure(result: subprocess.CompletedProcess[str], expected: str) -> None:
    assert result.returncode == EXIT_FAILED, result.stderr
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("sandboxfs: error:")]
    assert len(errors) == 1 and expected in errors[0], result.stderr


def test_startup_failures_are_one_line_and_status_1(tree: Tree, tmp_path: Path) -> None:
    (tree.root / "file").write_text("x")
    _one_line_failure(_run(str(tree.base / "missing")), "does not exist")
    _one_line_failure(_run(str(tree.root / "file")), "is not a directory")
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    try:
        result = _run("--http", f"127.0.0.1:{port}", str(tree.root))
        _one_line_failure(result, f"cannot listen on http://127.0.0.1:{port}/mcp")
        assert "in use" in result.stderr
    finally:
        taken.close()
    result = _run("--http", "127.0.0.1:0", "--token-file", str(tmp_path / "none"), str(tree.root))
    _one_line_failure(result, "cannot read --token-file")
    result = _run("--audit-log", str(tmp_path / "no" / "such" / "log"), str(tree.root))
    _one_line_failure(result, "cannot open the audit log")
    _one_line_failure(
        _run("--require-landlock", str(tree.root), patches="landlock-abi=0"), "--require-landlock"
    )


def _announced(process: subprocess.Popen[str]) -> str:
    assert process.stderr is not None
    for line in process.stderr:
        found = re.search(r"serving MCP on (\S+)", said(line))
        if found:
            return found.group(1)
    raise AssertionError("the server never said where it listens")


@pytest.mark.parametrize("host", ["127.0.0.1", "[::1]"])
def test_the_announced_url_is_the_one_that_works(tree: Tree, host: str) -> None:
    if host == "[::1]" and not socket.has_ipv6:
        pytest.skip("no IPv6 here")
    process = subprocess.Popen(
        [*SERVER, "--http", f"{host}:0", str(tree.root)],
        stderr=subprocess.PIPE,
        text=True,
        env=server_env(),
    )
    try:
        url = _announced(process)
        assert re.fullmatch(rf"http://{re.escape(host)}:[1-9][0-9]*/mcp", url), url
        health = url.removesuffix("/mcp") + "/healthz"
        with urllib.request.urlopen(health, timeout=30) as answer:
            assert answer.status == 200
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)
        assert process.stderr is not None
        process.stderr.close()


def test_the_log_speaks_to_the_operator(tree: Tree) -> None:
    async def main_() -> None:
        async with session(str(tree.root), era="2025") as s:
            await s.text("list_allowed_directories")
            await s.text("list_directory", path=".")
            log = s.log()
        for internal in ("fast lane", "SDK", "dispatcher"):
            assert internal.lower() not in log.lower(), log
        assert f"sandboxfs {__version__} serving MCP on stdio" in log

    run(main_)


# The SDK's HTTP client leaves SSE generators to the garbage collector (as in test_sidecar).
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_over_http_nothing_speaks_of_roots_or_sessions(tree: Tree) -> None:
    from sidecar_helpers import http_client, sidecar  # noqa: PLC0415

    async def main_(url: str) -> None:
        async with http_client(url, "2025") as client:
            listed = await client.call_tool("list_allowed_directories", {})
            assert "Roots" not in json.dumps(listed.structured_content)
            await client.call_tool("list_directory", {"path": "."})

    with sidecar(str(tree.root), tmp=tree.base) as s:
        run(lambda: main_(s.url))
        log = s.log.read_text()
    assert "Terminating session" not in log and "session" not in log.lower(), log
