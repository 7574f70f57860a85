"""Answer extraction and fenced blocks: table of tricky completions, degenerate inputs, never raising."""

import time

import pytest

from dsmath.rewards import code_blocks, extract_answer, fenced_blocks, last_boxed, strip_output_blocks

EXTRACT_CASES = [
    # (text, expected answer)
    ("The answer is \\boxed{31}.", "31"),
    ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
    ("so $\\boxed{\\frac{\\sqrt{3}}{2}}$", "\\frac{\\sqrt{3}}{2}"),  # nested braces
    ("first \\boxed{3}, on reflection \\boxed{4}", "4"),  # the LAST box
    ("\\boxed{3} and then \\boxed{4", None),  # last box unbalanced (cut off): no answer, not the earlier box
    ("The answer is \\boxed{}.", None),  # empty box
    ("\\boxed 5.", "5"),  # \boxed without braces takes one token
    ("\\fbox{7}", "7"),
    ("\\boxed{\\{1, 2\\}}", "\\{1, 2\\}"),  # escaped braces do not close the box
    ("\\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}", "\\left( 3, \\frac{\\pi}{2} \\right)"),
    ("\\boxed{a}}}", "a"),  # stray closing braces after the box
    ("The answer is 5. Actually it is \\boxed{6}", "6"),  # a box beats "The answer is"
    ("Natalia sold 48 + 24 = 72 clips.\n#### 72", "72"),  # GSM8K
    ("#### 1,000", "1,000"),
    ("#### 5\nno wait\n#### 6", "6"),
    ("The answer is 42.", "42"),
    ("The final answer is $\\frac{3}{4}$.", "\\frac{3}{4}"),
    ("Answer: 17", "17"),
    ("the answer is: 3.5.", "3.5"),
    ("The answer is 31 pencils.", "31 pencils"),
    ("The answer is 3.\nHmm, recheck.\nThe answer is 5.", "5"),  # the LAST "answer is"
    ("The answer is **12**", "12"),
    ("I think the answer isn't obvious", None),
    ("I don't know.", None),
    ("", None),
    ("   \n\t ", None),
    ("\x00\\boxed{", None),
]


@pytest.mark.parametrize(("text", "expected"), EXTRACT_CASES)
def test_extract_answer(text, expected):
    assert extract_answer(text) == expected


@pytest.mark.parametrize("bad", [None, 17, b"\\boxed{1}", ["\\boxed{1}"]])
def test_extract_answer_non_strings_give_none(bad):
    assert extract_answer(bad) is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [("so we get 12 apples", "12"), ("x is -3.5 here", "-3.5"), ("total 1,234 dollars", "1,234"), ("no digits", None)],
)
def test_last_number_fallback(text, expected):
    assert extract_answer(text, last_number_fallback=True) == expected
    assert extract_answer(text) is None  # off by default


def test_never_raises_on_hostile_strings():
    texts = ["{" * 5000 + "\\boxed{" + "}" * 10, "\\boxed{" * 3000, "####", "The answer is", "\\boxed", "$" * 99,
             "The answer is " + ". " * 50000 + "x", "#### " + "1" * 100000, "answer: " * 20000]
    start = time.monotonic()
    for text in texts:
        got = extract_answer(text, last_number_fallback=True)
        assert got is None or isinstance(got, str)
    assert time.monotonic() - start < 5  # no quadratic regex on long lines


def test_last_boxed_deep_nesting():
    assert last_boxed("\\boxed{" + "{" * 100 + "x" + "}" * 100 + "}") == "{" * 100 + "x" + "}" * 100


TOOL = "Let me compute.\n```python\nprint(3 * 12 - 5)\n```\n```output\n31\n```\nThe answer is \\boxed{31}."


def test_fenced_blocks_and_code_blocks():
    blocks = fenced_blocks(TOOL)
    assert [(b.lang, b.content) for b in blocks] == [("python", "print(3 * 12 - 5)\n"), ("output", "31\n")]
    assert TOOL[blocks[0].start : blocks[0].end] == "```python\nprint(3 * 12 - 5)\n```"
    assert code_blocks(TOOL) == ["print(3 * 12 - 5)\n"]


@pytest.mark.parametrize("text", ["```python\nprint(1)\n", "```python\n```python\n```\n```", None])
def test_malformed_fences(text):
    assert fenced_blocks(text) is None
    assert code_blocks(text) == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (TOOL, "Let me compute.\n```python\nprint(3 * 12 - 5)\n```\n\nThe answer is \\boxed{31}."),
        ("a\n```output\n\\boxed{7}\n```\nb\n```output\n8\n```\nc", "a\n\nb\n\nc"),  # every output block
        ("a\n```output\n```python\n\\boxed{7}\n```\nb", "a\n\nb"),  # a fence with a language is output text
        ("a\n```output\n\\boxed{7}", "a\n"),  # left open (cut off): runs to the end
        ("```python\nprint(7)```\n```output\n7\n```\nb", "```python\nprint(7)```\n\nb"),  # code closed mid-line
        ("```\nplain\n```\nno output here", "```\nplain\n```\nno output here"),
        ("", ""),
        (None, None),
    ],
)
def test_strip_output_blocks(text, expected):
    assert strip_output_blocks(text) == expected
