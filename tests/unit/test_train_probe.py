"""Accuracy probe arithmetic (generation stubbed), the fallback checker, and the stage-report helpers."""

from __future__ import annotations

import csv

from dsmath.config import Probe
from dsmath.train import probe, report


def test_fallback_checker_reads_the_last_box_and_compares_rationals():
    assert probe._fallback_extract("x \\boxed{3}\nThe answer is \\boxed{ 3/4 }.") == "3/4"
    assert probe._fallback_extract("no box") is None
    assert probe._fallback_equivalent("0.75", "3/4")
    assert probe._fallback_equivalent("1,200", "1200")
    assert not probe._fallback_equivalent("0.7", "3/4")
    assert not probe._fallback_equivalent(None, "1")
    assert probe._fallback_equivalent("x + 1", "x + 1")  # not a number: string match


def test_probe_metrics_hand_computed(monkeypatch):
    records = [{"question": f"q{i}", "answer": str(i)} for i in range(4)]
    box = "The answer is \\boxed{{{}}}.".format

    def fake_generate(model, tok, texts, max_new_tokens, batch_size, num_samples=1, temperature=0.0, seed=0, desc=""):
        assert len(texts) == 4 and all("q" in t for t in texts)
        if num_samples == 1:  # greedy: right on problems 0 and 1
            return [[box(0)], [box(1)], [box(9)], ["no answer"]]
        # sampled (k = 2): problem 0 both right, 1 none, 2 one right, 3 none
        return [[box(0), box(0)], [box(5), box(5)], [box(2), box(7)], [box(8), "x"]]

    monkeypatch.setattr(probe, "generate", fake_generate)
    monkeypatch.setattr(
        probe, "answer_checker", lambda: lambda c, g: probe._fallback_equivalent(probe._fallback_extract(c), g)
    )

    class Tok:
        chat_template = None
        eos_token = "<e>"

    metrics, rows = probe.accuracy_probe(None, Tok(), records, Probe(k=2), seed=0)
    # greedy 2/4; pass@2: problems 0 and 2 -> 2/4; sample accuracy 3 right of 8 samples
    assert metrics == {"greedy_acc": 0.5, "pass_at_2": 0.5, "sample_acc": 3 / 8, "probe_problems": 4}
    assert [r["correct"] for r in rows] == [True, True, False, False]


def test_write_curve_and_figure(tmp_path):
    history = [
        {"step": 5, "loss": 2.5, "lr": 1e-3, "grad_norm": 1.25, "tokens_per_s": 1000.0},
        {"step": 10, "loss": 2.0, "lr": 5e-4, "grad_norm": 1.0, "tokens_per_s": 1100.0},
    ]
    path = report.write_curve(history, tmp_path / "plots" / "x.csv")
    rows = list(csv.DictReader(path.open()))
    assert [(r["step"], r["loss"]) for r in rows] == [("5", "2.5"), ("10", "2")]
    fig = report.loss_figure(history, "x")
    assert fig.axes[0].lines[0].get_ydata().tolist() == [2.5, 2.0]


def test_null_run_swallows_every_call():
    run = report.NullRun()
    assert run.log_metrics({"a": 1.0}, step=3) is None and run.log_model("somewhere") is None
