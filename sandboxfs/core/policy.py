"""What an agent may see and change beneath one allowed directory.

A :class:`Policy` belongs to a :class:`~sandboxfs.core.allowlist.Root` and is
enforced by the chokepoint (:mod:`sandboxfs.core.chokepoint`) on every
component of every location it opens, lists or changes:

* **read-only**: nothing beneath the directory is created, written, truncated,
  removed or renamed (Landlock makes the same directory read-only too);
* **hidden** patterns: a matching entry, and everything below it, is treated as
  absent: never listed, never opened (``ENOENT``, exactly as if it did not
  exist), never created, never a rename's source or destination;
* **protected** patterns: a matching entry, and everything below it, stays
  visible and readable but is never created, written, removed, renamed or
  replaced.

Patterns use the ``search_files`` glob syntax (:mod:`sandboxfs.core.globs`)
over the path relative to the allowed directory.  A pattern without a ``/``
matches a name at any depth (``*.pem`` is ``**/*.pem``), as in ``.gitignore``;
a pattern with a ``/`` is anchored at the allowed directory (``.git/config``
is only the top one; write ``**/.git/config`` for every one).  A path is
hidden (protected) when it or any directory above it matches.

Allowed directories may nest (``R`` and ``R/sub``): then one file has a path
below each, and either may be the one a request resolves beneath.  Each
directory's policy then also carries the rules of the others (``also``), each
applied where that directory lies, so a path is judged by the rules of every
allowed directory it is in, whichever resolved it: ``--hide x/secret`` hides
``R/x/secret`` and ``R/sub/x/secret`` alike
(:func:`sandboxfs.core.allowlist.nested_policies`).

Guarantee: :meth:`Policy.verdict` is a pure function of the components below
the allowed directory; the chokepoint applies it to canonical (symlink-free)
locations only, so a symlink cannot reach a hidden or protected entry under
another name.  Hard links can: a policy names paths, not files (SECURITY.md).
"""

from __future__ import annotations

import errno
import functools
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Final, final

from sandboxfs.core.globs import Glob, GlobError, compile_glob, name_matcher

#: The named presets an operator can start from (``--preset NAME``).
PRESETS: Final[dict[str, tuple[tuple[str, ...], tuple[str, ...]]]] = {
    # name: (hidden, protected)
    "secrets": (
        (
            ".env*",
            "*.pem",
            "*.key",
            "*.p12",
            "*.pfx",
            "id_*",
            ".netrc",
            ".git-credentials",
            ".pgpass",
            ".npmrc",
            ".pypirc",
            ".ssh",
            "**/.git/config",
            "**/.aws/credentials",
            "**/.docker/config.json",
        ),
        (),
    ),
}

#: Most patterns one policy may hold (each is matched at every path component).
MAX_PATTERNS: Final = 256

#: Open flags that create, write or truncate.
_CHANGING_FLAGS: Final = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


class PolicyError(ValueError):
    """A policy that cannot be used (a bad pattern, an unknown preset)."""


@final
class PolicyRefusal(OSError):
    """The policy refuses a change: not the kernel, but reported the same way.

    ``reason`` says which rule refused (it names no path); the chokepoint's
    error gate turns it into a client-safe message naming the client's path.
    """

    def __init__(self, number: int, reason: str) -> None:
        super().__init__(number, reason)
        self.reason = reason


def _compile(
    patterns: Iterable[str], option: str
) -> tuple[Callable[[str], bool] | None, tuple[Glob, ...]]:
    """The patterns without ``/`` as one test of a single name (they match at any
    depth), and those with ``/`` as globs anchored at the allowed directory."""
    names, globs = [], []
    for pattern in patterns:
        if not pattern or pattern.startswith(("!", "/")) or pattern.endswith("/"):
            raise PolicyError(
                f"{option} {pattern!r}: a pattern is relative, not negated, with no trailing '/'"
            )
        try:
            if "/" in pattern:
                globs.append(compile_glob(pattern))
            else:
                name_matcher([pattern])  # each checked alone, so the error names it
                names.append(pattern)
        except GlobError as exc:
            raise PolicyError(f"{option} {pattern!r}: {exc}") from None
    return (name_matcher(names) if names else None), tuple(globs)


@final
@dataclass(frozen=True, slots=True)
class Verdict:
    """What the policy says of one location."""

    hidden: bool
    protected: bool


_VISIBLE: Final = Verdict(hidden=False, protected=False)

# Per pattern set, the automaton states after some components, and whether a
# prefix already matched: (hide states, hidden, protect states, protected).
_State = tuple[tuple[int, ...], bool, tuple[int, ...], bool]


@final
@dataclass(frozen=True)
class Policy:
    """The rules of one allowed directory.  Immutable and hashable.

    ``base`` is where this directory lies below the one the patterns are
    anchored at (a client's root inside an allowed directory inherits that
    directory's policy with the components between them).
    """

    writable: bool = True
    hide: tuple[str, ...] = ()
    protect: tuple[str, ...] = ()
    base: tuple[str, ...] = ()
    #: The policies of allowed directories that nest with this one, each with the
    #: components below this directory where it applies (``()``: everywhere here).
    also: tuple[tuple[tuple[str, ...], Policy], ...] = ()
    #: Anchored patterns (with a ``/``) as globs; the others as one test of a name.
    _hide: tuple[Glob, ...] = field(default=(), init=False, repr=False, compare=False)
    _protect: tuple[Glob, ...] = field(default=(), init=False, repr=False, compare=False)
    _hide_name: Callable[[str], bool] | None = field(
        default=None, init=False, repr=False, compare=False
    )
    _protect_name: Callable[[str], bool] | None = field(
        default=None, init=False, repr=False, compare=False
    )
    #: Whether some names are hidden or protected: then every open is exact, so only
    #: canonical locations are judged.
    patterned: bool = field(default=False, init=False, repr=False, compare=False)
    #: Whether anything is refused at all (an open policy costs one test per open).
    active: bool = field(default=False, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if len(self.hide) + len(self.protect) > MAX_PATTERNS:
            raise PolicyError(f"a policy holds at most {MAX_PATTERNS} patterns")
        hide_name, hide = _compile(self.hide, "--hide")
        protect_name, protect = _compile(self.protect, "--protect")
        object.__setattr__(self, "_hide", hide)
        object.__setattr__(self, "_protect", protect)
        object.__setattr__(self, "_hide_name", hide_name)
        object.__setattr__(self, "_protect_name", protect_name)
        nested = [policy for _, policy in self.also]
        patterned = bool(self.hide or self.protect) or any(p.patterned for p in nested)
        object.__setattr__(self, "patterned", patterned)
        writable = self.writable and all(p.writable for p in nested)
        object.__setattr__(self, "active", not writable or patterned)

    @classmethod
    def of(
        cls,
        *,
        writable: bool = True,
        hide: Iterable[str] = (),
        protect: Iterable[str] = (),
        presets: Iterable[str] = (),
    ) -> Policy:
        """A policy from options and named presets (duplicates dropped, order kept)."""
        hidden, protected = list(hide), list(protect)
        for name in presets:
            if name not in PRESETS:
                raise PolicyError(f"unknown preset {name!r} (known: {', '.join(PRESETS)})")
            hidden.extend(PRESETS[name][0])
            protected.extend(PRESETS[name][1])
        return cls(
            writable=writable,
            hide=tuple(dict.fromkeys(hidden)),
            protect=tuple(dict.fromkeys(protected)),
        )

    # -- what it says ------------------------------------------------------------

    @property
    def hides(self) -> bool:
        """Whether anything may be hidden (by this directory's rules or a nested one's)."""
        return bool(self.hide) or any(policy.hides for _, policy in self.also)

    def _nested(self, rel: tuple[str, ...]) -> Iterator[tuple[Policy, tuple[str, ...]]]:
        """The nested directories' policies that apply at ``rel``, each with ``rel``
        as seen from its own directory."""
        for prefix, policy in self.also:
            if rel[: len(prefix)] == prefix:
                yield policy, rel[len(prefix) :]

    def verdict(self, rel: tuple[str, ...]) -> Verdict:
        """What the policy says of the location ``rel`` below this directory."""
        if not self.patterned:
            return _VISIBLE
        _, hidden, _, protected = _states(self, rel)
        for policy, theirs in self._nested(rel):
            verdict = policy.verdict(theirs)
            hidden, protected = hidden or verdict.hidden, protected or verdict.protected
        if not (hidden or protected):
            return _VISIBLE
        return Verdict(hidden, protected)

    def hidden_names(self, rel: tuple[str, ...], names: Iterable[str]) -> set[str]:
        """Which of ``names``, entries of the directory at ``rel``, are hidden."""
        if self.also:
            names = list(names)
            found = self._own_hidden_names(rel, names)
            for policy, theirs in self._nested(rel):
                found |= policy.hidden_names(theirs, names)
            return found
        return self._own_hidden_names(rel, names)

    def _own_hidden_names(self, rel: tuple[str, ...], names: Iterable[str]) -> set[str]:
        if not self.hide:
            return set()
        hide_states, hidden, _, _ = _states(self, rel)
        if hidden:
            return set(names)
        found = set(filter(self._hide_name, names)) if self._hide_name else set()
        live = [(glob, state) for glob, state in zip(self._hide, hide_states, strict=True) if state]
        if live:
            found.update(
                name
                for name in names
                if any(glob.accepts(glob.step(state, name)) for glob, state in live)
            )
        return found

    def beneath(self, below: tuple[str, ...]) -> Policy:
        """This policy for a directory ``below`` this one (a client's narrower root)."""
        if not below:
            return self
        also: list[tuple[tuple[str, ...], Policy]] = []
        for prefix, policy in self.also:
            shared = min(len(prefix), len(below))
            if prefix[:shared] != below[:shared]:
                continue  # that nested directory is not below the narrower one
            if len(below) >= len(prefix):
                also.append(((), policy.beneath(below[len(prefix) :])))
            else:
                also.append((prefix[len(below) :], policy))
        return Policy(
            writable=self.writable,
            hide=self.hide,
            protect=self.protect,
            base=(*self.base, *below),
            also=tuple(also),
        )

    # -- what the chokepoint asks --------------------------------------------------

    def check_visible(self, rel: tuple[str, ...]) -> None:
        """Raise ENOENT, as for a missing entry, if ``rel`` is hidden."""
        if self.verdict(rel).hidden:
            raise FileNotFoundError(errno.ENOENT, "No such file or directory")

    def check_change(self, rel: tuple[str, ...]) -> None:
        """Raise :class:`PolicyRefusal` unless the entry ``rel`` may be created,
        written, removed or renamed."""
        if not self.writable or any(not p.writable for p, _ in self._nested(rel)):
            raise PolicyRefusal(errno.EROFS, "read-only directory")
        verdict = self.verdict(rel)
        if verdict.hidden:
            raise PolicyRefusal(errno.EACCES, "hidden by policy")
        if verdict.protected:
            raise PolicyRefusal(errno.EACCES, "protected by policy")

    def check_open(self, rel: tuple[str, ...], flags: int) -> None:
        """The check for opening ``rel`` with ``flags``: hidden is absent; an open
        that creates, writes or truncates must be a change the policy allows."""
        self.check_visible(rel)
        if flags & _CHANGING_FLAGS or flags & os.O_TMPFILE == os.O_TMPFILE:
            self.check_change(rel)

    def describe(self) -> str:
        """One line for the operator's log and list_allowed_directories."""
        parts = ["read-write" if self.writable else "read-only"]
        if self.hide:
            parts.append(f"{len(self.hide)} hidden pattern(s)")
        if self.protect:
            parts.append(f"{len(self.protect)} protected pattern(s)")
        return ", ".join(parts)


#: The policy of a directory with no rules.
OPEN: Final = Policy()


@functools.lru_cache(maxsize=8192)
def _states(policy: Policy, rel: tuple[str, ...]) -> _State:
    """The automaton states after ``policy.base + rel`` (memoized per prefix, so
    siblings share their parents' work)."""
    if rel:
        return _advance(policy, _states(policy, rel[:-1]), rel[-1])
    state: _State = (
        tuple(glob.start() for glob in policy._hide),
        False,
        tuple(glob.start() for glob in policy._protect),
        False,
    )
    for name in policy.base:
        state = _advance(policy, state, name)
    return state


def _advance(policy: Policy, state: _State, name: str) -> _State:
    hide, hidden, protect, protected = state
    if not hidden:
        hide = tuple(g.step(s, name) if s else 0 for g, s in zip(policy._hide, hide, strict=True))
        hidden = any(g.accepts(s) for g, s in zip(policy._hide, hide, strict=True) if s) or bool(
            policy._hide_name and policy._hide_name(name)
        )
    if not protected:
        protect = tuple(
            g.step(s, name) if s else 0 for g, s in zip(policy._protect, protect, strict=True)
        )
        protected = any(
            g.accepts(s) for g, s in zip(policy._protect, protect, strict=True) if s
        ) or bool(policy._protect_name and policy._protect_name(name))
    return hide, hidden, protect, protected
