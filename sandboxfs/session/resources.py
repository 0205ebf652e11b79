"""Files as MCP resources: the template ``file://{+path}`` and ``resources/read``.

A read is confined exactly like the tools (the same façade, the same caps); the
answer is text for a textual type whose bytes are UTF-8, else a base64 blob, and
may never be cached (``ttlMs: 0``, private).  Errors are -32602 with the URI in
``data``; ``resources/list`` is empty: the server never enumerates the disk.
"""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING, Any, Final

from sandboxfs.session.jsonrpc import INVALID_PARAMS, ProtocolError
from sandboxfs.tools import (
    IsADirectory,
    NotFound,
    SandboxError,
    Watch,
    guess_mime,
    is_textual,
    local_path,
    quote_path,
    whole_bytes,
)

if TYPE_CHECKING:
    from sandboxfs.session.host import CallHost

FILE_TEMPLATE: Final = {
    "name": "file",
    "title": "Files in the allowed directories",
    "uriTemplate": "file://{+path}",
    "description": "Any file inside an allowed directory, by its absolute file:// URI "
    "(percent-encoded).",
}


def _not_found(uri: str, message: str = "Resource not found") -> ProtocolError:
    return ProtocolError(INVALID_PARAMS, message, {"uri": uri})


async def read_resource(server: CallHost, uri: str) -> dict[str, Any]:
    path = local_path(uri)
    if path is None:
        raise _not_found(uri, "Resource not found: only local file:// URIs are served")
    sandbox = server.sandbox(server.access.current)
    limit = server.options.limits.read_bytes
    # A URI names bytes exactly: the tools' quoted form stands for the same name, so
    # no component of it is read as an escape (and a name that is not UTF-8 is reached).
    exact = quote_path(path)

    def read(watch: Watch) -> bytes:
        with sandbox.with_watch(watch).open_file(exact) as f:
            return whole_bytes(f, limit, exact)

    try:
        data = await server.bounded(read)
    except NotFound:
        raise _not_found(uri) from None
    except IsADirectory:
        raise _not_found(uri, "Resource not found: a directory is not a resource") from None
    except SandboxError as exc:
        raise ProtocolError(INVALID_PARAMS, str(exc), {"uri": uri}) from None
    mime = guess_mime(path)
    contents: dict[str, Any] = {"uri": uri}
    text = None
    if is_textual(mime):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            text = None
    if text is not None:
        contents.update(mimeType=mime or "text/plain", text=text)
    else:
        contents.update(
            mimeType=mime or "application/octet-stream",
            blob=base64.b64encode(data).decode("ascii"),
        )
    return {"contents": [contents], "ttlMs": 0, "cacheScope": "private"}
