"""The error gate is total: every errno text a client can read comes from one table
(:mod:`sandboxfs.core.errors`), what the OS said beyond the errno goes to the debug
log only, and every error a tool returns carries a code the audit log records."""

from __future__ import annotations

import ast
import dataclasses
import errno
import io
import json
import logging
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, get_args

import pytest
import trio

import sandboxfs
from sandboxfs.core import errors
from sandboxfs.core.allowlist import AllowList, Root
from sandboxfs.core.errors import (
    AlreadyExists,
    DirectoryNotEmpty,
    Form,
    IsADirectory,
    LimitExceeded,
    NotADirectory,
    NotFound,
    PermissionDenied,
    SandboxError,
    errno_error,
    errno_words,
    from_oserror,
)
from sandboxfs.fs.journalobjects import JournalError
from sandboxfs.session.access import AccessControl
from sandboxfs.session.auditlog import AuditLog
from sandboxfs.session.dispatcher import SandboxfsServer, ServerOptions
from sandboxfs.session.effects import Caller

PACKAGE = Path(sandboxfs.__file__).parent
TABLE = Path(errors.__file__)

#: An errno text: the errno's name, a colon, a space ("EEXIST: ...").
ERRNO_TEXT = re.compile(r"\bE[A-Z0-9]{2,}: ")

#: Modules that may look an errno's name up themselves, and why: neither writes an
#: errno text a client reads.
NAME_LOOKUPS = {
    # Below the core (it cannot import the table): the startup refusal an operator reads.
    "binding/syscalls.py",
    # The bare name of why a directory in a tree is unreadable ("unreadable": "EACCES").
    "fs/trees.py",
}


def _strings(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """Every string literal in ``tree``, the literal parts of f-strings included."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.lineno, node.value


def _name_lookups(tree: ast.AST) -> Iterator[int]:
    """Where ``errno.errorcode`` is read."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == "errorcode":
            yield node.lineno


def _problems(source: str, relative: str) -> list[str]:
    tree = ast.parse(source)
    found = [
        f"{relative}:{line}: an errno text written by hand: {text!r}"
        for line, text in _strings(tree)
        if ERRNO_TEXT.search(text)
    ]
    if relative not in NAME_LOOKUPS:
        found += [
            f"{relative}:{line}: an errno's name looked up outside the table"
            for line in _name_lookups(tree)
        ]
    return found


def test_the_scan_sees_a_hand_written_errno_text() -> None:
    """The scan below would fail on what the table replaced."""
    assert _problems('raise NotFound(f"ENOENT: no such file: {path}")\n', "fs/x.py")
    assert _problems('x = "EEXIST: destination already exists"\n', "fs/x.py")
    code = (
        'code = errno.errorcode.get(n, "EIO")\nraise SandboxError(f"{code}: the append failed")\n'
    )
    assert _problems(code, "fs/x.py")
    assert not _problems('raise errno_error(errno.ENOENT, path, "patch file missing")\n', "x.py")


def test_no_errno_text_is_written_outside_the_table() -> None:
    """Every errno text comes from :mod:`sandboxfs.core.errors`: no other module of the
    package spells one (``"ENOENT: ..."``) or looks an errno's name up to make one."""
    problems = []
    for module in sorted(PACKAGE.rglob("*.py")):
        if module == TABLE:
            continue
        relative = module.relative_to(PACKAGE).as_posix()
        problems += _problems(module.read_text(encoding="utf-8"), relative)
    assert problems == []


# -- the table speaks as the hand-written texts did ----------------------------------------

#: (errno, form, details, the client's text before the table, class, code): what each
#: call site wrote by hand, byte for byte.
PINNED: list[tuple[int, Form, dict[str, object], str, type[SandboxError], str]] = [
    (errno.ENOENT, "", {}, "ENOENT: no such file or directory: a/b", NotFound, "ENOENT"),
    (errno.ENOTDIR, "", {}, "ENOTDIR: not a directory: a/b", NotADirectory, "ENOTDIR"),
    (
        errno.ELOOP,
        "hop limit",
        {},
        "ELOOP: too many levels of symbolic links: a/b",
        LimitExceeded,
        "E2BIG",
    ),
    (
        errno.EEXIST,
        "destination exists",
        {},
        "EEXIST: destination already exists: a/b",
        AlreadyExists,
        "EEXIST",
    ),
    (
        errno.EEXIST,
        "not a directory there",
        {},
        "EEXIST: a file that is not a directory already exists: a/b",
        AlreadyExists,
        "EEXIST",
    ),
    (
        errno.EINVAL,
        "into itself",
        {"source": "s"},
        "EINVAL: cannot move a directory into itself, or the filesystem cannot rename "
        "without replacing: s -> a/b",
        SandboxError,
        "EINVAL",
    ),
    (
        errno.ENOTEMPTY,
        "not recursive",
        {},
        "ENOTEMPTY: directory not empty: a/b; set recursive to delete it and everything below it",
        DirectoryNotEmpty,
        "ENOTEMPTY",
    ),
    (
        errno.EISDIR,
        "not a file",
        {},
        "EISDIR: is a directory, not a file: a/b",
        IsADirectory,
        "EISDIR",
    ),
    (
        errno.EACCES,
        "read-only file",
        {},
        "EACCES: permission denied (the file is read-only): a/b",
        PermissionDenied,
        "EACCES",
    ),
    (
        errno.ENOSPC,
        "append left bytes",
        {"written": 7},
        "ENOSPC: the append failed after 7 of its bytes were written, and they could not "
        "be removed again (the file changed meanwhile): a/b",
        SandboxError,
        "ENOSPC",
    ),
    (
        errno.EINVAL,
        "patch changes twice",
        {"first": "x"},
        "EINVAL: the patch changes one file twice: x and a/b",
        SandboxError,
        "EINVAL",
    ),
    (
        errno.EEXIST,
        "patch would create",
        {},
        "EEXIST: the patch would create a/b, which exists",
        AlreadyExists,
        "EEXIST",
    ),
    (
        errno.EEXIST,
        "patch creates",
        {},
        "EEXIST: the patch creates a/b, which exists",
        SandboxError,
        "EEXIST",
    ),
    (errno.ENOENT, "patch file missing", {}, "ENOENT: no such file: a/b", NotFound, "ENOENT"),
    (
        errno.ENOENT,
        "patch changes missing",
        {},
        "ENOENT: no such file: a/b (the patch changes it)",
        NotFound,
        "ENOENT",
    ),
    (
        errno.EINVAL,
        "special file",
        {},
        "EINVAL: a special file below a/b cannot be made again",
        SandboxError,
        "EINVAL",
    ),
]


@pytest.mark.parametrize(
    ("number", "form", "details", "text", "kind", "code"),
    PINNED,
    ids=[f"{errno.errorcode[p[0]]}-{p[1] or 'own'}" for p in PINNED],
)
def test_each_form_speaks_as_its_call_site_did(
    number: int,
    form: Form,
    details: dict[str, object],
    text: str,
    kind: type[SandboxError],
    code: str,
) -> None:
    error = errno_error(number, "a/b", form, **details)
    assert (str(error), type(error), error.code) == (text, kind, code)


def test_every_form_is_in_the_table_and_pinned() -> None:
    """A form named in :data:`Form` has an entry, and its words are pinned above."""
    forms = set(get_args(Form))
    assert forms == {form for _, form in errors._TEXTS}
    assert forms == {p[1] for p in PINNED}


def test_the_converter_speaks_from_the_table() -> None:
    """from_oserror and errno_error say the same, and an errno the table does not list
    speaks the OS's words, as the converter always did."""
    for (number, form), _ in errors._TEXTS.items():
        if form == "" and number:
            converted = from_oserror(OSError(number, "ignored"), "a/b")
            direct = errno_error(number, "a/b")
            assert (str(converted), type(converted), converted.code) == (
                str(direct),
                type(direct),
                direct.code,
            )
    odd = from_oserror(OSError(errno.ENOLINK, "Link has been severed"), "a/b")
    assert (str(odd), odd.code) == ("ENOLINK: link has been severed: a/b", "ENOLINK")
    assert errno_words(errno.EIO) == "EIO: Input/output error"
    assert errno_words(None) == "EIO: Input/output error"


def test_what_the_os_said_goes_to_the_debug_log_never_to_the_client(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The names a call was given (a resolved path, a leaf) and the OS's words stay out
    of the message, and reach the debug log."""
    exc = OSError(errno.EACCES, "Permission denied", "/srv/secret/resolved", None, "leaf-two")
    with caplog.at_level(logging.DEBUG, logger="sandboxfs.core.errors"):
        error = from_oserror(exc, "given/path")
    assert str(error) == "EACCES: permission denied: given/path"
    logged = caplog.text
    assert "/srv/secret/resolved" in logged and "leaf-two" in logged
    assert "Permission denied" in logged and "'given/path'" in logged


# -- every error a tool returns carries a code the audit log records ---------------------


def _server(root: Path, log: io.StringIO) -> SandboxfsServer:
    return SandboxfsServer(
        ServerOptions(audit=AuditLog(log)),
        AccessControl(AllowList.of([Root.open(str(root))]), confine=False),
    )


def _call(server: SandboxfsServer, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    async def main() -> dict[str, Any]:
        return dict(await server.run_tool(tool, arguments, Caller("2025-11-25")))

    return trio.run(main)


def _records(log: io.StringIO) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in log.getvalue().splitlines()]
    log.seek(0)
    log.truncate()
    return [line for line in lines if line.get("event") == "tool_call"]


def _every_error_class() -> list[type[SandboxError]]:
    found: list[type[SandboxError]] = []
    pending = [SandboxError]
    while pending:
        kind = pending.pop()
        found.append(kind)
        pending.extend(kind.__subclasses__())
    return found


def _raising(error: BaseException) -> Callable[..., Any]:
    def handler(ctx: object, **arguments: object) -> Any:
        raise error

    return handler


def _failures() -> list[tuple[str, BaseException]]:
    """Every way a tool's work fails: each error class with its own code and with an
    OS code, each form of the table, and the journal failing."""
    cases: list[tuple[str, BaseException]] = []
    for kind in _every_error_class():
        cases.append((f"{kind.__name__}", kind("refused: a/b")))
        cases.append((f"{kind.__name__}-ENOSPC", kind("refused: a/b", "ENOSPC")))
    for number, form in errors._TEXTS:
        error = errno_error(number or errno.EIO, "a/b", form, source="s", written=1, first="f")
        cases.append((f"{errno.errorcode[number or errno.EIO]}-{form or 'own'}", error))
    cases.append(("journal", JournalError("the journal is damaged")))
    return cases


def test_every_error_a_tool_returns_carries_the_code_the_audit_log_records(
    tmp_path: Path,
) -> None:
    """Whatever a tool's work raises, and every refusal before it runs (bad arguments,
    a lone surrogate, no directories), answers with a code, and the audit log records
    that very code for the call."""
    (tmp_path / "f.txt").write_text("x\n")
    log = io.StringIO()
    server = _server(tmp_path, log)
    spec = server.by_name["read_text_file"]
    path = str(tmp_path / "f.txt")
    seen = []
    for label, failure in _failures():
        server.by_name["read_text_file"] = dataclasses.replace(spec, handler=_raising(failure))
        answer = _call(server, "read_text_file", {"path": path})
        seen.append((label, answer, _records(log)))
    server.by_name["read_text_file"] = spec
    refusals: list[tuple[str, str, dict[str, Any]]] = [
        ("arguments", "read_text_file", {"path": 7}),
        ("surrogate", "write_file", {"path": path, "content": "\ud800"}),
        ("missing", "read_text_file", {"path": str(tmp_path / "missing.txt")}),
        ("outside", "read_text_file", {"path": "/etc/passwd"}),
    ]
    for label, tool, arguments in refusals:
        seen.append((label, _call(server, tool, arguments), _records(log)))
    empty = SandboxfsServer(
        ServerOptions(audit=AuditLog(log)), AccessControl(AllowList.of([]), confine=False)
    )
    seen.append(("no directories", _call(empty, "read_text_file", {"path": path}), _records(log)))
    for label, answer, records in seen:
        assert answer["isError"], label
        code = answer["structuredContent"]["error"]["code"]
        assert code and re.fullmatch(r"E[A-Z0-9]+", code), (label, code)
        assert [(r["outcome"], r["error"]) for r in records] == [("error", code)], label
    by_label = {label: answer["structuredContent"]["error"]["code"] for label, answer, _ in seen}
    assert by_label["NotFound"] == "ENOENT" and by_label["NotFound-ENOSPC"] == "ENOSPC"
    assert by_label["journal"] == "EIO" and by_label["missing"] == "ENOENT"
    assert by_label["outside"] == "EACCES" and by_label["arguments"] == "EINVAL"


def test_a_call_that_succeeds_records_no_code(tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_text("x\n")
    log = io.StringIO()
    answer = _call(_server(tmp_path, log), "read_text_file", {"path": str(tmp_path / "f.txt")})
    assert not answer["isError"]
    assert [(r["outcome"], r["error"]) for r in _records(log)] == [("ok", None)]
