"""The fast argument check decides exactly as jsonschema does, on every tool's schema."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sandboxfs.session.argcheck import compile_schema
from sandboxfs.tools import served_tools

SCHEMAS = {spec.name: spec.input_schema() for spec in served_tools(read_only=False)}

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, 1, -1, 1.0, 0.0, 2.5, 10**9, "", "a", "head", "tail", "size", "name"]),
    st.text(max_size=8),
)
any_json = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)


def valid(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Values that satisfy ``schema`` (as far as a generator easily can)."""
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    kind = schema.get("type")
    if kind == "string":
        return st.text(min_size=schema.get("minLength", 0), max_size=6)
    if kind == "boolean":
        return st.booleans()
    if kind in ("integer", "number"):
        return st.integers(min_value=schema.get("minimum", -5), max_value=schema.get("maximum", 5))
    if kind == "array":
        return st.lists(
            near(schema.get("items", {})), min_size=schema.get("minItems", 0), max_size=3
        )
    if kind == "object":
        return objects_near(schema)
    return any_json


def flawed(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Values just outside ``schema``: wrong types, out of bounds, too short."""
    options: list[st.SearchStrategy[Any]] = [any_json]
    kind = schema.get("type")
    if kind == "string":
        options.append(st.text(max_size=max(schema.get("minLength", 0) - 1, 0)))
    elif kind in ("integer", "number"):
        low, high = schema.get("minimum", -5), schema.get("maximum", 5)
        options.append(st.sampled_from([low - 1, high + 1, low - 0.5, high + 0.5, float(low)]))
        options.append(st.sampled_from([True, False, "1"]))
    elif kind == "array":
        options.append(st.lists(any_json, max_size=3))
    return st.one_of(options)


def near(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Mostly valid values, with every kind of flaw mixed in."""
    return st.one_of(valid(schema), valid(schema), valid(schema), flawed(schema))


def objects_near(schema: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    properties = schema.get("properties", {})
    required = schema.get("required", ())

    @st.composite
    def build(draw: st.DrawFn) -> dict[str, Any]:
        value: dict[str, Any] = {}
        for name, sub in properties.items():
            present = draw(st.integers(0, 19)) < 19 if name in required else draw(st.booleans())
            if present:
                value[name] = draw(near(sub))
        if draw(st.integers(0, 9)) == 9:  # hypothesis favours small draws
            value[draw(st.text(max_size=5))] = draw(json_scalars)
        return value

    return build()


@pytest.mark.parametrize("name", sorted(SCHEMAS))
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_fast_check_agrees_with_jsonschema(name: str, data: st.DataObject) -> None:
    schema = SCHEMAS[name]
    arguments = data.draw(st.one_of(objects_near(schema), any_json))
    expected = jsonschema.Draft202012Validator(schema).is_valid(arguments)
    assert compile_schema(schema)(arguments) == expected, arguments


def test_the_generated_arguments_reach_both_answers() -> None:
    """The comparison above is only meaningful if valid arguments are generated too."""
    schema = SCHEMAS["read_text_file"]
    check = compile_schema(schema)
    assert check({"path": "a.txt", "head": 3})
    assert not check({"path": "a.txt", "head": "3"})
    assert not check({"path": ""})
    assert not check({"path": "a", "unknown": 1})
    assert not check({})


def test_an_unsupported_keyword_is_refused() -> None:
    with pytest.raises(ValueError, match="pattern"):
        compile_schema({"type": "string", "pattern": "^a"})
