"""Answer equivalence: a table of tricky pairs, MATH-500 golds against themselves and reformattings, speed, the time
limit on pathological input (also from a non-main thread)."""

import json
import math
import random
import re
import threading
import time
from fractions import Fraction
from pathlib import Path

import pytest

from dsmath.rewards import are_equivalent, is_equivalent, normalize_answer, parse_number
from dsmath.rewards.equivalence import fast_verdict
from dsmath.rewards.numeric import evaluate_latex

MATH500 = Path("data/raw/math500/test.jsonl")

EQUIVALENT = [
    # (pred, gold)
    ("14/3", "\\frac{14}{3}"),
    ("\\dfrac{14}{3}", "\\frac{14}{3}"),
    ("4\\frac{2}{3}", "\\frac{14}{3}"),  # mixed number
    ("1,000", "1000"),
    ("10080", "10,\\!080"),
    ("11111111100", "11,\\! 111,\\! 111,\\! 100"),
    ("2.0", "2"),
    ("0.5", "\\frac{1}{2}"),
    (".5", "0.5"),
    ("\\frac{3}{2}", "1.5"),
    ("1.8", "1\\frac{4}{5}"),
    ("50\\%", "50"),
    ("50%", "50"),
    ("18.9", "\\$18.90"),
    ("5.4", "5.4 \\text{ cents}"),
    ("864", "864 \\mbox{ inches}^2"),
    ("31", "31 pencils"),
    ("90", "90^\\circ"),
    ("90^{\\circ}", "90^\\circ"),
    ("\\frac{270}{7}", "\\frac{270}7\\text{ degrees}"),
    ("x = 5", "5"),
    ("Evelyn", "\\text{Evelyn}"),
    ("C", "\\text{(C)}"),
    ("(C)", "\\text{(C)}"),
    ("  42  ", "42"),
    ("$\\frac{4}{3}$", "\\frac43"),
    ("\\frac{5}{9}", "\\frac 59"),
    ("11\\sqrt{2}", "11\\sqrt2"),
    ("\\frac{\\sqrt{3}}{3}", "\\frac{1}{\\sqrt{3}}"),  # sympy from here on
    ("3\\sqrt{13}", "\\sqrt{117}"),
    ("\\sqrt{2}/2", "\\frac{\\sqrt{2}}{2}"),
    ("(3, \\pi/2)", "\\left( 3, \\frac{\\pi}{2} \\right)"),
    ("(3,4]", "(3, 4]"),
    ("[-2, 7]", "x \\in [-2,7]"),
    ("(-\\infty, 0]", "(-\\infty,0]"),
    ("6-5i", "6 - 5i"),
    ("274i+1", "1+274i"),
    ("x^2+2x+1", "(x+1)^2"),
    ("-\\pi/6", "-\\frac{\\pi}{6}"),
    ("\\frac12\\pi", "\\frac{\\pi}{2}"),
    ("1+\\sqrt{19}, 1-\\sqrt{19}", "1 \\pm \\sqrt{19}"),
    ("-2, 1+\\sqrt{5}, 1-\\sqrt{5}", "\\{1\\pm\\sqrt{5},-2\\}"),
    ("3,5,7", "3, 5, 7"),
    (
        "\\begin{pmatrix} -\\frac13 \\\\ \\frac23 \\\\ \\frac53 \\end{pmatrix}",
        "\\begin{pmatrix} -1/3 \\\\ 2/3 \\\\ 5/3 \\end{pmatrix}",
    ),
    ("2x+3", "y = 2x + 3"),
    ("0.333333", "\\frac{1}{3}"),  # math-verify rounds to 6 decimals
    ("2^{10}", "1024"),
    ("\\sqrt{50}", "5\\sqrt{2}"),
]

NOT_EQUIVALENT = [
    ("14/3", "\\frac{13}{3}"),
    ("0.5", "0.6"),
    ("1000", "100"),
    ("2", "-2"),
    ("90", "90.5"),
    ("0.33", "\\frac{1}{3}"),  # not the value to 6 places
    ("10\\%", "0.1"),  # a percent sign is dropped, not divided by 100
    ("x+1", "x-1"),
    ("(3,4)", "(3,4]"),
    ("\\pi", "3.14"),
    ("Evelyn", "\\text{Navin}"),
    ("2\\sqrt{2}", "\\sqrt{2}"),
    ("6+5i", "6-5i"),
    ("1/0", "0"),
    ("1,2", "12"),
    ("x = 5", "x = 6"),
    ("\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}", "\\begin{pmatrix} 2 \\\\ 1 \\end{pmatrix}"),
    ("x^2", "y^2"),
    ("A", "B"),
]

DEGENERATE = [("", "5"), ("5", ""), (None, "5"), ("5", None), ("   ", "  "), (5, "5")]


@pytest.mark.parametrize(("pred", "gold"), EQUIVALENT)
def test_equivalent(pred, gold):
    assert is_equivalent(pred, gold)


@pytest.mark.parametrize(("pred", "gold"), NOT_EQUIVALENT)
def test_not_equivalent(pred, gold):
    assert not is_equivalent(pred, gold)


@pytest.mark.parametrize(("pred", "gold"), DEGENERATE)
def test_degenerate_inputs_are_false(pred, gold):
    assert is_equivalent(pred, gold) is False


def test_table_has_at_least_60_cases():
    assert len(EQUIVALENT) + len(NOT_EQUIVALENT) + len(DEGENERATE) >= 60


@pytest.mark.parametrize(
    ("raw", "norm"),
    [
        ("\\dfrac{14}{3}", "\\frac{14}{3}"),
        ("10,\\!080", "10080"),
        ("90^\\circ", "90"),
        ("\\$18.90", "18.90"),
        ("5.4 \\text{ cents}", "5.4"),
        ("\\text{(C)}", "c"),
        ("x = 5", "5"),
        ("$\\frac 59$.", "\\frac{5}{9}"),
        ("\\left( 1, 2 \\right)", "(1,2)"),
        ("\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}", "\\begin{pmatrix}1\\\\2\\end{pmatrix}"),
    ],
)
def test_normalize_answer(raw, norm):
    assert normalize_answer(raw) == norm


@pytest.mark.parametrize(
    ("s", "value"),
    [
        ("1000", Fraction(1000)),
        ("-2.50", Fraction(-5, 2)),
        (".5", Fraction(1, 2)),
        ("3/4", Fraction(3, 4)),
        ("\\frac{14}{3}", Fraction(14, 3)),
        ("-\\frac{3}{8}", Fraction(-3, 8)),
        ("1\\frac{4}{5}", Fraction(9, 5)),
        ("1/0", None),
        ("\\frac{1}{0}", None),
        ("x", None),
        ("", None),
        ("1" * 300, None),
    ],
)
def test_parse_number(s, value):
    assert parse_number(s) == value


@pytest.mark.parametrize(
    ("pred", "gold", "verdict"),
    [
        ("14/3", "\\frac{14}{3}", True),
        ("7", "8", False),  # |7 - 8| > 1e-4 * 8
        ("0.333333", "\\frac{1}{3}", None),  # close but not equal: math-verify decides the rounding
        ("\\sqrt{2}", "\\frac{2}{\\sqrt{2}}", True),  # both constants, equal as floats to 1e-12
        ("3\\sqrt{13}", "11", False),  # 10.8167 vs 11
        ("\\pi", "3.1416", None),  # 2.3e-6 relative: close, sympy decides
        ("5", "(6,31,-1)", False),  # a number is never a tuple, interval, relation, or expression in x
        ("5", "2k+2", False),
        ("5", "\\text{east}", False),
        ("5", "52_8", False),
        ("\\", "69", False),  # a cut-off answer: no digit, no letter
        ("{}", "3/10", False),
        ("x^2+2x+1", "(x+1)^2", None),
    ],  # symbolic: sympy
)
def test_fast_verdict(pred, gold, verdict):
    assert fast_verdict(pred, gold) is verdict


@pytest.mark.parametrize(
    ("latex", "value"),
    [
        ("3\\sqrt{13}", 3 * 13**0.5),
        ("\\frac{20000}{\\pi}", 20000 / math.pi),
        ("6-5i", 6 - 5j),
        ("-2^2", -4),
        ("2^{-1}", 0.5),
        ("\\sqrt[3]{-8}", -2),
        ("\\frac9{19}", 9 / 19),
        ("2(3+4)\\cdot5", 70),
        ("e", math.e),
        ("x+1", None),
        ("\\sin 1", None),
        ("2^{10000}", None),
        ("1/0", None),
        ("10^{300}\\cdot10^{300}", None),
        ("(1", None),
        ("{" * 2000, None),
    ],
)
def test_evaluate_latex(latex, value):
    got = evaluate_latex(latex)
    assert got == value if value is None else abs(got - value) < 1e-9


def _math500_golds() -> list[str]:
    return [json.loads(line)["answer"] for line in MATH500.read_text().splitlines() if line.strip()]


def _reformattings(gold: str) -> list[str]:
    """Other spellings of one answer: $..$, \\dfrac, a/b for \\frac{a}{b}, spacing, no \\left/\\right, 1,000 commas."""
    out = [
        f"${gold}$",
        gold.replace("\\frac", "\\dfrac"),
        re.sub(r"\\frac\{(\d+)\}\{(\d+)\}", r"\1/\2", gold),
        gold.replace(" ", ""),
        re.sub(r"([+\-=,])", r" \1 ", gold),
        gold.replace("\\left", "").replace("\\right", ""),
    ]
    if re.fullmatch(r"-?\d+", gold):
        out += [f"{gold}.0", f"{int(gold):,}"]
    if re.search(r"\d\s*\\frac", gold):  # a mixed number's "a/b" spelling would change its value
        out.pop(2)
    return [o for o in dict.fromkeys(out) if o != gold]


def test_math500_golds_equivalent_to_themselves_and_reformattings():
    golds = _math500_golds()
    assert len(golds) == 500
    assert all(is_equivalent(g, g) for g in golds)
    pairs = [(r, g) for g in golds for r in _reformattings(g)]
    assert all(_reformattings(g) for g in golds)  # at least one reformatting each
    verdicts = are_equivalent([p for p, _ in pairs], [g for _, g in pairs])
    failed = [pair for pair, ok in zip(pairs, verdicts, strict=True) if not ok]
    assert not failed, failed[:10]


def test_1000_random_pairs_finish_in_seconds():
    golds = _math500_golds()
    rng = random.Random(0)
    preds = [rng.choice(golds) for _ in range(1000)]
    targets = [rng.choice(golds) for _ in range(1000)]
    are_equivalent(["x+1", "y+1"], ["1+x", "1+y"])  # start the math-verify workers outside the timed region
    start = time.monotonic()
    verdicts = are_equivalent(preds, targets)
    elapsed = time.monotonic() - start
    assert elapsed < 30, elapsed  # ~2 s measured on 2 shared cores; generous bound for loaded CI machines
    assert sum(verdicts) == sum(p == t for p, t in zip(preds, targets, strict=True))  # distinct MATH-500 answers


def _timed(pred: str, gold: str, timeout_s: float) -> tuple[bool, float]:
    start = time.monotonic()
    return is_equivalent(pred, gold, timeout_s=timeout_s), time.monotonic() - start


def test_pathological_input_is_cut_off_by_the_time_limit():
    assert is_equivalent("x+1", "1+x")  # a warm worker
    verdict, elapsed = _timed("10^{10^{10}}", "5", timeout_s=1.0)  # a 4 GB integer inside one C call
    assert verdict is False
    assert elapsed < 3.0, elapsed
    assert is_equivalent("\\sqrt{4}", "2")  # a fresh worker replaces the killed one


def test_time_limit_works_from_a_non_main_thread():
    out = {}
    thread = threading.Thread(
        target=lambda: out.update(slow=_timed("9^{9^{9^{9}}}", "1", 1.0), ok=is_equivalent("\\sqrt{9}", "3"))
    )
    thread.start()
    thread.join(timeout=60)
    assert not thread.is_alive()
    assert out["slow"][0] is False and out["slow"][1] < 3.0, out
    assert out["ok"] is True


def test_are_equivalent_checks_lengths():
    with pytest.raises(ValueError, match="differ in length"):
        are_equivalent(["1"], ["1", "2"])
    assert are_equivalent([], []) == []
    assert are_equivalent([None, "2", "2"], ["1", "2", "\\sqrt{4}"]) == [False, True, True]


def test_fast_path_never_raises_on_random_text():
    rng = random.Random(1)
    alphabet = list("0123456789+-*/^_=(){}[],.$%\\ abcxyzei") + [
        "\\frac",
        "\\sqrt",
        "\\pi",
        "\\text{",
        "\\left(",
        "\\boxed{",
        "\\dfrac",
        "\\circ",
        "\\infty",
        "\\!",
    ]
    start = time.monotonic()
    for _ in range(3000):
        a = "".join(rng.choices(alphabet, k=rng.randint(0, 40)))
        b = "".join(rng.choices(alphabet, k=rng.randint(0, 40)))
        assert fast_verdict(a, b) in (True, False, None)
        assert evaluate_latex(normalize_answer(a)) is None or isinstance(evaluate_latex(normalize_answer(a)), complex)
    assert time.monotonic() - start < 20


def test_huge_answer_is_bounded_by_the_time_limit():
    junk = "\\frac{" * 3000 + "x" + "}{2}" * 3000
    verdict, elapsed = _timed(junk, "\\frac{x}{2}", timeout_s=1.0)
    assert verdict is False and elapsed < 3.0, elapsed
