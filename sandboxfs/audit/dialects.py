"""Other names for the reference server's tools.

The cases speak the reference server's tool names (``read_text_file``,
``write_file``, ...).  A server that has no tool of that name but one known to do
the same under another name and arguments (desktop-commander's ``edit_block``,
``@j0hanz/filesystem-mcp``'s ``read``, PyPI ``filesystem-mcp``'s ``read_file``) is
called through it, so that it is attacked rather than found not applicable.  A
translation is used only when the server lacks the reference tool, and the first
one whose tool the server has wins; its reply is judged as the reference tool's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final, Protocol

Arguments = dict[str, Any]
Translate = Callable[[Arguments], Arguments]


def _same(arguments: Arguments) -> Arguments:
    return dict(arguments)


def _only(*names: str) -> Translate:
    return lambda arguments: {k: v for k, v in arguments.items() if k in names}


def _create(append: bool) -> Translate:
    def translate(arguments: Arguments) -> Arguments:
        file = {"path": arguments["path"], "content": arguments["content"]}
        return {"files": [{**file, "append": True} if append else {**file, "overwrite": True}]}

    return translate


def _edit_block(arguments: Arguments) -> Arguments:
    first = arguments["edits"][0]
    return {
        "file_path": arguments["path"],
        "old_string": first["oldText"],
        "new_string": first["newText"],
    }


def _moves(copy: bool) -> Translate:
    def translate(arguments: Arguments) -> Arguments:
        move = {"source": arguments["source"], "destination": arguments["destination"]}
        return {"moves": [move], **({"copy": True} if copy else {})}

    return translate


#: reference tool -> (the server's tool, how its arguments are spelled), in order.  A
#: translation holds only for a tool whose input schema has every argument it spells.
TRANSLATIONS: Final[Mapping[str, tuple[tuple[str, Translate], ...]]] = {
    "read_text_file": (("read_file", _only("path")), ("read", _only("path", "head", "tail"))),
    "read_multiple_files": (("read", _only("paths")),),
    "write_file": (("create", _create(append=False)),),
    "append_file": (
        ("write_file", lambda a: {"path": a["path"], "content": a["content"], "mode": "append"}),
        ("create", _create(append=True)),
    ),
    "edit_file": (("edit_block", _edit_block), ("edit", _only("path", "edits"))),
    "list_directory": (("list", _only("path")),),
    "get_file_info": (("stat", _only("path")),),
    "move_file": (("move", _moves(copy=False)),),
    "copy_file": (("move", _moves(copy=True)),),
    "delete_file": (("delete", lambda a: {"paths": [a["path"]]}),),
    "search_files": (("find_files", _only("path", "pattern")),),
}


#: Arguments of the reference tools, as the cases pass them (to see which a translation
#: spells: those are the ones the server's tool must take).
_SAMPLE: Final[Arguments] = {
    "path": "p",
    "paths": ["p"],
    "content": "c",
    "head": 1,
    "tail": 1,
    "edits": [{"oldText": "a", "newText": "b"}],
    "source": "s",
    "destination": "d",
    "pattern": "*",
}


class _Tool(Protocol):
    @property
    def input_schema(self) -> dict[str, Any]: ...


def translation(tool: str, available: Mapping[str, _Tool]) -> tuple[str, Translate] | None:
    """How to call ``tool`` on a server whose tools are ``available``: itself with its
    own arguments, a known translation, or None if the server has neither."""
    if tool in available:
        return tool, _same
    for other, translate in TRANSLATIONS.get(tool, ()):
        if other not in available:
            continue
        takes = available[other].input_schema.get("properties", {})
        if set(translate(dict(_SAMPLE))) <= set(takes):
            return other, translate
    return None
