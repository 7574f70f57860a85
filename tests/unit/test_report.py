"""The report's SFT -> RL arithmetic over seeds, against hand-computed values."""

from __future__ import annotations

import math

import pytest

from dsmath.evaluation.run import mean_metrics
from dsmath.reporting.paper import (
    best_on_validation,
    columns,
    paired_over_seeds,
    sd,
    seed_rows,
    standard_error_of_delta,
)


def test_paired_over_seeds_by_hand():
    # 4 problems; SFT right on p0, p1. Seed A fixes p2 (gain +0.25); seed B fixes p2, p3 and breaks p0 (+0.25)
    a = {"p0": True, "p1": True, "p2": False, "p3": False}
    runs = {"seed-1": {"p0": True, "p1": True, "p2": True, "p3": False},
            "seed-2": {"p0": False, "p1": True, "p2": True, "p3": True}}
    out = paired_over_seeds(a, runs)
    assert out["n"] == 4 and out["gain"] == pytest.approx(0.25) and out["sd_seeds"] == pytest.approx(0.0)
    # seed-mean correctness 0.5, 1, 1, 0.5 minus SFT 1, 1, 0, 0 -> d = -0.5, 0, 1, 0.5; mean 0.25
    var = ((-0.75) ** 2 + 0.25**2 + 0.75**2 + 0.25**2) / 3
    assert out["paired_se"] == pytest.approx(math.sqrt(var / 4))
    swapped = paired_over_seeds({"p0": True, "p1": True, "p2": True, "p3": False}, {"seed-1": a})
    assert swapped["gain"] == pytest.approx(-0.25)  # the order of sft and rl is the sign


def test_paired_over_seeds_uses_the_problems_every_run_has():
    a = {"p0": False, "p1": False, "p2": True}
    runs = {"seed-1": {"p0": True, "p1": False}, "seed-2": {"p0": True, "p1": True, "p2": True}}
    out = paired_over_seeds(a, runs)
    assert out["n"] == 2  # p2 is missing from seed-1
    assert out["gain"] == pytest.approx((0.5 + 1.0) / 2)
    assert out["sd_seeds"] == pytest.approx(math.sqrt(((0.5 - 0.75) ** 2 + (1.0 - 0.75) ** 2) / 1))
    assert paired_over_seeds(a, {})["gain"] is None


def test_sd_and_standard_error():
    assert sd([1.0, 2.0, 3.0, 4.0]) == pytest.approx(math.sqrt(5 / 3))
    assert math.isnan(sd([0.4]))
    assert standard_error_of_delta([False, False, True, True], [True, False, True, True]) == pytest.approx(0.25)


def test_seed_rows_and_the_champion_candidate_come_from_validation():
    sft = {"synthetic/tool/greedy": 0.5}
    runs = {"seed-1": {"synthetic/tool/greedy": 0.7, "val/synthetic/tool/greedy": 0.60},
            "seed-2": {"synthetic/tool/greedy": 0.6, "val/synthetic/tool/greedy": 0.65},
            "seed-3": {"synthetic/tool/greedy": 0.9, "val/synthetic/tool/greedy": 0.65}}
    a = {"p0": False, "p1": True}
    corrects = {r: {"p0": True, "p1": True} for r in runs}
    rows = seed_rows(sft, runs, a, corrects, "synthetic/tool/greedy")
    assert [r["gain"] for r in rows] == pytest.approx([0.2, 0.1, 0.4])
    assert [r["paired_se"] for r in rows] == pytest.approx([0.5, 0.5, 0.5])  # d = 1, 0: sd 0.707 / sqrt(2)
    best = best_on_validation(rows)
    assert best["run"] == "seed-2"  # best on validation (tie with seed-3: the first), not seed-3's better test
    assert best_on_validation([{"run": "x", "val": None}]) is None


def test_mean_metrics_and_columns_leave_validation_out_of_the_table():
    runs = [{"a/cot/greedy": 0.2, "val/a/cot/greedy": 0.1, "only": 1.0}, {"a/cot/greedy": 0.4, "val/a/cot/greedy": 0.3}]
    assert mean_metrics(runs) == pytest.approx({"a/cot/greedy": 0.3, "val/a/cot/greedy": 0.2})
    assert columns({"rl": mean_metrics(runs)}, 8) == ["a/cot/greedy"]
