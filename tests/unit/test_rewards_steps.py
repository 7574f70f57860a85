"""Process (step) verification: per-line equation checks, positions, neutral steps, degenerate text."""

import pytest

from dsmath.rewards import StepResult, check_step, token_ends, verify_steps

COT = (
    "Sam buys 3 boxes of 12 pencils: 3 * 12 = 36.\n"
    "He gives away 5 pencils: 36 - 5 = 32.\n"
    "\n"
    "Now he is happy.\n"
    "The answer is \\boxed{31}."
)


def test_verify_steps_rewards_and_positions():
    steps = verify_steps(COT, gold="31")
    # line starts: 0, 45 (after 44 chars + newline), 83 (blank line skipped), 84, 101
    assert steps == [
        StepResult(0, 44, True, True, 1.0),  # 3 * 12 = 36
        StepResult(45, 82, True, False, -1.0),  # 36 - 5 = 31, not 32
        StepResult(84, 100, False, None, 0.0),  # no equation: neutral
        StepResult(101, 126, True, True, 1.0),  # answer line checked against the gold
    ]
    assert [COT[s.char_start : s.char_end] for s in steps][1] == "He gives away 5 pencils: 36 - 5 = 32."


def test_answer_line_is_neutral_without_gold():
    assert verify_steps(COT)[-1] == StepResult(101, 126, False, None, 0.0)
    assert verify_steps(COT, gold="32")[-1] == StepResult(101, 126, True, False, -1.0)


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("3 * 12 = 36", True),
        ("3 * 12 = 38", False),
        ("so (3 + 4) * 2 = 14 pencils", True),
        ("10 / 3 = 3.33", True),  # |10/3 - 3.33| = 0.0033 <= 0.005: rounded to the places shown
        ("10 / 3 = 3.3", True),
        ("2 / 3 = 0.66", False),  # 0.6667 rounds to 0.67, not 0.66
        ("7 / 2 = 3", False),  # an integer right-hand side must be exact
        ("5 - 8 = -3", True),
        ("1,000 + 250 = 1,250", True),  # thousands separators
        ("$12 * 3 = $36", True),  # currency signs
        ("3 \\times 4 = 12 and 12 \\div 4 = 3", True),  # LaTeX operators, two equations
        ("3 × 4 = 12 and 12 ÷ 4 = 4", False),  # one wrong equation makes the step wrong
        ("\\frac{3}{4} \\cdot 12 = 9", True),
        ("1. 3 + 4 = 7", True),  # a list number before the expression
        ("- 3 + 4 = 7", True),  # a bullet dash is not a minus sign
        ("5 / 0 = 1", False),
        ("x = 5", None),  # not arithmetic on the left
        ("total = 36", None),
        ("36 = 36", None),  # no operation to check
        ("2^3 = 8", None),  # powers are not in the checked language
        ("3 ** 2 = 9", None),
        ("2 * 3 ** 2 = 18", None),  # not the fragment "2 = 18" either
        ("x - 3 + 4 = 7", None),  # "- 3 + 4" continues an expression in x
        ("(3 + 4 = 7)", True),
        ("3 + 4 = 7.", True),
        ("6 / 2 = 3 ** 2", None),
        ("if a <= 3 + 4 then", None),
        ("She is happy.", None),
        ("", None),
    ],
)
def test_check_step(line, expected):
    assert check_step(line) is expected


def test_degenerate_texts():
    assert verify_steps("") == []
    assert verify_steps(None) == []
    assert verify_steps("\n\n  \n") == []
    long_number = "1" * 40
    assert verify_steps(f"{long_number} + 1 = 2") == [StepResult(0, 48, False, None, 0.0)]  # too long to check
    assert verify_steps("(" * 5000 + "1 = 1")[0].checked is False


def test_windows_newlines_positions():
    text = "1 + 1 = 2\r\n2 + 2 = 5\r\n"
    steps = verify_steps(text)
    got = [(s.char_start, s.char_end, s.correct, s.reward) for s in steps]
    assert got == [(0, 9, True, 1.0), (11, 20, False, -1.0)]  # "\r\n": the second line starts at 9 + 2


def test_token_ends():
    # tokens: "1 + " [0,4), "1 = 2" [4,9), "\n" [9,10), "2 + 2 = 5" [10,19)
    offsets = [(0, 4), (4, 9), (9, 10), (10, 19)]
    steps = verify_steps("1 + 1 = 2\n2 + 2 = 5")
    assert token_ends([s.char_end for s in steps], offsets) == [1, 3]
    assert token_ends([25], offsets) == [3]  # past the tokenised text: the last token
    assert token_ends([3], []) == []


def test_never_raises_on_random_text():
    import random

    rng = random.Random(2)
    alphabet = list("0123456789+-*/=()., x\n$") + ["\\frac{", "}", "\\times", "×", "1,000", "**"]
    for _ in range(2000):
        text = "".join(rng.choices(alphabet, k=rng.randint(0, 60)))
        steps = verify_steps(text)
        assert all(s.reward == {True: 1.0, False: -1.0, None: 0.0}[s.correct] for s in steps)
        assert all(0 <= s.char_start <= s.char_end <= len(text) and s.checked == (s.correct is not None) for s in steps)


def test_long_lines_stay_fast():
    import time

    start = time.monotonic()
    steps = verify_steps("1 + " * 20000 + "1 = 20001\n" + "1=" * 20000 + "\n3 * 4 = 12")
    assert [s.checked for s in steps] == [False, False, True]
    assert time.monotonic() - start < 5
