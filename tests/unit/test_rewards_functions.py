"""Outcome reward functions (accuracy, format, combined) in the three modes, and the name registry."""

import pytest

from dsmath.config import Rewards, Sandbox
from dsmath.evaluation.evaluate import final_answers
from dsmath.rewards import (
    REWARDS,
    RandomReward,
    accuracy_reward,
    build_reward,
    combined_reward,
    format_reward,
    pot_accuracy_reward,
    program_answer,
    random_reward,
)

COT_RIGHT = "Sam buys 3 boxes of 12 pencils: 3 * 12 = 36.\nHe gives away 5: 36 - 5 = 31.\nThe answer is \\boxed{31}."
COT_WRONG = "3 * 12 = 36.\nThe answer is \\boxed{30}."
COT_UNFORMATTED = "3 * 12 - 5 = 31, so 31 pencils.\n#### 31"
TOOL = "Let me compute.\n```python\nprint(3 * 12 - 5)\n```\n```output\n31\n```\nThe answer is \\boxed{31}."
POT = "```python\nboxes = 3\nprint(boxes * 12 - 5)\n```"
POT_WRONG = "```python\nprint(3 * 12)\n```"
POT_CRASH = "```python\nprint(1 / 0)\n```"
POT_LOOP = "```python\nwhile True:\n    pass\n```"
POT_HOSTILE = "```python\nimport os\nos.system('echo 31')\n```"
SANDBOX = {"timeout_s": 1.0, "memory_mb": 256, "max_output_bytes": 4096, "workers": 2}


def test_accuracy_reward_cot():
    completions = [COT_RIGHT, COT_WRONG, COT_UNFORMATTED, "", "The answer is \\boxed{31"]
    assert accuracy_reward(completions, ["31"] * 5) == [1.0, 0.0, 1.0, 0.0, 0.0]
    assert accuracy_reward([], []) == []


def tool(output: str, answer_line: str, code: str = "print(chr(92) + 'boxed{' + str(3 + 4) + '}')") -> str:
    """A tool-mode completion whose program printed `output` (the model never wrote it) and its own answer line."""
    return f"Let me compute.\n```python\n{code}\n```\n```output\n{output}\n```\n{answer_line}".rstrip("\n")


TOOL_OWN_ANSWER = [  # (completion, accuracy against gold 7): only the model's own answer counts, not the output's
    (tool("\\boxed{7}", ""), 0.0),  # no answer line of its own
    (tool("The answer is 7", "", code="print('The', 'answer', 'is', 3 + 4)"), 0.0),
    (tool("\\boxed{7}", "The answer is 8."), 0.0),  # its own (unboxed) answer is wrong
    (tool("\\boxed{7}", "The answer is \\boxed{8}."), 0.0),
    (tool("The answer is 7", "So it is 6.\nThe answer is 6.", code="print('The', 'answer', 'is', 3 + 4)"), 0.0),
    (tool("\\boxed{7}", "The answer is \\boxed{7}."), 1.0),
    (tool("\\boxed{9}", "The answer is 7."), 1.0),  # its own answer line, whatever the program printed
    (tool("The answer is 8", "The answer is \\boxed{7}.", code="print('The', 'answer', 'is', 8)"), 1.0),
    ("Let me compute.\n```python\nprint(7)\n```\n```output\n\\boxed{7}", 0.0),  # output block cut off
]


@pytest.mark.parametrize(("completion", "expected"), TOOL_OWN_ANSWER)
def test_tool_accuracy_reads_the_models_own_answer_not_the_programs_output(completion, expected):
    assert accuracy_reward([completion], ["7"], mode="tool") == [expected]
    assert build_reward("accuracy", "tool")([completion], ["7"]) == [expected]
    assert (final_answers([completion], "tool", Sandbox()) == ["7"]) == (expected == 1.0)  # evaluation agrees


def test_tool_accuracy_keeps_format_and_other_modes_unchanged():
    right = tool("\\boxed{9}", "The answer is \\boxed{7}.")
    assert build_reward("format", "tool")([right, tool("\\boxed{7}", "")], ["7", "7"]) == [1.0, 0.0]
    assert build_reward("combined", "tool")([right], ["7"]) == pytest.approx([1.1])
    printed = tool("\\boxed{7}", "")  # cot mode reads the whole text, as before
    assert accuracy_reward([printed], ["7"]) == [1.0] and build_reward("accuracy", "cot")([printed], ["7"]) == [1.0]
    assert final_answers([printed], "cot", Sandbox()) == ["7"]


def test_lengths_must_match():
    with pytest.raises(ValueError, match="differ in length"):
        accuracy_reward([COT_RIGHT], ["31", "32"])
    with pytest.raises(ValueError, match="differ in length"):
        format_reward([COT_RIGHT], [])


@pytest.mark.parametrize(
    ("mode", "completions", "expected"),
    [
        ("cot", [COT_RIGHT, COT_WRONG, COT_UNFORMATTED, TOOL, "", "The answer is \\boxed{}."], [1, 1, 0, 0, 0, 0]),
        (
            "cot",
            ["The answer is \\boxed{31}.\nMore text after the answer.", "The answer is \\boxed{\\frac{1}{2}}"],
            [0, 1],
        ),
        (
            "pot",
            [POT, POT_WRONG, "```python\nx = 1\n```", "```python\nprint(\n```", "print(31)", TOOL],
            [1, 1, 0, 0, 0, 0],
        ),  # one block that parses and prints; golds are not used
        ("tool", [TOOL, COT_RIGHT, POT, TOOL.replace("```output", "```python")], [1, 0, 0, 0]),
        (
            "tool",
            [
                TOOL.replace("```output\n31\n```\n", ""),
                TOOL.replace("```\n```output", "```\nhmm\n```output"),
                TOOL + "\n```python\nprint(1)\n```\n```output\n1\n```\nThe answer is \\boxed{31}.",
            ],
            [0, 0, 1],
        ),
    ],
)
def test_format_reward(mode, completions, expected):
    assert format_reward(completions, ["31"] * len(completions), mode=mode) == [float(e) for e in expected]


def test_format_reward_unknown_mode():
    with pytest.raises(ValueError, match="unknown mode 'latex'; valid: cot, pot, tool"):
        format_reward([COT_RIGHT], ["31"], mode="latex")


def test_pot_accuracy_runs_programs_in_the_sandbox():
    completions = [POT, POT_WRONG, POT_CRASH, POT_LOOP, POT_HOSTILE, COT_RIGHT, "", "```python\nprint('$31$')\n```"]
    rewards = pot_accuracy_reward(completions, ["31"] * len(completions), **SANDBOX)
    # 36 != 31; a crash, a timeout, a blocked os.system and a text without a program all score 0
    assert rewards == [1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0]


@pytest.mark.parametrize(("stdout", "answer"), [("31\n", "31"), ("step 1\n31\n\n", "31"), ("", None), ("\n \n", None)])
def test_program_answer(stdout, answer):
    assert program_answer(stdout) == answer


def test_combined_reward_weights():
    completions = [COT_RIGHT, COT_WRONG, COT_UNFORMATTED, ""]
    combined = build_reward("combined", "cot", Rewards(accuracy_weight=1.0, format_weight=0.5))
    # accuracy [1, 0, 1, 0], format [1, 1, 0, 0] -> 1 * acc + 0.5 * fmt
    assert combined(completions, ["31"] * 4) == [1.5, 0.5, 1.0, 0.0]
    only_format = build_reward("combined", "cot", Rewards(accuracy_weight=0.0, format_weight=1.0))
    assert only_format(completions, ["31"] * 4) == [1.0, 1.0, 0.0, 0.0]


def test_combined_reward_skips_zero_weight_terms():
    def boom(completions, golds):
        raise AssertionError("a zero-weight reward must not be computed")

    ones = lambda completions, golds: [1.0] * len(completions)
    assert combined_reward(["a", "b"], ["1", "2"], accuracy=ones, fmt=boom, accuracy_weight=2.0, format_weight=0.0) == [
        2.0,
        2.0,
    ]


@pytest.mark.parametrize(
    ("mode", "completions", "expected"),
    [
        ("cot", [COT_RIGHT, COT_WRONG], [1.1, 0.1]),
        ("tool", [TOOL, COT_RIGHT], [1.1, 1.0]),
        ("pot", [POT, POT_WRONG], [1.1, 0.1]),
    ],
)
def test_build_reward_modes_with_default_weights(mode, completions, expected):
    reward = build_reward("combined", mode, sandbox=Sandbox(**SANDBOX))
    assert reward(completions, ["31", "31"]) == pytest.approx(expected)  # 1.0 * acc + 0.1 * fmt


def test_build_reward_accuracy_and_format():
    assert build_reward("accuracy", "pot", sandbox=Sandbox(**SANDBOX))([POT, COT_RIGHT], ["31", "31"]) == [1.0, 0.0]
    assert build_reward("format", "tool")([TOOL, COT_RIGHT], ["31", "31"]) == [1.0, 0.0]


def test_registry_errors_list_valid_names():
    assert set(REWARDS) == {"accuracy", "format", "combined", "random"}
    with pytest.raises(ValueError, match="unknown reward 'prm'; valid: accuracy, format, combined, random"):
        build_reward("prm")
    with pytest.raises(ValueError, match="unknown mode 'x'; valid: cot, pot, tool"):
        build_reward("accuracy", "x")


# ----------------------------------------------------------------------------------------------------------------
# random reward (rl.reward: random, the Spurious Rewards control)


def test_random_reward_rate_is_p():
    draws = build_reward("random", "cot", Rewards(random_p=0.5), seed=1)([COT_RIGHT] * 4000, ["31"] * 4000)
    assert set(draws) <= {0.0, 1.0}
    assert sum(draws) / 4000 == pytest.approx(0.5, abs=0.03)
    low = random_reward([COT_WRONG] * 4000, ["31"] * 4000, p=0.2, seed=1)
    assert sum(low) / 4000 == pytest.approx(0.2, abs=0.03)
    assert random_reward(["x"] * 50, ["1"] * 50, p=0.0, seed=3) == [0.0] * 50
    assert random_reward(["x"] * 50, ["1"] * 50, p=1.0, seed=3) == [1.0] * 50


def test_random_reward_is_deterministic_and_seeded():
    texts, golds = [COT_RIGHT, COT_WRONG, "", COT_RIGHT] * 50, ["31"] * 200
    a = build_reward("random", "cot", seed=7)(texts, golds)
    assert a == build_reward("random", "cot", seed=7)(texts, golds)
    assert a != build_reward("random", "cot", seed=8)(texts, golds)
    # the position keys the draw: identical outputs of one group differ, and a later batch (offset) draws anew
    same = random_reward(["same"] * 64, ["7"] * 64, p=0.5, seed=7)
    assert 0 < sum(same) < 64
    assert same != random_reward(["same"] * 64, ["7"] * 64, p=0.5, seed=7, offset=64)
    fn = RandomReward(0.5, seed=7)
    fn.offset = 64
    assert fn(["same"] * 64, ["7"] * 64) == random_reward(["same"] * 64, ["7"] * 64, p=0.5, seed=7, offset=64)


def test_random_reward_is_independent_of_correctness():
    n = 4000
    right = random_reward([COT_RIGHT] * n, ["31"] * n, p=0.5, seed=5)
    wrong = random_reward([COT_WRONG] * n, ["31"] * n, p=0.5, seed=5)
    assert abs(sum(right) / n - sum(wrong) / n) < 0.045  # ~2.8 sd of the difference of two rates
    assert right != wrong


def test_random_reward_in_the_scorer_keeps_accuracy_apart():
    from dsmath.rl.scoring import Scorer

    scorer = Scorer("random", "cot", Rewards(), Sandbox(**SANDBOX), 11)
    texts, golds = [COT_RIGHT, COT_WRONG] * 32, ["31"] * 64
    first = scorer(texts, golds)
    assert first.accuracy.tolist() == [1.0, 0.0] * 32
    assert first.rewards.tolist() == random_reward(texts, golds, p=0.5, seed=11)
    scorer.offset = 64
    assert scorer(texts, golds).rewards.tolist() == random_reward(texts, golds, p=0.5, seed=11, offset=64)
