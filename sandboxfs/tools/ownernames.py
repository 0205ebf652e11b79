"""User and group names, read once at startup.

Name lookups read /etc/passwd and /etc/group, which Landlock puts out of reach
once the server runs, so the tables are loaded before it applies.
"""

from __future__ import annotations

import grp
import pwd
from dataclasses import dataclass, field
from typing import final


@final
@dataclass(frozen=True)
class Accounts:
    """uid and gid to name; unknown ids are shown as numbers."""

    users: dict[int, str] = field(default_factory=dict)
    groups: dict[int, str] = field(default_factory=dict)

    @classmethod
    def load(cls) -> Accounts:
        return cls(
            {entry.pw_uid: entry.pw_name for entry in pwd.getpwall()},
            {entry.gr_gid: entry.gr_name for entry in grp.getgrall()},
        )

    def user(self, uid: int) -> str:
        return self.users.get(uid, str(uid))

    def group(self, gid: int) -> str:
        return self.groups.get(gid, str(gid))
