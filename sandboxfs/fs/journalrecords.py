"""The change journal's records: their format (JSON, one file each, named by id) and
what the store keeps in memory of each.

A record::

    {"version": 1, "id": 7, "time": 1796300000.0, "state": "done",
     "session": "...", "client": "...", "tool": "write_file", "paths": ["a.txt"],
     "undoes": [5],                      (an undo: the records it takes back)
     "partial": "...",                   (a call that stopped part-way)
     "steps": [{"op": "write", "path": "a.txt", "root": "/srv/p", "rel": ["a.txt"],
                "before": {...}, "after": {...}}, ...]}

``state`` is ``pending`` for a patch in progress, ``rolled-back`` for one taken back,
``done`` otherwise (see :mod:`sandboxfs.fs.journaling` for the steps).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, final

JSON = dict[str, Any]


@final
@dataclass(slots=True)
class Indexed:
    """What the store keeps in memory of one record."""

    id: int
    time: float
    state: str
    #: Bytes of the record itself.
    size: int
    #: Objects it references, with their sizes.
    objects: dict[str, int]
    undoes: tuple[int, ...] = ()
    session: str | None = None
    client: str | None = None
    tool: str = ""
    paths: tuple[str, ...] = field(default_factory=tuple)


def entry_name(entry_id: int) -> str:
    return f"{entry_id:012d}.json"


def entry_id_of(name: str) -> int | None:
    stem, dot, suffix = name.partition(".")
    if dot and suffix == "json" and len(stem) == 12 and stem.isdigit():
        return int(stem)
    return None


def referenced_objects(record: JSON) -> dict[str, int]:
    """Every object a record names (``object`` keys at any depth), with its size."""
    found: dict[str, int] = {}

    def visit(value: Any) -> None:
        if isinstance(value, dict):
            digest = value.get("object")
            if isinstance(digest, str):
                found[digest] = int(value.get("size") or 0)
            for inner in value.values():
                visit(inner)
        elif isinstance(value, list):
            for inner in value:
                visit(inner)

    visit(record.get("steps", []))
    return found


def indexed(record: JSON, size: int) -> Indexed:
    return Indexed(
        id=int(record["id"]),
        time=float(record.get("time", 0.0)),
        state=str(record.get("state", "done")),
        size=size,
        objects=referenced_objects(record),
        undoes=tuple(int(i) for i in record.get("undoes", ())),
        session=record.get("session"),
        client=record.get("client"),
        tool=str(record.get("tool", "")),
        paths=tuple(str(p) for p in record.get("paths", ())),
    )


def encode_record(record: JSON) -> bytes:
    """A record as stored: JSON, ASCII only (names that are not UTF-8 survive as
    ``\\udcXX`` escapes, which :func:`json.loads` gives back exactly)."""
    return (json.dumps(record, ensure_ascii=True, sort_keys=True) + "\n").encode("ascii")


def undone_by(items: list[Indexed]) -> dict[int, int]:
    """Which records are undone, and by which: a record is undone by an undo that is not
    itself undone (so undoing an undo redoes)."""
    by_id = {item.id: item for item in items}
    memo: dict[int, bool] = {}

    def live(entry_id: int, depth: int = 0) -> bool:
        if entry_id in memo:
            return memo[entry_id]
        result = depth > 64 or not any(
            entry_id in other.undoes and live(other.id, depth + 1)
            for other in by_id.values()
            if other.state == "done" and other.id > entry_id
        )
        memo[entry_id] = result
        return result

    found: dict[int, int] = {}
    for item in sorted(by_id.values(), key=lambda i: i.id):
        if item.state == "done" and item.undoes and live(item.id):
            for target in item.undoes:
                found[target] = item.id
    return found
