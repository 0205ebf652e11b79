"""The policy of each allowed directory, from the command line and ``--policy FILE``.

Command line: ``DIR:ro`` / ``DIR:rw`` (a directory whose name really ends in
``:ro`` is written ``NAME:ro:rw``), and ``--hide``, ``--protect``, ``--preset``,
each repeatable and applying to every allowed directory.

``--policy FILE`` is TOML (read with :mod:`tomllib`)::

    preset = ["secrets"]          # for every directory, like --preset
    hide = ["*.log"]              # like --hide
    protect = ["README.md"]       # like --protect

    [[directory]]                 # one more allowed directory, with its own rules
    path = "/srv/project"
    mode = "ro"                   # or "rw" (the default)
    hide = ["build/**"]
    protect = [".git"]
    preset = ["secrets"]

A directory's policy is the union of the global rules and its own.  Every
problem (an unknown key, a bad pattern or mode, a value of the wrong type) is
a :class:`~sandboxfs.core.policy.PolicyError` naming it.
"""

from __future__ import annotations

import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, final

from sandboxfs.core.policy import Policy, PolicyError

_MODES: Final = {"ro": False, "rw": True}
#: (``ask`` is read by sandboxfs.cli.approvals: changes there need the user's yes.)
_TOP_KEYS: Final = frozenset({"preset", "hide", "protect", "directory", "ask"})
_DIRECTORY_KEYS: Final = frozenset({"path", "mode", "preset", "hide", "protect", "ask"})


@final
@dataclass(frozen=True, slots=True)
class Rules:
    """Patterns and presets, before they are compiled into a policy."""

    hide: tuple[str, ...] = ()
    protect: tuple[str, ...] = ()
    presets: tuple[str, ...] = ()

    def __add__(self, other: Rules) -> Rules:
        return Rules(
            self.hide + other.hide, self.protect + other.protect, self.presets + other.presets
        )

    @property
    def empty(self) -> bool:
        return not (self.hide or self.protect or self.presets)


@final
@dataclass(frozen=True, slots=True)
class Directory:
    """One allowed directory as configured: where, and under which policy."""

    path: str
    policy: Policy


def split_mode(text: str) -> tuple[str, bool | None]:
    """``DIR:ro`` -> (DIR, False), ``DIR:rw`` -> (DIR, True), ``DIR`` -> (DIR, None)."""
    head, colon, mode = text.rpartition(":")
    if colon and head and mode in _MODES:
        return head, _MODES[mode]
    return text, None


def _strings(value: Any, where: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise PolicyError(f"{where} must be a string or a list of strings")
    return tuple(value)


def _rules(table: dict[str, Any], where: str) -> Rules:
    return Rules(
        hide=_strings(table.get("hide", []), f"{where}hide"),
        protect=_strings(table.get("protect", []), f"{where}protect"),
        presets=_strings(table.get("preset", []), f"{where}preset"),
    )


def load_policy_file(path: str) -> tuple[Rules, list[tuple[str, bool, Rules]]]:
    """The global rules of a policy file and its directories (path, writable, rules).
    Raises OSError if it cannot be read, PolicyError if it cannot be used."""
    with open(path, "rb") as f:
        try:
            data = tomllib.load(f)
        except tomllib.TOMLDecodeError as exc:
            raise PolicyError(f"--policy {path}: not valid TOML: {exc}") from None
    unknown = sorted(set(data) - _TOP_KEYS)
    if unknown:
        raise PolicyError(f"--policy {path}: unknown key {unknown[0]!r}")
    try:
        rules = _rules(data, "")
        directories = []
        tables = data.get("directory", [])
        if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
            raise PolicyError("directory must be an array of tables ([[directory]])")
        for index, table in enumerate(tables, 1):
            where = f"directory #{index}: "
            extra = sorted(set(table) - _DIRECTORY_KEYS)
            if extra:
                raise PolicyError(f"{where}unknown key {extra[0]!r}")
            where_path = table.get("path")
            if not isinstance(where_path, str) or not where_path:
                raise PolicyError(f"{where}path must be a non-empty string")
            mode = table.get("mode", "rw")
            if mode not in _MODES:
                raise PolicyError(f"{where}mode must be 'ro' or 'rw', got {mode!r}")
            directories.append((where_path, _MODES[mode], _rules(table, where)))
    except PolicyError as exc:
        raise PolicyError(f"--policy {path}: {exc}") from None
    return rules, directories


#: A policy file as read: its rules for every directory, and its directories
#: (path, writable, own rules).
PolicyFile = tuple[Rules, list[tuple[str, bool, Rules]]]


def configure(
    directories: Sequence[str], rules: Rules, policy_file: str | None, *, read_only: bool
) -> list[Directory]:
    """Every allowed directory with its policy: the command line's (``DIR:ro``
    suffixes split off), then the policy file's.  Raises PolicyError or OSError."""
    loaded = load_policy_file(policy_file) if policy_file is not None else (Rules(), [])
    return combine(directories, rules, loaded, read_only=read_only)


def combine(
    directories: Sequence[str], rules: Rules, loaded: PolicyFile, *, read_only: bool
) -> list[Directory]:
    """:func:`configure` with the policy file already read (``loaded``)."""
    file_rules, file_directories = loaded
    everywhere = rules + file_rules
    # Checked once even with no directory to apply them to.
    Policy.of(hide=everywhere.hide, protect=everywhere.protect, presets=everywhere.presets)
    configured = []
    for text in directories:
        path, writable = split_mode(text)
        configured.append((path, True if writable is None else writable, Rules()))
    configured.extend(file_directories)
    result = []
    for path, writable, own in configured:
        combined = everywhere + own
        policy = Policy.of(
            writable=writable and not read_only,
            hide=combined.hide,
            protect=combined.protect,
            presets=combined.presets,
        )
        result.append(Directory(path, policy))
    return result
