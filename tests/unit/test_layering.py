"""Packages import downward only: generation is shared by rl, evaluation and train and imports none of them; neither
evaluation nor train imports rl (the acceptance check `grep -rn "dsmath.rl" src/dsmath/evaluation src/dsmath/train`)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "dsmath"


def imported_modules(package: str) -> dict[str, set[str]]:
    """{file: every dsmath module it imports (top level or inside functions)} for the files of one package."""
    out = {}
    for path in sorted((SRC / package).rglob("*.py")):
        names = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                names |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
        out[str(path.relative_to(SRC))] = {n for n in names if n.startswith("dsmath")}
    return out


@pytest.mark.parametrize(("package", "forbidden"), [
    ("generation", ("dsmath.rl", "dsmath.evaluation", "dsmath.train")),
    ("evaluation", ("dsmath.rl", "dsmath.train")),
    ("train", ("dsmath.rl",)),
])
def test_packages_import_downward_only(package, forbidden):
    bad = {f: sorted(m for m in mods if m.startswith(forbidden)) for f, mods in imported_modules(package).items()}
    assert not {f: m for f, m in bad.items() if m}, f"{package} imports upward: {bad}"


def test_the_scan_sees_imports():
    assert "dsmath.generation.rollout" in imported_modules("rl")["rl/trainer.py"]
