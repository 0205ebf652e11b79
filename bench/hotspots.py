#!/usr/bin/env python3
"""Summarise py-spy ``--format raw`` profiles (collapsed stacks), e.g. from
``bench/run.py --profile DIR --profile-format raw``.

    python bench/hotspots.py /tmp/prof/list-rep1.txt [more.txt ...] [--top 25]

Prints, as shares of all samples: the hottest leaf lines (self time), the functions
with the most inclusive time, and the time per package (the leaf frame's package).
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from pathlib import Path

FRAME = re.compile(r"^(?P<func>.*) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")


def parse(paths: list[Path]) -> Counter[tuple[str, ...]]:
    stacks: Counter[tuple[str, ...]] = Counter()
    for path in paths:
        for raw in path.read_text().splitlines():
            stack, _, count = raw.rpartition(" ")
            if stack and count.isdigit():
                stacks[tuple(stack.split(";"))] += int(count)
    return stacks


def func_of(frame: str) -> str:
    """``func (file)`` without the line number."""
    m = FRAME.match(frame)
    return f"{m['func']} ({m['file']})" if m else frame


def package_of(frame: str) -> str:
    m = FRAME.match(frame)
    if not m:
        return frame
    file = m["file"]
    if file.startswith("<"):
        return file
    parts = file.split("/")
    return parts[0] if len(parts) > 1 else f"stdlib:{parts[0]}"


def summarise(stacks: Counter[tuple[str, ...]], top: int) -> str:
    total = sum(stacks.values())
    if not total:
        return "no samples"
    self_lines: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    packages: Counter[str] = Counter()
    for stack, n in stacks.items():
        self_lines[stack[-1]] += n
        packages[package_of(stack[-1])] += n
        for func in {func_of(f) for f in stack}:
            inclusive[func] += n

    def block(title: str, counter: Counter[str]) -> list[str]:
        rows = [f"{title}:"]
        rows += [f"  {n / total * 100:5.1f}%  {key}" for key, n in counter.most_common(top)]
        return rows

    out = [f"{total} samples"]
    out += block("self time (leaf frame, file:line)", self_lines)
    out += block("inclusive time (function)", inclusive)
    out += block("self time by package", packages)
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("profiles", nargs="+", type=Path)
    ap.add_argument("--top", type=int, default=20)
    args = ap.parse_args()
    print(summarise(parse(args.profiles), args.top))


if __name__ == "__main__":
    main()
