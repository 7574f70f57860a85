"""Find the final answer and the code blocks in model text (docs/formats.md). Never raises; None means "no answer".

Order of evidence for the answer, each taking the LAST occurrence in the text:
1. ``\\boxed{...}`` / ``\\fbox{...}`` with nested braces. If the text has a box at all, the last one decides: an
   unbalanced or empty last box (e.g. a completion cut off at max length) gives None, not an earlier box.
2. GSM8K ``#### N``.
3. "The (final) answer is N" / "Answer: N" up to the end of its line.
4. Optionally the last number in the text (evaluation of base models; off for RL rewards by default).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

BOX_COMMANDS = ("\\boxed", "\\fbox")
_GSM8K = re.compile(r"####\s*([^\n]+)")
_ANSWER_IS = re.compile(r"(?:final answer|the answer|answer)\s*(?:is\b|:)\s*:?\s*([^\n]+)", re.IGNORECASE)
_NUMBER = re.compile(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?|-?\d+/\d+|-?\d*\.?\d+")
_FENCE = re.compile(r"^```[ \t]*(\w*)[ \t]*$", re.MULTILINE)


def _braced(text: str, start: int) -> tuple[str, int] | None:
    """The content of the brace group opening at text[start] == '{' and the index after its '}'; None if unbalanced."""
    depth = 0
    for i in range(start, len(text)):
        c = text[i]
        if c == "{" and text[i - 1] != "\\":  # an escaped brace \{ or \} does not count
            depth += 1
        elif c == "}" and text[i - 1] != "\\":
            depth -= 1
            if depth == 0:
                return text[start + 1 : i], i + 1
    return None


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (or ``\\boxed 5`` / ``\\fbox{}``); None if absent, unbalanced or empty."""
    pos = max(text.rfind(cmd) for cmd in BOX_COMMANDS)
    if pos < 0:
        return None
    cmd = next(c for c in BOX_COMMANDS if text.startswith(c, pos))
    rest = pos + len(cmd)
    if text.startswith("{", rest):
        got = _braced(text, rest)
        content = got[0] if got else None
    elif text.startswith(" ", rest):  # \boxed 5: one token
        content = text[rest:].split(None, 1)[0].rstrip("$.") if text[rest:].strip() else None
    else:
        content = None
    return content.strip() or None if content is not None else None


def _clean_phrase(s: str) -> str | None:
    """Trim an answer phrase: trailing full stops, markdown bold, surrounding $...$; None when nothing is left."""
    s = s.rstrip(". \t\r\f\v").strip("*").strip().strip("$").strip()
    return s or None


def extract_answer(text: str | None, last_number_fallback: bool = False) -> str | None:
    """The final answer of a completion as a string (not normalised), or None. Never raises on any input."""
    if not isinstance(text, str) or not text.strip():
        return None
    if any(cmd in text for cmd in BOX_COMMANDS):
        return last_boxed(text)
    for pattern in (_GSM8K, _ANSWER_IS):
        matches = pattern.findall(text)
        if matches and (phrase := _clean_phrase(matches[-1])):
            return phrase
    if last_number_fallback and (numbers := _NUMBER.findall(text)):
        return numbers[-1]
    return None


@dataclass(frozen=True)
class Fenced:
    """One fenced block: its language tag ("" when none), content, and character span [start, end) of the fences."""

    lang: str
    content: str
    start: int
    end: int


def fenced_blocks(text: str | None) -> list[Fenced] | None:
    """The fenced blocks of `text` in order; None if a fence is left open or a block opens inside another."""
    if not isinstance(text, str):
        return None
    blocks, opened = [], None
    for m in _FENCE.finditer(text):
        if opened is None:
            opened = m
        elif m.group(1):  # an opening fence inside an open block
            return None
        else:
            content = text[opened.end() + 1 : m.start()]
            blocks.append(Fenced(opened.group(1), content, opened.start(), m.end()))
            opened = None
    return blocks if opened is None else None


def strip_output_blocks(text: str | None) -> str | None:
    """`text` without its ```output blocks (fence lines included), i.e. what a tool-mode model wrote itself.

    An output block runs from a "```output" fence line to the next bare "```" line (fence lines with a language
    inside it are output text), or to the end of the text when it is left open. A "```output" line inside another
    open block starts an output block too: the interpreter appends one whenever it sees a code block closed, even
    by a fence that is not on a line of its own. Other blocks are kept.
    """
    if not isinstance(text, str):
        return text
    kept, pos, opened = [], 0, None
    for m in _FENCE.finditer(text):
        if opened is None or (m.group(1) == "output" and opened.group(1) != "output"):
            opened = m
        elif not m.group(1):  # a bare fence closes the open block
            if opened.group(1) == "output":
                kept.append(text[pos : opened.start()])
                pos = m.end()
            opened = None
    if opened is not None and opened.group(1) == "output":
        kept.append(text[pos : opened.start()])
        pos = len(text)
    return "".join(kept) + text[pos:]


def code_blocks(text: str | None, lang: str = "python") -> list[str]:
    """Contents of the well-formed fenced `lang` blocks, in order ([] when none or when the fences are malformed)."""
    return [b.content for b in fenced_blocks(text) or [] if b.lang == lang]
