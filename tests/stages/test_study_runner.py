"""The study runner around a stand-in `dvc exp run`: a variant's seeds go into one experiment, each seed gets its
own record and MLflow run, seeds kept before are not in it (the real experiments run in tests/e2e)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from conftest import smoke_params

from dsmath.study import runner
from dsmath.study.spec import load_study

STUDY = """name: two
seeds: [1234, 1235]
targets: [evaluate@rl]
results: study/two
shared: {rl.steps: 3}
variants:
  grpo: {overrides: {}}
  online_rft: {overrides: {rl.algorithm: online_rft}}
"""


@pytest.fixture
def workspace(tmp_path, monkeypatch):
    """A study workspace in tmp_path: the smoke profile saved as the study's, and `dvc exp run` replaced by a
    function that writes what the stages would, per seed of common.rl_seeds, and records each call."""
    monkeypatch.chdir(tmp_path)
    raw = smoke_params(tmp_path)
    saved = runner.STATE / "saved" / "params.yaml"
    saved.parent.mkdir(parents=True)
    saved.write_text(yaml.safe_dump(raw, sort_keys=False))
    Path("params.yaml").write_text(saved.read_text())
    Path("study.yaml").write_text(STUDY)
    calls = []

    def fake_experiment(name, overrides, targets, log_path, on_line=print, parent_run_id=None, dvc=None):
        calls.append({"name": name, "seeds": overrides["common.rl_seeds"], "algorithm": overrides.get("rl.algorithm",
                                                                                                       "grpo"),
                      "parent": parent_run_id})
        paths = raw["common"]["paths"]
        for seed in overrides["common.rl_seeds"]:
            acc = (seed - 1000) / 1000 + (0.01 if "online_rft" in name else 0)  # a value per seed and variant
            rl_eval = Path(paths["eval"]) / "rl" / f"seed-{seed}"
            rl_eval.mkdir(parents=True, exist_ok=True)
            (rl_eval / "metrics.json").write_text(json.dumps({"synthetic/cot/greedy": acc}))
            (Path(paths["metrics"]) / "rl").mkdir(parents=True, exist_ok=True)
            (Path(paths["metrics"]) / "rl" / f"seed-{seed}.json").write_text(json.dumps({"seed": seed, "steps": 3}))
            (Path(paths["plots"]) / "rl").mkdir(parents=True, exist_ok=True)
            (Path(paths["plots"]) / "rl" / f"seed-{seed}.csv").write_text("step,reward_mean\n1,0.5\n")

    monkeypatch.setattr(runner, "run_experiment", fake_experiment)
    study = load_study("study.yaml", saved)
    return study, calls, raw


def test_a_variants_seeds_run_as_one_experiment_with_a_record_and_a_run_per_seed(workspace):
    import mlflow

    from dsmath.config import parse_params
    from dsmath.runtime import tracking

    study, calls, raw = workspace
    params = parse_params(raw)
    parent = runner.open_parent(study, params)
    seen = []
    records = runner.run_variant(study, "grpo", [1234, 1235], parent, "dvc", seen.append)
    assert [c["name"] for c in calls] == ["two-grpo-1234-1235"] and calls[0]["seeds"] == [1234, 1235]
    assert [r["seed"] for r in records] == [1234, 1235]
    for r, seed in zip(records, (1234, 1235), strict=True):
        on_disk = json.loads(study.result_path("grpo", seed).read_text())
        assert on_disk == r and r["key"] == study.run_key("grpo", seed)  # the key of the seed alone
        assert r["eval"]["synthetic/cot/greedy"] == pytest.approx((seed - 1000) / 1000)
        assert r["exp_name"] == "two-grpo-1234-1235" and r["exp_seeds"] == [1234, 1235]
        assert r["wall_s"] == pytest.approx(r["exp_wall_s"] / 2, abs=0.1)
        assert r["overrides"]["common.rl_seeds"] == [seed]

    # a seed kept before is not run again: the next experiment holds only the missing one
    study.result_path("online_rft", 1234).parent.mkdir(parents=True)
    kept = records[0] | {"variant": "online_rft", "key": study.run_key("online_rft", 1234)}
    study.result_path("online_rft", 1234).write_text(json.dumps(kept))
    again = runner.run_variant(study, "online_rft", [1234, 1235], parent, "dvc", seen.append)
    assert [c["name"] for c in calls] == ["two-grpo-1234-1235", "two-online_rft-1235"]
    assert again[0] == kept and again[1]["exp_name"] == "two-online_rft-1235"
    assert "study two: online_rft seed 1234 done before, kept" in seen
    assert runner.run_variant(study, "grpo", [1234, 1235], parent, "dvc", seen.append) == records
    assert len(calls) == 2  # nothing left to run

    tracking.close_run(parent)
    runs = mlflow.search_runs(experiment_names=[params.common.tracking.experiment], output_format="list",
                              filter_string=f"tags.mlflow.parentRunId = '{parent.run_id}'")
    kinds = sorted((r.data.tags["dsmath.kind"], r.data.tags["dsmath.variant"], r.data.tags.get("dsmath.seed", ""))
                   for r in runs)
    assert kinds == [("study-exp", "grpo", ""), ("study-exp", "online_rft", ""),
                     ("study-run", "grpo", "1234"), ("study-run", "grpo", "1235"), ("study-run", "online_rft", "1235")]
    exp_ids = {r.data.tags["dsmath.variant"]: r.info.run_id for r in runs if r.data.tags["dsmath.kind"] == "study-exp"}
    assert calls[0]["parent"] == exp_ids["grpo"]  # the experiment's stage runs nest under the variant's run
    for r in runs:
        if r.data.tags["dsmath.kind"] == "study-run":
            assert r.data.tags["dsmath.exp_run_id"] == exp_ids[r.data.tags["dsmath.variant"]]
            assert r.info.status == "FINISHED" and r.data.metrics[tracking.metric_key("eval/synthetic/cot/greedy")] > 0
