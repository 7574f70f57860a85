"""dvc.yaml's code deps are the import closure of each stage's entry point, and the closure is what the code runs."""

from __future__ import annotations

from pathlib import Path

from dsmath.core import codedeps


def test_dvc_yaml_declares_every_file_each_stage_imports():
    """A file a stage imports (lazily or not) that no dep covers would let a code change re-run nothing: fix with
    `python -m dsmath.core.codedeps --write`."""
    missing = {s: m for s, m in codedeps.missing_deps().items() if m}
    assert not missing, f"undeclared code deps (run `python -m dsmath.core.codedeps --write`): {missing}"


def test_dvc_yaml_declares_no_code_a_stage_does_not_import():
    unused = {s: u for s, u in codedeps.unused_deps().items() if u}
    assert not unused, f"code deps no file of the stage's closure is in: {unused}"


def test_dvc_yaml_is_what_the_writer_writes():
    assert codedeps.rewrite_dvc_yaml() == (codedeps.ROOT / "dvc.yaml").read_text()


def test_the_closure_holds_the_files_the_issue_found_undeclared():
    """lm_head (fused head of every training loss), config/ (class defaults), stage.py (seeding), distributed.py,
    prompts.py (base) and data/io.py were deps of no stage before the closure was derived."""
    base = set(codedeps.stage_closure("base"))
    for f in ("src/dsmath/modeling/lm_head.py", "src/dsmath/config/training.py", "src/dsmath/runtime/stage.py",
              "src/dsmath/runtime/distributed.py", "src/dsmath/modeling/prompts.py", "src/dsmath/data/io.py"):
        assert f in base, f
    evaluate = set(codedeps.stage_closure("evaluate"))
    assert "src/dsmath/rewards/mathverify_worker.py" in evaluate  # started by path, not imported
    assert "src/dsmath/runtime/tracking.py" not in evaluate  # output-neutral, listed with its reason
    assert "src/dsmath/runtime/tracking.py" in codedeps.closure("stages.evaluate", neutral=True)
    assert "src/dsmath/rl/trainer.py" not in evaluate  # evaluation imports no RL


def _tree(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


def test_closure_follows_lazy_relative_and_script_imports_and_skips_type_checking(tmp_path):
    _tree(tmp_path, {
        "stages/__init__.py": "",
        "stages/x.py": "from dsmath import a\n",
        "src/dsmath/__init__.py": "",
        "src/dsmath/a.py": "def f():\n    from dsmath.pkg import b\n",
        "src/dsmath/pkg/__init__.py": "",
        "src/dsmath/pkg/b.py": "from . import c\nWORKER = 'w.py'\n",
        "src/dsmath/pkg/c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from dsmath import d\n",
        "src/dsmath/pkg/w.py": "import json\n",
        "src/dsmath/d.py": "",
        "src/dsmath/unused.py": "",
    })
    got = codedeps.closure("stages.x", tmp_path)
    assert got == ["src/dsmath/__init__.py", "src/dsmath/a.py", "src/dsmath/pkg/__init__.py", "src/dsmath/pkg/b.py",
                   "src/dsmath/pkg/c.py", "src/dsmath/pkg/w.py", "stages/__init__.py", "stages/x.py"]
    assert codedeps.suggested_deps("x", tmp_path) == ["stages/__init__.py", "stages/x.py", "src/dsmath/__init__.py",
                                                      "src/dsmath/a.py", "src/dsmath/pkg"]
    assert codedeps.covered(got, ["stages", "src/dsmath/a.py", "src/dsmath/pkg"]) == ["src/dsmath/__init__.py"]


def test_code_hash_changes_with_any_file_of_the_closure(tmp_path):
    _tree(tmp_path, {"stages/__init__.py": "", "stages/x.py": "import dsmath.a\n", "src/dsmath/__init__.py": "",
                     "src/dsmath/a.py": "X = 1\n"})
    files = codedeps.closure("stages.x", tmp_path)
    before = codedeps.code_hash(files, tmp_path)
    assert codedeps.code_hash(files, tmp_path) == before  # deterministic
    (tmp_path / "src/dsmath/a.py").write_text("X = 2\n")
    assert codedeps.code_hash(files, tmp_path) != before
