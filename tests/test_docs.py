"""The documentation runs as written.

Every ``sh`` and ``python`` block of README.md, docs/ and fuzz/README.md is run,
in order, in a scratch copy of the repository (what ``pipx`` installs goes there
too, its command directory first on PATH), unless the line right before its
fence says why not (``<!-- not run: REASON -->``).  A block marked
``<!-- run: in the background ... -->`` starts a server that stays up while the
blocks after it run.  Python blocks run with the scratch copy's ``.venv`` (the one
the quick start makes), as a newcomer would run them; a ``print(...)  # TEXT``
line in one must print TEXT.  JSON blocks must parse.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "fuzz" / "README.md"]
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```\n", re.S | re.M)
_DIRECTIVE = re.compile(r"<!-- (not run|run): (.+?) -->\n\Z")


@dataclass(frozen=True)
class Block:
    document: Path
    line: int
    language: str
    code: str
    #: "not run: REASON", "run: in the background ...", or "" (run, in order).
    directive: str

    @property
    def where(self) -> str:
        return f"{self.document.relative_to(ROOT)}:{self.line}"

    @property
    def runs(self) -> bool:
        return self.language in ("sh", "python") and not self.directive.startswith("not run")

    @property
    def background(self) -> bool:
        return self.directive.startswith("run: in the background")


def blocks(document: Path) -> list[Block]:
    text = document.read_text()
    found = []
    for match in _FENCE.finditer(text):
        before = text[: match.start()]
        directive = _DIRECTIVE.search(before)
        found.append(
            Block(
                document,
                before.count("\n") + 1,
                match.group(1),
                match.group(2),
                f"{directive.group(1)}: {directive.group(2)}" if directive else "",
            )
        )
    return found


ALL = [block for document in DOCUMENTS for block in blocks(document)]


def test_every_block_runs_or_says_why() -> None:
    assert any(b.runs for b in ALL)
    for block in ALL:
        if block.directive.startswith("not run"):
            assert block.directive.removeprefix("not run:").strip(), block.where
            assert block.language in ("sh", "python"), f"{block.where}: only code is run"


@pytest.mark.parametrize("block", [b for b in ALL if b.language == "json"], ids=lambda b: b.where)
def test_json_blocks_parse(block: Block) -> None:
    json.loads(block.code)


def _scratch_copy(into: Path) -> None:
    """The repository as a fresh clone has it (tracked files only)."""
    files = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.split(b"\0")
    for name in filter(None, files):
        source, target = ROOT / os.fsdecode(name), into / os.fsdecode(name)
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_file():
            target.write_bytes(source.read_bytes())
            target.chmod(source.stat().st_mode)


def _port_free(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) != 0


def _wait_served(process: subprocess.Popen[str], block: Block) -> None:
    assert process.stderr is not None
    for line in process.stderr:
        if "serving MCP on" in line:
            return
    raise AssertionError(f"{block.where}: the background server never started")


def _user_environment(scratch: Path) -> dict[str, str]:
    """The environment of a newcomer with pipx: what pipx installs goes into the
    scratch copy (its ``~/.local/bin`` first on PATH), never onto this machine."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("SANDBOXFS_")}
    environment.pop("VIRTUAL_ENV", None)
    tools = scratch / ".tools"
    tools.mkdir(exist_ok=True)
    pipx = Path(sys.executable).parent / "pipx"  # the test extra's
    if pipx.exists() and not (tools / "pipx").exists():
        (tools / "pipx").symlink_to(pipx)
    bin_dir = scratch / ".local" / "bin"
    environment["PIPX_HOME"] = str(scratch / ".local" / "share" / "pipx")
    environment["PIPX_BIN_DIR"] = str(bin_dir)
    environment["PATH"] = os.pathsep.join([str(bin_dir), str(tools), environment.get("PATH", "")])
    return environment


def _run_in_order(document: Path, scratch: Path) -> None:
    environment = _user_environment(scratch)
    background: list[subprocess.Popen[str]] = []
    try:
        for block in blocks(document):
            if not block.runs:
                continue
            if block.language == "python":
                venv_python = scratch / ".venv" / "bin" / "python"
                python = str(venv_python) if venv_python.exists() else sys.executable
                (scratch / "block.py").write_text(block.code)
                command = [python, "block.py"]
            else:
                command = ["bash", "-e", "-o", "pipefail", "-c", block.code]
            if block.background:
                process = subprocess.Popen(
                    command,
                    cwd=scratch,
                    env=environment,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                    text=True,
                    start_new_session=True,
                )
                background.append(process)
                _wait_served(process, block)
                continue
            result = subprocess.run(
                command,
                cwd=scratch,
                env=environment,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=600,
            )
            assert result.returncode == 0, f"{block.where}:\n{result.stdout}\n{result.stderr}"
            for expected in re.findall(r"print\(.*\)  # (.+)$", block.code, re.M):
                assert expected in result.stdout, f"{block.where}: {expected!r} not printed"
    finally:
        for process in background:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=60)
            assert process.stderr is not None
            process.stderr.close()


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda d: str(d.relative_to(ROOT)))
def test_the_document_runs_as_written(document: Path, tmp_path: Path) -> None:
    if not any(b.runs for b in blocks(document)):
        pytest.skip("every block says why it is not run")
    if "127.0.0.1:8080" in document.read_text() and not _port_free(8080):
        pytest.skip("port 8080, which the README's example uses, is taken on this machine")
    _scratch_copy(tmp_path)
    _run_in_order(document, tmp_path)
