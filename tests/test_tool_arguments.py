"""No input ends in an internal error: every tool's every string argument, drawn from
the tool declarations (tools/spec.py, so a new tool or parameter is covered without
a word here), gets arbitrary Unicode (lone surrogates, control characters, bidi
controls, huge strings), through the session core in process, in both protocol
eras; every answer is a result or a clean tool error, never ``-32603``, always
encodable, and nothing is logged as an internal error.

The default suite draws a bounded number of examples; ``-m slow`` draws many more,
with larger strings.
"""

from __future__ import annotations

import functools
import io
import json
import logging
import shutil
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_inprocess import InProcess

from sandboxfs.core.allowlist import AllowList, Root
from sandboxfs.fs.workspacebase import Base
from sandboxfs.session.access import AccessControl
from sandboxfs.session.auditlog import AuditLog
from sandboxfs.session.dispatcher import SandboxfsServer, ServerOptions
from sandboxfs.session.jsonrpc import encode
from sandboxfs.session.sessionworkspace import WorkspaceSessions
from sandboxfs.tools import ToolSpec, served_tools

#: Names that exist in the directory every example starts from, so that some calls
#: get past resolution into the tools themselves.
_FILES: Mapping[str, bytes] = {
    "f.txt": b"one\ntwo needle\nthree\n",
    "d/g.txt": b"needle\r\nlast",
    "d/e/h.py": b"def f():\n    return 1\n",
    "bin.dat": b"\0\1\2needle",
}
_VALID = st.sampled_from(["f.txt", "d", "d/g.txt", "d/e", ".", "new.txt", "d/new", "bin.dat"])
_NASTY = st.sampled_from(
    [
        *("", ".", "..", "/", "//", "\0", "a\0b", "a\ud800b", "\ud800", "\udfff\ud800", "\udcff"),
        *("\ud83d", "\U0001f600", "\x1b[31m", "\u202e", "\ufeff", "\u2028", "\n", "\r\n", "\t"),
        *("%2e%2e/%2e%2e", "file:///etc/passwd", "../outside", "~", "~root", "*", "**/*"),
        *("{a,b", "[", "(", "(?P<x>", "\\", "\\x", '"\\xff"', '"a\\u0000"', '"\\ud800"', "…"),
    ]
)
_CHARACTERS = st.one_of(
    st.characters(exclude_categories=()),  # any code point
    st.characters(categories=["Cs"]),  # lone surrogates, which hypothesis rarely draws
    st.characters(max_codepoint=0x1F),  # control characters
    st.sampled_from('/.\\"*?[]{}\n'),
)
_TEXT = st.text(_CHARACTERS, max_size=24)
#: Text holding a lone surrogate (which no UTF-8 can carry) somewhere.
_UNPAIRED = st.tuples(_TEXT, st.characters(categories=["Cs"]), _TEXT).map("".join)


@functools.cache
def _big(piece: str, size: int) -> str:
    """One string of ``size`` characters made of ``piece``, made once: hypothesis keeps
    what it draws, and a fresh 17 MiB string per example would add up to gigabytes."""
    return piece * (size // len(piece))


def _strings(huge: int) -> st.SearchStrategy[str]:
    """Strings of every kind a client may send, up to ``huge`` characters."""
    big = st.tuples(
        st.sampled_from(["a", "\ud800", "é\n", "/", "x/", "\0", "needle "]),
        st.sampled_from(sorted({1 << 12, 1 << 16, huge})),
    ).map(lambda drawn: _big(*drawn))
    return st.one_of(
        _VALID,
        _NASTY,
        _TEXT,
        _UNPAIRED,
        st.tuples(st.one_of(_VALID, _NASTY), st.one_of(_TEXT, _UNPAIRED)).map("/".join),
        st.tuples(st.one_of(_TEXT, _UNPAIRED), st.one_of(_VALID, _NASTY)).map("".join),
        big,
    )


def _value(schema: Mapping[str, Any], strings: st.SearchStrategy[str]) -> st.SearchStrategy[Any]:
    """Values for one parameter's JSON schema: strings from ``strings`` wherever the
    schema takes a string; the other types within their bounds."""
    kind = schema.get("type")
    if "enum" in schema:
        return st.one_of(st.sampled_from(list(schema["enum"])), strings)
    if kind == "string":
        least = schema.get("minLength", 0)
        return strings.map(lambda s: s + "x" * (least - len(s))) if least else strings
    if kind == "integer":
        low = schema.get("minimum", 0)
        high = schema.get("maximum")
        if high is not None:
            return st.integers(low, high)
        return st.one_of(st.integers(low, low + 50), st.just(2**62))
    if kind == "boolean":
        return st.booleans()
    if kind == "array":
        items = _value(schema["items"], strings)
        return st.lists(items, min_size=schema.get("minItems", 0), max_size=4)
    if kind == "object":
        properties = schema["properties"]
        required = set(schema.get("required", ()))
        return st.fixed_dictionaries(
            {name: _value(properties[name], strings) for name in sorted(required)},
            optional={
                name: _value(sub, strings)
                for name, sub in sorted(properties.items())
                if name not in required
            },
        )
    raise AssertionError(f"no strategy for the schema {dict(schema)}: extend _value")


def _arguments(
    tool: ToolSpec, strings: st.SearchStrategy[str]
) -> st.SearchStrategy[dict[str, Any]]:
    """Arguments for ``tool``, from its declaration: every required parameter, any of
    the others."""
    return st.fixed_dictionaries(
        {p.name: _value(p.schema, strings) for p in tool.params if p.required},
        optional={p.name: _value(p.schema, strings) for p in tool.params if not p.required},
    )


class _Servers:
    """A plain server and one with --workspaces (and its store tools), each over a
    directory put back to :data:`_FILES` before every call, each writing its audit
    log as UTF-8 that refuses what UTF-8 cannot carry (as a log file would)."""

    def __init__(self, base: Path) -> None:
        plain = base / "plain"
        plain.mkdir()
        workspaces = WorkspaceSessions(Base(Root.open(str(base / "ws"))), AllowList.of([]))
        lease = workspaces.for_process(None)
        self.logs = [io.TextIOWrapper(io.BytesIO(), encoding="utf-8") for _ in range(2)]
        self.servers = {
            "plain": (
                SandboxfsServer(
                    ServerOptions(audit=AuditLog(self.logs[0])),
                    AccessControl(AllowList.of([Root.open(str(plain))]), confine=False),
                ),
                plain,
            ),
            "workspaces": (
                SandboxfsServer(
                    ServerOptions(workspaces=workspaces, audit=AuditLog(self.logs[1])),
                    workspaces.access(lease),
                ),
                Path(lease.root.path),
            ),
        }

    def audited(self, config: str) -> list[dict[str, Any]]:
        """The tool calls the audit log of ``config``'s server recorded since the reset."""
        log = self.logs[list(self.servers).index(config)]
        log.flush()
        records = map(json.loads, log.buffer.getvalue().decode("utf-8").splitlines())
        return [record for record in records if record.get("event") == "tool_call"]

    def reset(self, directory: Path) -> None:
        for log in self.logs:  # each call's line is written, then dropped
            log.seek(0)
            log.truncate()
        for child in directory.iterdir():
            if child.is_dir() and not child.is_symlink():
                try:
                    shutil.rmtree(child)
                except RecursionError:  # create_directory made 2,000 levels
                    subprocess.run(["rm", "-rf", "--", str(child)], check=True)
            else:
                child.unlink()
        for name, data in _FILES.items():
            (directory / name).parent.mkdir(parents=True, exist_ok=True)
            (directory / name).write_bytes(data)


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[_Servers]:
    base = tmp_path_factory.mktemp("arguments")
    (base / "ws").mkdir(mode=0o700)
    yield _Servers(base)


def _calls(huge: int) -> st.SearchStrategy[tuple[str, str, dict[str, Any]]]:
    """(server, tool, arguments) for every tool each server serves."""
    strings = _strings(huge)
    options: list[st.SearchStrategy[tuple[str, str, dict[str, Any]]]] = []
    configs = {
        "plain": served_tools(read_only=False),
        "workspaces": served_tools(read_only=False, workspaces=True),
    }
    for config, specs in configs.items():
        for spec in specs:
            options.append(
                _arguments(spec, strings).map(
                    lambda arguments, c=config, n=spec.name: (c, n, arguments)
                )
            )
    return st.one_of(options)


def _answer(server: SandboxfsServer, era: str, tool: str, arguments: dict[str, Any]) -> Any:
    async def main() -> Any:
        async with trio.open_nursery() as nursery:
            conversation = InProcess(server, nursery, era)
            request_id = conversation.call(tool, arguments)
            await conversation.settle()  # every message checked by the SDK's models
            return conversation.answers[request_id]

    return trio.run(main)


def _check(
    servers: _Servers,
    caplog: pytest.LogCaptureFixture,
    call: tuple[str, str, dict[str, Any]],
    era: str,
) -> None:
    config, tool, arguments = call
    server, directory = servers.servers[config]
    servers.reset(directory)
    caplog.clear()
    answer = _answer(server, era, tool, arguments)
    assert "error" not in answer, (tool, arguments, answer)  # never -32603, nor any other
    result = answer["result"]
    assert isinstance(result["isError"], bool)
    code = None
    if result["isError"]:
        error = result["structuredContent"]["error"]
        assert error["code"] and error["message"]
        code = error["code"]
    # The audit log records the call once, with the very code the client was given.
    assert [(r["tool"], r["error"]) for r in servers.audited(config)] == [(tool, code)]
    encode(answer)  # what a transport writes: never raises
    internal = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert internal == [], [r.getMessage() for r in internal]


_SUPPRESSED = [
    HealthCheck.too_slow,
    HealthCheck.function_scoped_fixture,
    HealthCheck.data_too_large,
]


@settings(max_examples=300, deadline=None, suppress_health_check=_SUPPRESSED)
@given(call=_calls(huge=1 << 18), era=st.sampled_from(["2025", "2026"]))
def test_no_tool_argument_ends_in_an_internal_error(
    servers: _Servers,
    caplog: pytest.LogCaptureFixture,
    call: tuple[str, str, dict[str, Any]],
    era: str,
) -> None:
    _check(servers, caplog, call, era)


@pytest.mark.slow
@settings(max_examples=5000, deadline=None, suppress_health_check=_SUPPRESSED)
@given(call=_calls(huge=17 << 20), era=st.sampled_from(["2025", "2026"]))
def test_no_tool_argument_ends_in_an_internal_error_long_run(
    servers: _Servers,
    caplog: pytest.LogCaptureFixture,
    call: tuple[str, str, dict[str, Any]],
    era: str,
) -> None:
    _check(servers, caplog, call, era)


def test_every_declared_parameter_gets_a_strategy() -> None:
    """The strategies come from the declarations: every parameter of every tool has
    one (a schema the generator cannot read fails here, not silently)."""
    strings = _strings(16)
    for spec in served_tools(read_only=False, workspaces=True):
        for param in spec.params:
            _value(param.schema, strings)
        assert _arguments(spec, strings) is not None
