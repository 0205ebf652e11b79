"""The fuzz targets in fuzz/, briefly: each one fuzzes for a few seconds from its seeds,
and every seed and saved crash input replays through its target.

A saved input whose name starts with an id from the target's ``KNOWN_BUGS`` must
still fail (it is an xfail); once the bug is fixed the test says so, and the
id comes out of ``KNOWN_BUGS``.  Long runs: fuzz/README.md.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

pytest.importorskip("atheris")

FUZZ = Path(__file__).resolve().parent.parent / "fuzz"
TARGETS = ("resolver", "textedit", "globs", "framing", "session", "dirents", "scan", "codemap")
TOLERATE_ENV = "SANDBOXFS_FUZZ_TOLERATE"


def _load(target: str) -> ModuleType:
    """Import fuzz/fuzz_<target>.py without fuzzing (it instruments only as __main__)."""
    name = f"sandboxfs_fuzz_{target}"
    spec = importlib.util.spec_from_file_location(name, FUZZ / f"fuzz_{target}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def targets() -> Iterator[dict[str, ModuleType]]:
    loaded: dict[str, ModuleType] = {}
    try:
        for target in TARGETS:
            loaded[target] = _load(target)
        yield loaded
    finally:
        for target, module in loaded.items():
            cleanup = getattr(module, "cleanup", None)
            if cleanup is not None:
                cleanup()
            sys.modules.pop(f"sandboxfs_fuzz_{target}", None)


def _inputs(directory: Path) -> list[Path]:
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.iterdir() if p.is_file() and not p.name.startswith("."))


REGRESSIONS = [(t, p) for t in TARGETS for p in _inputs(FUZZ / "regressions" / t)]


@pytest.mark.parametrize("target", TARGETS)
def test_short_fuzz_run(target: str, targets: dict[str, ModuleType], tmp_path: Path) -> None:
    """A few seconds of fuzzing from the seeds, known bugs tolerated (their saved inputs
    replay below, uninstrumented: under instrumentation some take tens of seconds)."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    env = {**os.environ, TOLERATE_ENV: ",".join(targets[target].KNOWN_BUGS)}
    command = [
        sys.executable,
        str(FUZZ / f"fuzz_{target}.py"),
        "-max_total_time=5",
        "-rss_limit_mb=2048",
        "-runs=2000000",
        "-timeout=20",
        f"-artifact_prefix={tmp_path}/",
        str(corpus),
        str(FUZZ / "seeds" / target),
    ]
    run = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=90)
    artifacts = sorted(p.name for p in tmp_path.iterdir() if p.name != "corpus")
    assert run.returncode == 0, f"{artifacts}\n{run.stderr[-6000:]}"
    assert "Done" in run.stderr, run.stderr[-2000:]


@pytest.mark.parametrize("target", TARGETS)
def test_seeds_replay(target: str, targets: dict[str, ModuleType], monkeypatch) -> None:
    monkeypatch.delenv(TOLERATE_ENV, raising=False)
    seeds = _inputs(FUZZ / "seeds" / target)
    assert seeds, f"no seeds for {target}: run python fuzz/make_seeds.py"
    for seed in seeds:
        targets[target].TestOneInput(seed.read_bytes())


@pytest.mark.parametrize(
    ("target", "path"), REGRESSIONS, ids=[f"{t}/{p.name}" for t, p in REGRESSIONS]
)
def test_regression_replays(
    target: str, path: Path, targets: dict[str, ModuleType], monkeypatch
) -> None:
    monkeypatch.delenv(TOLERATE_ENV, raising=False)
    module = targets[target]
    bug = path.name.split(".")[0]
    if bug not in module.KNOWN_BUGS:
        module.TestOneInput(path.read_bytes())
        return
    try:
        module.TestOneInput(path.read_bytes())
    except Exception as exc:
        pytest.xfail(f"known bug {bug}: {module.KNOWN_BUGS[bug]} ({type(exc).__name__})")
    pytest.fail(f"{path.name} passes: if bug {bug!r} is fixed, remove it from KNOWN_BUGS")
