"""The configuration decided whole (issue 26): what each failure of the issue became.

Rules given without directories reach the directories a client's Roots name; a
policy file without ``[[directory]]`` no longer slips past ``--require-landlock``
or serves nothing over HTTP; numbers that crashed the server are refused; the
startup line says what is served, and list_allowed_directories agrees.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import trio

from helpers import Tree
from mcp_client import SERVER, Roots, run, said, server_env, session
from sandboxfs.cli.arguments import EXIT_USAGE, Refused, parse_arguments
from sandboxfs.cli.config import Config, build
from sandboxfs.cli.serve import access_control
from sandboxfs.session.dispatcher import SandboxfsServer, ServerOptions
from sandboxfs.session.effects import Caller

SECRET = "KEY=CANARY-never-read\n"
POLICY_TOP_LEVEL_ONLY = 'preset = ["secrets"]\nhide = ["*.log"]\nprotect = ["keep.txt"]\n'


def _config(*argv: str, env: dict[str, str] | None = None) -> Config:
    return build(parse_arguments(list(argv)), env or {})


def _refusal(*argv: str, env: dict[str, str] | None = None) -> Refused:
    with pytest.raises(Refused) as refused:
        _config(*argv, env=env)
    return refused.value


def _fill(root: Path) -> None:
    (root / ".env").write_text(SECRET)
    (root / "app.log").write_text(SECRET)
    (root / "keep.txt").write_text("keep\n")
    (root / "notes.txt").write_text("notes\n")


@pytest.fixture
def policy_file(tmp_path: Path) -> Path:
    path = tmp_path / "p.toml"
    path.write_text(POLICY_TOP_LEVEL_ONLY)
    return path


def _rules_argv(kind: str, policy_file: Path) -> list[str]:
    if kind == "policy-file":
        return ["--policy", str(policy_file)]
    return ["--preset", "secrets", "--hide", "*.log", "--protect", "keep.txt"]


@pytest.mark.parametrize("kind", ["policy-file", "options"])
def test_client_roots_carry_the_rules_given_without_directories(
    tree: Tree, policy_file: Path, kind: str
) -> None:
    """The issue's `--policy p.toml` (top-level rules only) served a client's Roots
    with no policy: `.env` and `app.log` were read in full.  Here the server is wired
    as the CLI wires it, and a Roots answer names the tree."""
    _fill(tree.root)
    config = _config(*_rules_argv(kind, policy_file))
    assert config.roots == "replace" and config.directories == ()
    server = SandboxfsServer(ServerOptions(), access_control(config, [], landlocked=False))
    caller = Caller("2025-11-25")

    async def main() -> None:
        await server.open_roots([tree.root.as_uri()])
        assert server.access.current.allow.display() == [str(tree.root)]

        async def call(tool: str, **arguments: str) -> dict[str, object]:
            return dict(await server.run_tool(tool, arguments, caller))

        read = await call("read_text_file", path=str(tree.root / "notes.txt"))
        assert not read["isError"]
        for hidden in (".env", "app.log"):
            answer = await call("read_text_file", path=str(tree.root / hidden))
            assert answer["isError"] and "CANARY" not in str(answer), answer
        listed = await call("list_directory", path=str(tree.root))
        assert ".env" not in str(listed) and "app.log" not in str(listed)
        changed = await call("write_file", path=str(tree.root / "keep.txt"), content="gone")
        assert changed["isError"], changed
        allowed = await call("list_allowed_directories")
        assert "carries rules" in str(allowed)

    trio.run(main)
    assert (tree.root / "keep.txt").read_text() == "keep\n"


def test_read_only_reaches_client_roots(tree: Tree) -> None:
    config = _config("--read-only")
    assert config.roots == "replace" and not config.roots_policy.writable
    assert config.read_only


def test_the_issues_policy_file_over_stdio_end_to_end(tree: Tree, policy_file: Path) -> None:
    """The issue's reproduction: a 2025-era client's Roots under `--policy p.toml`."""
    _fill(tree.root)
    roots = Roots([str(tree.root)])

    async def main() -> None:
        async with session("--policy", str(policy_file), era="2025", roots=roots) as s:
            listed = await s.call("list_allowed_directories")
            assert listed.structured_content is not None
            assert listed.structured_content["directories"] == [str(tree.root)]
            for hidden in (".env", "app.log"):
                said = await s.error("read_text_file", path=str(tree.root / hidden))
                assert "CANARY" not in said
            await s.error("write_file", path=str(tree.root / "keep.txt"), content="x")
            assert await s.text("read_text_file", path=str(tree.root / "notes.txt")) == "notes\n"
            log = s.log()
        line = _configuration_line(log)
        assert "client Roots: name the directories served, each read-write, " in line
        assert "Landlock: not applied" in line

    run(main)
    assert (tree.root / "keep.txt").read_text() == "keep\n"


def _configuration_line(log: str) -> str:
    lines = [said(line) for line in log.splitlines() if said(line).startswith("Configuration: ")]
    assert len(lines) == 1, log
    return lines[0]


def test_the_startup_line_names_what_list_allowed_directories_lists(
    tree: Tree, tmp_path: Path
) -> None:
    other = tmp_path / "other"
    other.mkdir()
    policy = tmp_path / "dirs.toml"
    policy.write_text(f'hide = ["*.log"]\n[[directory]]\npath = "{other}"\nmode = "ro"\n')

    async def main() -> None:
        async with session(str(tree.root), "--policy", str(policy), era="2026") as s:
            listed = await s.call("list_allowed_directories")
            log = s.log()
        assert listed.structured_content is not None
        served = listed.structured_content["directories"]
        line = _configuration_line(log)
        named = re.findall(r"(/\S+) \((read-\w+)[^)]*\)", line)
        assert [path for path, _ in named] == served == [str(tree.root), str(other)]
        assert [mode for _, mode in named] == ["read-write", "read-only"]
        notes = " ".join(listed.structured_content["notes"])
        assert f"{other} is read-only" in notes and "hidden by policy" in notes
        assert "client Roots: not used" not in line  # stdio: Roots may narrow

    run(main)


def _one_line_refusal(result: subprocess.CompletedProcess[str], *expected: str) -> None:
    assert result.returncode == EXIT_USAGE, result.stderr
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("sandboxfs: error:")]
    assert len(errors) == 1, result.stderr
    for text in expected:
        assert text in errors[0], result.stderr


def _run(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SERVER, *argv],
        input="",
        capture_output=True,
        text=True,
        env=server_env(env),
        timeout=60,
    )


def test_a_policy_without_directories_never_slips_past_require_landlock_or_http(
    policy_file: Path,
) -> None:
    """`--policy p.toml --require-landlock` with only top-level rules served Roots with
    no policy and no Landlock; over HTTP the same file served nothing."""
    _one_line_refusal(
        _run("--policy", str(policy_file), "--require-landlock"),
        "--require-landlock needs command-line directories",
        "Roots decide",
    )
    _one_line_refusal(
        _run("--policy", str(policy_file), "--http", "127.0.0.1:0"),
        "serving HTTP needs at least one directory",
    )
    _one_line_refusal(
        _run("--policy", str(policy_file), "--unix", "/tmp/never.sock"),
        "serving HTTP needs at least one directory",
    )
    assert "confine Roots to" in str(_refusal("--policy", str(policy_file), "--confine-roots"))


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--fs-timeout", "nan"),
        ("--max-search-seconds", "nan"),
        ("--fs-timeout", "inf"),
        ("--max-search-seconds", "-0.0"),
        ("--max-read-bytes", "1e3"),
        ("--max-tree-depth", "100000"),
    ],
)
def test_numbers_that_crashed_or_lied_are_refused_naming_the_option(
    tree: Tree, option: str, value: str
) -> None:
    """`--fs-timeout nan` ended the first tool call with TrioInternalError;
    `--max-search-seconds nan` answered "stopped after nan s"."""
    result = _run(option, value, str(tree.root))
    assert result.returncode == EXIT_USAGE
    assert result.stderr.startswith(f"sandboxfs: error: {option} ")
    assert "Traceback" not in result.stderr


def test_shutdown_grace_nan_is_refused(tree: Tree) -> None:
    result = _run("--shutdown-grace", "nan", "--http", "127.0.0.1:0", str(tree.root))
    assert result.returncode == EXIT_USAGE and "--shutdown-grace" in result.stderr


def test_roots_confinement_is_decided_by_the_configuration_not_the_kernel(tree: Tree) -> None:
    """With directories and Landlock not disabled, Roots only narrow them, whether the
    kernel turns out to have Landlock or not (the line says so before it is tried)."""
    assert _config(str(tree.root)).roots == "confine"
    assert _config("--no-landlock", str(tree.root)).roots == "replace"
    assert _config("--no-landlock", "--hide", "x", str(tree.root)).roots == "confine"
    assert _config("--no-landlock", "--confine-roots", str(tree.root)).roots == "confine"
    assert _config("--http", "127.0.0.1:0", str(tree.root)).roots == "unused"


def test_environment_variables_nothing_reads_are_refused(tree: Tree) -> None:
    token = {"SANDBOXFS_TOKEN": "a-strong-token-0123456789abcdef"}
    assert "stdio server takes no bearer token" in str(_refusal(str(tree.root), env=token))
    workspace = {"SANDBOXFS_WORKSPACE_ID": "alpha"}
    assert "no --workspaces BASE" in str(_refusal(str(tree.root), env=workspace))
    both = _refusal(
        "--http", "127.0.0.1:0", "--token-file", "/nonexistent", str(tree.root), env=token
    )
    assert "give one of them" in str(both)
    agree = _config("--workspaces", str(tree.base / "ws"), "--workspace-id", "alpha", env=workspace)
    assert agree.workspace_id == "alpha"
    differ = _refusal(
        "--workspaces", str(tree.base / "ws"), "--workspace-id", "beta", env=workspace
    )
    assert "disagree" in str(differ)


def test_token_file_beside_tenants_says_where_tokens_go(tmp_path: Path) -> None:
    """It spoke of a per-tenant key that does not exist."""
    refused = _refusal("--tenants", str(tmp_path / "t.toml"), "--http", ":0", "--token-file", "t")
    assert "token_sha256 in the tenants file" in str(refused)
    assert "per tenant" not in str(refused)


def _tenants_file(tmp_path: Path, extra: str) -> Path:
    path = tmp_path / "tenants.toml"
    digest = "5" * 64
    path.write_text(
        f'[[tenant]]\nname = "alice"\ntoken_sha256 = "{digest}"\n'
        f'directories = ["{tmp_path}"]\n{extra}'
    )
    return path


def test_a_tenant_that_could_never_start_refuses_the_front(tmp_path: Path) -> None:
    """Checked as its worker will check it, naming the tenant, instead of five failed
    starts and a tenant given up."""
    never = _tenants_file(tmp_path, f'workspaces = "{tmp_path / "ws"}"\nread_only = true\n')
    refused = _refusal("--tenants", str(never), "--http", "127.0.0.1:0")
    assert "tenant 'alice'" in str(refused) and "--workspaces with --read-only" in str(refused)
    bad_policy = tmp_path / "bad.toml"
    bad_policy.write_text("hide = 3\n")
    policy = _tenants_file(tmp_path, f'policy = "{bad_policy}"\n')
    assert "tenant 'alice'" in str(_refusal("--tenants", str(policy), "--http", ":0"))


def test_the_fronts_limits_reach_every_worker(tmp_path: Path) -> None:
    """A limit given to the front is the workers' limit (it used to stop at the front)."""
    path = _tenants_file(tmp_path, "")
    argv = ["--tenants", str(path), "--http", "127.0.0.1:0", "--require-landlock"]
    argv += ["--max-read-bytes", "1000", "--fs-timeout", "2.5", "--shutdown-grace", "3"]
    config = _config(*argv)
    assert config.worker_options == (
        "--require-landlock",
        "--max-read-bytes=1000",
        "--fs-timeout=2.5",
        "--shutdown-grace=3.0",
    )
    worker = parse_arguments(["--unix", "/x.sock", *config.worker_options, str(tmp_path)])
    assert worker.limits.read_bytes == 1000 and worker.serving.fs_timeout == 2.5
    assert worker.shutdown_grace == 3.0 and worker.require_landlock
