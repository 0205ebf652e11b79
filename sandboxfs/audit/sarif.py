"""The audit's results as SARIF 2.1.0 that GitHub code scanning accepts.

* One rule per category (:mod:`sandboxfs.audit.rules`), every one declared in every
  log, so that an alert whose case passes again is closed.
* One result per FAIL, and nothing for a case that passed or did not apply (code
  scanning makes an alert of every result, whatever its ``kind``).  ERRORs are tool
  execution notifications: the invocation did not succeed.
* Every result has a physical location: the file that starts the server (a
  workspace's ``.mcp.json``, a Dockerfile; ``--location FILE[:LINE]``, see
  :meth:`Location.parse` for the default), and stable ``partialFingerprints``: rule,
  server identity (that location and the server's command line) and case.

Guarantee: whatever the server answered, the log is valid JSON text (lone
surrogates are written as ``\\uNNNN`` escapes, see :mod:`sandboxfs.audit.reports`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from sandboxfs.audit.reports import json_text
from sandboxfs.audit.rules import RULES, rule_for
from sandboxfs.audit.verdicts import Result, counts, summary

SARIF_SCHEMA: Final = "https://json.schemastore.org/sarif-2.1.0.json"
#: The key of the audit's partial fingerprint; its version changes if its recipe does.
FINGERPRINT: Final = "sandboxfsAudit/v1"
_LINE: Final = re.compile(r"(.*):([0-9]+)")


@dataclass(frozen=True)
class Location:
    """Where a finding is placed: a file relative to the repository's root (the
    current directory) and a line in it."""

    uri: str
    line: int = 1

    @classmethod
    def parse(cls, spec: str | None, command: Sequence[str], cwd: Path | None = None) -> Location:
        """``FILE[:LINE]`` as given, or the default: the first word of ``command`` that
        names a file inside ``cwd``; else ``.mcp.json`` there (at the first line naming
        the server's program); else the program itself."""
        here = (cwd or Path.cwd()).resolve()
        if spec is not None:
            match = _LINE.fullmatch(spec)
            name, line = (match[1], int(match[2])) if match else (spec, 1)
            if not name or line < 1:
                raise ValueError(f"--location {spec!r}: give FILE or FILE:LINE")
            return cls(_uri(Path(name), here), line)
        for word in command:
            if "{root}" in word:
                continue
            path = (here / word).resolve()
            if path.is_file() and path.is_relative_to(here):
                return cls(path.relative_to(here).as_posix())
        mcp_json = here / ".mcp.json"
        if command and mcp_json.is_file():
            program = Path(command[0]).name
            with mcp_json.open(encoding="utf-8", errors="replace") as f:
                for number, text in enumerate(f, start=1):
                    if program in text:
                        return cls(".mcp.json", number)
            return cls(".mcp.json")
        return cls(_uri(Path(command[0]), here) if command else "server")

    def region(self, cwd: Path | None = None) -> dict[str, int]:
        """The whole line (its length read from the file if it is there)."""
        width = 0
        path = (cwd or Path.cwd()) / self.uri
        try:
            with path.open(encoding="utf-8", errors="replace") as f:
                for number, text in enumerate(f, start=1):
                    if number == self.line:
                        width = len(text.rstrip("\r\n"))
                        break
        except (OSError, ValueError):
            pass
        return {
            "startLine": self.line,
            "startColumn": 1,
            "endLine": self.line,
            "endColumn": width + 1,
        }


def _uri(path: Path, here: Path) -> str:
    """Relative to the repository's root when inside it, else an absolute file URI."""
    if not path.is_absolute():
        return path.as_posix()
    resolved = Path(os.path.normpath(path))
    if resolved.is_relative_to(here):
        return resolved.relative_to(here).as_posix()
    return resolved.as_uri()


def server_identity(command: Sequence[str], location: Location, cwd: Path | None = None) -> str:
    """What names the server across runs: its location and its command line, with the
    current directory (a checkout's path, which may move) written as ``.``."""
    here = str((cwd or Path.cwd()).resolve())
    words = [word.replace(here, ".") for word in command]
    return f"{location.uri} {shlex.join(words)}"


def fingerprint(rule_id: str, identity: str, case_id: str) -> str:
    return hashlib.sha256(f"{rule_id}\0{identity}\0{case_id}".encode()).hexdigest()


def _rules() -> list[dict[str, Any]]:
    return [
        {
            "id": rule.id,
            "name": "".join(word.capitalize() for word in rule.category.split("-")),
            "shortDescription": {"text": rule.title},
            "fullDescription": {"text": rule.weakness},
            "help": {"text": rule.help_text, "markdown": rule.help_markdown},
            "defaultConfiguration": {"level": "error"},
            "properties": {
                "tags": ["security", "mcp", "filesystem", rule.category],
                "precision": "high",
                "problem.severity": "error",
                "security-severity": f"{rule.severity:.1f}",
            },
        }
        for rule in RULES.values()
    ]


def sarif(
    results: Sequence[Result],
    *,
    era: str,
    command: Sequence[str],
    version: str,
    location: Location | None = None,
) -> dict[str, Any]:
    """A SARIF 2.1.0 log of one audit (see the module's docstring)."""
    where = location or Location.parse(None, command)
    identity = server_identity(command, where)
    index = {category: i for i, category in enumerate(RULES)}
    region = where.region()
    entries = []
    for result in results:
        if result.status != "FAIL":
            continue
        rule = rule_for(result.case)
        properties: dict[str, Any] = {"case": result.case, "seconds": round(result.seconds, 3)}
        if result.trials is not None:
            properties["attempts"] = result.trials.attempts
        entries.append(
            {
                "ruleId": rule.id,
                "ruleIndex": index[rule.category],
                "kind": "fail",
                "level": "error",
                "message": {"text": json_text(f"{result.case}: {result.reason}")},
                "locations": [
                    {
                        "physicalLocation": {
                            "artifactLocation": {"uri": where.uri, "uriBaseId": "%SRCROOT%"},
                            "region": region,
                        },
                        "logicalLocations": [
                            {"name": result.case, "kind": "test", "fullyQualifiedName": result.case}
                        ],
                    }
                ],
                "partialFingerprints": {FINGERPRINT: fingerprint(rule.id, identity, result.case)},
                "properties": properties,
            }
        )
    errors = [r for r in results if r.status == "ERROR"]
    invocation: dict[str, Any] = {
        "executionSuccessful": not errors,
        "commandLine": json_text(shlex.join(["sandboxfs", "audit", "--", *command])),
        "toolExecutionNotifications": [
            {
                "level": "error",
                "message": {"text": json_text(f"{r.case} could not be run: {r.reason}")},
                "descriptor": {"id": rule_for(r.case).id},
            }
            for r in errors
        ],
        "properties": {
            "era": era,
            "summary": summary(results),
            "counts": counts(results),
            "verdicts": {r.case: r.status for r in results},
        },
    }
    return {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {"name": "sandboxfs audit", "version": version, "rules": _rules()}
                },
                "automationDetails": {"id": f"sandboxfs-audit/{era}/"},
                "invocations": [invocation],
                "results": entries,
            }
        ],
    }


def sarif_text(log: dict[str, Any]) -> str:
    return json.dumps(log, indent=2, ensure_ascii=False) + "\n"
