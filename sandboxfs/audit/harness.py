"""The audit harness: fixtures with canaries, a server under audit, and the checks
made after every case.

A case gets its own directory inside the server's allowed directory and its own
outside directory full of canaries (files whose content carries a token unique
to the case).  After each case the harness checks that nothing outside changed,
that no reply carried a canary token or named an outside path the request did
not, that no canary content was copied inside, and that the server still
answers.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shlex
import stat
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

import mcp_types as types
import trio
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError

from sandboxfs.audit import dialects, leash, procs
from sandboxfs.audit.verdicts import Trials

Era = Literal["2025", "2026"]
#: Size of the canary files: distinctive, so a reported size is recognisable.
CANARY_SIZE: Final = 7919


class CaseFailed(Exception):
    """The server did something it must not; the message says what."""


class CaseSkipped(Exception):
    """The case does not apply here (a missing tool, no privilege for mknod, ...): N/A."""


class CaseError(Exception):
    """The audit could not run the case (its own attacker did nothing, ...): ERROR."""


@dataclass(frozen=True)
class Budget:
    """How hard the probabilistic and the costly cases attack (``--quick`` lowers it)."""

    #: Attempts a race makes when nothing gets through (it stops at the first escape).
    race_attempts: int = 2000
    #: A bound on a race's time, for a server so slow that its attempts never end;
    #: reached, the race says how many attempts it made and what they prove.
    race_seconds: float = 240.0
    #: Rounds of outside calls after a Roots answer (a server may bring Roots in force
    #: a few requests later).
    roots_rounds: int = 20
    #: Requests left pending before end of input (protocol/pending-then-end-of-input).
    flood: int = 10_000


QUICK: Final = Budget(race_attempts=200, race_seconds=60.0, flood=1000)


class ServerHung(CaseFailed):
    """A call got no answer in time."""


@dataclass
class Reply:
    """A tool call's outcome as the client saw it."""

    error: bool
    text: str
    raw: str

    def __str__(self) -> str:
        return self.text


@dataclass
class Fixture:
    """One case's directories: ``root`` inside the allowed directory, ``outside`` not."""

    base: Path
    root: Path
    outside: Path
    token: str

    @property
    def canary(self) -> bytes:
        head = f"CANARY {self.token}: outside content must never be read or changed\n".encode()
        return head + b"." * (CANARY_SIZE - len(head) - 1) + b"\n"

    def build(self) -> None:
        self.root.mkdir(parents=True)
        self.outside.mkdir(parents=True)
        (self.outside / "secret.txt").write_bytes(self.canary)
        (self.outside / "dir").mkdir()
        (self.outside / "dir" / "only-outside.txt").write_bytes(self.canary)
        (self.root / "inside.txt").write_bytes(b"inside\n")

    def rel(self, *parts: str) -> str:
        """An absolute path inside this case's root."""
        return str(self.root.joinpath(*parts))


def snapshot(directory: Path) -> dict[str, tuple[int, int, str]]:
    """Everything a change would show: type, size and content (or link target).

    Not the modification time (the test suite's snapshot has it): a race case's
    attacker moves a directory through the outside area and back, which updates the
    moved directory's mtime without the server doing anything.
    """
    result: dict[str, tuple[int, int, str]] = {}
    for dirpath, dirnames, filenames in os.walk(directory):
        for name in dirnames + filenames:
            full = os.path.join(dirpath, name)
            st = os.lstat(full)
            digest = ""
            if stat.S_ISREG(st.st_mode):
                with open(full, "rb") as f:
                    digest = hashlib.sha256(f.read()).hexdigest()
            elif stat.S_ISLNK(st.st_mode):
                digest = os.readlink(full)
            result[os.path.relpath(full, directory)] = (st.st_mode, st.st_size, digest)
    return result


def _server_argv(command: Sequence[str], root: Path) -> list[str]:
    if any("{root}" in part for part in command):
        return [part.replace("{root}", str(root)) for part in command]
    return [*command, str(root)]


@dataclass
class Session:
    """A connection to the server under audit, with a timeout on every call."""

    client: Client
    timeout: float
    tools: dict[str, types.Tool]
    replies: list[tuple[dict[str, Any], Reply]] = field(default_factory=list)
    #: How the server under audit is started (for cases that speak raw JSON-RPC to a
    #: fresh copy of it), and the protocol era of the audit.
    argv: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    era: Era = "2025"
    #: Where the server's stderr goes (for a fresh copy of it too).
    log: Path | None = None
    #: Whether a call got no answer in time (the server may still be busy with it).
    hung: bool = False
    #: What a case that held has to say (a race: how long it attacked), for its line.
    notes: list[str] = field(default_factory=list)
    #: How hard to attack.
    budget: Budget = field(default_factory=Budget)
    #: A probabilistic case's attempts, for its verdict's confidence.
    trials: Trials | None = None
    #: The argument on the server's leash that finds its processes (see procs.tagged).
    tag: str = ""

    _leash_pid: int | None = None

    def processes(self) -> set[int]:
        """The server's processes (its leash and everything below it); reads /proc."""
        if self._leash_pid is None and self.tag:
            self._leash_pid = procs.tagged(f"--tag={self.tag}")
        pid = self._leash_pid
        return set() if pid is None else {pid, *procs.descendants(pid)}

    def has(self, tool: str) -> bool:
        """Whether the server has ``tool``, or a tool known to do the same
        (:mod:`sandboxfs.audit.dialects`)."""
        return dialects.translation(tool, self.tools) is not None

    async def call(self, tool: str, **arguments: Any) -> Reply:
        """Call ``tool`` (a reference tool name; the server's own name for it if it has
        another, see :mod:`sandboxfs.audit.dialects`) with a timeout."""
        found = dialects.translation(tool, self.tools)
        if found is None:
            raise CaseSkipped(f"the server has no {tool} tool")
        name, translate = found
        request = types.CallToolRequest(
            params=types.CallToolRequestParams(name=name, arguments=translate(arguments))
        )
        reply: Reply | None = None
        with trio.move_on_after(self.timeout):
            try:
                result = await self.client.session.send_request(request, types.CallToolResult)
                text = "".join(c.text for c in result.content if isinstance(c, types.TextContent))
                raw = result.model_dump_json(by_alias=True, exclude_none=True)
                reply = Reply(bool(result.is_error), text, raw)
            except MCPError as exc:
                reply = Reply(True, exc.error.message, exc.error.model_dump_json())
        if reply is None:
            self.hung = True
            raise ServerHung(f"{_named(tool, name)} got no answer within {self.timeout:g} s")
        self.replies.append(({"tool": _named(tool, name), **arguments}, reply))
        return reply

    async def alive(self) -> bool:
        with trio.move_on_after(self.timeout):
            try:
                await self.client.list_tools()
                return True
            except Exception:
                return False
        return False


def _named(tool: str, name: str) -> str:
    return tool if tool == name else f"{tool} (the server's {name})"


@dataclass
class ClientRoots:
    """The Roots a client declares: what it answers the server's ``roots/list`` with
    (``uris``, read at each request), and how many times it was asked."""

    uris: list[str]
    asked: int = 0
    _changed: trio.Event = field(default_factory=trio.Event)

    async def __call__(self, context: Any) -> types.ListRootsResult:
        self.asked += 1
        self._changed.set()
        self._changed = trio.Event()
        roots = [types.Root.model_validate({"uri": uri}) for uri in self.uris]
        return types.ListRootsResult(roots=roots)

    async def asked_at_least(self, times: int, seconds: float) -> bool:
        """Wait (at most ``seconds``) until the server has asked ``times`` times."""
        with trio.move_on_after(seconds):
            while self.asked < times:
                await self._changed.wait()
        return self.asked >= times


@asynccontextmanager
async def connect(
    command: Sequence[str],
    root: Path,
    era: Era,
    timeout: float,
    log: Path | None,
    *,
    budget: Budget | None = None,
) -> AsyncIterator[Session]:
    """Start the server under audit on ``root`` and connect to it; its stderr goes to
    ``log`` (appended), or nowhere."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("SANDBOXFS_TEST_")}
    argv = _server_argv(command, root)
    async with start(argv, environment, era, timeout, log, budget=budget) as session:
        yield session


@asynccontextmanager
async def start(
    argv: list[str],
    environment: dict[str, str],
    era: Era,
    timeout: float,
    log: Path | None,
    *,
    roots: ClientRoots | None = None,
    budget: Budget | None = None,
) -> AsyncIterator[Session]:
    """Start ``argv`` and connect to it, as a client that declares ``roots`` if given
    (a case that needs a server of its own: another environment, or Roots)."""
    tag = secrets.token_hex(8)
    leashed = leash.command(argv, tag)  # it must not outlive the auditor
    params = StdioServerParameters(command=leashed[0], args=leashed[1:], env=environment)
    with (log or Path(os.devnull)).open("a") as errlog:
        errlog.write(f"$ {shlex.join(argv)}\n")
        errlog.flush()
        client = Client(
            stdio_client(params, errlog=errlog),
            mode="legacy" if era == "2025" else "2026-07-28",
            cache=None,
            read_timeout_seconds=timeout,  # also bounds a server that never answers initialize
            list_roots_callback=roots,
        )
        async with client:
            with trio.fail_after(timeout):
                listed = await client.list_tools()
            tools = {t.name: t for t in listed.tools}
            yield Session(
                client,
                timeout,
                tools,
                argv=argv,
                env=environment,
                era=era,
                log=log,
                budget=budget or Budget(),
                tag=tag,
            )


async def in_fresh_server(
    s: Session,
    body: Callable[[Session], Awaitable[None]],
    *,
    env: dict[str, str] | None = None,
    roots: ClientRoots | None = None,
) -> None:
    """Run ``body`` against a fresh copy of the server (in ``env``, or as a client that
    declares ``roots``); its verdict comes out as itself, and its replies join those of
    ``s`` for the harness's checks."""
    verdict: list[CaseFailed | CaseSkipped] = []
    async with start(
        s.argv, env or s.env, s.era, s.timeout, s.log, roots=roots, budget=s.budget
    ) as fresh:
        try:
            await body(fresh)
        except (CaseFailed, CaseSkipped) as exc:  # not wrapped in the client's task group
            verdict.append(exc)
        finally:
            s.replies.extend(fresh.replies)
            s.trials = s.trials or fresh.trials
    if verdict:
        raise verdict[0]


@dataclass
class Workspace:
    """The directory tree of one lane of an audit: the server's allowed directory
    (``root``) and the outside directories of its cases (``outside``), alone in
    ``base`` (what a case's Roots may name: the directory holding both)."""

    base: Path

    @classmethod
    def lane(cls, scratch: Path, number: int) -> Workspace:
        base = scratch / f"l{number}"
        base.mkdir()
        os.chmod(base, 0o755)  # noqa: S103 - a server running as another user must enter
        (base / "root").mkdir()
        (base / "outside").mkdir()
        return cls(base)

    @property
    def root(self) -> Path:
        return self.base / "root"

    def fixture(self, case_id: str) -> Fixture:
        token = secrets.token_hex(8)
        fixture = Fixture(self.base, self.root / case_id, self.base / "outside" / case_id, token)
        fixture.build()
        return fixture


@contextmanager
def scratch() -> Iterator[Path]:
    """The audit's scratch directory (every lane's workspace), removed at its end."""
    with tempfile.TemporaryDirectory(prefix="sandboxfs-audit-") as name:
        os.chmod(name, 0o755)  # noqa: S103 - a server running as another user must enter
        yield Path(name)


def leaks(fixture: Fixture, replies: list[tuple[dict[str, Any], Reply]]) -> str | None:
    """What a reply revealed that it must not, or None."""
    outside_prefix = str(fixture.base / "outside")
    for request, reply in replies:
        if fixture.token in reply.raw:
            return f"{request['tool']} returned outside content (canary token)"
        asked = json.dumps(request)
        if outside_prefix in reply.raw and outside_prefix not in asked:
            return (
                f"{request['tool']} named an outside path the request did not: {reply.text[:160]!r}"
            )
    return None


def exfiltrated(fixture: Fixture) -> str | None:
    """A file inside the case's directory now holding canary content, or None.

    Walks with directory descriptors, so very deep trees are no problem."""
    needle = fixture.token.encode()
    for _, _, filenames, dir_fd in os.fwalk(fixture.root):
        for name in filenames:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
                continue  # links and hard-linked canaries are not copies
            fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK, dir_fd=dir_fd)
            with os.fdopen(fd, "rb") as f:
                if needle in f.read(CANARY_SIZE * 2):
                    return f"canary content was copied inside, to {name}"
    return None
