"""Glob patterns over relative paths, without regular expressions.

Semantics follow minimatch with ``dot: true`` (what the reference server uses):

* matching is case-sensitive and against the whole ``/``-separated relative path;
* ``*`` matches any run of characters within one segment, ``?`` one character,
  ``[abc]``/``[a-z]``/``[!x]``/``[^x]`` a character class; none of them crosses ``/``;
* ``**`` as a whole segment matches zero or more segments (at the end of a
  pattern, one or more: ``src/**`` matches what is below ``src``, not ``src``);
* names starting with ``.`` are matched like any other;
* ``{a,b}`` alternatives expand (nested allowed); a leading ``!`` negates;
* ``\\`` escapes the next character;
* an absolute pattern, or one with a trailing ``/``, never matches.

Matching is a small automaton walk with no backtracking blow-up: a segment is
matched in O(len(pattern) x len(name)) (a regex only where one ``*`` keeps it so),
the segments by a bit-set automaton that walks can advance name by name.
Invariant (see fuzz/fuzz_globs.py): :func:`compile_glob` either returns a matcher
or raises :class:`GlobError`; the matcher returns a bool for any string.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, final

#: Upper bound on brace alternatives, so ``{a,b}{a,b}...`` cannot explode.
MAX_ALTERNATIVES: Final = 1024
#: Longest pattern accepted, in characters.
MAX_PATTERN_LENGTH: Final = 4096
#: Deepest nesting of brace groups.
MAX_BRACE_DEPTH: Final = 32
#: Total characters all brace alternatives together may hold.
MAX_EXPANDED_CHARS: Final = 65536


class GlobError(ValueError):
    """The pattern cannot be used; the message says why."""


# A segment is a tuple of tokens: a literal character (str of length 1), ANY (one
# character), STAR (any run), or a Class.
_ANY: Final = object()
_STAR: Final = object()
_GLOBSTAR: Final = "**"


@final
@dataclass(frozen=True, slots=True)
class _Class:
    negated: bool
    singles: frozenset[str]
    ranges: tuple[tuple[str, str], ...]

    def matches(self, ch: str) -> bool:
        inside = ch in self.singles or any(lo <= ch <= hi for lo, hi in self.ranges)
        return inside != self.negated


_Token = object
_Segment = tuple[_Token, ...]


@final
@dataclass(frozen=True, slots=True)
class _Choice:
    """A ``{a,b,...}`` group: each option is a sequence of text and choices."""

    options: tuple[list[str | _Choice], ...]


def _parse_braces(pattern: str) -> list[str | _Choice]:
    """Split ``pattern`` into text and brace groups, without recursion.  Escapes are
    kept as they are; ``{x}`` (no comma) and unclosed groups stay literal."""
    top: list[str | _Choice] = []
    current = top
    frames: list[tuple[list[str | _Choice], list[list[str | _Choice]]]] = []
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\":
            current.append(pattern[i : i + 2])
            i += 2
            continue
        if ch == "{":
            if len(frames) >= MAX_BRACE_DEPTH:
                raise GlobError(f"braces nested more than {MAX_BRACE_DEPTH} deep")
            frames.append((current, [[]]))
            current = frames[-1][1][0]
        elif ch == "," and frames:
            frames[-1][1].append([])
            current = frames[-1][1][-1]
        elif ch == "}" and frames:
            parent, options = frames.pop()
            if len(options) == 1:
                parent.extend(["{", *options[0], "}"])
            else:
                parent.append(_Choice(tuple(options)))
            current = parent
        else:
            current.append(ch)
        i += 1
    while frames:  # unclosed: the braces and commas were literal after all
        parent, options = frames.pop()
        parent.append("{")
        for index, option in enumerate(options):
            if index:
                parent.append(",")
            parent.extend(option)
    return top


def _expand(items: list[str | _Choice], budget: int) -> list[str]:
    results = [""]
    text = ""  # runs of plain text are joined before they multiply
    for item in items:
        if isinstance(item, str):
            text += item
            continue
        options = [t for option in item.options for t in _expand(option, budget)]
        if len(results) * len(options) > MAX_ALTERNATIVES:
            raise GlobError(f"pattern expands to more than {MAX_ALTERNATIVES} alternatives")
        if (sum(map(len, results)) + len(results) * len(text)) * len(options) > budget:
            raise GlobError("pattern expands to too much text")
        results = [r + text + o for r in results for o in options]
        text = ""
    if len(results) * len(text) > budget:
        raise GlobError("pattern expands to too much text")
    return [r + text for r in results]


def _expand_braces(pattern: str) -> list[str]:
    """Every alternative of ``pattern``'s ``{a,b}`` groups (nested allowed), bounded in
    number and in total size."""
    return _expand(_parse_braces(pattern), MAX_EXPANDED_CHARS)


def _parse_class(segment: str, i: int) -> tuple[_Class, int] | None:
    """Parse ``[...]`` starting at ``segment[i] == '['``; None if it does not close."""
    j = i + 1
    negated = j < len(segment) and segment[j] in "!^"
    if negated:
        j += 1
    singles: set[str] = set()
    ranges: list[tuple[str, str]] = []
    first = True
    while j < len(segment):
        ch = segment[j]
        if ch == "]" and not first:
            return _Class(negated, frozenset(singles), tuple(ranges)), j + 1
        if ch == "\\" and j + 1 < len(segment):
            j += 1
            ch = segment[j]
        if j + 2 < len(segment) and segment[j + 1] == "-" and segment[j + 2] != "]":
            hi = segment[j + 2]
            if hi == "\\" and j + 3 < len(segment):
                hi = segment[j + 3]
                j += 1
            ranges.append((ch, hi))
            j += 3
        else:
            singles.add(ch)
            j += 1
        first = False
    return None


def _parse_segment(segment: str) -> _Segment:
    tokens: list[_Token] = []
    i = 0
    while i < len(segment):
        ch = segment[i]
        if ch == "\\":
            if i + 1 < len(segment):
                tokens.append(segment[i + 1])
                i += 2
            else:
                tokens.append("\\")
                i += 1
        elif ch == "*":
            if not tokens or tokens[-1] is not _STAR:
                tokens.append(_STAR)
            i += 1
        elif ch == "?":
            tokens.append(_ANY)
            i += 1
        elif ch == "[":
            parsed = _parse_class(segment, i)
            if parsed is None:
                tokens.append("[")
                i += 1
            else:
                tokens.append(parsed[0])
                i = parsed[1]
        else:
            tokens.append(ch)
            i += 1
    return tuple(tokens)


def _token_matches(token: _Token, ch: str) -> bool:
    if token is _ANY:
        return True
    if isinstance(token, _Class):
        return token.matches(ch)
    return token == ch


def _match_segment(tokens: _Segment, name: str) -> bool:
    """Wildcard match with a single backtrack point: O(len(tokens) * len(name))."""
    t = n = 0
    star_t = star_n = -1
    while n < len(name):
        if t < len(tokens) and tokens[t] is not _STAR and _token_matches(tokens[t], name[n]):
            t += 1
            n += 1
        elif t < len(tokens) and tokens[t] is _STAR:
            star_t, star_n = t, n
            t += 1
        elif star_t >= 0:
            star_n += 1
            n = star_n
            t = star_t + 1
        else:
            return False
    while t < len(tokens) and tokens[t] is _STAR:
        t += 1
    return t == len(tokens)


def _segment_regex(tokens: _Segment) -> str:
    """A Python regex for one segment (``re.DOTALL``: a name may hold any character)."""
    out: list[str] = []
    for token in tokens:
        if token is _STAR:
            out.append(".*")
        elif token is _ANY:
            out.append(".")
        elif isinstance(token, _Class):
            members = [re.escape(ch) for ch in sorted(token.singles)]
            members += [f"{re.escape(lo)}-{re.escape(hi)}" for lo, hi in token.ranges if lo <= hi]
            if not members:
                out.append("." if token.negated else "(?!)")
            else:
                out.append(f"[{'^' if token.negated else ''}{''.join(members)}]")
        else:
            out.append(re.escape(str(token)))
    return "".join(out)


def _segment_test(tokens: _Segment) -> Callable[[str], object]:
    """A predicate for one name: string equality for a literal segment, a regex for
    one with at most one ``*`` (backtracking then stays O(len(pattern) x len(name))),
    else the single-backtrack-point matcher."""
    if all(isinstance(t, str) for t in tokens):
        return "".join(str(t) for t in tokens).__eq__
    if sum(t is _STAR for t in tokens) <= 1:
        return re.compile(_segment_regex(tokens), re.DOTALL).fullmatch
    return functools.partial(_match_segment, tokens)


@final
class Glob:
    """A compiled glob pattern: :meth:`matches` takes a relative path; walks match
    name by name with :meth:`start`, :meth:`step` and :meth:`accepts`.

    All brace alternatives form one automaton.  Alternative ``a`` with segments
    ``s0..sL-1`` owns the positions ``off..off+L``; a state is a bit set of
    positions reached, position ``off+L`` meaning "the whole alternative matched".
    A ``**`` that is not last may match zero names (its next position is reached
    with it); a final ``**`` needs at least one.
    """

    __slots__ = (
        "_accept",
        "_skippable",
        "_start",
        "_tests",
        "negated",
        "pattern",
    )

    def __init__(self, pattern: str) -> None:
        if len(pattern) > MAX_PATTERN_LENGTH:
            raise GlobError(f"pattern is longer than {MAX_PATTERN_LENGTH} characters")
        self.pattern = pattern
        self.negated = pattern.startswith("!")
        body = pattern[1:] if self.negated else pattern
        #: Per position: the name test, None for a ``**``; end positions hold None too
        #: but are never stepped from.
        self._tests: list[Callable[[str], object] | None] = []
        self._start = self._accept = self._skippable = 0
        for alternative in _expand_braces(body):
            self._add(alternative)
        self._start = self._close(self._start)

    def _add(self, alternative: str) -> None:
        parts = alternative.split("/")
        # A leading "" (absolute) or trailing "" (trailing slash) can never match a
        # relative path without a trailing slash; empty parts in between collapse.
        if alternative.startswith("/") or (len(parts) > 1 and parts[-1] == ""):
            return
        kept = [p for p in parts if p != ""]
        if not kept:
            return
        offset = len(self._tests)
        self._start |= 1 << offset
        for index, part in enumerate(kept):
            if part == _GLOBSTAR:
                self._tests.append(None)
                if index < len(kept) - 1:
                    self._skippable |= 1 << (offset + index)
            else:
                self._tests.append(_segment_test(_parse_segment(part)))
        self._tests.append(None)  # the end position
        self._accept |= 1 << (offset + len(kept))

    def _close(self, state: int) -> int:
        """Add the positions reached by letting non-final ``**`` match nothing."""
        frontier = state & self._skippable
        while frontier:
            reached = (frontier << 1) & ~state
            state |= reached
            frontier = reached & self._skippable
        return state

    def start(self) -> int:
        """The state before any name."""
        return self._start

    def step(self, state: int, name: str) -> int:
        """The state after one more name (0: nothing below can match)."""
        following = 0
        pending = state & ~self._accept
        while pending:
            low = pending & -pending
            pending ^= low
            test = self._tests[low.bit_length() - 1]
            if test is None:  # ** consumes this name and may consume more
                following |= low | (low << 1)
            elif test(name):
                following |= low << 1
        return self._close(following) if following else 0

    def accepts(self, state: int) -> bool:
        """Whether a path that led to ``state`` matches (negation applied)."""
        return bool(state & self._accept) != self.negated

    def matches(self, relative_path: str) -> bool:
        state = self._start
        for name in relative_path.split("/"):
            if name and state:
                state = self.step(state, name)
        return self.accepts(state)


def compile_glob(pattern: str) -> Glob:
    """Compile ``pattern``; raises GlobError for an unusable one."""
    if "\0" in pattern:
        raise GlobError("pattern contains a NUL character")
    return Glob(pattern)


def name_matcher(patterns: list[str]) -> Callable[[str], bool]:
    """One predicate for single names: whether ``name`` matches any of ``patterns``
    (each without ``/``, in this module's syntax, braces expanded), as one segment
    of a :class:`Glob` would.  Alternatives with at most one ``*`` share one regex
    (so its backtracking stays O(len(pattern) x len(name))); the rare others use
    the single-backtrack-point matcher.  Raises GlobError for an unusable pattern."""
    regexes: list[str] = []
    others: list[Callable[[str], bool]] = []
    for pattern in patterns:
        if "/" in pattern:
            raise GlobError(f"a name pattern holds no '/': {pattern!r}")
        if "\0" in pattern or len(pattern) > MAX_PATTERN_LENGTH:
            raise GlobError(f"pattern cannot be used: {pattern[:40]!r}")
        for alternative in _expand_braces(pattern):
            tokens = _parse_segment(alternative)
            if sum(t is _STAR for t in tokens) <= 1:
                regexes.append(_segment_regex(tokens))
            else:
                others.append(functools.partial(_match_segment, tokens))
    combined = (
        re.compile("|".join(f"(?:{r})" for r in regexes), re.DOTALL).fullmatch if regexes else None
    )

    def matches(name: str) -> bool:
        if combined is not None and combined(name) is not None:
            return True
        return any(test(name) for test in others)

    return matches
