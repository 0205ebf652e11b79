"""The SDK-free wire facts agree with the SDK's own."""

from __future__ import annotations

import mcp_types as types
import mcp_types.version as sdk_versions
import pytest
from mcp.shared.dispatcher import coerce_request_id

from sandboxfs.session import jsonrpc as protocol


def test_versions_and_codes_are_the_sdks() -> None:
    assert protocol.HANDSHAKE_VERSIONS == sdk_versions.HANDSHAKE_PROTOCOL_VERSIONS
    assert protocol.MODERN_VERSIONS == sdk_versions.MODERN_PROTOCOL_VERSIONS
    assert protocol.PROTOCOL_VERSION_META_KEY == types.PROTOCOL_VERSION_META_KEY
    assert protocol.CLIENT_CAPABILITIES_META_KEY == types.CLIENT_CAPABILITIES_META_KEY
    assert protocol.CLIENT_INFO_META_KEY == types.CLIENT_INFO_META_KEY
    assert protocol.SERVER_INFO_META_KEY == types.SERVER_INFO_META_KEY
    assert protocol.PARSE_ERROR == types.PARSE_ERROR
    assert protocol.INVALID_REQUEST == types.INVALID_REQUEST
    assert protocol.INVALID_PARAMS == types.INVALID_PARAMS
    assert protocol.INTERNAL_ERROR == types.INTERNAL_ERROR


@pytest.mark.parametrize("request_id", [7, "7", "07", "-3", "x", "", " 7", "7.0", 0, "1_000"])
def test_ids_correlate_as_the_sdks(request_id: int | str) -> None:
    assert protocol.correlation_key(request_id) == coerce_request_id(request_id)


def test_what_cannot_be_an_id_correlates_with_nothing() -> None:
    for value in (None, True, 1.5, [1], {"a": 1}):
        assert protocol.correlation_key(value) is None
