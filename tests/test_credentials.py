"""Weak credentials are refused unless an explicit option accepts them for tests, and
the empty token is never a credential (issue 26).

A token under 16 bytes, a token file its group or others may read, a tenants hash
of a well-known test token: refused, unless ``--allow-weak-tokens`` (which logs a
loud warning, and which no production default sets).  The hash of the empty
string: refused whatever the options, and an empty bearer token authenticates
nobody, in the front's comparison too.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import tempfile
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers import Tree, run_as_nobody
from mcp_client import SERVER, said, server_env
from sandboxfs.cli.arguments import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    Arguments,
    Refused,
    parse_arguments,
)
from sandboxfs.cli.config import build
from sandboxfs.transports.credentials import (
    EMPTY_SHA256,
    MIN_TOKEN_BYTES,
    WEAK_WARNING,
    WeakCredential,
    read_token_file,
)
from sandboxfs.transports.front import Front, _reload
from sandboxfs.transports.tenants import Tenant, Tenants, TenantsError, parse_tenants

ROOT = Path(__file__).resolve().parent.parent
STRONG = "f3b1c2d4e5f60718293a4b5c6d7e8f90"
SHORT = "s3cr3t-but-short"[: MIN_TOKEN_BYTES - 1]


def _decide(*argv: str, env: dict[str, str] | None = None) -> object:
    try:
        return build(parse_arguments(list(argv)), env or {})
    except Refused as exc:
        return exc


def _token_file(directory: Path, token: str, mode: int) -> Path:
    path = directory / "token"
    path.write_text(token + "\n")
    path.chmod(mode)
    return path


# -- tokens of one server ------------------------------------------------------------------


@pytest.mark.parametrize("token", [SHORT, "test", "changeme", "password"])
def test_a_weak_token_in_the_environment_is_refused(tree: Tree, token: str) -> None:
    argv = ("--http", "127.0.0.1:0", str(tree.root))
    refused = _decide(*argv, env={"SANDBOXFS_TOKEN": token})
    assert isinstance(refused, Refused) and refused.status == EXIT_USAGE
    assert "SANDBOXFS_TOKEN" in str(refused) and "--allow-weak-tokens" in str(refused)
    assert SHORT not in str(refused)  # a token is never echoed
    accepted = _decide(*argv, "--allow-weak-tokens", env={"SANDBOXFS_TOKEN": token})
    assert not isinstance(accepted, Refused)


def test_a_token_of_sixteen_bytes_is_enough(tree: Tree) -> None:
    token = "x7" * (MIN_TOKEN_BYTES // 2)
    decided = _decide("--http", "127.0.0.1:0", str(tree.root), env={"SANDBOXFS_TOKEN": token})
    assert not isinstance(decided, Refused)


@pytest.mark.parametrize(
    ("mode", "refused"),
    [(0o600, False), (0o400, False), (0o640, True), (0o604, True), (0o644, True), (0o660, True)],
)
def test_a_token_file_others_may_read_is_refused(
    tree: Tree, tmp_path: Path, mode: int, refused: bool
) -> None:
    path = _token_file(tmp_path, STRONG, mode)
    argv = ("--http", "127.0.0.1:0", "--token-file", str(path), str(tree.root))
    decided = _decide(*argv)
    assert isinstance(decided, Refused) == refused, decided
    if refused:
        assert isinstance(decided, Refused)
        assert f"mode {mode:04o}" in str(decided) and "chmod 600" in str(decided)
        assert not isinstance(_decide(*argv, "--allow-weak-tokens"), Refused)


def test_a_short_token_in_a_private_file_is_refused(tree: Tree, tmp_path: Path) -> None:
    path = _token_file(tmp_path, SHORT, 0o600)
    decided = _decide("--http", "127.0.0.1:0", "--token-file", str(path), str(tree.root))
    assert isinstance(decided, Refused) and f"under {MIN_TOKEN_BYTES}" in str(decided)


@pytest.mark.parametrize("token", ["två-tokens-i-en-fil-0123456789", "two words 0123456789abcdef"])
def test_a_token_no_client_could_send_is_refused_even_for_tests(token: str) -> None:
    with tempfile.TemporaryDirectory() as private:
        path = Path(private) / "token"
        path.write_bytes(token.encode() + b"\n")
        path.chmod(0o600)
        with pytest.raises(WeakCredential):
            read_token_file(str(path), allow_weak=True)


@pytest.fixture
def reachable() -> Iterator[Path]:
    """A directory an ordinary user can reach."""
    path = Path(tempfile.mkdtemp(prefix="sandboxfs-credentials-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_a_secret_volume_file_of_our_group_is_accepted_and_nothing_wider(
    reachable: Path,
) -> None:
    """What the kubelet makes of a Secret mounted for the pod's fsGroup: owned by root,
    group the pod's, mode 0440 whatever defaultMode says.  The server (uid/gid 65534
    here) cannot make it tighter; others still may not read it, and a file the server
    owns itself must be 0600."""
    path = _token_file(reachable, STRONG, 0o440)
    os.chown(path, 0, 65534)

    def read() -> str:
        return read_token_file(str(path), allow_weak=False)

    assert run_as_nobody(read) == STRONG
    path.chmod(0o444)
    with pytest.raises(WeakCredential, match="others may read it"):
        run_as_nobody(read)
    path.chmod(0o440)
    os.chown(path, 65534, 65534)  # its own file: it could chmod 600 it
    with pytest.raises(WeakCredential, match="its group may read it"):
        run_as_nobody(read)


def test_allow_weak_tokens_is_loud_and_only_serves_what_it_says(tree: Tree) -> None:
    process = subprocess.Popen(
        [*SERVER, "--http", "127.0.0.1:0", "--allow-weak-tokens", str(tree.root)],
        stderr=subprocess.PIPE,
        text=True,
        env=server_env({"SANDBOXFS_TOKEN": "test"}),
    )
    assert process.stderr is not None
    try:
        seen = []
        for line in process.stderr:
            seen.append(line)
            if "serving MCP on " in line:
                break
        url = said(seen[-1]).rpartition(" ")[2].strip()
        with urllib.request.urlopen(url.removesuffix("/mcp") + "/healthz", timeout=60) as answer:
            assert answer.status == 200
        assert WEAK_WARNING in [said(line) for line in seen]
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == EXIT_OK
        process.stderr.close()


def test_no_production_default_accepts_weak_tokens() -> None:
    assert Arguments().allow_weak_tokens is False
    shipped = [ROOT / "Dockerfile", *(ROOT / "deploy").rglob("*.yaml"), ROOT / ".ci" / "run"]
    for path in shipped:
        assert "--allow-weak-tokens" not in path.read_text(), path
    for path in (ROOT / "sandboxfs").rglob("*.py"):
        text = path.read_text()
        if "--allow-weak-tokens" in text:  # only where it is parsed and explained
            where = ("arguments.py", "credentials.py", "environment.py", "hashtoken.py")
            assert path.name in where, path


# -- tenants -------------------------------------------------------------------------------


def _tenants(digest: str, *, allow_weak: bool = False) -> Tenants:
    document = {"tenant": [{"name": "a", "token_sha256": digest, "directories": ["/srv/a"]}]}
    return parse_tenants(document, "t.toml", allow_weak=allow_weak)


@pytest.mark.parametrize("allow_weak", [False, True])
def test_the_empty_tokens_hash_is_never_a_tenants_credential(allow_weak: bool) -> None:
    assert hashlib.sha256(b"").hexdigest() == EMPTY_SHA256
    for digest in (EMPTY_SHA256, EMPTY_SHA256.upper()):
        with pytest.raises(TenantsError, match="SHA-256 of the empty string"):
            _tenants(digest, allow_weak=allow_weak)


@pytest.mark.parametrize("word", ["test", "test2", "token", "secret", "password", "changeme"])
def test_a_well_known_test_tokens_hash_is_refused_unless_accepted_for_tests(word: str) -> None:
    digest = hashlib.sha256(word.encode()).hexdigest()
    with pytest.raises(TenantsError, match=f"well-known test token {word!r}"):
        _tenants(digest)
    assert _tenants(digest, allow_weak=True).authenticate(word) is not None


def test_an_empty_bearer_token_authenticates_nobody_in_the_front() -> None:
    """Even a Tenants holding the empty token's hash (never loaded from a file) lets
    `Authorization: Bearer` with nothing after it through neither check."""
    tenant = Tenant(name="a", token_sha256=EMPTY_SHA256, directories=("/srv/a",))
    tenants = Tenants({"a": tenant})
    front = Front(tenants, workers=None, policy=None)  # type: ignore[arg-type]
    for presented in ("", " ", "\t"):
        assert tenants.authenticate(presented) is None
        assert not front.authenticate(presented)


def test_the_command_line_refuses_a_weak_tenants_file(tmp_path: Path) -> None:
    path = tmp_path / "tenants.toml"
    digest = hashlib.sha256(b"test").hexdigest()
    path.write_text(f'[[tenant]]\nname = "a"\ntoken_sha256 = "{digest}"\ndirectories = ["/x"]\n')
    refused = _decide("--tenants", str(path), "--http", "127.0.0.1:0")
    assert isinstance(refused, Refused) and refused.status == EXIT_USAGE
    assert "well-known test token" in str(refused)
    accepted = _decide("--tenants", str(path), "--http", "127.0.0.1:0", "--allow-weak-tokens")
    assert not isinstance(accepted, Refused)
    path.write_text(
        f'[[tenant]]\nname = "a"\ntoken_sha256 = "{EMPTY_SHA256}"\ndirectories = ["/x"]\n'
    )
    never = _decide("--tenants", str(path), "--http", "127.0.0.1:0", "--allow-weak-tokens")
    assert isinstance(never, Refused) and "empty string" in str(never)


# -- hash-token and the subcommands' help ----------------------------------------------------


def _cli(*argv: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [*SERVER, *argv], input=stdin, capture_output=True, env=server_env(), timeout=60
    )


def test_hash_token_hashes_the_token_in_a_file(tmp_path: Path) -> None:
    path = _token_file(tmp_path, STRONG, 0o600)
    done = _cli("hash-token", str(path))
    assert done.returncode == EXIT_OK, done.stderr
    assert done.stdout.decode() == hashlib.sha256(STRONG.encode()).hexdigest() + "\n"
    assert _cli("hash-token", stdin=STRONG.encode()).stdout == done.stdout


def test_hash_token_refuses_what_could_never_be_used(tmp_path: Path) -> None:
    weak = _token_file(tmp_path, "test", 0o600)
    refused = _cli("hash-token", str(weak))
    assert refused.returncode == EXIT_FAILED and b"well-known test token" in refused.stderr
    accepted = _cli("hash-token", "--allow-weak-tokens", str(weak))
    assert accepted.stdout.decode().strip() == hashlib.sha256(b"test").hexdigest()
    exposed = _token_file(tmp_path, STRONG, 0o644)
    assert b"chmod 600" in _cli("hash-token", str(exposed)).stderr
    missing = _cli("hash-token", str(tmp_path / "none"))
    assert missing.returncode == EXIT_FAILED and b"cannot read" in missing.stderr
    assert _cli("hash-token", "a", "b").returncode == EXIT_USAGE
    for done in (refused, missing):
        assert len(done.stderr.splitlines()) == 1 and b"Traceback" not in done.stderr


@pytest.mark.parametrize("command", ["hash-token", "workspaces"])
@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_subcommands_print_their_help(command: str, flag: str) -> None:
    done = _cli(command, flag)
    assert done.returncode == EXIT_OK, done.stderr
    assert done.stdout.decode().startswith(f"usage: sandboxfs {command} ")
    assert b"exit status:" in done.stdout and done.stderr == b""


@pytest.mark.parametrize("allow_weak", [False, True])
def test_a_reload_reads_the_tenants_file_under_the_rule_it_was_started_with(
    tmp_path: Path, allow_weak: bool
) -> None:
    """SIGHUP re-reads the file as the front read it at startup: a front started with
    --allow-weak-tokens keeps accepting a test token's hash, one without it refuses."""
    path = tmp_path / "tenants.toml"
    digest = hashlib.sha256(b"test").hexdigest()
    path.write_text(
        f'[[tenant]]\nname = "b"\ntoken_sha256 = "{digest}"\ndirectories = ["/srv/b"]\n'
    )
    strong = Tenant(name="a", token_sha256="0" * 64, directories=("/srv/a",))
    front = Front(Tenants({"a": strong}, allow_weak=allow_weak), workers=None, policy=None)  # type: ignore[arg-type]
    _reload(front, str(path))
    assert set(front.tenants.by_name) == ({"b"} if allow_weak else {"a"})
    assert front.tenants.allow_weak is allow_weak
