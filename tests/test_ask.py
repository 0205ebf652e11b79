"""Approval for chosen paths (``--ask``) end to end: the SDK client answers the server's
question (MCP elicitation) yes or no, over stdio and HTTP, in both protocol eras (2025:
``elicitation/create`` while the call waits; 2026-07-28: ``input_required`` and a
retry).  No answer, or a client without elicitation, is a refusal; a yes is for the
change shown and no other; every changing tool, every name of a path, is asked about."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
import trio
from sidecar_helpers import http_client, sidecar

from helpers import Tree
from mcp_client import ERAS, PATCHED, Era, run, server_env, session


class User:
    """The person behind the client: answers every question as told, and remembers them."""

    def __init__(self, answer: bool | None) -> None:
        self.answer = answer
        self.asked: list[str] = []

    async def __call__(self, context: Any, params: Any) -> Any:
        self.asked.append(params.message)
        if self.answer is None:  # never answers
            await trio.sleep_forever()
        return types.ElicitResult(action="accept", content={"approve": self.answer})


class Declines(User):
    async def __call__(self, context: Any, params: Any) -> Any:
        self.asked.append(params.message)
        return types.ElicitResult(action="decline")


def _text(result: Any) -> str:
    return "".join(getattr(c, "text", "") for c in result.content)


ASK = ("--ask", "*.cfg", "--ask", "secrets/**")

# The SDK's HTTP client leaves its SSE readers to the garbage collector (as in the other
# HTTP tests); that is the client's business, not the server's.
http_warnings = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")


@pytest.mark.parametrize("era", ERAS)
def test_a_yes_makes_the_change_and_a_no_refuses_it(tree: Tree, era: Era) -> None:
    (tree.root / "app.cfg").write_text("debug = false\n")
    (tree.root / "notes.txt").write_text("free\n")

    async def main() -> None:
        yes = User(True)
        async with session(*ASK, str(tree.root), era=era, elicitation=yes) as s:
            await s.text(
                "edit_file", path="app.cfg", edits=[{"oldText": "false", "newText": "true"}]
            )
            assert (tree.root / "app.cfg").read_text() == "debug = true\n"
            assert len(yes.asked) == 1
            question = yes.asked[0]
            assert "edit_file call wants to write" in question and "app.cfg" in question
            assert "-debug = false\n+debug = true" in question  # the diff is shown
            await s.text("write_file", path="notes.txt", content="still free\n")
            assert len(yes.asked) == 1  # no question for a path without a rule
        no = User(False)
        async with session(*ASK, str(tree.root), era=era, elicitation=no) as s:
            refused = await s.error("write_file", path="app.cfg", content="pwned\n")
            assert "approval (--ask)" in refused and "said no" in refused
            assert (tree.root / "app.cfg").read_text() == "debug = true\n"
            assert len(no.asked) == 1
        declines = Declines(None)
        async with session(*ASK, str(tree.root), era=era, elicitation=declines) as s:
            assert "said no" in await s.error("delete_file", path="app.cfg")
            assert (tree.root / "app.cfg").exists()

    run(main)


@pytest.mark.parametrize("era", ERAS)
def test_a_client_that_cannot_ask_is_refused(tree: Tree, era: Era) -> None:
    (tree.root / "app.cfg").write_text("x\n")

    async def main() -> None:
        async with session(*ASK, str(tree.root), era=era) as s:  # no elicitation
            refused = await s.error("write_file", path="app.cfg", content="y\n")
            assert "cannot ask its user" in refused
            await s.text("write_file", path="other.txt", content="fine\n")

    run(main)
    assert (tree.root / "app.cfg").read_text() == "x\n"


def test_no_answer_is_a_refusal(tree: Tree) -> None:
    (tree.root / "app.cfg").write_text("x\n")

    async def main() -> None:
        silent = User(None)
        command = [*PATCHED, "ask-seconds=1", *ASK, str(tree.root)]
        async with session(command=command, era="2025", elicitation=silent) as s:
            refused = await s.error("write_file", path="app.cfg", content="y\n")
            assert "no answer" in refused and len(silent.asked) == 1

    run(main)
    assert (tree.root / "app.cfg").read_text() == "x\n"


@pytest.mark.parametrize("era", ERAS)
def test_every_changing_tool_and_every_name_is_asked_about(tree: Tree, era: Era) -> None:
    (tree.root / "secrets").mkdir()
    (tree.root / "secrets" / "k.txt").write_text("key\n")
    (tree.root / "link").symlink_to("secrets")
    (tree.root / "plain.txt").write_text("p\n")

    async def main() -> None:
        no = User(False)
        async with session(*ASK, str(tree.root), era=era, elicitation=no) as s:
            attempts: list[tuple[str, dict[str, Any]]] = [
                ("write_file", {"path": "link/k.txt", "content": "x"}),  # through a symlink
                ("append_file", {"path": "secrets/k.txt", "content": "x"}),
                (
                    "edit_file",
                    {"path": "secrets/k.txt", "edits": [{"oldText": "key", "newText": "x"}]},
                ),
                ("create_directory", {"path": "secrets/new/deep"}),
                ("move_file", {"source": "secrets/k.txt", "destination": "k.txt"}),
                ("move_file", {"source": "plain.txt", "destination": "secrets/p.txt"}),
                ("copy_file", {"source": "plain.txt", "destination": "secrets/c.txt"}),
                ("delete_file", {"path": "secrets", "recursive": True}),
                (
                    "apply_patch",
                    {
                        "files": [
                            {"path": "plain.txt", "content": "ok"},
                            {"path": "secrets/k.txt", "delete": True},
                        ]
                    },
                ),
            ]
            for tool, arguments in attempts:
                refused = await s.error(tool, **arguments)
                assert "approval (--ask)" in refused, (tool, refused)
            assert len(no.asked) == len(attempts)
            assert "apply a patch to 2 files" in no.asked[-1] and "-p\n+ok" in no.asked[-1]

    before = sorted(str(p) for p in tree.root.rglob("*"))
    run(main)
    assert sorted(str(p) for p in tree.root.rglob("*")) == before
    assert (tree.root / "secrets" / "k.txt").read_text() == "key\n"
    assert (tree.root / "plain.txt").read_text() == "p\n"


def test_a_2026_approval_is_for_the_change_shown_and_no_other(tree: Tree) -> None:
    """The sealed state binds the yes to the call's arguments and the exact change: a
    state replayed with other arguments, or after the file changed, asks again."""
    (tree.root / "app.cfg").write_text("one\n")

    async def main() -> None:
        async with session(*ASK, str(tree.root), era="2026", elicitation=User(True)) as s:
            first = await s.client.session.call_tool(
                "write_file", {"path": "app.cfg", "content": "two\n"}, allow_input_required=True
            )
            assert isinstance(first, types.InputRequiredResult)
            state = first.request_state
            yes = {"approve": types.ElicitResult(action="accept", content={"approve": True})}
            # the same state and yes, for other content: asked again, nothing written
            other = await s.client.session.call_tool(
                "write_file",
                {"path": "app.cfg", "content": "evil\n"},
                input_responses=yes,
                request_state=state,
                allow_input_required=True,
            )
            assert isinstance(other, types.InputRequiredResult)
            assert (tree.root / "app.cfg").read_text() == "one\n"
            # the file changes before the retry: the change shown is not the one made
            (tree.root / "app.cfg").write_text("changed meanwhile\n")
            moved = await s.client.session.call_tool(
                "write_file",
                {"path": "app.cfg", "content": "two\n"},
                input_responses=yes,
                request_state=state,
                allow_input_required=True,
            )
            assert isinstance(moved, types.InputRequiredResult)
            assert (tree.root / "app.cfg").read_text() == "changed meanwhile\n"
            # a forged state is nothing
            forged = await s.client.session.call_tool(
                "write_file",
                {"path": "app.cfg", "content": "two\n"},
                input_responses=yes,
                request_state="e30.00",
                allow_input_required=True,
            )
            assert isinstance(forged, types.InputRequiredResult)
            assert (tree.root / "app.cfg").read_text() == "changed meanwhile\n"

    run(main)


@http_warnings
@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("answer", [True, False])
def test_asking_over_http(tmp_path: Path, era: str, answer: bool) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "app.cfg").write_text("old\n")

    async def main(url: str) -> None:
        user = User(answer)
        async with http_client(url, era, elicitation=user) as client:  # type: ignore[arg-type]
            result = await client.call_tool("write_file", {"path": "app.cfg", "content": "new\n"})
            assert result.is_error is (not answer), _text(result)
            assert len(user.asked) == 1 and "-old\n+new" in user.asked[0]

    with sidecar(*ASK, str(root), tmp=tmp_path) as served:
        run(lambda: main(served.url))
    assert (root / "app.cfg").read_text() == ("new\n" if answer else "old\n")


@http_warnings
def test_an_http_client_that_takes_no_stream_cannot_be_asked(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "app.cfg").write_text("old\n")
    with sidecar("--json-response", *ASK, str(root), tmp=tmp_path) as served:

        async def main() -> None:
            async with http_client(served.url, "2025", elicitation=User(True)) as client:
                result = await client.call_tool("write_file", {"path": "app.cfg", "content": "x"})
                assert result.is_error and "cannot ask its user" in _text(result)

        run(main)
    assert (root / "app.cfg").read_text() == "old\n"


def test_the_policy_file_key_and_bad_patterns(tree: Tree) -> None:
    policy = tree.base / "policy.toml"
    policy.write_text(
        f'ask = ["*.cfg"]\n[[directory]]\npath = "{tree.base / "other"}"\nask = ["*"]\n'
    )
    (tree.base / "other").mkdir()
    (tree.base / "other" / "any.txt").write_text("a\n")
    (tree.root / "free.txt").write_text("f\n")

    async def main() -> None:
        no = User(False)
        async with session("--policy", str(policy), str(tree.root), elicitation=no) as s:
            await s.text("write_file", path="free.txt", content="g\n")  # no rule here
            assert "said no" in await s.error(
                "write_file", path=str(tree.base / "other" / "any.txt"), content="b\n"
            )
            assert "said no" in await s.error("write_file", path="x.cfg", content="b\n")
            assert len(no.asked) == 2

    run(main)
    bad = subprocess.run(
        [sys.executable, "-m", "sandboxfs", "--ask", "/abs", str(tree.root)],
        capture_output=True,
        text=True,
        env=server_env(),
    )
    assert bad.returncode == 2 and "--ask" in bad.stderr
    read_only = subprocess.run(
        [sys.executable, "-m", "sandboxfs", "--read-only", "--ask", "*.cfg", str(tree.root)],
        capture_output=True,
        text=True,
        env=server_env(),
    )
    assert read_only.returncode == 2


def test_the_gate_judges_every_change_at_its_canonical_place(tmp_path: Path) -> None:
    """In process: a rule names a directory; every changing operation of the façade,
    reaching it through a symlink or an alias, is asked about (and refused)."""
    from sandboxfs.core.allowlist import AllowList, Root  # noqa: PLC0415
    from sandboxfs.core.errors import SandboxError  # noqa: PLC0415
    from sandboxfs.core.resolver import Resolver  # noqa: PLC0415
    from sandboxfs.fs.approval import AskRules, Gate, NotApproved, Question  # noqa: PLC0415
    from sandboxfs.fs.patches import FileChange  # noqa: PLC0415
    from sandboxfs.fs.sandbox import Sandbox  # noqa: PLC0415

    root = tmp_path / "root"
    (root / "guarded").mkdir(parents=True)
    (root / "guarded" / "f.txt").write_text("f\n")
    (root / "way").symlink_to("guarded")
    asked: list[Question] = []

    def no(question: Question) -> None:
        asked.append(question)
        raise NotApproved("no")

    gate = Gate(AskRules(("guarded",)), no)
    sandbox = Sandbox(Resolver(AllowList.of([Root.open(str(root))]))).gated(gate)
    attempts = [
        lambda: sandbox.replace_file("way/f.txt", b"x"),
        lambda: sandbox.append_file("way/f.txt", b"x"),
        lambda: sandbox.create_file("way/new.txt", b"x"),
        lambda: sandbox.make_dirs("way/d/e"),
        lambda: sandbox.rename("way/f.txt", "moved.txt"),
        lambda: sandbox.copy_file("way/f.txt", "way/copy.txt"),
        lambda: sandbox.remove("way/f.txt"),
        lambda: sandbox.apply_changes([FileChange("way/f.txt", b"f\n", b"x")]),
    ]
    for attempt in attempts:
        with pytest.raises(SandboxError, match="no"):
            attempt()
    assert len(asked) == len(attempts)
    assert all(str(root / "guarded") in q.places[0].path for q in asked)
    assert (root / "guarded" / "f.txt").read_text() == "f\n"
