"""code_map's parser: source bytes -> the names a file defines and the names it uses.

It runs only in a parse helper (:mod:`sandboxfs.tools.parsehelper`), a process
that holds no directory descriptor, under its own seccomp filter, Landlock and
resource limits: the server never imports this module, nor tree-sitter.

Parsing is tree-sitter's (the ``tree-sitter`` bindings and the tree-sitter project's
own grammar wheels: no grammar is built or fetched at run time).  For each language
one query, written here, captures ``@definition``, the name of a function, method,
class, type, module-level constant ...; ``@reference``, every identifier-like token
outside comments and strings; ``@local``, a name the file binds for itself (a
parameter, a variable); and ``@skip``, a token that names nothing defined elsewhere
(a keyword argument's name, an object literal's key).  A definition's own name and
a skipped token are no references, and a name the file binds itself is no
reference of that file: its uses are most likely of its own binding (``path``,
``mode``, ``name``), not of another file's definition of it.  References are
matched by name only, later, by the ranking (:mod:`sandboxfs.tools.coderank`).

Guarantee: :func:`extract` returns an :class:`Extracted` for any bytes (invalid
code gives what its parse recovered; at most :data:`~sandboxfs.tools.codefacts.DEFINITIONS_MAX`
spans and :data:`~sandboxfs.tools.codefacts.REFERENCES_MAX` names), or raises
:class:`ParseStopped` once ``deadline`` (``time.monotonic()``) has passed; never
anything else.  :func:`parse_source` is the same, made into a
:class:`~sandboxfs.tools.codefacts.Parsed` as the server makes it.  Nothing parsed
is ever executed.  What it costs is bounded by the caller: files are read up to
a size cap (:data:`sandboxfs.tools.codemap.FILE_BYTES`), parsing stops at the
call's deadline and the helper's timer kills a query that does not.
"""

from __future__ import annotations

import functools
import importlib
import time
from collections import Counter
from dataclasses import dataclass
from typing import Final, final

import tree_sitter

from sandboxfs.tools.codefacts import (
    DEFINITIONS_MAX,
    LANGUAGES,
    NAME_MAX,
    Parsed,
    bounded_references,
    facts_from_spans,
)

#: Bytes handed to the parser at a time, and bytes of a file queried at a time.
_SLICE: Final = 64 * 1024
_QUERY_SLICE: Final = 256 * 1024


@final
@dataclass(frozen=True, slots=True)
class Extracted:
    """What a parse found: the byte spans of the names defined, in byte order, and
    how often each other name is used."""

    spans: list[tuple[int, int]]
    references: dict[str, int]


class ParseStopped(Exception):
    """Parsing went past the call's deadline."""


@final
@dataclass(frozen=True, slots=True)
class _Grammar:
    """Where a language's grammar lives (module and its function) and our query."""

    module: str
    function: str
    query: str


# -- the queries -----------------------------------------------------------------------

_PYTHON: Final = """
(parameters (identifier) @local)
(default_parameter name: (identifier) @local)
(typed_parameter (identifier) @local)
(typed_default_parameter name: (identifier) @local)
(lambda_parameters (identifier) @local)
(assignment left: (identifier) @local)
(augmented_assignment left: (identifier) @local)
(pattern_list (identifier) @local)
(tuple_pattern (identifier) @local)
(for_statement left: (identifier) @local)
(for_in_clause left: (identifier) @local)
(as_pattern_target (identifier) @local)
(named_expression name: (identifier) @local)
(keyword_argument name: (identifier) @skip)
(function_definition name: (identifier) @definition)
(class_definition name: (identifier) @definition)
(module (expression_statement (assignment left: (identifier) @definition)))
(identifier) @reference
"""

_JS_DEFINITIONS: Final = """
(arrow_function parameter: (identifier) @local)
(variable_declarator name: (identifier) @local)
(assignment_expression left: (identifier) @local)
(pair key: (property_identifier) @skip)
(function_declaration name: (identifier) @definition)
(generator_function_declaration name: (identifier) @definition)
(class_declaration name: (_) @definition)
(method_definition name: (_) @definition)
(program (lexical_declaration (variable_declarator name: (identifier) @definition)))
(program (variable_declaration (variable_declarator name: (identifier) @definition)))
(program (export_statement
  declaration: (lexical_declaration (variable_declarator name: (identifier) @definition))))
"""

_JAVASCRIPT: Final = (
    _JS_DEFINITIONS
    + "(formal_parameters (identifier) @local)\n"
    + "[(identifier) (property_identifier) (shorthand_property_identifier)]"
    " @reference\n"
)

_TYPESCRIPT: Final = (
    _JS_DEFINITIONS
    + """
(required_parameter pattern: (identifier) @local)
(optional_parameter pattern: (identifier) @local)
(property_signature name: (property_identifier) @skip)
(abstract_class_declaration name: (_) @definition)
(interface_declaration name: (_) @definition)
(type_alias_declaration name: (_) @definition)
(enum_declaration name: (_) @definition)
(function_signature name: (_) @definition)
(abstract_method_signature name: (_) @definition)
[(identifier) (property_identifier) (shorthand_property_identifier) (type_identifier)]
  @reference
"""
)

_GO: Final = """
(parameter_declaration name: (identifier) @local)
(short_var_declaration left: (expression_list (identifier) @local))
(var_spec name: (identifier) @local)
(range_clause left: (expression_list (identifier) @local))
(function_declaration name: (identifier) @definition)
(method_declaration name: (field_identifier) @definition)
(type_spec name: (type_identifier) @definition)
(type_alias name: (type_identifier) @definition)
(source_file (const_declaration (const_spec name: (identifier) @definition)))
(source_file (var_declaration (var_spec name: (identifier) @definition)))
[(identifier) (type_identifier) (field_identifier)] @reference
"""

_RUST: Final = """
(parameter pattern: (identifier) @local)
(let_declaration pattern: (identifier) @local)
(closure_parameters (identifier) @local)
(for_expression pattern: (identifier) @local)
(function_item name: (identifier) @definition)
(function_signature_item name: (identifier) @definition)
(struct_item name: (type_identifier) @definition)
(enum_item name: (type_identifier) @definition)
(union_item name: (type_identifier) @definition)
(trait_item name: (type_identifier) @definition)
(type_item name: (type_identifier) @definition)
(mod_item name: (identifier) @definition)
(macro_definition name: (identifier) @definition)
(const_item name: (identifier) @definition)
(static_item name: (identifier) @definition)
[(identifier) (type_identifier) (field_identifier)] @reference
"""

_JAVA: Final = """
(formal_parameter name: (identifier) @local)
(catch_formal_parameter name: (identifier) @local)
(variable_declarator name: (identifier) @local)
(enhanced_for_statement name: (identifier) @local)
(class_declaration name: (identifier) @definition)
(interface_declaration name: (identifier) @definition)
(enum_declaration name: (identifier) @definition)
(record_declaration name: (identifier) @definition)
(annotation_type_declaration name: (identifier) @definition)
(method_declaration name: (identifier) @definition)
[(identifier) (type_identifier)] @reference
"""

# A C function's name sits under its declarator, behind up to two pointer levels.
_C_DEFINITIONS: Final = """
(parameter_declaration declarator: (identifier) @local)
(parameter_declaration declarator: (pointer_declarator declarator: (identifier) @local))
(init_declarator declarator: (identifier) @local)
(declaration declarator: (identifier) @local)
(function_definition declarator: (function_declarator declarator: (identifier) @definition))
(function_definition declarator: (pointer_declarator
  declarator: (function_declarator declarator: (identifier) @definition)))
(function_definition declarator: (pointer_declarator declarator: (pointer_declarator
  declarator: (function_declarator declarator: (identifier) @definition))))
(declaration declarator: (function_declarator declarator: (identifier) @definition))
(declaration declarator: (pointer_declarator
  declarator: (function_declarator declarator: (identifier) @definition)))
(struct_specifier name: (type_identifier) @definition body: (_))
(union_specifier name: (type_identifier) @definition body: (_))
(enum_specifier name: (type_identifier) @definition body: (_))
(type_definition declarator: (type_identifier) @definition)
(preproc_def name: (identifier) @definition)
(preproc_function_def name: (identifier) @definition)
"""

_C: Final = _C_DEFINITIONS + "[(identifier) (type_identifier) (field_identifier)] @reference\n"

_CPP: Final = (
    _C_DEFINITIONS
    + """
(function_definition declarator: (function_declarator declarator: (field_identifier) @definition))
(function_definition declarator: (function_declarator
  declarator: (qualified_identifier name: (identifier) @definition)))
(function_definition declarator: (function_declarator
  declarator: (qualified_identifier name: (qualified_identifier name: (identifier) @definition))))
(field_declaration declarator: (function_declarator declarator: (field_identifier) @definition))
(class_specifier name: (type_identifier) @definition body: (_))
(alias_declaration name: (type_identifier) @definition)
[(identifier) (type_identifier) (field_identifier) (namespace_identifier)] @reference
"""
)

_RUBY: Final = """
(method_parameters (identifier) @local)
(block_parameters (identifier) @local)
(lambda_parameters (identifier) @local)
(optional_parameter name: (identifier) @local)
(keyword_parameter name: (identifier) @local)
(assignment left: (identifier) @local)
(method name: (_) @definition)
(singleton_method name: (_) @definition)
(class name: (constant) @definition)
(class name: (scope_resolution name: (constant) @definition))
(module name: (constant) @definition)
(module name: (scope_resolution name: (constant) @definition))
[(identifier) (constant)] @reference
"""

_BASH: Final = """
(function_definition name: (word) @definition)
(command_name (word) @reference)
"""

_GRAMMARS: Final[dict[str, _Grammar]] = {
    "python": _Grammar("tree_sitter_python", "language", _PYTHON),
    "javascript": _Grammar("tree_sitter_javascript", "language", _JAVASCRIPT),
    "typescript": _Grammar("tree_sitter_typescript", "language_typescript", _TYPESCRIPT),
    "tsx": _Grammar("tree_sitter_typescript", "language_tsx", _TYPESCRIPT),
    "go": _Grammar("tree_sitter_go", "language", _GO),
    "rust": _Grammar("tree_sitter_rust", "language", _RUST),
    "java": _Grammar("tree_sitter_java", "language", _JAVA),
    "c": _Grammar("tree_sitter_c", "language", _C),
    "cpp": _Grammar("tree_sitter_cpp", "language", _CPP),
    "ruby": _Grammar("tree_sitter_ruby", "language", _RUBY),
    "bash": _Grammar("tree_sitter_bash", "language", _BASH),
}

if tuple(_GRAMMARS) != LANGUAGES:  # the wire names languages by their index there
    raise ImportError("codeparse's grammars and codefacts.LANGUAGES disagree")


@functools.cache
def _compiled(language: str) -> tuple[tree_sitter.Language, tree_sitter.Query]:
    """The grammar and the compiled query of ``language`` (made once per process:
    both are immutable, and a query is shared by the cursors of every thread)."""
    grammar = _GRAMMARS[language]
    module = importlib.import_module(grammar.module)
    lang = tree_sitter.Language(getattr(module, grammar.function)())
    return lang, tree_sitter.Query(lang, grammar.query)


def load_grammars() -> None:
    """Import every grammar's module now: the parse supervisor does it before it
    confines itself (afterwards it can open no file); compiling needs no file."""
    for grammar in _GRAMMARS.values():
        importlib.import_module(grammar.module)


def prepare() -> None:
    """Compile every grammar's query now (the supervisor does, so that the helpers it
    forks have them)."""
    for language in LANGUAGES:
        _compiled(language)


def extract(language: str, data: bytes, deadline: float) -> Extracted:
    """The definitions' spans and the references of ``data`` in ``language`` (see the
    module)."""
    lang, query = _compiled(language)

    def stop(_offset: int, _has_error: bool = False) -> bool:
        return time.monotonic() > deadline

    try:
        tree = tree_sitter.Parser(lang).parse(
            lambda offset, _point: data[offset : offset + _SLICE], progress_callback=stop
        )
    except ValueError:  # the parse was cancelled by ``stop``
        raise ParseStopped from None
    seen: dict[int, int] = {}  # name start -> end: a name captured twice counts once
    counted: Counter[bytes] = Counter()
    local: set[bytes] = set()  # names this file binds itself (parameters, variables)
    # The query runs a slice at a time, the deadline checked between slices (the
    # bindings' own query progress callback crashes: tree-sitter 0.26.1); a node is
    # taken in the slice where it starts.
    cursor = tree_sitter.QueryCursor(query)
    for low in range(0, max(len(data), 1), _QUERY_SLICE):
        if stop(low):
            raise ParseStopped
        high = low + _QUERY_SLICE
        cursor.set_byte_range(low, high)
        captures = cursor.captures(tree.root_node)
        for node in captures.get("definition", ()):
            at, end = node.start_byte, node.end_byte
            if at not in seen and low <= at < high and 0 < end - at <= NAME_MAX:
                seen[at] = end
        for node in captures.get("local", ()):
            local.add(data[node.start_byte : node.end_byte])
        skipped = {node.start_byte for node in captures.get("skip", ())}
        for node in captures.get("reference", ()):
            at, end = node.start_byte, node.end_byte
            if low <= at < high and at not in seen and at not in skipped and end > at:
                counted[data[at:end]] += 1
    references: Counter[str] = Counter()
    for name, n in counted.items():
        if name not in local:
            references[name.decode("utf-8", "replace")] += n
    spans = sorted(seen.items())[:DEFINITIONS_MAX]
    return Extracted(spans, bounded_references(references))


def parse_source(language: str, data: bytes, deadline: float) -> Parsed:
    """What ``data`` defines and uses, as the server makes it of :func:`extract`'s
    answer (see :func:`~sandboxfs.tools.codefacts.facts_from_spans`)."""
    found = extract(language, data, deadline)
    return facts_from_spans(data, found.spans, found.references)
