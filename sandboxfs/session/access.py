"""Which directories are allowed right now, and how a 2025-era client's Roots change it.

The allow-list in force is an immutable :class:`~sandboxfs.core.allowlist.AllowList`;
an update builds a new one and swaps it in.  While client Roots are being
fetched, the session holds tool calls back (:mod:`sandboxfs.session.protocol`), so
none runs against a root the client has just withdrawn.

Rules (what README.md's "Roots (2025-era clients)" promises users):

* Without ``confine``, valid client Roots replace the command-line directories,
  each carrying ``roots_policy`` (the rules given for every directory).
* With ``confine`` (``--confine-roots``, or forced by Landlock), a root inside a
  command-line directory is allowed as given, a root containing command-line
  directories is narrowed to them, and a root outside all of them is ignored
  and logged.
* An update with no valid root keeps the command-line directories if no root
  was ever in force; once one was, it revokes access until the client exposes
  a root again.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import final

from sandboxfs.tools import OPEN, AllowList, Policy, Root, Workspace

log = logging.getLogger("sandboxfs")


@final
@dataclass(frozen=True, slots=True)
class Effective:
    """The allowed directories in force and where they came from."""

    allow: AllowList
    source: str

    def describe(self) -> str:
        lines = [f"Effective allowed directories ({self.source}):"]
        lines.extend(f"  {name}" for name in self.allow.display())
        return "\n".join(lines)


@final
class AccessControl:
    """The allow-list in force for this connection, and how a Roots answer changes it."""

    def __init__(
        self,
        cli: AllowList,
        *,
        confine: bool,
        notes: tuple[str, ...] = (),
        policy_notes: tuple[str, ...] = (),
        workspace: Workspace | None = None,
        roots_policy: Policy = OPEN,
    ) -> None:
        self.cli = cli
        self.confine = confine
        #: The policy every directory of an unconfined Roots answer carries (a
        #: confined one keeps the policy of the directory it lies in).
        self.roots_policy = roots_policy
        #: This connection's session directory and the stores (``--workspaces``).
        self.workspace = workspace
        #: Lines list_allowed_directories adds after the directories (about Roots).
        self.notes = notes
        #: Lines it adds in every era: what the directories' policies allow.
        self.policy_notes = policy_notes
        source = "from the command line" if not cli.empty else "none yet: waiting for Roots"
        self._current = Effective(cli, source)
        self._roots_in_force = False

    @property
    def current(self) -> Effective:
        return self._current

    def announce(self) -> None:
        """Log the effective allowed directories (at startup and on every change)."""
        log.info("%s", self._current.describe())

    def keep(self, reason: str) -> None:
        """The Roots could not be fetched (``reason``, already escaped): keep what is
        in force."""
        log.warning(
            "Could not get the client's Roots (%s); keeping the current directories", reason
        )

    def install(self, roots: list[Root]) -> None:
        """Put the directories of a Roots answer in force."""
        if roots:
            self._roots_in_force = True
            if self.confine and not self.cli.empty:
                source = "from the client's Roots, confined to the command-line directories"
            elif self.cli.empty:
                source = "from the client's Roots"
            else:
                source = "from the client's Roots, which replaced the command-line directories"
            self._current = Effective(AllowList.of(roots), source)
        elif self._roots_in_force:
            self._current = Effective(
                AllowList.of(()),
                "none: the client's Roots name no usable directory; access is revoked until "
                "it exposes one again",
            )
        else:
            source = "from the command line; the client's Roots name no usable directory"
            self._current = Effective(self.cli, source)
        self.announce()

    def client_without_roots(self) -> None:
        """A 2025-era client without the Roots capability: the command line stays."""
        self._current = Effective(self.cli, "from the command line; the client does not use Roots")
        self.announce()
