"""The Prefect flow finds each stage's metrics files in the stage's declared DVC outputs, not by its name."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from dsmath.config import load_params
from dsmath.orchestration.pipeline import stage_metrics_files

ROOT = Path(__file__).resolve().parents[2]

TINY_DVC_YAML = """\
stages:
  plain:
    cmd: "true"
    outs: [out/plain]
  two:
    cmd: "true"
    metrics:
      - ${paths.metrics}/two.json:
          cache: false
      - ${paths.metrics}/two_extra.json:
          cache: false
    plots:
      - ${paths.plots}/two.csv:
          cache: false
  rl:
    foreach: ${seeds}
    do:
      cmd: "true"
      outs:
        - models/rl/seed-${item}
      metrics:
        - ${paths.metrics}/rl/seed-${item}.json:
            cache: false
  outside:
    cmd: "true"
    metrics:
      - ${outside}:
          cache: false
"""


def test_real_dvc_yaml_evaluate_stages_read_metrics_eval(monkeypatch):
    """The bug this replaces: `evaluate@rl` was looked up at metrics/evaluate/rl.json; dvc.yaml says eval/rl.json."""
    monkeypatch.chdir(ROOT)  # DVC names stages relative to the working directory
    metrics_dir = load_params(ROOT / "params.yaml").common.paths.metrics
    files = stage_metrics_files(ROOT)
    evaluate = {s: paths for s, paths in files.items() if s.startswith("evaluate@")}
    assert evaluate, sorted(files)
    for stage, paths in evaluate.items():
        assert paths == [f"{metrics_dir}/eval/{stage.split('@', 1)[1]}.json"], stage
    assert files["corpus"] == [f"{metrics_dir}/corpus.json"]


@pytest.fixture
def tiny_repo(tmp_path, monkeypatch):
    from dvc.repo import Repo

    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "dvc.yaml").write_text(TINY_DVC_YAML)
    outside = tmp_path / "elsewhere" / "m.json"
    (repo / "params.yaml").write_text(yaml.safe_dump({"paths": {"metrics": "metrics", "plots": "plots"},
                                                      "seeds": [1234, 5678], "outside": str(outside)}))
    Repo.init(str(repo), no_scm=True).close()
    monkeypatch.chdir(repo)
    return repo, outside


def test_no_several_foreach_and_outside_metrics(tiny_repo):
    repo, outside = tiny_repo
    files = stage_metrics_files(repo)
    assert files == {
        "plain": [],
        "two": ["metrics/two.json", "metrics/two_extra.json"],  # declared order; plots are not metrics
        "rl@1234": ["metrics/rl/seed-1234.json"],
        "rl@5678": ["metrics/rl/seed-5678.json"],
        "outside": [str(outside)],  # declared outside the repository: kept absolute
    }
