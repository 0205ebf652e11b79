"""The rules of the wire that are not about any one method: which era a message
belongs to, the 2026-07-28 envelope every modern request carries, the shapes of
the parameters sandboxfs reads, and how a result is finished for its era.

Pure functions over decoded JSON objects; the messages and codes are the MCP
SDK's own (its client and models are the tests' oracle).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from sandboxfs.session import era as eras
from sandboxfs.session.jsonrpc import (
    CLIENT_CAPABILITIES_META_KEY,
    CLIENT_INFO_META_KEY,
    INVALID_PARAMS,
    PROTOCOL_VERSION_META_KEY,
    SERVER_INFO_META_KEY,
    SUPPORTED_VERSIONS,
    UNSUPPORTED_PROTOCOL_VERSION,
    ProtocolError,
)

LOG_LEVEL_META_KEY: Final = "io.modelcontextprotocol/logLevel"
LOG_LEVELS: Final = (
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
)
#: Results that carry cache hints at 2026-07-28.
CACHEABLE_METHODS: Final = frozenset(
    {
        "tools/list",
        "resources/list",
        "resources/templates/list",
        "resources/read",
        "server/discover",
    }
)
#: What a file's contents (and anything else sandboxfs serves) may be cached for: not at all.
CACHE_HINTS: Final = {"ttlMs": 0, "cacheScope": "private"}


def invalid_params() -> ProtocolError:
    """The SDK's answer to parameters of the wrong shape (it names no detail)."""
    return ProtocolError(INVALID_PARAMS, "Invalid request parameters", "")


def meta_of(params: Mapping[str, Any] | None) -> Any:
    return params.get("_meta") if params is not None else None


def unsupported_version(
    requested: Any, message: str = "Unsupported protocol version"
) -> ProtocolError:
    data: dict[str, Any] = {"supported": list(SUPPORTED_VERSIONS)}
    if isinstance(requested, str):
        data["requested"] = requested
    return ProtocolError(UNSUPPORTED_PROTOCOL_VERSION, message, data)


def check_envelope(params: Mapping[str, Any] | None) -> dict[str, Any]:
    """The 2026-07-28 envelope of a modern request, checked rung by rung as the SDK does;
    returns the ``_meta`` object.  Raises ProtocolError with the SDK's code and message."""
    meta = meta_of(params)
    if not isinstance(meta, dict):
        raise ProtocolError(
            INVALID_PARAMS,
            f"params._meta must be an object carrying the required '{PROTOCOL_VERSION_META_KEY}' "
            f"and '{CLIENT_CAPABILITIES_META_KEY}' envelope keys",
        )
    missing = [
        k for k in (PROTOCOL_VERSION_META_KEY, CLIENT_CAPABILITIES_META_KEY) if k not in meta
    ]
    if missing:
        raise ProtocolError(
            INVALID_PARAMS,
            "params._meta is missing the required envelope key(s): " + ", ".join(missing),
        )
    version = meta[PROTOCOL_VERSION_META_KEY]
    if not isinstance(version, str):
        raise ProtocolError(INVALID_PARAMS, "the protocol-version envelope value must be a string")
    if eras.of_version(version) != "2026":
        raise unsupported_version(version)
    info = meta.get(CLIENT_INFO_META_KEY)
    if not isinstance(meta[CLIENT_CAPABILITIES_META_KEY], dict):
        raise invalid_params()
    if info is not None and not implementation(info):
        raise invalid_params()
    level = meta.get(LOG_LEVEL_META_KEY)
    if level is not None and level not in LOG_LEVELS:
        raise invalid_params()
    if not progress_token_ok(meta):
        raise invalid_params()
    return meta


def implementation(value: Any) -> bool:
    """Whether ``value`` is an ``Implementation`` (client or server info)."""
    return (
        isinstance(value, dict)
        and isinstance(value.get("name"), str)
        and isinstance(value.get("version"), str)
        and all(isinstance(value.get(k), str | None) for k in ("title", "description"))
    )


def _token(value: Any) -> tuple[bool, str | int | None]:
    """A progress token as the SDK reads it (leniently: ``true`` is 1, ``2.0`` is 2,
    null is none): whether it is acceptable, and its value."""
    if value is None or isinstance(value, str):
        return True, value
    if isinstance(value, bool | int):
        return True, int(value)
    if isinstance(value, float) and value.is_integer():
        return True, int(value)
    return False, None


def progress_token_ok(meta: Mapping[str, Any] | None) -> bool:
    """A progress token, if any, is one the SDK accepts (a string or an integer)."""
    if meta is None or "progressToken" not in meta:
        return True
    return _token(meta["progressToken"])[0]


def progress_token(params: Mapping[str, Any] | None) -> str | int | None:
    """The client's progress token, normalized (None if it asked for no progress)."""
    meta = meta_of(params)
    if not isinstance(meta, dict):
        return None
    return _token(meta.get("progressToken"))[1]


def client_name(params: Mapping[str, Any] | None) -> str | None:
    """The client's name from a 2026-07-28 envelope, if it gave one."""
    meta = meta_of(params)
    info = meta.get(CLIENT_INFO_META_KEY) if isinstance(meta, dict) else None
    if not isinstance(info, dict) or not implementation(info):
        return None
    name = info["name"]
    return name if isinstance(name, str) else None


def _tool_call(params: Mapping[str, Any] | None) -> bool:
    return (
        params is not None
        and isinstance(params.get("name"), str)
        and isinstance(params.get("arguments"), dict | None)
    )


def _resource_read(params: Mapping[str, Any] | None) -> bool:
    return params is not None and isinstance(params.get("uri"), str)


def _initialize(params: Mapping[str, Any] | None) -> bool:
    return (
        params is not None
        and isinstance(params.get("protocolVersion"), str)
        and isinstance(params.get("capabilities"), dict)
        and implementation(params.get("clientInfo"))
    )


def _set_level(params: Mapping[str, Any] | None) -> bool:
    return params is not None and params.get("level") in LOG_LEVELS


def _page(params: Mapping[str, Any] | None) -> bool:
    return params is None or isinstance(params.get("cursor"), str | None)


_SHAPES: Final = {
    "tools/call": _tool_call,
    "resources/read": _resource_read,
    "initialize": _initialize,
    "logging/setLevel": _set_level,
    "tools/list": _page,
    "resources/list": _page,
    "resources/templates/list": _page,
}


def check_request_params(method: str, params: Mapping[str, Any] | None) -> None:
    """The parameters sandboxfs reads, of the right shape (else the SDK's -32602)."""
    meta = meta_of(params)
    if (meta is not None and not isinstance(meta, dict)) or not progress_token_ok(meta):
        raise invalid_params()
    shape = _SHAPES.get(method)
    if shape is not None and not shape(params):
        raise invalid_params()


def finish_modern(
    method: str, result: dict[str, Any], server_info: dict[str, Any]
) -> dict[str, Any]:
    """A result as 2026-07-28 carries it: ``resultType``, the server's identity in
    ``_meta``, and cache hints where the method is cacheable."""
    finished = dict(result)
    finished.setdefault("resultType", "complete")
    meta = dict(finished.get("_meta") or {})
    meta.setdefault(SERVER_INFO_META_KEY, server_info)
    finished["_meta"] = meta
    if method in CACHEABLE_METHODS:
        for key, value in CACHE_HINTS.items():
            finished.setdefault(key, value)
    return finished


def finish_legacy(method: str, result: dict[str, Any]) -> dict[str, Any]:
    """A result as the 2025 era carries it: without the fields only 2026-07-28 defines."""
    if "ttlMs" not in result and "cacheScope" not in result:
        return result
    return {k: v for k, v in result.items() if k not in ("ttlMs", "cacheScope", "resultType")}
