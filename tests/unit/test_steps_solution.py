"""Process rewards judged against the problem's solution (DeepSeekMath sec. 4.1.3, Math-Shepherd-style labels):
reference quantities (synthetic `quantities`, GSM8K annotations), CoT lines, scratchpad chains, statically evaluated
programs, the repeat rule and the terminal (outcome) step. Every expected number is worked out by hand."""

from __future__ import annotations

import random
from fractions import Fraction

import pytest

from dsmath.rewards import (
    QuantityPool,
    StepResult,
    canonical_number,
    gsm8k_quantities,
    program_assignments,
    reference_quantities,
    solution_steps,
    terminal_reward,
)

RECORD = {
    "source": "synthetic",
    "question": "Sam has 20 apples. Sam finds 4 more apples. He puts them into packs of 12. "
                "How many packs does he fill?",
    "answer": "2",
    "cot": "After getting 4 more: 20 + 4 = 24.\nPacks of 12: 24 / 12 = 2.\nThe answer is \\boxed{2}.",
    "tool": "Let me use Python to find how many packs Sam fills.\n```python\ntotal = 20 + 4\npacks = total // 12\n"
            "print(packs)\n```\n```output\n2\n```\nThe answer is \\boxed{2}.",
    "pot": "```python\napples = 20\nmore = 4\nper_pack = 12\ntotal = apples + more\npacks = total // per_pack\n"
           "print(packs)\n```",
    "quantities": ["24", "2"],
}
Q = reference_quantities(RECORD)


def judged(text: str, steps: list[StepResult]) -> list[tuple[str, str, float]]:
    return [(text[s.char_start : s.char_end], s.kind, s.reward) for s in steps]


# ----------------------------------------------------------------------------------------------------------------
# reference quantities


def test_canonical_numbers():
    values = [24, -3, Fraction(5, 2), Fraction(-5, 2), Fraction(1, 20), Fraction(1, 3), Fraction(7, 10)]
    assert [canonical_number(v) for v in values] == ["24", "-3", "2.5", "-2.5", "0.05", "1/3", "0.7"]
    assert [canonical_number(v, fraction=True) for v in (Fraction(3, 4), Fraction(4, 2))] == ["3/4", "2"]


def test_gsm8k_annotations():
    solution = ("Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n"
                "Natalia sold 48+24 = <<48+24=72>>72 clips altogether in April and May.\n#### 72")
    assert gsm8k_quantities(solution) == ["24", "72"]  # the final #### answer is not an annotation
    odd = ("<<5*0.5=2.5>> <<1,000+200=1,200>> <<3-5=-2>> <<2.50*2=5.00>> <<$5*2=$10>> <<1/3=1/3>> "  # parsed
           "<<48/2>> <<=5>> <<2*3=six>> <<2*3=>> <<4/2=2")  # malformed: skipped
    assert gsm8k_quantities(odd) == ["2.5", "1200", "-2", "5", "10", "1/3"]
    assert gsm8k_quantities(None) == [] and gsm8k_quantities("no annotations") == []


def test_reference_quantities_of_each_kind_of_record():
    assert Q == ["24", "2"]  # the gold 2 is already the last quantity: not added twice
    assert reference_quantities({"answer": "5", "quantities": ["3/4", "0.7", "x"]}) == ["3/4", "0.7", "5"]
    assert reference_quantities({"answer": "\\frac{1}{3}", "quantities": ["2"]}) == ["2", "1/3"]
    gsm8k = {"source": "gsm8k", "answer": "72", "solution": "48/2 = <<48/2=24>>24 clips.\n#### 72"}
    assert reference_quantities(gsm8k) == ["24", "72"]  # the gold answer is accepted as a quantity
    math = {"source": "math500", "answer": "\\frac{3}{4}", "solution": "We have $x = \\frac{3}{4}$."}
    assert reference_quantities(math) == []  # nothing known about the steps: truth-only checks
    assert reference_quantities({"answer": "2", "quantities": []}) == []


def test_quantity_pool_matches_numbers_once_each():
    pool = QuantityPool(["1/2", "6", "6", "33.33", "0.7"])
    assert pool.take([Fraction("0.5")])  # 0.5 == 1/2
    assert not pool.take([Fraction(1, 2)]) and pool.known([Fraction(1, 2)])  # used up: a repeat, not irrelevant
    assert pool.take([Fraction(6)]) and pool.take([Fraction(6)]) and not pool.take([Fraction(6)])  # two 6s
    assert pool.take([Fraction(100, 3)])  # rounds to the shown 33.33
    assert not pool.take([Fraction(65, 100)])  # one decimal place: exact only
    assert not pool.known([Fraction(5)]) and not QuantityPool([]) and QuantityPool(["x", "2"])


# ----------------------------------------------------------------------------------------------------------------
# chain of thought


def test_right_solution_is_paid_per_step_and_the_answer_line_is_neutral():
    text = RECORD["cot"]
    assert judged(text, solution_steps(text, Q)) == [
        ("After getting 4 more: 20 + 4 = 24.", "right", 1.0),
        ("Packs of 12: 24 / 12 = 2.", "right", 1.0),
        ("The answer is \\boxed{2}.", "unchecked", 0.0),
    ]


def test_wrong_setup_with_true_arithmetic_is_penalised_at_its_first_wrong_step():
    text = "Sam gives away 4: 20 - 4 = 16.\nPacks of 12: 16 / 12 = 4/3.\nThe answer is \\boxed{4/3}."
    steps = solution_steps(text, Q)
    assert steps[0] == StepResult(0, 30, True, False, -1.0, "irrelevant")  # true arithmetic, 16 is no quantity
    assert text[steps[0].char_end - 1] == "." and text[steps[0].char_end] == "\n"  # the -1 sits at the line's end
    assert [s.reward for s in steps] == [-1.0, -1.0, 0.0]
    # the old truth-only judge (no quantities known) rewarded both lines
    assert [s.reward for s in solution_steps(text, [])] == [1.0, 1.0, 0.0]


def test_false_arithmetic_and_neutral_lines():
    text = "After getting 4 more: 20 + 4 = 25.\nSo he has many apples.\n24 / 12 = 2"
    assert [(s.kind, s.reward, s.correct) for s in solution_steps(text, Q)] == [
        ("false", -1.0, False), ("unchecked", 0.0, None), ("right", 1.0, True)]


def test_a_repeated_right_step_is_paid_once():
    text = "20 + 4 = 24.\nAgain: 20 + 4 = 24.\n4 + 20 = 24.\n24 / 12 = 2."
    assert [(s.kind, s.reward) for s in solution_steps(text, Q)] == [
        ("right", 1.0), ("repeat", 0.0), ("repeat", 0.0), ("right", 1.0)]
    assert [s.checked for s in solution_steps(text, Q)] == [True, False, False, True]
    # a value the solution computes twice is paid twice
    assert [s.reward for s in solution_steps("3 + 3 = 6.\n12 - 6 = 6.\n2 * 3 = 6.", ["6", "6"])] == [1.0, 1.0, 0.0]
    # truth only: an identical right line again is a repeat, another true line is paid
    assert [s.kind for s in solution_steps("1 + 1 = 2\n1 + 1 = 2\n2 + 2 = 4", [])] == ["right", "repeat", "right"]


def test_values_match_numerically():
    assert [s.kind for s in solution_steps("1 / 2 = 0.5\n3 / 4 = 0.75\n10 / 3 = 3.33", ["0.5", "3/4", "10/3"])] == [
        "right", "right", "right"]  # 3.33 is 10/3 rounded: the exact left side is the value that matches


@pytest.mark.parametrize(("line", "quantities", "kind", "reward"), [
    ("After getting 36 more: 47 + 36 = 40 + 30 + 7 + 6 = 70 + 13 = 83.", ["83"], "right", 1.0),
    ("83 - 36 = 70 - 30 + 13 - 6 = 40 + 7 = 47", ["47"], "right", 1.0),
    ("17 * 5 = 10 * 5 + 7 * 5 = 50 + 35 = 85", ["85"], "right", 1.0),
    ("After getting 36 more: 47 + 36 = 40 + 30 + 7 + 6 = 70 + 12 = 83.", ["83"], "false", -1.0),  # one false link
    ("47 + 36 = 40 + 30 + 7 + 6 = 70 + 13 = 83.", ["84"], "irrelevant", -1.0),  # the value is no quantity
    ("47 + 36 = 40 + 30 + 7 + 6 = 70 + 13 = 83.", ["70"], "irrelevant", -1.0),  # 70 is the chain's, not the value
])
def test_scratchpad_chains(line, quantities, kind, reward):
    assert [(s.kind, s.reward) for s in solution_steps(line, quantities)] == [(kind, reward)]


def test_chain_intermediates_do_not_use_up_quantities():
    text = "47 + 36 = 40 + 30 + 7 + 6 = 70 + 13 = 83.\nThen 60 + 10 = 70."
    assert [s.kind for s in solution_steps(text, ["83", "70"])] == ["right", "right"]


# ----------------------------------------------------------------------------------------------------------------
# programs (pot, tool)


def test_tool_program_assignments_are_checked():
    text = ("Let me use Python.\n```python\napples = 20\ntotal = apples + 4\nwrong = total * 12\npacks = total // 12\n"
            "print(packs)\n```\n```output\n2\n```\nThe answer is \\boxed{2}.")
    assert judged(text, solution_steps(text, Q, "tool")) == [
        ("Let me use Python.", "unchecked", 0.0),
        ("apples = 20", "given", 0.0),  # a number of the question: neutral
        ("total = apples + 4", "right", 1.0),  # 24 is a quantity
        ("wrong = total * 12", "irrelevant", -1.0),  # 288 is not
        ("packs = total // 12", "right", 1.0),
        ("The answer is \\boxed{2}.", "unchecked", 0.0),  # the output block's "2" is no step
    ]


def test_reference_programs_of_the_record():
    pot, tool = RECORD["pot"], RECORD["tool"]
    assert [(line, kind) for line, kind, _ in judged(pot, solution_steps(pot, Q, "pot"))] == [
        ("apples = 20", "given"), ("more = 4", "given"), ("per_pack = 12", "given"),
        ("total = apples + more", "right"), ("packs = total // per_pack", "right")]
    assert [r for _, _, r in judged(tool, solution_steps(tool, Q, "tool"))] == [0.0, 1.0, 1.0, 0.0]
    assert [s.checked for s in solution_steps(pot, [], "pot")] == [False] * 5  # no quantities: programs unjudged
    assert [s.kind for s in solution_steps(tool, Q, "cot")][1:3] == ["unchecked", "unchecked"]  # cot: no programs


def test_static_evaluation_of_programs():
    code = ("from fractions import Fraction\nh = Fraction(3, 4)\nx = h * 8\ny = float(x) / 3\nz = round(10 / 3, 2)\n"
            "w = 2 ** 0.5\nv = max(1, x) - min(abs(-2), 3) + int(7 / 2) % 2\nq = 7.5 // 2 + -x\n"
            "def solution():\n    a = 5\n    return a * x\nfor i in range(3):\n    x += 1\nr = x + 1\n"
            "s = __import__('os').system('echo hi')\nt = s + 1\nu = 3 / 4\nm = 1 / 0\nbig = 10 ** 100\n")
    got = [(a.first, a.value, a.literal) for a in program_assignments(code)]
    assert got == [
        (2, Fraction(3, 4), True), (3, Fraction(6), False), (4, Fraction(2), False), (5, Fraction(333, 100), False),
        (6, None, False),  # a fractional power is not followed
        (7, Fraction(6 - 2 + 1), False), (8, Fraction(3 - 6), False),
        (10, Fraction(5), True),  # a function without parameters is followed in its own scope
        (14, None, False),  # x was changed in a loop: unknown
        (15, None, False), (16, None, False),  # an unknown call is never run, and what depends on it is unknown
        (17, Fraction(3, 4), True), (18, None, False), (19, None, False),  # 10 ** 100: the exponent is too large
    ]


def test_fraction_and_decimal_programs_and_a_cut_off_program():
    text = "```python\nshare = Fraction(3, 4)\neaten = share * 4\nleft = float(7 / 10)\ntotal = eaten +"
    assert [(s.kind, s.reward) for s in solution_steps(text, ["3", "0.7"], "pot")] == [
        ("given", 0.0), ("right", 1.0), ("given", 0.0)]  # the open block runs to the end; the cut line is dropped
    assert program_assignments("x = = 1") == [] and program_assignments("x = 1\ny = (") == [
        program_assignments("x = 1")[0]]


def test_steps_are_judged_in_text_order_across_prose_and_programs():
    text = ("First, 20 + 4 = 24.\n```python\ntotal = 20 + 4\npacks = total // 12\n```\n```output\n2\n```\n"
            "So 24 / 12 = 2.")
    assert [s.kind for s in solution_steps(text, Q, "tool")] == ["right", "repeat", "right", "repeat"]


# ----------------------------------------------------------------------------------------------------------------
# the terminal step


def test_terminal_reward_values():
    assert terminal_reward(1, 1) == pytest.approx(1.1)  # right, well formed
    assert terminal_reward(1, 0) == pytest.approx(0.9)
    assert terminal_reward(0, 1) == pytest.approx(-0.9)  # wrong but well formed
    assert terminal_reward(0, 0) == pytest.approx(-1.1)  # no answer (cut off): strictly below a wrong answer
    assert terminal_reward(1, 1, accuracy_weight=2.0, format_weight=0.5) == 2.5


def test_stopping_early_is_never_better_than_answering_wrong():
    two = "After getting 4 more: 20 + 4 = 24.\nPacks of 12: 24 / 12 = 2."
    cut = solution_steps(two, Q, outcome=terminal_reward(0, 0))  # no answer line: wrong and not well formed
    wrong = two + "\nThe answer is \\boxed{3}."
    answered = solution_steps(wrong, Q, outcome=terminal_reward(0, 1))
    assert [s.reward for s in cut if s.checked] == pytest.approx([1.0, 1.0, -1.1])
    assert [s.reward for s in answered if s.checked] == pytest.approx([1.0, 1.0, -0.9])
    assert cut[-1] == StepResult(len(two), len(two), True, False, pytest.approx(-1.1), "terminal")
    assert sum(s.reward for s in cut) < sum(s.reward for s in answered)


def test_degenerate_inputs():
    assert solution_steps(None, Q) == [] and solution_steps("", Q) == []
    assert solution_steps("", Q, outcome=-1.1) == [StepResult(0, 0, True, False, -1.1, "terminal")]
    with pytest.raises(ValueError, match="mode"):
        solution_steps("1 + 1 = 2", Q, "latex")


def test_never_raises_on_random_text():
    rng = random.Random(3)
    alphabet = (list("0123456789+-*/=()., x\n$") + ["```python\n", "```output\n", "\n```\n", "total = ", "**", "//",
                "Fraction(", "round(", "1,000", "\\frac{", "}"])
    for _ in range(1500):
        text = "".join(rng.choices(alphabet, k=rng.randint(0, 60)))
        for mode in ("cot", "pot", "tool"):
            steps = solution_steps(text, rng.choice([[], Q, ["0.5", "1/3"]]), mode)
            assert all(0 <= s.char_start <= s.char_end <= len(text) for s in steps)
            assert all(s.reward == {True: 1.0, False: -1.0, None: 0.0}[s.correct] for s in steps)


def test_reference_solutions_of_the_generator_earn_no_wrong_step():
    from dsmath.data.synthetic.generate import FAMILIES, generate_problem

    rng = random.Random(0)
    for family in FAMILIES:
        for level in (1, 3, 5):
            for scratchpad in (False, True):
                record = generate_problem(rng, family, level, 20, scratchpad=scratchpad)
                quantities = reference_quantities(record)
                cot = solution_steps(record["cot"], quantities, "cot")
                assert sum(s.kind == "right" for s in cot) == len(record["quantities"]), record["cot"]
                for mode in ("cot", "pot", "tool"):
                    steps = solution_steps(record[mode], quantities, mode)
                    assert all(s.reward >= 0 for s in steps) and any(s.reward > 0 for s in steps), record[mode]
