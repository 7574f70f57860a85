"""The synthetic math world: seeded problems in skill families and levels, with verified CoT, PoT and tool solutions.

The default profile trains on it: a model small enough for a laptop CPU cannot learn GSM8K itself, but it can learn
short, regular problems whose every step is checkable. Families (docs/formats.md gives the text formats):

- ``arithmetic``: multi-step GSM8K-style word problems (buying, sharing, wages, savings, reading, travel, ages, ...);
- ``linear``: linear equations in x, bare or as word problems (think of a number, had some at first, ages, ...);
- ``fraction_percent``: percent of, discounts, price changes, fraction of, sums of fractions as reduced ``a/b``;
- ``sums``: sums of one-digit numbers, the smoke profile's toy world (learnt by a tiny model in seconds).

Level L (1..5) means L or L+1 reasoning steps. A record's ``key`` (template + structure + numbers) is its identity:
splits are assigned by a hash of it, so train, val and test never share a problem.

Public API: :func:`generate_problem`, :func:`generate_splits`, :func:`math_text_documents`, :func:`verify_record`
(plus the equation helpers :func:`extract_equation`, :func:`sympy_value`, :func:`count_steps` and the program
runners :func:`run_python`, :func:`run_programs`); jsonl helpers live in :mod:`dsmath.data.io`.
"""

from dsmath.data.io import read_jsonl, write_jsonl
from dsmath.data.synthetic.core import fmt_number
from dsmath.data.synthetic.generate import (
    FAMILIES,
    LEVELS,
    SPLITS,
    generate_problem,
    generate_splits,
    math_text_documents,
    split_of,
)
from dsmath.data.synthetic.verify import (
    FIELDS,
    check_cot,
    count_steps,
    extract_equation,
    program_of,
    run_programs,
    run_python,
    sympy_value,
    tool_parts,
    verify_record,
)

__all__ = [
    "FAMILIES", "FIELDS", "LEVELS", "SPLITS", "check_cot", "count_steps", "extract_equation", "fmt_number",
    "generate_problem", "generate_splits", "math_text_documents", "program_of", "read_jsonl", "run_programs",
    "run_python", "split_of", "sympy_value", "tool_parts", "verify_record", "write_jsonl",
]
