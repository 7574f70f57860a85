"""String normalisation and exact number parsing: the fast path of answer equivalence (no sympy, bounded time).

``normalize_answer`` maps the many spellings of one answer to one string: ``\\dfrac{14}{3}`` -> ``\\frac{14}{3}``,
``10,\\!080`` -> ``10080``, ``90^\\circ`` -> ``90``, ``\\$18.90`` -> ``18.90``, ``5.4 \\text{ cents}`` -> ``5.4``,
``\\text{(C)}`` -> ``c``, ``x = 5`` -> ``5``. ``parse_number`` reads the result as an exact Fraction when it is a plain
number: integer (thousands commas allowed), decimal, ``a/b``, ``\\frac{a}{b}``, mixed number ``1\\frac{4}{5}``.
"""

from __future__ import annotations

import re
from fractions import Fraction

MAX_NUMBER_CHARS = 200  # longer digit strings are left to the slow path (int() has a 4300-digit limit anyway)

_WRAPPERS = (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]"))
_DROP = re.compile(
    r"\\(?:displaystyle|left|right|bigl|bigr|Bigl|Bigr|big|Big)(?![a-zA-Z])|(?<!\\)\\[!,;:> ]|\\q?quad(?![a-zA-Z])|~"
)
_DEGREES = re.compile(r"\^\s*\{?\s*\\circ\s*\}?|\\circ|\\degree|°")
_TEXT_CMD = re.compile(r"\\(?:text|textbf|textit|textrm|mbox|mathrm|mathbf|operatorname)\s*\{([^{}]*)\}")
_TRAILING_UNIT = re.compile(r"(?<=[\d}.])\s*\\(?:text|mbox|mathrm)\s*\{\s*[a-zA-Z][a-zA-Z .]*\}(?:\^\{?\d\}?)?\s*$")
_UNIT_WORDS = re.compile(r"(?<=\d)\s+[a-zA-Z]{2,}\.?(?:\s+[a-zA-Z]{2,}\.?)*(?:\^\{?\d\}?)?\s*$")
_MATH_WORDS = frozenset({"pi", "sin", "cos", "tan", "log", "ln", "exp", "sqrt", "and", "or", "to", "in"})
_FRAC_SHORT = re.compile(r"\\[dt]?frac\s*(\d)\s*(\d)")  # \frac12 -> \frac{1}{2}
_FRAC_HALF_SHORT = re.compile(r"\\[dt]?frac\s*(\{[^{}]*\})\s*(\d)")  # \frac{270}7 -> \frac{270}{7}
_SQRT_SHORT = re.compile(r"\\sqrt\s*(\d)")
_ASSIGN = re.compile(r"^[a-zA-Z](?:_\{?\w+\}?)?\s*(?:=|\\in)\s*(?!.*(?:=|\\in))")
_SPACE = re.compile(r"\\[a-zA-Z]+\s+(?=[a-zA-Z])|\s+")  # spaces go, except one ending a command: \cot x
_SUBSCRIPT = re.compile(r"_\{(\w)\}")  # 4210_{5} -> 4210_5
_THOUSANDS = re.compile(r"^[+-]?\d{1,3}(?:,\d{3})+(?:\.\d+)?$")
_CHOICE = re.compile(r"^\(?([a-eA-E])\)?$")

_DECIMAL = re.compile(r"^[+-]?(?:\d+\.?\d*|\.\d+)$")
_RATIO = re.compile(r"^([+-]?\d+)/(\d+)$")
_FRAC = re.compile(r"^([+-]?)\\frac\{([+-]?\d+)\}\{([+-]?\d+)\}$")
_MIXED = re.compile(r"^([+-]?)(\d+)\\frac\{(\d+)\}\{(\d+)\}$")


def _unwrap(s: str) -> str:
    """Strip one or more layers of math delimiters around the whole answer: $..$, \\(..\\), \\[..\\]."""
    changed = True
    while changed:
        changed = False
        s = s.strip()
        for left, right in _WRAPPERS:
            if len(s) >= len(left) + len(right) and s.startswith(left) and s.endswith(right):
                s, changed = s[len(left) : len(s) - len(right)], True
                break
    return s


def _strip_units(s: str) -> str:
    """Drop a trailing unit after a number: ``5.4 \\text{ cents}``, ``864 \\mbox{ inches}^2``, ``31 pencils``."""
    s = _TRAILING_UNIT.sub("", s)
    m = _UNIT_WORDS.search(s)
    if m and not (set(re.findall(r"[a-z]+", m.group(0).lower())) & _MATH_WORDS):
        s = s[: m.start()]
    return s


def normalize_answer(s: str) -> str:
    """Canonical spelling of an answer string (see module docstring); '' for blank input."""
    s = _unwrap(s.strip().rstrip("."))
    s = _DROP.sub(" ", s).replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    s = _DEGREES.sub("", s).replace("\\%", "").replace("%", "").replace("\\$", "").replace("$", "")
    s = re.sub(r"\b(?:dollars?|degrees?|percent)\b", "", s).strip()
    s = _strip_units(s)
    while (t := _TEXT_CMD.sub(r"\1", s)) != s:
        s = t
    s = _FRAC_HALF_SHORT.sub(r"\\frac\1{\2}", _FRAC_SHORT.sub(r"\\frac{\1}{\2}", s))
    s = _SQRT_SHORT.sub(r"\\sqrt{\1}", s)
    s = _ASSIGN.sub("", s.strip())
    s = _SPACE.sub(lambda m: m.group(0).rstrip() + " " if m.group(0)[0] == "\\" else "", s).rstrip(".")
    s = _SUBSCRIPT.sub(r"_\1", s)
    if _THOUSANDS.match(s):
        s = s.replace(",", "")
    if m := _CHOICE.match(s):
        return m.group(1).lower()
    return s.lower() if s.isalpha() else s


def parse_number(s: str) -> Fraction | None:
    """Exact value of a normalised plain number (integer, decimal, a/b, \\frac{a}{b}, mixed number), else None."""
    if not s or len(s) > MAX_NUMBER_CHARS:
        return None
    try:
        if _DECIMAL.match(s):
            return Fraction(s)
        if m := _RATIO.match(s):
            return Fraction(int(m.group(1)), int(m.group(2))) if int(m.group(2)) else None
        if m := _FRAC.match(s):
            value = Fraction(int(m.group(2)), int(m.group(3))) if int(m.group(3)) else None
            return -value if value is not None and m.group(1) == "-" else value
        if m := _MIXED.match(s):
            if not int(m.group(4)):
                return None
            value = int(m.group(2)) + Fraction(int(m.group(3)), int(m.group(4)))
            return -value if m.group(1) == "-" else value
    except (ValueError, ZeroDivisionError):
        return None
    return None
