"""The audit's results as JUnit XML (what test-report views display; SARIF, for
code-scanning dashboards, is :mod:`sandboxfs.audit.sarif`).

Guarantee: whatever the server under audit answered (a failure's reason quotes
it), the report is well-formed.  Text XML 1.0 cannot carry (control characters,
lone surrogates) is written as ``\\xNN``/``\\uNNNN`` escapes; JSON reports carry
any text once surrogates are escaped the same way (:func:`json_text`).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from typing import Final

from sandboxfs.audit.rules import rule_for
from sandboxfs.audit.verdicts import Result

#: Characters XML 1.0 cannot carry in text or attributes.
_NOT_XML: Final = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_SURROGATE: Final = re.compile("[\ud800-\udfff]")


def _xml_text(text: str) -> str:
    return _NOT_XML.sub(lambda m: _escape_char(m.group()), text)


def json_text(text: str) -> str:
    """``text`` with lone surrogates written as ``\\uNNNN``: encodable as UTF-8."""
    return _SURROGATE.sub(lambda m: _escape_char(m.group()), text)


def _escape_char(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _category(case_id: str) -> str:
    return case_id.split("/", 1)[0]


def junit_xml(results: Sequence[Result], *, era: str, command: Sequence[str]) -> bytes:
    """One ``testsuite`` per category, one ``testcase`` per case: a FAIL is a
    ``failure`` with its reason, an ERROR an ``error`` (the case could not be run), an
    N/A a ``skipped`` with why.  Valid against Jenkins' junit-10.xsd, the schema CI
    systems' JUnit readers follow."""
    suites = ET.Element("testsuites", name="sandboxfs audit")
    by_category: dict[str, list[Result]] = {}
    for result in results:
        by_category.setdefault(_category(result.case), []).append(result)
    for category, cases in by_category.items():
        suite = ET.SubElement(
            suites,
            "testsuite",
            name=f"sandboxfs audit ({era} era): {category}",
            tests=str(len(cases)),
            failures=str(sum(r.status == "FAIL" for r in cases)),
            errors=str(sum(r.status == "ERROR" for r in cases)),
            skipped=str(sum(r.status == "N/A" for r in cases)),
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
            if result.status in ("FAIL", "ERROR"):
                failed = result.status == "FAIL"
                element = ET.SubElement(
                    testcase,
                    "failure" if failed else "error",
                    message=reason.split("\n", 1)[0],
                    type="escape" if failed else "audit-error",
                )
                element.text = f"{result.case}: {rule_for(result.case).title}\n{reason}"
            elif result.status == "N/A":  # junit-10.xsd: a skip's reason is its text
                ET.SubElement(testcase, "skipped").text = reason
    # What junit-10.xsd allows on testsuites (skips are counted on each testsuite).
    suites.set("tests", str(len(results)))
    suites.set("failures", str(sum(r.status == "FAIL" for r in results)))
    suites.set("errors", str(sum(r.status == "ERROR" for r in results)))
    body: bytes = ET.tostring(suites, encoding="utf-8", xml_declaration=True)
    return body + b"\n"
