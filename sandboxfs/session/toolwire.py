"""A tool call on the wire: its answer (:func:`to_wire`, :func:`error_result` and a
failed call's :class:`ToolAnswer` with its code), its declaration in ``tools/list``, the
problems of arguments it refuses, and the note saying where calls run; client text in
any of them is cleaned (:func:`clean_text`)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Final, NamedTuple, final

from sandboxfs.session.auditlog import PATH_ARGUMENTS
from sandboxfs.session.jsonrpc import (
    clean_json_text,
)
from sandboxfs.tools import (
    MediaBlock,
    MountTable,
    ToolResult,
    ToolSpec,
    has_lone_surrogate,
)


def clean_text(text: str) -> str:
    """Text safe for JSON, whatever Unicode it holds: bytes of a name that were not
    UTF-8 become U+FFFD as a UTF-8 decoder replaces them, and any other lone
    surrogate (a client's unpaired escape, echoed in an error) one U+FFFD each
    (:func:`~sandboxfs.session.jsonrpc.clean_json_text`, the one cleaner).  Never raises."""
    if not has_lone_surrogate(text):
        return text
    return clean_json_text(text)


def _clean_json(value: dict[str, Any]) -> dict[str, Any]:
    """A structured result whose top-level strings (a whole file's text) are safe for
    JSON, checked in place without a copy.  Anything nested is left to
    :func:`sandboxfs.session.jsonrpc.encode`, which cleans it the same way only when
    it cannot be encoded: a clean answer is serialized once, not twice."""
    clean = all(clean_text(k) is k for k in value) and all(
        clean_text(v) is v for v in value.values() if isinstance(v, str)
    )
    return value if clean else {clean_text(k): _clean_top(v) for k, v in value.items()}


def _clean_top(value: Any) -> Any:
    return clean_text(value) if isinstance(value, str) else value


#: Characters of one argument's text, and of one problem, an explanation quotes.
_EXPLAINED_CHARS: Final = 200
_PROBLEM_CHARS: Final = 500


def _shortened(value: Any) -> Any:
    """``value`` with every string longer than :data:`_EXPLAINED_CHARS` cut there: what
    jsonschema quotes when it explains a refusal (quoting a 16 MiB string took seconds
    and gigabytes, for an answer no one reads)."""
    if isinstance(value, str):
        return value if len(value) <= _EXPLAINED_CHARS else value[:_EXPLAINED_CHARS] + "…"
    if isinstance(value, list):
        return [_shortened(item) for item in value]
    if isinstance(value, dict):
        return {key: _shortened(item) for key, item in value.items()}
    return value


def argument_problems(schema: dict[str, Any], arguments: dict[str, Any]) -> str:
    """Why ``arguments`` do not satisfy ``schema``, as jsonschema explains it (long
    strings cut first, each problem at most :data:`_PROBLEM_CHARS` characters)."""
    import jsonschema  # noqa: PLC0415 - only refusals need it (and it is slow to import)

    errors = jsonschema.Draft202012Validator(schema).iter_errors(_shortened(arguments))
    problems = []
    for error in sorted(errors, key=str):
        where = "/".join(str(p) for p in error.absolute_path)
        if error.validator == "additionalProperties" or not where:
            problem = error.message
        else:
            problem = f"'{where}': {error.message}"
        if len(problem) > _PROBLEM_CHARS:
            problem = problem[:_PROBLEM_CHARS] + "…"
        problems.append(problem)
    return "; ".join(problems) or "they do not match the tool's input schema"


#: A tool call's result as the 2025 era writes it: ``content`` blocks, ``isError``,
#: and ``structuredContent`` when there is one (2026-07-28 adds ``resultType`` and
#: the ``serverInfo`` stamp).
WireResult = dict[str, Any]


def lone_surrogate_in(arguments: dict[str, Any]) -> str | None:
    """The name of a text argument holding a lone surrogate (which no file, pattern or
    edit can mean), or None.  Paths are left to the path check, which knows the
    names the standard library spells with escaped bytes."""

    def bad(value: Any) -> bool:
        if isinstance(value, str):
            return has_lone_surrogate(value)
        if isinstance(value, list):
            return any(bad(v) for v in value)
        if isinstance(value, dict):
            return any(bad(v) for v in value.values())
        return False

    for key, value in arguments.items():
        if key in PATH_ARGUMENTS:
            continue
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            for item in value:
                for inner, text in item.items():
                    if inner not in PATH_ARGUMENTS and bad(text):
                        return str(inner)
        elif bad(value):
            return key
    return None


@final
class ToolAnswer(NamedTuple):
    """A tool call as it ended: its wire result and, when it failed, its error code
    (what the audit log records: never read back out of the wire)."""

    wire: WireResult
    code: str | None = None


def refused(message: str, code: str = "EINVAL") -> ToolAnswer:
    """A failed call's answer: :func:`error_result`, carrying its code."""
    return ToolAnswer(error_result(message, code), code)


def error_result(message: str, code: str = "EINVAL") -> WireResult:
    """A tool error the model sees (``isError``), with its code for clients."""
    message = clean_text(message)
    return {
        "content": [{"type": "text", "text": message}],
        "structuredContent": {"error": {"code": code, "message": message}},
        "isError": True,
    }


def _media_block(block: MediaBlock) -> dict[str, Any]:
    if block.kind in ("image", "audio"):
        return {"type": block.kind, "data": block.data, "mimeType": block.mime}
    resource = {"uri": block.uri or "file:///", "mimeType": block.mime, "blob": block.data}
    return {"type": "resource", "resource": resource}


def to_wire(result: ToolResult) -> WireResult:
    """A tool's result in wire form, built directly (the SDK's models would copy it
    twice); every string is made safe for JSON."""
    content: list[dict[str, Any]] = []
    if result.text is not None:
        content.append({"type": "text", "text": clean_text(result.text)})
    if result.media is not None:
        content.append(_media_block(result.media))
    wire: WireResult = {"content": content, "isError": False}
    if result.structured is not None:
        wire["structuredContent"] = _clean_json(result.structured)
    return wire


def mount_kind(mounts: MountTable, root: Any) -> tuple[bool, str]:
    """Whether calls on the allowed directory ``root`` may run inline, and its kind."""
    try:
        st = os.fstat(root.fd)
    except OSError:
        return False, "filesystem type unknown"
    return mounts.local(root.path, (os.major(st.st_dev), os.minor(st.st_dev)))


def where_calls_run(kinds: Sequence[tuple[Any, bool, str]], timeout: float) -> str:
    """The note saying, per allowed directory, whether quick calls run inline (a
    local filesystem) or in worker threads with the step timeout."""
    inline = [f"{root.given} ({kind})" for root, local, kind in kinds if local]
    threads = [f"{root.given} ({kind})" for root, local, kind in kinds if not local]
    if not threads:
        return f"Calls run inline: every allowed directory is local: {', '.join(inline)}"
    text = (
        f"Calls run in worker threads with a {timeout:g} s step timeout: "
        f"{', '.join(threads)} is not known to be local"
    )
    if inline:
        text += f" (local: {', '.join(inline)})"
    return text


def tool_definition(spec: ToolSpec, input_schema: dict[str, Any]) -> dict[str, Any]:
    """A tool as ``tools/list`` describes it on the wire."""
    a = spec.annotations
    return {
        "name": spec.name,
        "title": spec.title,
        "description": spec.description,
        "inputSchema": input_schema,
        "annotations": {
            "readOnlyHint": a.read_only,
            "destructiveHint": a.destructive,
            "idempotentHint": a.idempotent,
            "openWorldHint": a.open_world,
        },
    }
