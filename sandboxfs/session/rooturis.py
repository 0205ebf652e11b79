"""The ``file:`` URIs of a client's ``roots/list`` answer, read as the MCP SDK's
models read them (a test compares the two on a table of odd URIs).  Client text
that reaches the log is escaped."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import pydantic_core

from sandboxfs.core.names import quote_name

log = logging.getLogger("sandboxfs")


def root_uris(result: Any) -> list[str]:
    """The ``file:`` URIs of a client's ``roots/list`` result, normalized as the SDK's
    models do.  A root that is not one is skipped (and logged); ValueError if the
    answer is not a list of roots at all."""
    roots = result.get("roots") if isinstance(result, Mapping) else None
    if not isinstance(roots, list):
        raise ValueError("the client's roots/list answer holds no list of roots")
    uris = []
    for root in roots:
        uri = root.get("uri") if isinstance(root, Mapping) else None
        if not isinstance(uri, str):
            log.warning("Skipping a malformed client root")
            continue
        try:
            url = pydantic_core.Url(uri)
        except ValueError:
            log.warning("Skipping a client root whose URI does not parse: %s", quote_name(uri))
            continue
        if url.scheme != "file":
            log.warning("Skipping client root that is not a local file:// URI: %s", quote_name(uri))
            continue
        uris.append(str(url))
    return uris
