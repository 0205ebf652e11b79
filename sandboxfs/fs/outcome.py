"""What a mutation reports: it happened, what it left, and anything that failed
after the change was made."""

from __future__ import annotations

from dataclasses import dataclass
from typing import final


@final
@dataclass(frozen=True, slots=True)
class Change:
    """A mutation that happened.  (One that did not raises SandboxError instead.)"""

    #: The revision of what the path holds now; None when it cannot be told here.
    revision: str | None = None
    #: The size of the file written, appended to or copied.
    size: int | None = None
    #: How many entries were created or removed.
    count: int = 1
    #: A step after the change that failed (flushing to disk): the change stands.
    warning: str | None = None
