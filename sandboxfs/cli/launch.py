"""The ``sandboxfs`` command's entry point: process setup due before the heavy imports.

Big buffers (whole-file reads, edits) come from fresh ``mmap``\\ s, and on this
kind of machine faulting their 4 KiB pages in costs more than filling them.
When the kernel grants transparent huge pages only on request (``madvise``
mode, the common default), the process re-executes itself once, first thing,
with glibc's ``glibc.malloc.hugetlb=1`` tunable, so malloc asks for huge pages
(a 10 MiB read or edit is then ~20% faster).  An operator who sets
``glibc.malloc.hugetlb`` in ``GLIBC_TUNABLES`` (to 0, say) keeps their choice.
"""

from __future__ import annotations

import os
import sys
from typing import Final

from sandboxfs.cli.exits import EXIT_INTERRUPTED, INTERRUPTED

THP_MODE_FILE: Final = "/sys/kernel/mm/transparent_hugepage/enabled"
TUNABLE: Final = "glibc.malloc.hugetlb"


def huge_pages_on_request() -> bool:
    """Whether the kernel gives transparent huge pages only to memory that asks."""
    try:
        with open(THP_MODE_FILE, encoding="ascii") as f:
            return "[madvise]" in f.read()
    except OSError:
        return False


def reexec_for_huge_pages() -> None:
    """Re-execute this process with the tunable set, if it would help; returns only
    when it does not (or the exec fails)."""
    tunables = os.environ.get("GLIBC_TUNABLES", "")
    if TUNABLE in tunables or not huge_pages_on_request() or not sys.executable:
        return
    env = dict(os.environ)
    env["GLIBC_TUNABLES"] = f"{tunables}:{TUNABLE}=1" if tunables else f"{TUNABLE}=1"
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)  # noqa: S606
    except OSError:
        return


def main() -> int:
    try:
        reexec_for_huge_pages()
        from sandboxfs.cli.main import main as serve_main  # noqa: PLC0415 - after the exec
    except KeyboardInterrupt:  # Ctrl-C while still importing: the same one line
        print(INTERRUPTED, file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED
    return serve_main()
