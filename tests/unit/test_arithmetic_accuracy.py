"""Per-equation arithmetic accuracy of CoT completions (dsmath.evaluation.arithmetic), against hand-computed values,
and its way into the evaluate split's metrics, the SFT probe's metrics and the report's section."""

from __future__ import annotations

import pytest

from dsmath.config import Evaluate, Probe, Rewards, Sandbox
from dsmath.evaluation import evaluate
from dsmath.evaluation.arithmetic import equation_table, line_equations, table_metrics
from dsmath.reporting.paper import arithmetic_section, equation_summary
from dsmath.train import probe


def _one(line: str):
    (eq,) = line_equations(line)
    return eq.operator, eq.digits, eq.step_true, eq.links


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("After getting 4 more: 20 + 4 = 24.", ("add", "2", True, (True,))),
        ("After getting 36 more: 47 + 36 = 40 + 30 + 7 + 6 = 70 + 13 = 83.", ("add", "2", True, (True,) * 3)),
        ("83 - 36 = 70 - 30 + 13 - 6 = 40 + 7 = 47.", ("sub", "2", True, (True,) * 3)),
        ("17 * 5 = 10 * 5 + 7 * 5 = 50 + 35 = 85.", ("mul", "2", True, (True,) * 3)),
        ("96 / 8 = 80 / 8 + 16 / 8 = 10 + 2 = 12.", ("div", "2", True, (True,) * 3)),
        ("1/4 + 1/2 = 3/4.", ("fraction", "1", True, (True,))),
        ("\\frac{1}{4} + \\frac{1}{2} = \\frac{3}{5}", ("fraction", "1", False, (False,))),
        ("14 * 5 / 100 = 0.7.", ("mixed", "3+", True, (True,))),
        ("13.3 * 2 = 26.6.", ("decimal", "3+", True, (True,))),
        ("So 0.25 * 4 = 1.", ("decimal", "2", True, (True,))),
        ("9 * 2 + 1 = 18 + 1 = 10 + 8 + 1 = 10 + 9 = 19.", ("mixed", "1", True, (True,) * 4)),
        ("1. 123 + 4 = 128", ("add", "3+", False, (False,))),
        ("10 / 3 = 3.33", ("div", "2", True, (True,))),  # a rounded decimal result holds, as in rewards.steps
        ("5 / 0 = 0", ("div", "1", False, (False,))),
        ("Total = 3 + 4 = 7 apples.", ("add", "1", True, (True,))),  # `Total` is not arithmetic: the chain starts after
    ],
)
def test_line_equations_category_and_truth(line, expected):
    assert _one(line) == expected


def test_a_false_link_in_a_chain():
    # the scratchpad slips twice (70 + 12 = 82, then 82 = 83) but the written result is right: step true, links not
    eq = line_equations("47 + 36 = 40 + 30 + 7 + 6 = 70 + 12 = 83.")[0]
    assert (eq.expression, eq.result, eq.step_true, eq.links) == ("47 + 36", "83", True, (True, False, False))
    # a wrong last link makes the step wrong
    assert _one("17 * 5 = 10 * 5 + 7 * 5 = 50 + 35 = 86.") == ("mul", "2", False, (True, True, False))


def test_lines_without_a_computation_and_two_chains_on_a_line():
    assert line_equations("The answer is \\boxed{2}.") == []
    assert line_equations("She has 24 = 20 + 4 pencils.") == []  # the first expression has no operation
    assert line_equations("x == 3 + 4") == []
    first, second = line_equations("3 + 4 = 7 and 7 * 2 = 15.")  # text between '=' ends a chain
    assert (first.expression, first.step_true, second.expression, second.step_true) == ("3 + 4", True, "7 * 2", False)
    assert [eq.links for eq in line_equations("3 + 4 = 7. 7 * 2 = 14.")] == [(True,), (True,)]


COMPLETIONS = [
    # add/2 true (1 link true); add/2 true (3 links true)
    "After getting 4 more: 20 + 4 = 24.\nAfter getting 36 more: 24 + 36 = 20 + 30 + 4 + 6 = 50 + 10 = 60.\n"
    "The answer is \\boxed{60}.",
    # mul/2 false (links T, T, F); div/2 true (T)
    "17 * 5 = 10 * 5 + 7 * 5 = 50 + 35 = 86.\n96 / 8 = 12.\nThe answer is \\boxed{86}.",
    # fraction/1 true (T); decimal/3+ false (F); mixed/1 false (links T, F); add/1 true (T)
    "1/4 + 1/2 = 3/4.\n13.3 * 2 = 26.5.\n3 + 4 * 2 = 3 + 8 = 12.\n7 + 8 = 15",
    None,  # no completion
]


def test_equation_table_by_hand():
    t = equation_table(COMPLETIONS)
    assert (t["n_equations"], t["n_true"], t["equation_acc"]) == (8, 5, 5 / 8)
    assert (t["n_links"], t["n_links_true"], t["link_acc"]) == (13, 10, 10 / 13)
    assert [(r["operator"], r["digits"], r["n"], r["correct"]) for r in t["rows"]] == [
        ("add", "1", 1, 1), ("add", "2", 2, 2), ("mul", "2", 1, 0), ("div", "2", 1, 1), ("mixed", "1", 1, 0),
        ("fraction", "1", 1, 1), ("decimal", "3+", 1, 0)]
    m = table_metrics(t)
    assert m["equation_acc"] == 5 / 8 and m["link_acc"] == 10 / 13 and m["n_equations"] == 8.0
    assert m["equations/add/2/acc"] == 1.0 and m["equations/add/2/n"] == 2.0
    assert m["equations/decimal/3plus/acc"] == 0.0 and m["equations/decimal/3plus/n"] == 1.0
    assert len(m) == 4 + 2 * 7


def test_no_equation_gives_counts_and_no_accuracy():
    t = equation_table(["The answer is \\boxed{1}.", None])
    assert t["equation_acc"] is None and t["rows"] == []
    assert table_metrics(t) == {"n_equations": 0.0, "n_links": 0.0}


class FakeGenerator:
    """Greedy and sampled completions looked up by question (generation stubbed)."""

    last_number = False

    def __init__(self, texts):
        self.texts = texts

    def __call__(self, questions, mode, temperature):
        return [self.texts[q] for q in questions], [5 for _ in questions]

    def map(self, fn, *columns):
        return fn(*columns)


RECORDS = [{"id": f"p{i}", "question": f"q{i}", "answer": a} for i, a in enumerate(["60", "85", "3/4", "1"])]
TEXTS = {f"q{i}": c or "no answer" for i, c in enumerate(COMPLETIONS)}


def test_evaluate_split_adds_the_table_in_cot_mode_only():
    cfg = Evaluate(n_samples=0, modes=["cot", "tool"], primary_metric="synthetic/cot/greedy")
    m, _ = evaluate.evaluate_split(FakeGenerator(TEXTS), RECORDS, "cot", cfg, Sandbox(), Rewards(), sampled=False)
    assert m["equation_acc"] == 5 / 8 and m["link_acc"] == 10 / 13 and m["n_equations"] == 8.0
    assert m["equations/mixed/1/acc"] == 0.0 and m["greedy"] == 0.25
    m, _ = evaluate.evaluate_split(FakeGenerator(TEXTS), RECORDS, "tool", cfg, Sandbox(), Rewards(), sampled=False)
    assert not any(k.startswith("equation") or k in ("link_acc", "n_equations") for k in m)


def test_probe_reports_the_flat_arithmetic_metrics(monkeypatch):
    monkeypatch.setattr(probe, "Generator", lambda *a, **kw: FakeGenerator(TEXTS))
    metrics, _ = probe.accuracy_probe(None, None, RECORDS, Probe(k=2, mode="cot", modes=["cot"]), Sandbox(),
                                      Rewards(), seed=0)
    assert metrics["cot/equation_acc"] == 5 / 8 and metrics["cot/link_acc"] == 10 / 13
    assert metrics["cot/n_equations"] == 8.0 and metrics["cot/n_links"] == 13.0
    assert not any("equations/" in k for k in metrics)  # the per-category rows are the evaluate stage's


SEED_1 = {"synthetic/cot/n_equations": 4.0, "synthetic/cot/equation_acc": 0.5, "synthetic/cot/n_links": 10.0,
          "synthetic/cot/link_acc": 0.9, "synthetic/cot/equations/add/1/n": 4.0,
          "synthetic/cot/equations/add/1/acc": 0.5, "val/synthetic/cot/equations/div/1/n": 3.0}
SEED_2 = {"synthetic/cot/n_equations": 6.0, "synthetic/cot/equation_acc": 1.0, "synthetic/cot/n_links": 10.0,
          "synthetic/cot/link_acc": 0.7, "synthetic/cot/equations/mul/3plus/n": 4.0,
          "synthetic/cot/equations/mul/3plus/acc": 1.0, "synthetic/cot/equations/add/1/n": 2.0,
          "synthetic/cot/equations/add/1/acc": 1.0}


def test_equation_summary_pools_seeds_by_count():
    s = equation_summary([SEED_1, SEED_2])
    assert (s["n_equations"], s["equation_acc"]) == (10.0, pytest.approx(0.8))  # (2 + 6) / 10
    assert (s["n_links"], s["link_acc"]) == (20.0, pytest.approx(0.8))  # (9 + 7) / 20
    assert list(s["cells"]) == [("add", "1"), ("mul", "3plus")]  # table order; validation keys left out
    assert s["cells"][("add", "1")] == (6.0, pytest.approx(4 / 6))
    assert equation_summary([{"synthetic/cot/greedy": 0.5}]) is None  # an evaluation from before the keys


def test_arithmetic_section_table_and_missing_keys():
    lines = arithmetic_section({"base": None, "sft": equation_summary([SEED_1]),
                                "rl": equation_summary([SEED_1, SEED_2])}, n_seeds=2)
    assert lines[0] == "## Arithmetic in chain of thought"
    table = [line for line in lines if line.startswith("|")]
    assert table[0] == "| operator | digits | sft n | sft acc | rl n | rl acc |"
    assert table[2:] == ["| `+` | 1 | 4 | 50.0 | 6 | 66.7 |", "| `*` | 3+ | 0 | - | 4 | 100.0 |",
                         "| all equations | | 4 | 50.0 | 10 | 80.0 |", "| all `=` links | | 10 | 90.0 | 20 | 80.0 |"]
    assert "pool its 2 seeds" in " ".join(lines)
    missing = arithmetic_section({"sft": None})
    assert missing[0] == "## Arithmetic in chain of thought" and missing[2].startswith("Not measured")
    assert not any(line.startswith("|") for line in missing)


@pytest.mark.parametrize("with_keys", [False, True])
def test_build_report_with_and_without_the_keys(tmp_path, with_keys):
    """The report builds from old evaluation files (no arithmetic keys: the section says so) and new ones; rl pools
    its per-seed files."""
    import json

    from dsmath.config import parse_params
    from dsmath.reporting.paper import build_report

    paths = {k: str(tmp_path / k) for k in ("metrics", "eval", "plots", "reports")}
    params = parse_params({"common": {"paths": paths, "rl_seeds": [1, 2]}})
    base = {"synthetic/cot/greedy": 0.5, "synthetic/tool/greedy": 0.6}
    models = {"sft": base | (SEED_1 if with_keys else {}), "rl": base}  # rl.json: the stage's mean, not used here
    for model, m in models.items():
        (tmp_path / "metrics" / "eval").mkdir(parents=True, exist_ok=True)
        (tmp_path / "metrics" / "eval" / f"{model}.json").write_text(json.dumps(m))
    for seed, m in (("seed-1", SEED_1), ("seed-2", SEED_2)):
        (tmp_path / "eval" / "rl" / seed).mkdir(parents=True)
        (tmp_path / "eval" / "rl" / seed / "metrics.json").write_text(json.dumps(base | (m if with_keys else {})))
    out = build_report(params, tmp_path / "reports")
    text = (tmp_path / "reports" / "report.md").read_text()
    assert "## Arithmetic in chain of thought" in text
    if with_keys:
        assert "| all equations | | 4 | 50.0 | 10 | 80.0 |" in text
        assert out["arithmetic"]["rl"]["equation_acc"] == pytest.approx(0.8)
    else:
        assert "Not measured" in text and out["arithmetic"] == {}


def test_evaluate_split_gives_greedy_accuracy_per_level_where_records_span_levels():
    cfg = Evaluate(n_samples=0, modes=["cot"], primary_metric="synthetic/cot/greedy")
    _, rows = evaluate.evaluate_split(FakeGenerator(TEXTS), RECORDS, "cot", cfg, Sandbox(), Rewards(), sampled=False)
    right = [row["greedy_correct"] for row in rows]
    assert right == [True, False, False, False]  # only q0's completion reaches its gold
    leveled = [r | {"level": lv} for r, lv in zip(RECORDS, [1, 1, 2, 3], strict=True)]
    m, _ = evaluate.evaluate_split(FakeGenerator(TEXTS), leveled, "cot", cfg, Sandbox(), Rewards(), sampled=False)
    assert (m["greedy_level1"], m["greedy_level2"], m["greedy_level3"]) == (0.5, 0.0, 0.0)
    assert m["greedy"] == 0.25
    one_level = [r | {"level": 2} for r in RECORDS]
    m, _ = evaluate.evaluate_split(FakeGenerator(TEXTS), one_level, "cot", cfg, Sandbox(), Rewards(), sampled=False)
    assert not any(k.startswith("greedy_level") for k in m)
    assert evaluate.greedy_by_level([{"level": 1}, {"level": 3}, {"level": 3}], [True, True, False]) == {
        "greedy_level1": 1.0, "greedy_level3": 0.5}
