"""Workspaces (``--workspaces BASE``): a private 0700 directory per session, named stores
shared by all, resuming by id, the ``sandboxfs workspaces`` command, and isolation:
two sessions cannot reach each other's files by path, ``..``, symlink, Roots or race.

End to end through the real server with the MCP SDK client, over stdio and HTTP.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from sidecar_helpers import TOKEN, Sidecar, http_client, sidecar

from mcp_client import SERVER, Roots, Session, run, server_env, session
from sandboxfs.audit.attacker import AttackerProcess, prepare
from sandboxfs.core.allowlist import Root
from sandboxfs.fs.workspacebase import Base, check_name, parse_age

SECRET = "session-a-secret-0451"


def _directories(structured: dict[str, Any]) -> list[str]:
    return list(structured["directories"])


async def _allowed(s: Session) -> dict[str, Any]:
    result = await s.call("list_allowed_directories")
    assert not result.is_error
    assert result.structured_content is not None
    return dict(result.structured_content)


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SERVER, *args],
        capture_output=True,
        text=True,
        env=server_env(env),
        timeout=60,
        stdin=subprocess.DEVNULL,
        check=False,
    )


# -- names and ages ----------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["", ".", "..", "a/b", "a b", "x" * 65, "é", "a\0b"])
def test_bad_names_are_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="1 to 64 letters"):
        check_name(bad, "store name")


def test_ages() -> None:
    assert parse_age("30m") == 1800
    assert parse_age("12h") == 12 * 3600
    assert parse_age("7d") == 7 * 86400
    for bad in ("", "7", "d", "-1d", "1.5h", "3y"):
        with pytest.raises(ValueError, match="invalid age"):
            parse_age(bad)


# -- stdio: fresh, private, resumable ----------------------------------------------------


def test_a_session_gets_a_fresh_private_directory(tmp_path: Path) -> None:
    base = tmp_path / "base"

    async def main() -> None:
        async with session("--workspaces", str(base), era="2026") as s:
            allowed = await _allowed(s)
            mine, stores = _directories(allowed)[:2]
            assert Path(mine).parent == base / "sessions"
            assert stores == str(base / "stores")
            assert "your private workspace" in allowed["roles"][mine]
            assert "shared stores" in allowed["roles"][stores]
            assert stat.S_IMODE(os.stat(mine).st_mode) == 0o700
            assert stat.S_IMODE(os.stat(base).st_mode) == 0o700
            assert os.listdir(mine) == []
            await s.text("write_file", path="note.txt", content="relative goes here")
            assert (Path(mine) / "note.txt").read_text() == "relative goes here"
            names = {t.name for t in (await s.client.list_tools()).tools}
            assert {"list_stores", "create_store"} <= names

    run(main)


def test_the_same_id_resumes_the_session(tmp_path: Path) -> None:
    base = tmp_path / "base"

    async def main() -> None:
        async with session("--workspaces", str(base), "--workspace-id", "alpha") as s:
            await s.text("write_file", path="kept.txt", content="from session 1")
        async with session("--workspaces", str(base), env={"SANDBOXFS_WORKSPACE_ID": "alpha"}) as s:
            assert await s.text("read_text_file", path="kept.txt") == "from session 1"
            # A server holds its session: even --prune 0s leaves it (and its file) alone.
            pruned = _cli("workspaces", str(base), "--prune", "0s")
            assert pruned.returncode == 0, pruned.stderr
            assert "kept session alpha: in use" in pruned.stdout
            assert (base / "sessions" / "alpha" / "kept.txt").exists()
            assert _directories(await _allowed(s))[0] == str(base / "sessions" / "alpha")

    run(main)


def test_without_workspaces_nothing_changes(tmp_path: Path) -> None:
    async def main() -> None:
        async with session(str(tmp_path)) as s:
            names = {t.name for t in (await s.client.list_tools()).tools}
            assert "list_stores" not in names and "create_store" not in names
            assert "roles" not in await _allowed(s)
        async with session("--workspaces", str(tmp_path / "b"), "--read-only") as s:
            names = {t.name for t in (await s.client.list_tools()).tools}
            assert "list_stores" in names and "create_store" not in names
        # Read-only command-line directories leave the workspace writable.
        (tmp_path / "ro").mkdir()
        async with session("--workspaces", str(tmp_path / "b"), f"{tmp_path / 'ro'}:ro") as s:
            names = {t.name for t in (await s.client.list_tools()).tools}
            assert "create_store" in names
            await s.text("write_file", path="w.txt", content="writable")

    run(main)


# -- stdio: isolation --------------------------------------------------------------------


def test_two_stdio_sessions_cannot_reach_each_other(tmp_path: Path) -> None:
    base = tmp_path / "base"
    other_base = str(base / "sessions" / "bob")

    async def main() -> None:
        async with (
            session("--workspaces", str(base), "--workspace-id", "alice") as a,
            session("--workspaces", str(base), "--workspace-id", "bob", era="2025") as b,
        ):
            alice = base / "sessions" / "alice"
            await a.text("write_file", path="secret.txt", content=SECRET)
            (base / "sessions" / "bob" / "abs").symlink_to(alice)
            (base / "sessions" / "bob" / "rel").symlink_to("../alice")
            (base / "sessions" / "bob" / "file").symlink_to(alice / "secret.txt")
            attempts = [
                str(alice / "secret.txt"),
                f"{other_base}/../alice/secret.txt",
                "../alice/secret.txt",
                "abs/secret.txt",
                "rel/secret.txt",
                "file",
            ]
            for path in attempts:
                text = await b.error("read_text_file", path=path)
                assert SECRET not in text
            for path in (str(alice), "abs", "rel", str(base), str(base / "sessions")):
                text = await b.error("list_directory", path=path)
                assert "secret.txt" not in text
            text = await b.error("write_file", path=str(alice / "planted"), content="x")
            assert not (alice / "planted").exists()
            assert SECRET not in text

    run(main)


def test_client_roots_cannot_widen_a_session(tmp_path: Path) -> None:
    """A 2025-era client offering the other session's directory, or BASE, as Roots."""
    base = tmp_path / "base"
    alice = base / "sessions" / "alice"
    alice.mkdir(parents=True)
    (alice / "secret.txt").write_text(SECRET)
    roots = Roots([str(alice)])

    async def main() -> None:
        args = ("--workspaces", str(base), "--workspace-id", "bob")
        async with session(*args, era="2025", roots=roots) as s:
            await s.wait_for_log("Ignoring client root outside")
            assert roots.asked >= 1
            assert str(alice) not in _directories(await _allowed(s))
            assert SECRET not in await s.error("read_text_file", path=str(alice / "secret.txt"))
        roots.paths = [str(base)]
        async with session(*args, era="2025", roots=roots) as s:
            await s.wait_for_log("narrowed to the command-line directories")
            shown = _directories(await _allowed(s))
            assert str(base) not in shown and str(alice) not in shown
            assert str(base / "sessions" / "bob") in shown
            assert SECRET not in await s.error("read_text_file", path=str(alice / "secret.txt"))

    run(main)


def test_a_swap_race_never_shows_the_other_session(tmp_path: Path) -> None:
    """An attacker exchanges a directory inside session bob with a symlink to alice's
    directory while bob's client reads and lists through it."""
    base = tmp_path / "base"
    bob = base / "sessions" / "bob"
    alice = base / "sessions" / "alice"
    bob.mkdir(parents=True)
    canary = f"{SECRET}-canary"
    prepare("exchange-dir", bob, alice, canary.encode())

    async def main() -> None:
        async with session("--workspaces", str(base), "--workspace-id", "bob") as s:
            attacker = AttackerProcess("exchange-dir", bob, alice)
            refused = 0
            try:
                for _ in range(150):
                    for tool, path in (("read_text_file", "d/f"), ("list_directory", "d")):
                        result = await s.call(tool, path=path)
                        text = "".join(getattr(c, "text", "") for c in result.content)
                        assert canary not in text and "canary" not in text
                        refused += result.is_error
            finally:
                tally = attacker.stop()
            assert tally.swaps > 0, tally
            assert refused > 0  # the attack was met, not missed

    run(main)


# -- stores ------------------------------------------------------------------------------


def test_stores_are_shared_and_persist(tmp_path: Path) -> None:
    base = tmp_path / "base"

    async def main() -> None:
        async with (
            session("--workspaces", str(base)) as a,
            session("--workspaces", str(base), era="2025") as b,
        ):
            assert "No stores yet" in await a.text("list_stores")
            made = await a.call("create_store", name="notes")
            assert made.structured_content is not None
            path = made.structured_content["path"]
            assert made.structured_content["created"] is True
            assert path == str(base / "stores" / "notes")
            await a.text("write_file", path=f"{path}/todo.md", content="shared text")
            again = await b.call("create_store", name="notes")
            assert again.structured_content is not None
            assert again.structured_content["created"] is False
            listed = await b.call("list_stores")
            assert listed.structured_content is not None
            (store,) = listed.structured_content["stores"]
            assert store["name"] == "notes" and store["size"] == len("shared text")
            assert await b.text("read_text_file", path=f"{path}/todo.md") == "shared text"
            for bad in ("..", "a/b", "x" * 65, "with space"):
                assert "1 to 64 letters" in await a.error("create_store", name=bad)
            assert sorted(os.listdir(base / "stores")) == ["notes"]
        async with session("--workspaces", str(base)) as c:
            assert "[STORE] notes" in await c.text("list_stores")
            assert await c.text("read_text_file", path=f"{path}/todo.md") == "shared text"

    run(main)


# -- the workspaces command --------------------------------------------------------------


def _age_tree(path: Path, when: float) -> None:
    for dirpath, dirnames, filenames in os.walk(path):
        for name in dirnames + filenames:
            os.utime(os.path.join(dirpath, name), (when, when), follow_symlinks=False)
    os.utime(path, (when, when))


def test_list_and_prune(tmp_path: Path) -> None:
    base = tmp_path / "base"
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("must survive")
    (outside / "dir").mkdir()
    (outside / "dir" / "inner.txt").write_text("must survive too")
    ws = Base(Root.open(str(base)) if base.exists() else _made(base))
    for name in ("old", "fresh", "busy"):
        with ws.lease(name, create=True):
            pass
    old = base / "sessions" / "old"
    (old / "sub" / "deeper").mkdir(parents=True)
    (old / "sub" / "deeper" / "f.txt").write_text("x" * 100)
    (old / "link-file").symlink_to(outside / "keep.txt")
    (old / "sub" / "link-dir").symlink_to(outside / "dir")
    (old / "rel").symlink_to("../../../outside")
    (base / "stores" / "kept-store").mkdir()
    (base / "stores" / "kept-store" / "data").write_text("store data")
    week_ago = (base / "sessions").stat().st_mtime - 8 * 86400
    for name in ("old", "busy"):
        _age_tree(base / "sessions" / name, week_ago)
    _age_tree(base / "stores" / "kept-store", week_ago)

    listed = _cli("workspaces", str(base))
    assert listed.returncode == 0, listed.stderr
    assert "sessions in" in listed.stdout and "stores in" in listed.stdout
    assert "  old  idle 8d" in listed.stdout
    assert "kept-store" in listed.stdout

    held = ws.lease("busy", create=False)  # a server holding it
    try:
        _age_tree(base / "sessions" / "busy", week_ago)
        pruned = _cli("workspaces", str(base), "--prune", "7d")
    finally:
        held.release()
    assert pruned.returncode == 0, pruned.stderr
    assert "removed session old" in pruned.stdout
    assert "kept session busy: in use" in pruned.stdout
    assert sorted(os.listdir(base / "sessions")) == ["busy", "fresh"]
    assert (base / "stores" / "kept-store" / "data").read_text() == "store data"
    assert (outside / "keep.txt").read_text() == "must survive"
    assert (outside / "dir" / "inner.txt").read_text() == "must survive too"


def _made(base: Path) -> Root:
    base.mkdir(mode=0o700)
    return Root.open(str(base))


@pytest.mark.parametrize(
    ("args", "env", "says"),
    [
        (("workspaces",), None, "give exactly one BASE"),
        (("workspaces", "BASE", "--prune", "soon"), None, "invalid age"),
        (("workspaces", "BASE", "--prune"), None, "--prune needs an age"),
        (("--workspaces", "BASE", "--workspace-id", ".."), None, "invalid --workspace-id"),
        (("--workspaces", "BASE", "--workspace-id", "a/b"), None, "invalid --workspace-id"),
        (("--workspace-id", "x"), None, "--workspace-id needs --workspaces"),
        (("--workspaces", "BASE", "--http", "127.0.0.1:0", "--read-only"), None, "stdio only"),
        (("--workspaces", "BASE", "--unix", "BASE.sock", "--workspace-id", "a"), None, "stdio"),
        (("--workspaces", "BASE"), {"SANDBOXFS_WORKSPACE_ID": "../x"}, "SANDBOXFS_WORKSPACE_ID"),
    ],
)
def test_bad_command_lines_exit_2(
    tmp_path: Path, args: tuple[str, ...], env: dict[str, str] | None, says: str
) -> None:
    argv = [str(tmp_path / "b") if a == "BASE" else a for a in args]
    done = _cli(*argv, env=env)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert says in done.stderr


def test_a_directory_overlapping_base_is_refused(tmp_path: Path) -> None:
    done = _cli("--workspaces", str(tmp_path / "b"), str(tmp_path))
    assert done.returncode == 1
    assert "overlaps --workspaces" in done.stderr


# -- HTTP --------------------------------------------------------------------------------


def _post(car: Sidecar, message: dict[str, Any], headers: dict[str, str]) -> tuple[int, Any]:
    status, body = car.request(
        "POST",
        "/mcp",
        json.dumps(message).encode(),
        {
            "Content-Type": "application/json",
            "Accept": "application/json",
            "Authorization": f"Bearer {TOKEN}",
            **headers,
        },
    )
    return status, json.loads(body) if body else None


def _call(request_id: int, tool: str, **arguments: Any) -> dict[str, Any]:
    params = {"name": tool, "arguments": arguments}
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


def test_two_http_sessions_are_isolated(tmp_path: Path) -> None:
    base = tmp_path / "base"
    with sidecar("--workspaces", str(base), tmp=tmp_path) as car:

        async def main() -> None:
            async with (
                http_client(car.url, "2025") as a,
                http_client(car.url, "2025") as b,
            ):
                dirs_a = (await a.call_tool("list_allowed_directories", {})).structured_content
                dirs_b = (await b.call_tool("list_allowed_directories", {})).structured_content
                assert dirs_a is not None and dirs_b is not None
                mine, theirs = dirs_a["directories"][0], dirs_b["directories"][0]
                assert mine != theirs
                assert stat.S_IMODE(os.stat(mine).st_mode) == 0o700
                wrote = await a.call_tool("write_file", {"path": "s.txt", "content": SECRET})
                assert not wrote.is_error
                assert (Path(mine) / "s.txt").read_text() == SECRET
                for path in (f"{mine}/s.txt", f"{theirs}/../{Path(mine).name}/s.txt"):
                    got = await b.call_tool("read_text_file", {"path": path})
                    assert got.is_error
                    assert SECRET not in "".join(getattr(c, "text", "") for c in got.content)
                again = await a.call_tool("read_text_file", {"path": "s.txt"})
                assert not again.is_error  # the same session, request after request

        run(main)

        # A session id the server did not issue, or none, gets no workspace.
        status, reply = _post(car, _call(1, "list_allowed_directories"), {"Mcp-Session-Id": "bob"})
        assert status == 404 and "Session not found" in reply["error"]["message"]
        status, reply = _post(car, _call(2, "list_allowed_directories"), {})
        assert status == 400 and "Sandboxfs-Workspace-Id" in reply["error"]["message"]
        # The operator's header resumes a named session (2025-era request, token given).
        status, reply = _post(
            car,
            _call(3, "write_file", path="op.txt", content="operator"),
            {"Sandboxfs-Workspace-Id": "ops"},
        )
        assert status == 200 and not reply["result"]["isError"], reply
        assert (base / "sessions" / "ops" / "op.txt").read_text() == "operator"
        status, reply = _post(car, _call(4, "list_stores"), {"Sandboxfs-Workspace-Id": "../x"})
        assert status == 400 and "invalid Sandboxfs-Workspace-Id" in reply["error"]["message"]


def test_the_operator_header_needs_a_token(tmp_path: Path) -> None:
    with sidecar("--workspaces", str(tmp_path / "base"), tmp=tmp_path, token=None) as car:
        status, body = car.request(
            "POST",
            "/mcp",
            json.dumps(_call(1, "list_stores")).encode(),
            {
                "Content-Type": "application/json",
                "Accept": "application/json",
                "Sandboxfs-Workspace-Id": "ops",
            },
        )
        assert status == 400
        assert b"requires a bearer token" in body
        assert not (tmp_path / "base" / "sessions" / "ops").exists()


def test_a_2026_request_names_its_session_with_the_operator_header(tmp_path: Path) -> None:
    """The 2026-07-28 era has no initialize: the operator's header names the session,
    resumed request after request (and after a restart)."""
    base = tmp_path / "base"
    modern = "2026-07-28"

    def modern_call(car: Sidecar, request_id: int, tool: str, **arguments: Any) -> Any:
        message = _call(request_id, tool, **arguments)
        message["params"]["_meta"] = {
            "io.modelcontextprotocol/protocolVersion": modern,
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "wire", "version": "1"},
        }
        headers = {
            "MCP-Protocol-Version": modern,
            "Mcp-Method": "tools/call",
            "Mcp-Name": tool,
            "Sandboxfs-Workspace-Id": "agent-7",
        }
        status, reply = _post(car, message, headers)
        assert status == 200, reply
        return reply["result"]

    with sidecar("--workspaces", str(base), tmp=tmp_path) as car:
        result = modern_call(car, 1, "write_file", path="w.txt", content="2026 era")
        assert not result["isError"], result
        result = modern_call(car, 2, "list_allowed_directories")
        assert result["structuredContent"]["directories"][0] == str(base / "sessions" / "agent-7")
    with sidecar("--workspaces", str(base), tmp=tmp_path) as car:
        result = modern_call(car, 3, "read_text_file", path="w.txt")
        assert result["structuredContent"]["content"] == "2026 era", result


def test_an_http_swap_race_never_shows_the_other_session(tmp_path: Path) -> None:
    """Two HTTP sessions on one server: an attacker exchanges a directory in bob's
    session with a symlink to alice's while bob's client reads and lists through it."""
    base = tmp_path / "base"
    canary = f"{SECRET}-http-canary"
    with sidecar("--workspaces", str(base), tmp=tmp_path) as car:

        async def main() -> None:
            async with http_client(car.url, "2025") as alice, http_client(car.url, "2025") as bob:
                mine = (await alice.call_tool("list_allowed_directories", {})).structured_content
                theirs = (await bob.call_tool("list_allowed_directories", {})).structured_content
                assert mine is not None and theirs is not None
                alice_dir = Path(mine["directories"][0])
                bob_dir = Path(theirs["directories"][0])
                prepare("exchange-dir", bob_dir, alice_dir, canary.encode())
                attacker = AttackerProcess("exchange-dir", bob_dir, alice_dir)
                refused = 0
                try:
                    for _ in range(100):
                        for tool, path in (("read_text_file", "d/f"), ("list_directory", "d")):
                            result = await bob.call_tool(tool, {"path": path})
                            text = "".join(getattr(c, "text", "") for c in result.content)
                            assert "canary" not in text
                            refused += result.is_error
                finally:
                    tally = attacker.stop()
                assert tally.swaps > 0, tally
                assert refused > 0

        run(main)


def test_prune_during_a_swap_race_never_touches_outside(tmp_path: Path) -> None:
    """While a session is pruned, an attacker keeps exchanging a directory in it with
    a symlink to a directory outside: nothing outside is ever removed."""
    base = tmp_path / "base"
    outside = tmp_path / "outside"
    ws = Base(_made(base))
    swaps = 0
    for round_ in range(4):
        name = f"racy-{round_}"
        ws.lease(name, create=True).release()
        session_dir = base / "sessions" / name
        prepare("exchange-dir", session_dir, outside, b"outside canary")
        (outside / "inner").mkdir(exist_ok=True)
        (outside / "inner" / "keep.txt").write_text("keep")
        attacker = AttackerProcess("exchange-dir", session_dir, outside)
        try:
            ws.prune(0, now=time.time() + 10**6)
        finally:
            swaps += attacker.stop().swaps
        assert (outside / "canary.txt").read_bytes() == b"outside canary"
        assert (outside / "inner" / "keep.txt").read_text() == "keep"
    assert swaps > 0
