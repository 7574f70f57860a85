"""The health signals of a study's RL runs: the per-run and per-variant summaries (hand-computed), the report's table,
and reading them back from a real MLflow store (SQLite in tmp) into records made without them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from study_records import record as _record

from dsmath.runtime import tracking
from dsmath.study import health
from dsmath.study import report as sr
from dsmath.study.spec import load_study, variant_params

ROOT = Path(__file__).resolve().parents[2]


def test_rows_from_history_one_row_per_step_last_value_wins():
    rows = health.rows_from_history({"kl": [(2, 0.5), (1, 0.1), (2, 0.7)], "entropy": [(1, 2.0)]})
    assert rows == [{"step": 1, "kl": 0.1, "entropy": 2.0}, {"step": 2, "kl": 0.7}]


def test_summary_means_the_first_and_last_window_and_skips_missing_and_nan():
    curve = [{"step": s, "kl": float(s), "entropy": 1.0 if s != 3 else float("nan")} for s in range(1, 9)]
    s = health.summary(list(reversed(curve)), window=3)  # order of the rows does not matter
    assert s["kl/start"] == pytest.approx(2.0) and s["kl/end"] == pytest.approx(7.0)  # (1+2+3)/3, (6+7+8)/3
    assert s["entropy/start"] == pytest.approx(1.0)  # the NaN of step 3 left out: steps 1, 2, 4
    assert s["clip_frac/start"] is None and s["clip_frac/end"] is None  # never logged


def test_variant_summary_is_the_seed_mean_over_seeds_with_a_curve():
    runs = {1: {"health": [{"step": 1, "zero_std_groups": 0.5}, {"step": 2, "zero_std_groups": 0.3}]},
            2: {"health": [{"step": 1, "zero_std_groups": 0.1}, {"step": 2, "zero_std_groups": 0.1}]},
            3: {"curve": []}}  # no health curve: left out, not counted as zero
    s = health.variant_summary(runs, window=1)
    assert s["seeds"] == 2
    assert s["zero_std_groups/start"] == pytest.approx(0.3) and s["zero_std_groups/end"] == pytest.approx(0.2)
    assert s["kl/start"] is None
    assert s["longest_ever"] is None  # no lengths logged
    runs[1]["health"][0]["response_len_max"], runs[2]["health"][1]["response_len_max"] = 90.0, 131.0
    assert health.variant_summary(runs, window=1)["longest_ever"] == 131.0  # of any step of any seed
    assert health.variant_summary(runs, window=1)["capped_steps"] is None  # no cap given
    assert health.variant_summary(runs, window=1, cap=131)["capped_steps"] == 0.5  # 1 of the 2 steps with a length
    assert health.variant_summary({1: {"curve": []}}) is None


@pytest.fixture
def store(tmp_path, monkeypatch):
    """A study in tmp_path whose MLflow store is a SQLite file there; the process-wide URI restored after."""
    mlflow = pytest.importorskip("mlflow")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/m.db")  # absolute: one store per test
    monkeypatch.delenv(tracking.PARENT_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    previous = mlflow.get_tracking_uri()
    (tmp_path / "study.yaml").write_text(
        "name: t\nseeds: [1, 2]\nresults: res\nreport: out/study.md\n"
        "variants:\n  grpo: {overrides: {}}\n"
        "findings:\n  - {claim: RL lifts greedy, source: s, a: grpo, b: sft}\n")
    yield load_study(tmp_path / "study.yaml", ROOT / "params.yaml")
    mlflow.set_tracking_uri(previous)


def _logged_run(study, seed: int, monkeypatch, steps: range, kl0: float = 0.0, ok: bool = True) -> str:
    """A study child for (grpo, seed), FINISHED (or KILLED), with an `rl@<seed>` stage run nested under it that
    logged health keys for `steps` (kl = kl0 + step / 100, entropy = 2 - step / 30) and a key health does not read."""
    params = variant_params(study, "grpo", seed, study.profile)
    child = tracking.open_run(params, f"grpo seed {seed}", {"dsmath.kind": "study-run", "dsmath.study": study.name,
                                                            "dsmath.variant": "grpo", "dsmath.seed": str(seed)})
    monkeypatch.setenv(tracking.PARENT_ENV, child.run_id)
    with tracking.stage_run(f"rl@{seed}", params) as run:
        for s in steps:
            run.log_metrics({"rl/kl": kl0 + s / 100, "rl/entropy": 2 - s / 30, "rl/lr": 1e-4}, step=s)
    monkeypatch.delenv(tracking.PARENT_ENV)
    if ok:
        tracking.close_run(child)
    else:
        child.client.set_terminated(child.run_id, status="KILLED")
    return child.run_id


def test_health_is_read_from_the_store_and_fills_old_records_and_the_report(store, monkeypatch):
    child = _logged_run(store, 1, monkeypatch, range(1, 13))
    curve = health.read(child)
    assert [r["step"] for r in curve] == list(range(1, 13))
    assert curve[0] == {"step": 1, "kl": 0.01, "entropy": pytest.approx(2 - 1 / 30)}  # rl/lr is not a health key
    assert health.find_child("t", "grpo", 1) == child and health.find_child("t", "grpo", 2) is None
    for seed in (1, 2):  # records made before health curves: seed 2's run is not in the store
        path = store.result_path("grpo", seed)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(_record([1, 0], [0, 0], 2.0) | {"key": store.run_key("grpo", seed),
                                                                   "variant": "grpo", "seed": seed}))
    lines: list[str] = []
    assert health.backfill(store, on_line=lines.append) == 1
    filled = json.loads(store.result_path("grpo", 1).read_text())
    assert filled["mlflow_run_id"] == child and len(filled["health"]) == 12
    assert filled["key"] == store.run_key("grpo", 1)  # still the run's record: the runner keeps it
    assert "health" not in json.loads(store.result_path("grpo", 2).read_text())
    assert lines == ["grpo seed 1: 12 steps", "grpo seed 2: no RL run found in the store"]
    assert health.backfill(store, on_line=lines.append) == 0  # a filled record is left alone
    md = Path(sr.build_study_report(store)["report"]).read_text()
    row = next(line for line in md.splitlines() if line.startswith("| grpo | 1 |") and "->" in line)
    cells = [c.strip() for c in row.strip("|").split("|")]
    # first 10 steps: kl mean 0.055, entropy 2 - 5.5/30; last 10 (steps 3-12): kl 0.075, entropy 2 - 7.5/30
    assert cells[4] == "1.82 -> 1.75" and cells[5] == "0.0550 -> 0.0750"
    assert cells[2] == "-"  # flat groups were not logged
    assert cells[8] == "-"  # truncation unknown: no lengths logged


def test_a_resumed_runs_health_joins_its_killed_attempts_steps(store, monkeypatch):
    """Killed at step 5 and resumed from its step-3 checkpoint under a new child: steps 1-3 come from the killed
    attempt, 4-8 from the resumed one (its value where both logged a step)."""
    _logged_run(store, 2, monkeypatch, range(1, 6), kl0=0.0, ok=False)
    resumed = _logged_run(store, 2, monkeypatch, range(4, 9), kl0=1.0)
    curve = health.read(resumed)
    assert [r["step"] for r in curve] == list(range(1, 9))
    assert [r["kl"] for r in curve] == pytest.approx([0.01, 0.02, 0.03, 1.04, 1.05, 1.06, 1.07, 1.08])
    assert health.find_child("t", "grpo", 2) == resumed  # the finished one
    other = _logged_run(store, 1, monkeypatch, range(1, 3), kl0=5.0)  # another seed's runs stay out
    assert [r["kl"] for r in health.read(other)] == pytest.approx([5.01, 5.02])
    again = _logged_run(store, 2, monkeypatch, range(1, 3), kl0=7.0)  # a later sitting: the finished run stays out
    assert [r["kl"] for r in health.read(again)] == pytest.approx([7.01, 7.02])


def test_the_health_table_shows_the_logged_truncation_rate_else_whether_the_cap_was_reached():
    from dsmath.study.markdown import health_section

    def row(**kw):
        return {"variant": "v", "seeds": 1, **kw}

    def cell(r):
        line = next(x for x in health_section([r]) if x.startswith("| v |"))
        return [c.strip() for c in line.strip("|").split("|")][8]

    assert cell(row(**{"truncated_rate/start": 0.02, "truncated_rate/end": 0.005}, longest_ever=160.0,
                    cap=160)) == "2.0 -> 0.5 %"
    assert cell(row(longest_ever=160.0, cap=160, capped_steps=0.25)) == "160 reached in 25.0% of steps"
    assert cell(row(longest_ever=120.0, cap=160, capped_steps=0.0)) == "none (<= 120 of 160)"
