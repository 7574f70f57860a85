"""pass@k and maj@k against hand-computed values and the brute-force definitions."""

from itertools import combinations

import pytest

from dsmath.evaluation.metrics import maj_at_k, majority_answer, mean_pass_at_k, pass_at_k


@pytest.mark.parametrize(
    ("k", "expected"),
    # n=5, c=2: pass@k = 1 - C(3,k)/C(5,k): k=1: 1-3/5=0.4; k=2: 1-3/10=0.7; k=3: 1-1/10=0.9; k=4,5: 1 (C(3,4)=0)
    [(1, 0.4), (2, 0.7), (3, 0.9), (4, 1.0), (5, 1.0)],
)
def test_pass_at_k_hand_computed(k, expected):
    assert pass_at_k(5, 2, k) == pytest.approx(expected)


@pytest.mark.parametrize(("n", "c"), [(5, 0), (5, 5), (6, 1), (8, 3), (10, 7)])
def test_pass_at_k_equals_brute_force(n, c):
    samples = [True] * c + [False] * (n - c)
    for k in range(1, n + 1):
        subsets = list(combinations(range(n), k))
        brute = sum(any(samples[i] for i in s) for s in subsets) / len(subsets)
        assert pass_at_k(n, c, k) == pytest.approx(brute)


def test_pass_at_k_rejects_bad_arguments_and_averages():
    with pytest.raises(ValueError):
        pass_at_k(4, 5, 1)
    with pytest.raises(ValueError):
        pass_at_k(4, 1, 5)
    assert mean_pass_at_k([[True, False], [False, False]], 1) == pytest.approx(0.25)


def _eq(a: str, b: str) -> bool:
    """A stand-in equivalence: numeric value equality of plain numbers/fractions."""
    from fractions import Fraction

    try:
        return Fraction(a.replace(",", "")) == Fraction(b.replace(",", ""))
    except ValueError:
        return a == b


def test_majority_equivalent_answers_vote_together():
    # '0.5' and '1/2' are one class (2 votes) and beat '3' (1 vote)... even though '3' appears first
    assert majority_answer(["3", "0.5", "1/2"], _eq) == "0.5"
    assert maj_at_k(["3", "0.5", "1/2"], "1/2", 3, _eq)


def test_majority_ties_break_by_first_appearance_and_none_does_not_vote():
    assert majority_answer(["7", "8", "8", "7"], _eq) == "7"
    assert majority_answer([None, None, "4"], _eq) == "4"
    assert majority_answer([None, None], _eq) is None
    assert not maj_at_k([None, None], "4", 2, _eq)


def test_maj_at_k_uses_only_first_k():
    answers = ["1", "2", "2", "1", "1"]
    assert maj_at_k(answers, "1", 1, _eq)
    assert not maj_at_k(answers, "1", 3, _eq)
    assert maj_at_k(answers, "1", 5, _eq)
    with pytest.raises(ValueError):
        maj_at_k(answers, "1", 6, _eq)


def test_moving_average_is_trailing_and_short_at_the_start():
    from dsmath.reporting.paper import moving_average

    assert moving_average([1.0, 3.0, 5.0, 7.0], 2) == [1.0, 2.0, 4.0, 6.0]
    assert moving_average([2.0, 4.0], 10) == [2.0, 3.0]
    assert moving_average([], 3) == []


def test_rl_curves_plot_one_smoothed_line_per_seed_and_held_out_points():
    from dsmath.reporting.paper import plot_rl_curves

    def run(scale: float) -> list[dict]:
        rows = [{"step": "0", "reward_mean": "", "accuracy": "", "kl": "", "val_greedy_acc": str(0.5 * scale)}]
        return rows + [{"step": str(i), "reward_mean": str(scale * i / 10), "accuracy": "0.5", "kl": "0.01",
                        "val_greedy_acc": ""} for i in range(1, 6)]

    fig = plot_rl_curves({"seed-1": run(1.0), "seed-2": run(2.0)}, window=2)
    reward, acc, _ = fig.axes
    one, two = (line.get_ydata().tolist() for line in reward.lines)
    assert one == pytest.approx([0.1, 0.15, 0.25, 0.35, 0.45]) and two == pytest.approx([0.2, 0.3, 0.5, 0.7, 0.9])
    assert [line.get_label() for line in reward.lines] == ["seed-1", "seed-2"]
    held_out = [line.get_ydata().tolist() for line in acc.lines if "held-out" in line.get_label()]
    assert held_out == [[0.5], [1.0]]  # each seed's held-out point at step 0


# ----------------------------------------------------------------------------------------------------------------
# pass@k on a subset at large k (evaluate.passk_*)


@pytest.mark.parametrize(("n", "c", "k", "expected"),
                         # n=4, c=1: 1 - C(3,k)/C(4,k): k=1: 1-3/4; k=2: 1-3/6; k=4: 1-0
                         [(4, 1, 1, 0.25), (4, 1, 2, 0.5), (4, 1, 4, 1.0), (64, 0, 1, 0.0), (64, 0, 64, 0.0)])
def test_pass_at_k_hand_computed_subset(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected)


def test_passk_metrics_from_per_sample_correctness():
    from dsmath.evaluation.evaluate import passk_metrics

    correct = [[True, False, False, False], [False] * 4]  # n=4: c=1 and c=0
    m = passk_metrics(correct, [1, 2, 4, 64])  # 64 > n: left out
    assert m == pytest.approx({"passk@1": 0.125, "passk@2": 0.25, "passk@4": 0.5, "passk_problems": 2.0})


def test_evaluate_model_reports_passk_on_the_subset(monkeypatch):
    """passk_problems > 0: passk_samples drawn per problem of the first passk_problems synthetic problems in each
    sampled mode, from a Generator seeded apart (generation stubbed); 0 (default): no passk keys."""
    from dsmath.config import Evaluate, Rewards, Sandbox
    from dsmath.evaluation import evaluate

    seeds = []

    class FakeGenerator:
        last_number = False

        def __init__(self, model, tok, cfg, sandbox, seed, *args):
            seeds.append(seed)

        def __call__(self, questions, mode, temperature):  # question q0 always right, the others right 1 in 4
            texts = [f"The answer is \\boxed{{{1 if q == 'q0' or i % 4 == 0 else 2}}}."
                     for i, q in enumerate(questions)]
            return texts, [7] * len(questions)

        def map(self, fn, *columns):
            return fn(*columns)

    monkeypatch.setattr(evaluate, "Generator", FakeGenerator)
    records = {"synthetic": [{"id": f"s{i}", "question": f"q{i}", "answer": "1"} for i in range(5)]}
    base = {"datasets": {"synthetic": 5, "gsm8k_test": 0, "svamp": 0, "math500": 0}, "modes": ["cot", "pot"],
            "sampled_modes": ["cot"], "n_samples": 2, "k": [1, 2]}
    off, _ = evaluate.evaluate_model(None, None, records, Evaluate(**base), Sandbox(), Rewards(), seed=3)
    assert not any("passk" in k for k in off) and seeds == [3]
    cfg = Evaluate(**base, passk_problems=2, passk_samples=8, passk_k=[1, 4, 8])
    on, rows = evaluate.evaluate_model(None, None, records, cfg, Sandbox(), Rewards(), seed=3)
    assert seeds[1:] == [3, 3 + evaluate.PASSK_SEED_OFFSET]
    # per problem of the subset, in its cot row: right samples of passk_samples (q0 8, q1 2); no other row has them
    right = {(r["mode"], r["id"]): (r["passk_right"], r["passk_samples"]) for r in rows if "passk_right" in r}
    assert right == {("cot", "s0"): (8, 8), ("cot", "s1"): (2, 8)}
    timing = "_per_s"
    assert {k: v for k, v in on.items() if k in off and timing not in k} == {k: v for k, v in off.items()
                                                                              if timing not in k}
    assert {k for k in on if "passk" in k} == {"synthetic/cot/passk@1", "synthetic/cot/passk@4",
                                               "synthetic/cot/passk@8", "synthetic/cot/passk_problems"}
    # q0: 8 of 8 right; q1: 2 of 8 (rows 0 and 4 of its block: i = 8, 12) -> pass@1 = (1 + 2/8) / 2
    assert on["synthetic/cot/passk@1"] == pytest.approx((1 + 2 / 8) / 2)
    assert on["synthetic/cot/passk@8"] == 1.0 and on["synthetic/cot/passk_problems"] == 2.0
    no_sampling, _ = evaluate.evaluate_model(None, None, records, cfg, Sandbox(), Rewards(), seed=3, sampling=False)
    assert not any("passk" in k for k in no_sampling)
