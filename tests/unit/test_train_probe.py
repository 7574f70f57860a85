"""Accuracy probe arithmetic (generation stubbed) and the training-stage lifecycle helpers."""

from __future__ import annotations

import csv

import torch

from dsmath.config import Probe, Rewards, Sandbox
from dsmath.runtime import tracking
from dsmath.train import lifecycle, probe


def test_probe_metrics_hand_computed(monkeypatch):
    records = [{"id": f"p{i}", "question": f"q{i}", "answer": str(i)} for i in range(4)]
    box = "The answer is \\boxed{{{}}}.".format
    greedy = {"q0": box(0), "q1": box(1), "q2": box(9), "q3": "no answer"}  # right on problems 0 and 1
    # sampled (k = 2): problem 0 both right, 1 none, 2 one right, 3 none
    sampled = {"q0": [box(0), box(0)], "q1": [box(5), box(5)], "q2": [box(2), box(7)], "q3": [box(8), "x"]}

    class FakeGenerator:
        last_number = False

        def __init__(self, model, tok, cfg, sandbox_cfg, seed, world=None, dtype=None):
            assert cfg.n_samples == 2 and cfg.k == [1, 2] and dtype is None and world is None

        def map(self, fn, *columns):  # one process: the scoring runs over every item
            return fn(*columns)

        def __call__(self, questions, mode, temperature):
            if temperature == 0:
                texts = [greedy[q] for q in questions]
            else:  # each question repeated k times, consecutively
                texts = [sampled[q][i % 2] for i, q in enumerate(questions)]
            return texts, [len(t) for t in texts]

    monkeypatch.setattr(probe, "Generator", FakeGenerator)
    cfg = Probe(k=2, mode="cot", modes=["cot"])
    metrics, rows = probe.accuracy_probe(None, None, records, cfg, Sandbox(), Rewards(), seed=0)
    # greedy 2/4; pass@2: problems 0 and 2 -> 2/4; sample accuracy (= pass@1) 3 right of 8 samples
    assert (metrics["greedy_acc"], metrics["pass_at_2"], metrics["sample_acc"]) == (0.5, 0.5, 3 / 8)
    assert metrics["cot/greedy"] == 0.5 and metrics["cot/pass@1"] == 3 / 8 and metrics["probe_problems"] == 4
    assert metrics["cot/format_error_rate"] == 0.25
    assert [r["correct"] for r in rows] == [True, True, False, False]


def test_probe_reports_every_mode_with_the_headline_first(monkeypatch):
    calls = []

    def fake_split(gen, records, mode, cfg, sandbox_cfg, rewards_cfg, sampled):
        calls.append((mode, sampled))
        row = {"question": "q", "gold": "1", "greedy": "g", "greedy_correct": True, "sample_correct": [True, False]}
        return {"greedy": {"cot": 0.1, "tool": 0.6}[mode], "pass@1": 0.5, "pass@2": 0.9, "n": 1.0}, [row]

    dtypes = []
    monkeypatch.setattr(probe, "Generator", lambda *a, world=None, dtype=None: dtypes.append(dtype))
    monkeypatch.setattr(probe, "evaluate_split", fake_split)
    metrics, rows = probe.accuracy_probe(None, None, [{}], Probe(k=2, mode="tool", modes=["cot", "tool"]),
                                         Sandbox(), Rewards(), seed=0, dtype=torch.bfloat16)
    assert dtypes == [torch.bfloat16]  # the probe decodes in common.dtype, as the evaluate stage does
    assert calls == [("tool", True), ("cot", False)]
    assert metrics["greedy_acc"] == 0.6 and metrics["cot/greedy"] == 0.1 and metrics["tool/pass@2"] == 0.9
    assert rows[0]["mode"] == "tool" and "cot/n" not in metrics


def test_write_curve_and_figure(tmp_path):
    history = [
        {"step": 5, "loss": 2.5, "lr": 1e-3, "grad_norm": 1.25, "tokens_per_s": 1000.0},
        {"step": 10, "loss": 2.0, "lr": 5e-4, "grad_norm": 1.0, "tokens_per_s": 1100.0},
    ]
    path = lifecycle.write_curve(history, tmp_path / "plots" / "x.csv")
    rows = list(csv.DictReader(path.open()))
    assert [(r["step"], r["loss"]) for r in rows] == [("5", "2.5"), ("10", "2")]
    fig = lifecycle.loss_figure(history, "x")
    assert fig.axes[0].lines[0].get_ydata().tolist() == [2.5, 2.0]


def test_null_run_swallows_every_call():
    run = tracking.NullRun()
    assert run.log_metrics({"a": 1.0}, step=3) is None and run.log_model("somewhere") is None
