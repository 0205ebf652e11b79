"""The layout keeps its promises: layers import one way, nothing imports in a
circle, only the chokepoint opens client paths.

Layers, lowest first: the compiled shim, ``binding``, ``core`` (the chokepoint),
``fs`` (filesystem operations), ``tools`` (no MCP types), ``session``,
``transports``, ``tenancy`` (the tenants' front), ``cli``.  A module may import
its own layer and the **face** of the layer right below it (that layer's package,
``sandboxfs.fs`` for the tools, whose ``__init__`` exports what the layer above may
use), and nothing else: not a module inside the layer below, not a layer further
down.  Type-only and lazy imports count too.  The CLI is the composition root: it
builds the server from every layer and may import any of them.
The auditor (``audit``) sits beside: it may use the binding (its attacker makes
raw syscalls) and nothing else of sandboxfs; only the CLI may start it.
Lazy imports inside functions count; imports for type checking only do not.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "sandboxfs"

RANKS = {
    "_native": 0,
    "binding": 1,
    "core": 2,
    "fs": 3,
    "tools": 4,
    "session": 5,
    "transports": 6,
    "tenancy": 7,
    "cli": 8,
    "__main__": 9,
}

#: Modules allowed to call path-taking os functions (or open()) and why; every
#: other module works through descriptors the chokepoint handed out.
PATH_CALLS = {
    "core/chokepoint/directory.py": "the *at calls on one entry name, relative to a held descriptor",
    "core/chokepoint/parent.py": "opens an allowed directory beneath a Root's own descriptor",
    "core/allowlist.py": "opens the allowed directories the operator (or a client's Roots) names",
    "core/roots.py": "checks a client's Roots, which define the allow-list itself",
    "core/landlock.py": "opens Python's own directories for Landlock rules",
    "core/mounts.py": "opens /proc/self/mountinfo (the mount table) before Landlock",
    "binding/syscalls.py": "probes openat2 on /",
    "cli/serve.py": "the operator's files: token file, audit log, directories",
    "cli/launch.py": "reads the kernel's transparent huge page mode",
    "cli/healthcheck.py": "the container's health check reads /proc for the server's command line",
    "cli/cleanup.py": "removes the unix socket the server made, once it is done",
    "cli/policies.py": "reads the operator's --policy file",
    "cli/journal.py": "makes the operator's --journal directory, and names its session journals",
    "cli/approvals.py": "reads the ask keys of the operator's --policy file",
    "transports/stdio.py": "opens /dev/null for the private copies of fds 0 and 1",
    "transports/http/server.py": "the operator's unix socket path",
    "tenancy/config.py": "reads the operator's --tenants file",
    "transports/http/credentials.py": "reads the operator's --token-file",
    "tenancy/proxy.py": "makes and removes the workers' private socket directory",
    "tenancy/supervisor.py": "removes a worker's stale socket in that directory",
    "transports/http/metrics.py": "keeps /proc/self/statm and /proc/self/fd open for the process metrics",
    "audit/attacker.py": "the attacker changes the tree as a local attacker would",
    "audit/cases/path_syntax.py": "the auditor builds fixtures",
    "audit/cases/symlinks.py": "the auditor builds fixtures",
    "audit/cases/files.py": "the auditor builds fixtures",
    "audit/cases/exhaustion.py": "the auditor builds fixtures",
    "audit/cases/roots.py": "the auditor builds fixtures",
    "audit/cases/sidecar.py": "the auditor reads /proc for the server's listening sockets",
    "audit/cases/races.py": "the auditor builds fixtures",
    "audit/cases/leaks.py": "the auditor builds fixtures",
    "audit/harness.py": "the auditor builds and checks fixtures",
}
_PATH_FUNCTIONS = {
    "open", "stat", "lstat", "readlink", "unlink", "remove", "rmdir", "mkdir", "makedirs",
    "rename", "replace", "link", "symlink", "chmod", "chown", "lchown", "listdir", "scandir",
    "mkfifo", "mknod", "truncate", "access", "chdir", "chroot", "removedirs", "statvfs", "walk",
    "fwalk",
}  # fmt: skip
_OS_PATH_FUNCTIONS = {"realpath", "isdir", "isfile", "exists", "lexists", "islink", "getsize"}


def _modules() -> Iterator[tuple[str, Path]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE.parent).with_suffix("")
        name = ".".join(relative.parts).removesuffix(".__init__")
        yield name, path


def _type_checking_only(tree: ast.Module) -> set[int]:
    """Line numbers of imports under ``if TYPE_CHECKING:``."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for inner in ast.walk(node):
                if isinstance(inner, ast.Import | ast.ImportFrom):
                    lines.add(inner.lineno)
    return lines


def _imports(name: str, path: Path, known: set[str], *, typing: bool = False) -> set[str]:
    """The sandboxfs modules ``name`` imports at run time (lazy imports included), and
    for type checking too if ``typing``."""
    tree = ast.parse(path.read_text())
    skipped = set() if typing else _type_checking_only(tree)
    found: set[str] = set()
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in skipped:
            continue
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            # ``from package import module`` imports the module; anything else, the package.
            modules = [f"{node.module}.{alias.name}" for alias in node.names]
            targets = [m for m in modules if m in known]
            if len(targets) < len(modules):
                targets.append(node.module)
        else:
            continue
        found.update(t for t in targets if t in known and t != name)
    return found


def _graph(*, typing: bool = False) -> dict[str, set[str]]:
    modules = dict(_modules())
    known = set(modules) | {"sandboxfs._native"}
    return {name: _imports(name, path, known, typing=typing) for name, path in modules.items()}


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "package"


GRAPH = _graph()
#: With the imports made for type checking only: no circle there either.
TYPED_GRAPH = _graph(typing=True)


def test_the_graph_sees_the_package() -> None:
    assert "sandboxfs.core.chokepoint" in GRAPH["sandboxfs.core.resolver"]
    assert {_layer(m) for m in GRAPH} >= set(RANKS) - {"_native"} | {"audit"}


#: Layers that may import any layer below them (the composition root).
COMPOSITION_ROOT = frozenset({"cli", "__main__", "package"})


def _statements(path: Path) -> Iterator[tuple[int, str]]:
    """(line, module) of every ``from sandboxfs... import`` and ``import sandboxfs...``
    in ``path``: at the top, under ``TYPE_CHECKING`` and inside functions alike."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            if node.module.split(".")[0] == "sandboxfs":
                yield node.lineno, node.module
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "sandboxfs":
                    yield node.lineno, alias.name


def allowed(layer: str, imported: str) -> bool:
    """Whether a module of ``layer`` may import the module ``imported``."""
    target = _layer(imported)
    if imported == "sandboxfs":  # the package itself: its version only
        return True
    if layer == "audit":  # the wire only; its attacker makes raw syscalls (binding)
        return target in ("audit", "binding")
    if target == "audit":
        return layer == "cli"
    if layer in COMPOSITION_ROOT:
        return layer == "package" or RANKS[target] <= RANKS[layer]
    if target == layer:
        return True
    return RANKS[target] == RANKS[layer] - 1 and imported == f"sandboxfs.{target}"


def test_the_rule_refuses_what_it_should() -> None:
    assert allowed("tools", "sandboxfs.fs")
    assert allowed("tools", "sandboxfs.tools.spec")
    assert not allowed("tools", "sandboxfs.fs.facade")  # inside the layer below
    assert not allowed("tools", "sandboxfs.core")  # two layers down
    assert not allowed("tools", "sandboxfs.binding.syscalls")
    assert not allowed("fs", "sandboxfs.tools")  # upward
    assert allowed("cli", "sandboxfs.core.landlock")  # the composition root
    assert not allowed("audit", "sandboxfs.core")
    assert not allowed("session", "sandboxfs.audit.runner")


@pytest.mark.parametrize("module", sorted(GRAPH))
def test_a_layer_imports_itself_and_the_face_below(module: str) -> None:
    layer = _layer(module)
    path = dict(_modules())[module]
    wrong = [f"line {n}: {m}" for n, m in _statements(path) if not allowed(layer, m)]
    assert not wrong, f"{module} ({layer}) reaches past the face below: {wrong}"


@pytest.mark.parametrize("graph", [GRAPH, TYPED_GRAPH], ids=["run-time", "type-checking"])
def test_there_is_no_import_cycle(graph: dict[str, set[str]]) -> None:
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(module: str) -> None:
        state[module] = 1
        path.append(module)
        for imported in sorted(graph.get(module, ())):
            if state.get(imported) == 1:
                cycle = [*path[path.index(imported) :], imported]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if imported in graph and imported not in state:
                visit(imported)
        path.pop()
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module)


def _calls(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Call):
            continue
        fn = node.func
        if isinstance(fn, ast.Name) and fn.id in ("open", "openat2"):
            found.add(fn.id)
        if not isinstance(fn, ast.Attribute):
            continue
        if fn.attr == "openat2":
            found.add("openat2")
        owner = fn.value
        if isinstance(owner, ast.Name) and owner.id == "os" and fn.attr in _PATH_FUNCTIONS:
            found.add(f"os.{fn.attr}")
        if (
            isinstance(owner, ast.Attribute)
            and isinstance(owner.value, ast.Name)
            and owner.value.id == "os"
            and owner.attr == "path"
            and fn.attr in _OS_PATH_FUNCTIONS
        ):
            found.add(f"os.path.{fn.attr}")
    return found


def test_only_the_chokepoint_calls_openat2() -> None:
    callers = {
        str(path.relative_to(PACKAGE)) for _, path in _modules() if "openat2" in _calls(path)
    }
    assert callers == {"core/chokepoint/confinement.py", "binding/syscalls.py"}


def test_only_the_chokepoint_opens_names_in_c() -> None:
    """sfs_read_leaves (native/scan.c) opens names beneath a descriptor as openat2
    does: its flags come from the chokepoint, the one caller of its wrapper."""
    callers = {
        str(path.relative_to(PACKAGE))
        for _, path in _modules()
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in ("read_leaves", "sfs_read_leaves")
    }
    assert callers == {"core/chokepoint/directory.py", "binding/syscalls.py"}


@pytest.mark.parametrize("module", sorted(str(p.relative_to(PACKAGE)) for _, p in _modules()))
def test_only_named_modules_touch_paths(module: str) -> None:
    """Filesystem operations, tools and the protocol work only through descriptors
    the chokepoint handed out: none of them names a path to the kernel."""
    calls = _calls(PACKAGE / module) - {"openat2"}
    if module in PATH_CALLS:
        return
    assert calls == set(), f"{module} calls {sorted(calls)} on a path"


#: Top-level packages of the MCP SDK: the auditor's client and the tests' oracle only.
SDK_PACKAGES = {"mcp", "mcp_types"}


def _imported_names(path: Path) -> set[str]:
    """Every module name ``path`` imports (lazy imports included)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names


def test_only_the_auditor_imports_the_mcp_sdk() -> None:
    importers = sorted(
        module
        for module, path in _modules()
        if not module.startswith("sandboxfs.audit")
        for name in _imported_names(path)
        if name.split(".")[0] in SDK_PACKAGES
    )
    assert importers == []
    auditor = [
        m
        for m, p in _modules()
        if m.startswith("sandboxfs.audit")
        and any(n.split(".")[0] in SDK_PACKAGES for n in _imported_names(p))
    ]
    assert auditor  # the check sees imports of the SDK where they are


def test_a_serving_process_never_loads_the_mcp_sdk(tmp_path: Path) -> None:
    """Everything a serving process imports (CLI, both transports, the driver) leaves
    the SDK's modules unloaded (a leak would bring back its start-up cost)."""
    script = """
import sys
import sandboxfs.cli.main, sandboxfs.transports.stdio, sandboxfs.transports.http.endpoint
import sandboxfs.transports.http.server, sandboxfs.session.driver
loaded = sorted(m for m in sys.modules if m.split(".")[0] in {"mcp", "mcp_types"})
print(loaded)
"""
    out = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
        env={"PYTHONPATH": os.pathsep.join([str(PACKAGE.parent), *sys.path])},
    ).stdout
    assert out.strip() == "[]"
