"""Physical-limit measurements for bench/run.py: the same work without MCP, in the same run.

Two kinds: an external command (``find``, ``grep``, ``rg``) whose output goes to a file,
timed from spawn to exit (GNU ``time`` gives its peak RSS), and a plain Python loop run in the
bench process (``listing_text``: scandir + sort + format; ``tree_text``: hand-rolled JSON
of a tree), timed in-process.  Every limit checks its own result (a line count, a file
count), so a limit that did less work than the server cannot look fast.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable

from rpc import BenchError


def tool_path(name: str) -> str:
    """The absolute path of a command on PATH, or BenchError saying it is missing."""
    found = shutil.which(name)
    if not found:
        hint = " (apt-get install ripgrep)" if name == "rg" else ""
        raise BenchError(f"{name} not found on PATH{hint}")
    return found


def _count_lines(f: object) -> int:
    assert hasattr(f, "read")
    n = 0
    while chunk := f.read(1 << 20):
        n += chunk.count(b"\n")
    return n


def _peak_kib(argv: list[str], label: str) -> int | None:
    """The command's peak RSS in KiB, from GNU time (None without /usr/bin/time).  Not
    from our own ``wait4``: a child forked from the bench process starts with the bench's
    RSS high-water mark, which survives the exec."""
    gnu_time = shutil.which("time") or "/usr/bin/time"
    if not os.path.exists(gnu_time):
        return None
    with tempfile.NamedTemporaryFile("r") as report:
        done = subprocess.run(  # noqa: S603 - our own fixed commands
            [gnu_time, "-f", "%M", "-o", report.name, *argv],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=False,
        )
        if done.returncode != 0:
            raise BenchError(f"{label} exited with status {done.returncode}")
        text = report.read().split()
    return int(text[-1]) if text and text[-1].isdigit() else None


def time_command(
    argv: list[str], *, runs: int, expect_lines: int, label: str
) -> tuple[float, int | None, int]:
    """(mean seconds, peak RSS in KiB or None, output lines) over ``runs`` timed runs of
    ``argv`` after an untimed warm-up (under GNU time, for the peak RSS), stdout to a
    temporary file.  Every run must exit 0 and print exactly ``expect_lines`` lines."""
    peak = _peak_kib(argv, label)
    times = []
    lines = 0
    for _ in range(runs):
        with tempfile.TemporaryFile() as out:
            t0 = time.perf_counter()
            proc = subprocess.Popen(  # noqa: S603 - our own fixed commands
                argv, stdout=out, stderr=subprocess.DEVNULL
            )
            _, status, _usage = os.wait4(proc.pid, 0)
            times.append(time.perf_counter() - t0)
            proc.returncode = os.waitstatus_to_exitcode(status)
            if proc.returncode != 0:
                raise BenchError(f"{label} exited with status {proc.returncode}")
            out.seek(0)
            lines = _count_lines(out)
        if lines != expect_lines:
            raise BenchError(f"{label} printed {lines} lines, expected {expect_lines}")
    return statistics.mean(times), peak, lines


def time_python(fn: Callable[[], str], *, runs: int, check: Callable[[str], None]) -> float:
    """Mean seconds of ``fn()`` over ``runs`` calls after one untimed, checked warm-up."""
    check(fn())
    t0 = time.perf_counter()
    for _ in range(runs):
        fn()
    return (time.perf_counter() - t0) / runs


def listing_text(path: str) -> str:
    """list_directory's text without MCP: scandir, sort by name, one ``[DIR]``/``[FILE]``
    line per entry."""
    with os.scandir(path) as it:
        entries = sorted(it, key=lambda e: e.name)
    return "\n".join(
        ("[DIR] " if e.is_dir(follow_symlinks=False) else "[FILE] ") + e.name for e in entries
    )


def tree_text(path: str) -> str:
    """directory_tree's JSON text without MCP, hand-rolled (the same layout as sandboxfs's
    answer: a list of {name, type[, children]} objects, indent 2, sorted by name)."""
    out: list[str] = []
    dumps = json.dumps

    def read(dirpath: str) -> list[os.DirEntry[str]]:
        with os.scandir(dirpath) as it:
            return sorted(it, key=lambda e: e.name)

    def emit(entries: list[os.DirEntry[str]], pad: str) -> None:
        inner = pad + "  "
        last = len(entries) - 1
        for i, e in enumerate(entries):
            out.append(f'{pad}{{\n{inner}"name": {dumps(e.name, ensure_ascii=False)},\n')
            if e.is_dir(follow_symlinks=False):
                out.append(f'{inner}"type": "directory",\n{inner}"children": ')
                below = read(e.path)
                if below:
                    out.append("[\n")
                    emit(below, inner + "  ")
                    out.append(f"{inner}]\n")
                else:
                    out.append("[]\n")
            else:
                out.append(f'{inner}"type": "file"\n')
            out.append(f"{pad}}}" + (",\n" if i != last else "\n"))

    top = read(path)
    if not top:
        return "[]"
    out.append("[\n")
    emit(top, "  ")
    out.append("]")
    return "".join(out)
