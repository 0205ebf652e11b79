"""The audit's results in the formats CI systems read: JUnit XML (what test-report
views display) and SARIF 2.1.0 (what code-scanning dashboards ingest).

Guarantee: whatever the server under audit answered (a failure's reason quotes
it), the report is well-formed.  Text XML 1.0 cannot carry (control characters,
lone surrogates) is written as ``\\xNN``/``\\uNNNN`` escapes; SARIF is JSON, which
carries any text once surrogates are escaped the same way.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from typing import Any, Final, Literal, Protocol

Status = Literal["PASS", "FAIL", "SKIP"]

#: What each category of cases attacks, in a line a user understands.
CATEGORY_TEXT: Final = {
    "path-syntax": "paths that spell a way out of the allowed directory",
    "symlinks": "symbolic links that lead outside the allowed directory",
    "destination": "writes, moves and copies whose destination lies outside",
    "hard-links": "hard links inside that name files outside",
    "special-files": "FIFOs, devices and sockets planted in the tree",
    "resource-exhaustion": "inputs that exhaust the server's memory or time",
    "races": "paths swapped by an attacker while the server works",
    "leaks": "answers that reveal what lies outside",
    "protocol": "JSON-RPC no SDK client sends: unencodable text, a second handshake, a flood",
}
SARIF_SCHEMA: Final = "https://json.schemastore.org/sarif-2.1.0.json"

#: Characters XML 1.0 cannot carry in text or attributes.
_NOT_XML: Final = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_SURROGATE: Final = re.compile("[\ud800-\udfff]")


class Outcome(Protocol):
    """One case's result, as the runner records it."""

    case: str
    status: Status
    reason: str
    seconds: float


def _xml_text(text: str) -> str:
    return _NOT_XML.sub(lambda m: _escape_char(m.group()), text)


def _json_text(text: str) -> str:
    return _SURROGATE.sub(lambda m: _escape_char(m.group()), text)


def _escape_char(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _category(case_id: str) -> str:
    return case_id.split("/", 1)[0]


def junit_xml(results: Sequence[Outcome], *, era: str, command: Sequence[str]) -> bytes:
    """One ``testsuite`` per category, one ``testcase`` per case: a failure carries
    its reason, a skip the feature the server lacks.  Valid against Jenkins'
    junit-10.xsd, the schema CI systems' JUnit readers follow."""
    suites = ET.Element("testsuites", name="sandboxfs audit")
    by_category: dict[str, list[Outcome]] = {}
    for result in results:
        by_category.setdefault(_category(result.case), []).append(result)
    for category, cases in by_category.items():
        suite = ET.SubElement(
            suites,
            "testsuite",
            name=f"sandboxfs audit ({era} era): {category}",
            tests=str(len(cases)),
            failures=str(sum(r.status == "FAIL" for r in cases)),
            errors="0",
            skipped=str(sum(r.status == "SKIP" for r in cases)),
            time=f"{sum(r.seconds for r in cases):.3f}",
        )
        properties = ET.SubElement(suite, "properties")
        ET.SubElement(properties, "property", name="server", value=_xml_text(" ".join(command)))
        ET.SubElement(properties, "property", name="era", value=era)
        for result in cases:
            testcase = ET.SubElement(
                suite,
                "testcase",
                classname=f"sandboxfs-audit.{category}",
                name=result.case.split("/", 1)[-1],
                time=f"{result.seconds:.3f}",
            )
            reason = _xml_text(result.reason)
            if result.status == "FAIL":
                failure = ET.SubElement(
                    testcase, "failure", message=reason.split("\n", 1)[0], type="escape"
                )
                failure.text = f"{result.case}: {CATEGORY_TEXT.get(category, category)}\n{reason}"
            elif result.status == "SKIP":  # junit-10.xsd: a skip's reason is its text
                ET.SubElement(testcase, "skipped").text = reason
    # What junit-10.xsd allows on testsuites (skips are counted on each testsuite).
    suites.set("tests", str(len(results)))
    suites.set("failures", str(sum(r.status == "FAIL" for r in results)))
    suites.set("errors", "0")
    body: bytes = ET.tostring(suites, encoding="utf-8", xml_declaration=True)
    return body + b"\n"


def sarif(
    results: Sequence[Outcome], *, era: str, command: Sequence[str], version: str
) -> dict[str, Any]:
    """A SARIF 2.1.0 log: one rule per case, one result per case run (``fail`` at
    level ``error``, ``pass``, or ``notApplicable`` for a skip)."""
    ids = list(dict.fromkeys(r.case for r in results))
    index = {case_id: i for i, case_id in enumerate(ids)}
    rules = [
        {
            "id": case_id,
            "name": case_id.replace("/", "-"),
            "shortDescription": {"text": f"{case_id}: {CATEGORY_TEXT.get(_category(case_id), '')}"},
            "defaultConfiguration": {"level": "error"},
            "properties": {"category": _category(case_id), "tags": ["security"]},
        }
        for case_id in ids
    ]
    entries = []
    for result in results:
        kind = {"FAIL": "fail", "PASS": "pass", "SKIP": "notApplicable"}[result.status]
        text = _json_text(result.reason) or {"PASS": "held", "SKIP": "skipped"}.get(
            result.status, "failed"
        )
        entries.append(
            {
                "ruleId": result.case,
                "ruleIndex": index[result.case],
                "kind": kind,
                "level": "error" if result.status == "FAIL" else "none",
                "message": {"text": text},
                "locations": [
                    {
                        "logicalLocations": [
                            {"name": result.case, "kind": "test", "fullyQualifiedName": result.case}
                        ]
                    }
                ],
            }
        )
    return {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "sandboxfs audit",
                        "version": version,
                        "rules": rules,
                    }
                },
                "invocations": [
                    {
                        "executionSuccessful": True,
                        "commandLine": _json_text(" ".join(command)),
                        "properties": {"era": era},
                    }
                ],
                "results": entries,
            }
        ],
    }


def sarif_text(log: dict[str, Any]) -> str:
    return json.dumps(log, indent=2, ensure_ascii=False) + "\n"
