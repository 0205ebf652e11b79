"""A fast yes/no check of tool arguments against their JSON Schema.

Tool schemas use a small subset of JSON Schema (2020-12): ``type``,
``properties``, ``required``, ``additionalProperties``, ``items``, ``enum``,
``minLength``, ``minItems``, ``minimum`` and ``maximum`` (plus the annotations
``description`` and ``default``).  :func:`compile_schema` turns such a schema
into a predicate that decides exactly as ``jsonschema`` does, at a fraction of
the cost; the adapter asks ``jsonschema`` only to explain a refusal.  A schema
using anything else is refused when compiled, so a new keyword cannot be
silently ignored.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, Final

Check = Callable[[Any], bool]

_ANNOTATIONS: Final = frozenset({"description", "default", "title"})
_KNOWN: Final = _ANNOTATIONS | {
    "type",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "enum",
    "minLength",
    "minItems",
    "minimum",
    "maximum",
}


def _is_integer(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    return isinstance(value, float) and math.isfinite(value) and value.is_integer()


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


_TYPES: Final[Mapping[str, Check]] = {
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "integer": _is_integer,
    "number": _is_number,
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "null": lambda v: v is None,
}


def _same_json(a: Any, b: Any) -> bool:
    """JSON equality as jsonschema's ``enum`` sees it: booleans are not numbers."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same_json(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_json(a[k], b[k]) for k in a)
    if _is_number(a) and _is_number(b):
        return bool(a == b)
    return type(a) is type(b) and bool(a == b)


def compile_schema(schema: Mapping[str, Any]) -> Check:
    """A predicate: does a value satisfy ``schema``?  Raises ValueError for a schema
    outside the supported subset."""
    unknown = set(schema) - _KNOWN
    if unknown:
        raise ValueError(f"unsupported JSON Schema keywords: {sorted(unknown)}")
    checks: list[Check] = []
    kind = schema.get("type")
    if kind is not None:
        names = [kind] if isinstance(kind, str) else list(kind)
        type_checks = [_TYPES[name] for name in names]
        checks.append(
            type_checks[0]
            if len(type_checks) == 1
            else lambda v: any(check(v) for check in type_checks)
        )
    if "enum" in schema:
        allowed = list(schema["enum"])
        checks.append(lambda v: any(_same_json(v, option) for option in allowed))
    if "minLength" in schema:
        least = schema["minLength"]
        checks.append(lambda v: not isinstance(v, str) or len(v) >= least)
    if "minimum" in schema:
        low = schema["minimum"]
        checks.append(lambda v: not _is_number(v) or v >= low)
    if "maximum" in schema:
        high = schema["maximum"]
        checks.append(lambda v: not _is_number(v) or v <= high)
    if "minItems" in schema:
        fewest = schema["minItems"]
        checks.append(lambda v: not isinstance(v, list) or len(v) >= fewest)
    if "items" in schema:
        item = compile_schema(schema["items"])
        checks.append(lambda v: not isinstance(v, list) or all(item(x) for x in v))
    if {"properties", "required", "additionalProperties"} & schema.keys():
        checks.append(_object_check(schema))
    return _every(checks)


def _every(checks: list[Check]) -> Check:
    """All of ``checks``, in order, stopping at the first that fails (one call each:
    a generator per value cost more than the checks of a small call's arguments)."""
    if not checks:
        return lambda _v: True
    if len(checks) == 1:
        return checks[0]
    if len(checks) == 2:
        first, second = checks
        return lambda v: first(v) and second(v)
    return lambda v: all(check(v) for check in checks)


def _object_check(schema: Mapping[str, Any]) -> Check:
    properties = {name: compile_schema(sub) for name, sub in schema.get("properties", {}).items()}
    required = tuple(schema.get("required", ()))
    extra = schema.get("additionalProperties", True)
    if not isinstance(extra, bool):
        raise ValueError("additionalProperties must be true or false")

    def check(value: Any) -> bool:
        if not isinstance(value, dict):
            return True
        if any(name not in value for name in required):
            return False
        for name, item in value.items():
            sub = properties.get(name)
            if sub is None:
                if not extra:
                    return False
            elif not sub(item):
                return False
        return True

    return check
