"""``--ask PATTERN`` and a policy file's ``ask`` keys: which changes need the user's yes.

``--ask`` patterns apply to every allowed directory (workspace directories too),
as ``--protect`` patterns do; a policy file's top-level ``ask`` likewise, and a
``[[directory]]`` table's ``ask`` to that directory alone.  The patterns are the
policy's (see :mod:`sandboxfs.core.policy`); the asking is
:mod:`sandboxfs.session.approval`.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Sequence
from typing import Any

from sandboxfs.cli.config import Config
from sandboxfs.core.allowlist import Root
from sandboxfs.core.policy import Policy, PolicyError
from sandboxfs.fs.approval import AskRules


def _patterns(value: Any, where: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise PolicyError(f"{where}ask must be a string or a list of strings")
    patterns = tuple(value)
    try:
        Policy(protect=patterns)
    except PolicyError as exc:
        raise PolicyError(f"{where}{str(exc).replace('--protect', 'ask')}") from None
    return patterns


def ask_rules(config: Config, roots: Sequence[Root]) -> AskRules | None:
    """The rules of ``--ask`` and the policy file; None when nothing needs asking.
    Raises PolicyError (a bad pattern) or OSError (the policy file cannot be read)."""
    everywhere = tuple(config.ask)
    per_directory: dict[str, tuple[str, ...]] = {}
    if config.policy_file is not None:
        with open(config.policy_file, "rb") as f:
            data = tomllib.load(f)
        everywhere += _patterns(data.get("ask", []), f"--policy {config.policy_file}: ")
        for index, table in enumerate(data.get("directory", []), 1):
            own = _patterns(
                table.get("ask", []), f"--policy {config.policy_file}: directory #{index}: "
            )
            if not own:
                continue
            real = os.path.realpath(os.path.expanduser(str(table["path"])))
            for root in roots:
                if real in (root.path, root.given):
                    per_directory[root.path] = per_directory.get(root.path, ()) + own
    rules = AskRules(everywhere, per_directory)
    return rules if rules.active else None
