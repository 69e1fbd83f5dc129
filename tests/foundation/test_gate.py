"""The gate (.ci/gate, run by .ci/run before the tests) fails on a ruff finding and on a type
finding: each is planted in a copy of the product code, and the gate run on that copy."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
COPIED = ("workflows", "activities", "operations", "frontdoor", "commands", "pressroom", "devstack", "schema", ".ci")


def copy_of_the_tree(to: Path) -> Path:
    for name in COPIED:
        shutil.copytree(ROOT / name, to / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "worker.py", "starter.py"):
        shutil.copy(ROOT / name, to / name)
    (to / ".venv").symlink_to(ROOT / ".venv")
    # CI has just run the gate here: its mypy cache makes the copy's runs incremental, as the gate's
    # own runs are (findings are the same; each run still reads the changed module and its importers).
    if (ROOT / ".mypy_cache").is_dir():
        shutil.copytree(ROOT / ".mypy_cache", to / ".mypy_cache")
    return to


def gate(tree: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(tree / ".ci" / "gate")], capture_output=True, text=True, timeout=600)


def test_ci_runs_the_gate_before_the_tests():
    steps = (ROOT / ".ci" / "run").read_text().splitlines()
    assert steps.index(".ci/gate") < steps.index(".venv/bin/pytest -n 3")


@pytest.mark.slow
def test_the_gate_fails_on_a_ruff_finding_then_on_a_type_finding(tmp_path):
    tree = copy_of_the_tree(tmp_path)
    module = tree / "pressroom" / "errors.py"
    clean = module.read_text()
    module.write_text(clean + "\n\ndef planted(items=[]):  # B006: a mutable default\n    return items\n")
    ruff = gate(tree)
    assert ruff.returncode != 0 and "B006" in ruff.stdout, ruff.stdout + ruff.stderr
    module.write_text(clean + "\n\ndef planted() -> int:\n    return 'not a number'\n")
    mypy = gate(tree)
    assert mypy.returncode != 0 and "[return-value]" in mypy.stdout, mypy.stdout + mypy.stderr
    module.write_text(clean)
    assert gate(tree).returncode == 0
