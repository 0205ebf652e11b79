"""The tenants' front at runtime: under a read-only root filesystem, and on Ctrl-C.

With ``/tmp`` and ``/var/tmp`` read-only (the pod's and the image's read-only
root filesystem, made here in a private mount namespace), the front makes its
workers' socket directory where the operator says (``--run-dir``, or
``$XDG_RUNTIME_DIR``: a writable volume, here a tmpfs as an ``emptyDir`` is),
serves its tenants, and removes it on the way out; with nowhere writable it
refuses to start in one line naming the option to give.  Ctrl-C (SIGINT to the
front's process group, as a terminal sends it) stops the workers, removes the
run directory and exits 130 with one line.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from sidecar_helpers import free_port, wait_healthy
from test_tenants import TOKEN_A, Front, _alive, _wait, tenants_toml

from mcp_client import SERVER, server_env
from sandboxfs.cli.main import main
from sandboxfs.tenancy.config import hash_token
from sandboxfs.tenancy.proxy import MAX_RUNDIR_BASE, RunDirError, make_rundir

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")


def can_unshare() -> bool:
    if os.geteuid() != 0:
        return False
    probe = ["unshare", "-m", "--propagation", "private", "sh", "-c", "mount --bind / /mnt"]
    try:
        return subprocess.run(probe, capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


needs_mount_namespace = pytest.mark.skipif(
    not can_unshare(), reason="needs root and unshare -m (a private mount namespace)"
)


def read_only_tmp(argv: list[str], volume: Path | None = None) -> list[str]:
    """``argv`` in a private mount namespace where /tmp and /var/tmp are read-only (and
    ``volume``, if given, is a fresh writable tmpfs, as an emptyDir would be)."""
    steps = [
        f"mount --bind {shlex.quote(d)} {shlex.quote(d)} && mount -o remount,bind,ro {d}"
        for d in ("/tmp", "/var/tmp")
    ]
    if volume is not None:
        steps.append(f"mount -t tmpfs -o mode=0755 tmpfs {shlex.quote(str(volume))}")
    script = " && ".join([*steps, 'exec "$@"'])
    return ["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh", *argv]


def _tenant(tmp_path: Path) -> tuple[Path, Path]:
    served = tmp_path / "served"
    served.mkdir()
    (served / "a.txt").write_text("served under a read-only /tmp\n")
    tenants_file = tmp_path / "tenants.toml"
    tenants_file.write_text(
        tenants_toml(
            {"name": "a", "token_sha256": hash_token(TOKEN_A), "directories": [str(served)]}
        )
    )
    return served, tenants_file


def _environment(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = server_env(extra)
    if extra is None or "XDG_RUNTIME_DIR" not in extra:
        env.pop("XDG_RUNTIME_DIR", None)
    env.pop("TMPDIR", None)
    return env


@contextmanager
def started(
    tmp_path: Path, command: list[str], env: dict[str, str], port: int, *, new_session: bool
) -> Iterator[Front]:
    served, tenants_file = _tenant(tmp_path)
    log = tmp_path / "front.log"
    with log.open("wb") as errlog:
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=errlog,
            env=env,
            start_new_session=new_session,
        )
    try:
        wait_healthy(port, process, log)
        f = Front(process, port, log, tenants_file, served, served)
        # Ready, and done saying so: the worker's last startup line has been relayed.
        _wait(
            lambda: "tenant a: sandboxfs serving MCP on" in f.log_text() or not _alive(process.pid)
        )
        _wait(lambda: bool(f.ready_pids("a")) or "starts in a row" in f.log_text())
        yield f
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()


def _front_argv(tmp_path: Path, port: int, *extra: str) -> list[str]:
    tenants_file = tmp_path / "tenants.toml"
    return [
        *SERVER,
        "--tenants",
        str(tenants_file),
        "--http",
        f"127.0.0.1:{port}",
        "--log-format",
        "text",
        *extra,
    ]


def _rundir(f: Front) -> str:
    found = re.search(r"workers' sockets in (\S+)", f.log_text())
    assert found is not None, f.log_text()
    return found[1]


@needs_mount_namespace
@pytest.mark.parametrize("where", ["--run-dir", "XDG_RUNTIME_DIR"])
def test_tenants_are_served_under_a_read_only_tmp(tmp_path: Path, where: str) -> None:
    volume = tmp_path / "v"  # short: a unix socket path is short
    volume.mkdir()
    port = free_port()
    extra = ("--run-dir", str(volume)) if where == "--run-dir" else ()
    env = _environment({"XDG_RUNTIME_DIR": str(volume)} if where != "--run-dir" else None)
    command = read_only_tmp(_front_argv(tmp_path, port, *extra), volume)
    with started(tmp_path, command, env, port, new_session=False) as f:
        assert "Traceback" not in f.log_text()
        assert f.text(TOKEN_A, "read_text_file", path=str(f.a / "a.txt")).startswith("served")
        rundir = _rundir(f)
        assert rundir.startswith(f"{volume}/sandboxfs-")
        f.process.send_signal(signal.SIGTERM)
        assert f.process.wait(timeout=60) == 0
    # The namespace (and its tmpfs) went with the front: the directory was in there.
    assert not os.path.exists(rundir)


@needs_mount_namespace
def test_nowhere_writable_is_one_line_naming_the_option(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    _tenant(tmp_path)
    # Under /tmp (read-only in the namespace), and short whatever pytest's numbering has
    # reached: a path too long for the sockets would be refused for that reason first.
    read_only = Path(tempfile.mkdtemp(prefix="ro-", dir="/tmp"))
    request.addfinalizer(lambda: shutil.rmtree(read_only, ignore_errors=True))
    cases = [
        ([], "nowhere to make the workers' socket directory (/tmp: Read-only file system; "
         "/var/tmp: Read-only file system): give --run-dir DIR, a writable directory (in a pod, "
         "an emptyDir volume)"),
        (["--run-dir", str(read_only)], f"--run-dir {read_only}: cannot make the workers' "
         "socket directory there: Read-only file system"),
    ]  # fmt: skip
    for extra, message in cases:
        command = read_only_tmp(_front_argv(tmp_path, free_port(), *extra))
        done = subprocess.run(command, capture_output=True, text=True, env=_environment())
        assert done.returncode == 1, done.stderr
        assert done.stderr == f"sandboxfs: error: {message}\n", done.stderr
    assert os.listdir(read_only) == []


def test_ctrl_c_stops_the_workers_removes_the_run_directory_and_exits_130(
    tmp_path: Path,
) -> None:
    port = free_port()
    command = _front_argv(tmp_path, port, "--run-dir", str(tmp_path))
    with started(tmp_path, command, _environment(), port, new_session=True) as f:
        worker = f.pid("a")
        rundir = _rundir(f)
        assert os.listdir(rundir) == ["1.sock"]
        before = len(f.log_text())
        os.killpg(f.process.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
        assert f.process.wait(timeout=60) == 130
        said = f.log_text()[before:]
    assert said == "sandboxfs: interrupted\n", said
    _wait(lambda: not _alive(worker))
    assert not os.path.exists(rundir)


def test_run_dir_only_applies_with_tenants(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--http", "127.0.0.1:1", "--run-dir", str(tmp_path), str(tmp_path)]) == 2
    assert "--run-dir only applies with --tenants" in capsys.readouterr().err


def test_the_run_directory_fits_a_unix_socket_address(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker's socket is RUNDIR/N.sock, and a unix socket's path has 107 bytes: a
    base too long for it is refused with --run-dir, and passed over otherwise."""
    deep = tmp_path / ("d" * (MAX_RUNDIR_BASE - len(str(tmp_path))))
    deep.mkdir()
    with pytest.raises(RunDirError, match=r"too long a path for the workers' unix sockets"):
        make_rundir(str(deep))
    fits = tmp_path / "run"
    fits.mkdir()
    made = make_rundir(str(fits))
    assert len(os.fsencode(f"{made}/9999999999.sock")) <= 107
    assert os.stat(made).st_mode & 0o777 == 0o700
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(deep))
    monkeypatch.setenv("TMPDIR", str(fits))
    assert os.path.dirname(make_rundir()) == str(fits)  # the next place that fits
