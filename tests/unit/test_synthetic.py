"""The synthetic math world: determinism, verified CoT/PoT/tool solutions, disjoint splits, levels, formats."""

from __future__ import annotations

import math
import random
import re
import statistics
from fractions import Fraction

import pytest
import sympy

from dsmath.config import Synthetic
from dsmath.data.io import dumps_jsonl, read_jsonl, write_jsonl
from dsmath.data.synthetic import (
    FAMILIES,
    FIELDS,
    LEVELS,
    count_steps,
    extract_equation,
    fmt_number,
    generate,
    generate_problem,
    generate_splits,
    math_text_documents,
    program_of,
    run_programs,
    split_of,
    sympy_value,
    tool_parts,
    verify_record,
)
from dsmath.data.synthetic.core import Ctx

ALL_LEVELS = Synthetic(levels=list(LEVELS), n_train=600, n_val=60, n_test=120)
CANONICAL = re.compile(r"^(0|[1-9]\d*)(\.\d*[1-9])?$|^[1-9]\d*/[1-9]\d*$")


@pytest.fixture(scope="module")
def splits() -> dict[str, list[dict]]:
    return generate_splits(ALL_LEVELS, seed=7)


@pytest.fixture(scope="module")
def sample() -> list[dict]:
    """200 problems per family and level."""
    rng = random.Random(3)
    return [generate_problem(rng, f, lv, 100) for f in FAMILIES for lv in LEVELS for _ in range(200)]


# ---- determinism -----------------------------------------------------------------------------------------------


def test_same_seed_same_bytes_other_seed_other_data(tmp_path):
    cfg = Synthetic(n_train=300, n_val=30, n_test=30)
    a, b, c = generate_splits(cfg, 11), generate_splits(cfg, 11), generate_splits(cfg, 12)
    for split in ("train", "val", "test"):
        path = write_jsonl(a[split], tmp_path / f"{split}.jsonl")
        assert path.read_bytes() == dumps_jsonl(b[split]).encode("utf-8")
        assert dumps_jsonl(c[split]) != dumps_jsonl(a[split])
    assert {r["key"] for r in a["train"]} != {r["key"] for r in c["train"]}


# ---- every solution checks out ---------------------------------------------------------------------------------


def test_every_cot_step_and_answer_verifies_with_sympy(sample):
    failures = [(r["key"], p) for r in sample if (p := verify_record(r, runner=None))]
    assert not failures, failures[:5]
    assert all(count_steps(r["cot"]) >= 1 for r in sample)


def test_programs_print_the_answer_and_tool_output_is_real(sample):
    chosen = sample[::60]  # 50 records, every family and level
    codes = [program_of(r["pot"]) for r in chosen] + [tool_parts(r["tool"])[1] for r in chosen]
    outputs = dict(zip(codes, run_programs(codes), strict=True))
    failures = [(r["key"], p) for r in chosen if (p := verify_record(r, runner=outputs.__getitem__))]
    assert not failures, failures[:5]


def test_verify_record_runs_programs_in_a_fresh_process(sample):
    record = next(r for r in sample if r["family"] == "fraction_percent" and "." in r["answer"])
    assert verify_record(record) == []  # default runner: subprocess, decimal answer printed exactly


def test_verify_record_catches_each_kind_of_error(sample):
    rec = next(r for r in sample if r["family"] == "arithmetic" and r["level"] == 3)
    first = rec["cot"].splitlines()[0]
    lhs, rhs = extract_equation(first)
    wrong = first.replace(f"= {rhs}", f"= {int(rhs) + 1}")
    bad_cot = dict(rec, cot=rec["cot"].replace(first, wrong), solution=rec["cot"].replace(first, wrong))
    assert any("false equation" in p for p in verify_record(bad_cot, runner=None))
    bad_answer = dict(rec, answer=str(int(rec["answer"]) + 1))
    assert any("boxed" in p for p in verify_record(bad_answer, runner=None))
    bad_pot = dict(rec, pot=rec["pot"].replace("print(", "print(1 + "))
    assert any(p.startswith("pot: prints") for p in verify_record(bad_pot, runner=lambda code: run_programs([code])[0]))
    reasoning, code, out, final = tool_parts(rec["tool"])
    bad_tool = dict(rec, tool=rec["tool"].replace(f"```output\n{out}\n", f"```output\n{out}0\n"))
    assert any(p.startswith("tool: output") for p in verify_record(bad_tool, runner=lambda c: run_programs([c])[0]))
    assert verify_record({"id": "x"}) == [f"fields missing: {', '.join(FIELDS[1:])}"]


# ---- equation parsing and exact values -------------------------------------------------------------------------


def test_extract_equation_finds_the_one_arithmetic_equation():
    assert extract_equation("Sam buys 3 boxes of 12 pencils: 3 * 12 = 36.") == ("3 * 12", "36")
    assert extract_equation("Add 1/3: 1/4 + 1/3 = 7/12.") == ("1/4 + 1/3", "7/12")
    assert extract_equation("Check: 7 * (4 + 3) + 3 = 52.") == ("7 * (4 + 3) + 3", "52")
    assert extract_equation("After spending $5: 38.5 - 5 = 33.5.") == ("38.5 - 5", "33.5")
    assert extract_equation("No equation on this line.") is None
    assert extract_equation("1 + 1 = 2 = 2.") == ("1 + 1", "2")  # a chain: its first expression and result
    assert extract_equation("Total: 47 + 36 = 40 + 30 + 7 + 6 = 70 + 13 = 83.") == ("47 + 36", "83")
    assert extract_equation("Total: 47 + 36 = forty = 83.") is None  # a link that is not arithmetic
    assert extract_equation("So x = y.") is None


def test_sympy_value_is_exact_and_refuses_non_arithmetic():
    assert sympy_value("1/3") == sympy.Rational(1, 3)
    assert sympy_value("0.1 * 3") == sympy.Rational(3, 10)  # as a float this would be 0.30000000000000004
    assert sympy_value("(6 - 3) * 3 / 2") == sympy.Rational(9, 2)
    for bad in ("x + 1", "2 ** 3", "__import__('os')", "3 +"):
        with pytest.raises(ValueError):
            sympy_value(bad)


def test_fmt_number_canonical_forms():
    assert fmt_number(36) == "36"
    assert fmt_number(Fraction(5, 2), "decimal") == "2.5"
    assert fmt_number(Fraction(1, 20), "decimal") == "0.05"
    assert fmt_number(Fraction(-3, 2), "decimal") == "-1.5"
    assert fmt_number(Fraction(1, 3), "decimal") == "1/3"  # does not terminate: stays a fraction
    assert fmt_number(Fraction(6, 8), "fraction") == "3/4"


def test_programs_divide_exactly_and_parenthesize():
    ctx = Ctx(random.Random(0), 100, "t")
    a, b, c = ctx.num(6, "a"), ctx.num(3, "b"), ctx.num(7, "c")
    assert (a / b).pot == "a // b" and (a / b).tool == "6 // 3"  # whole: stays int (no `2.0`)
    assert (c / b).pot == "Fraction(c, b)" and (c / b).value == Fraction(7, 3)
    assert ((a - b) * b).cot == "(6 - 3) * 3" and (a - (b - b)).cot == "6 - (3 - 3)"
    assert (a / (b * b)).cot == "6 / (3 * 3)"
    step = ctx.step("Half", a / ctx.lit(2), "half")
    assert ctx.cot == ["Half: 6 / 2 = 3."] and ctx.pot == ["half = a // 2"] and step.pot == "half"


# ---- splits ----------------------------------------------------------------------------------------------------


def test_splits_have_the_counts_and_share_no_problem(splits):
    assert {s: len(v) for s, v in splits.items()} == {"train": 600, "val": 60, "test": 120}
    ids = [r["id"] for v in splits.values() for r in v]
    assert len(ids) == len(set(ids))
    for held in ("val", "test"):
        others = [r for s in ("train", "val") if s != held for r in splits[s]]
        assert not {r["key"] for r in splits[held]} & {r["key"] for r in others}
        assert not {r["question"] for r in splits[held]} & {r["question"] for r in others}


def test_split_is_a_function_of_the_key(splits):
    weights = {"train": 600, "val": 60, "test": 120}
    assert all(split_of(r["key"], weights) == s for s, records in splits.items() for r in records)


def test_exhausted_problem_space_raises_with_advice(monkeypatch):
    def ten_problems(rng, family, level, max_number, scratchpad=False, decimals=False):  # only 10 problems
        k = rng.randrange(10)
        return {"key": f"k{k}", "question": f"q{k}"}

    monkeypatch.setattr(generate, "generate_problem", ten_problems)
    with pytest.raises(RuntimeError, match="raise max_number"):
        generate_splits(Synthetic(n_train=20, n_val=5, n_test=5), 0)


# ---- families, levels, numbers ---------------------------------------------------------------------------------


def test_every_family_and_level_appears_and_steps_grow_with_level(splits):
    train = splits["train"]
    families = ALL_LEVELS.families  # the default world (sums is the smoke profile's own)
    assert {(r["family"], r["level"]) for r in train} == {(f, lv) for f in families for lv in LEVELS}
    for r in train:
        assert count_steps(r["cot"]) in (r["level"], r["level"] + 1), r["key"]
    for family in families:
        means = [statistics.mean(count_steps(r["cot"]) for r in train if (r["family"], r["level"]) == (family, lv))
                 for lv in LEVELS]
        assert means == sorted(means) and len(set(means)) == len(means), (family, means)


def test_record_fields_and_canonical_answers(splits):
    for r in splits["test"]:
        assert list(r) == list(FIELDS) and r["source"] == "synthetic" and r["solution"] == r["cot"]
        assert r["key"].split(":")[0].split("+")[0].split(".")[0] in ("arith", "lin", "fp")
        assert CANONICAL.match(r["answer"]), r["answer"]
        if "/" in r["answer"]:
            num, den = map(int, r["answer"].split("/"))
            assert math.gcd(num, den) == 1 and den > 1
        if r["family"] in ("arithmetic", "linear"):
            assert r["answer"].isdigit()


def test_given_numbers_stay_within_max_number():
    cfg = Synthetic(levels=list(LEVELS), n_train=300, n_val=30, n_test=30, max_number=12)
    for records in generate_splits(cfg, 5).values():
        for r in records:
            assert max(int(x) for x in re.findall(r"\d+", r["question"])) <= 12, r["question"]
            assert verify_record(r, runner=None) == []


def test_generate_problem_rejects_unknown_names():
    with pytest.raises(ValueError, match="arithmetic, linear, fraction_percent"):
        generate_problem(random.Random(0), "geometry", 1, 100)
    with pytest.raises(ValueError, match="level"):
        generate_problem(random.Random(0), "linear", 6, 100)


# ---- documents and files ---------------------------------------------------------------------------------------


def test_math_text_documents_keep_key_and_add_some_programs(splits):
    records = splits["train"][:40]
    docs = math_text_documents(records)
    assert [d["key"] for d in docs] == [r["key"] for r in records]
    assert all(d["source"] == "synthetic" and d["text"].startswith(r["question"] + "\n" + r["cot"])
               for d, r in zip(docs, records, strict=True))
    with_code = [i for i, d in enumerate(docs) if "```python" in d["text"]]
    assert with_code == list(range(3, 40, 4))


def test_jsonl_round_trip(tmp_path):
    records = [{"id": "a", "question": "Zoë has 3/4 of a pie.", "n": 1}, {"id": "b", "question": "x", "n": 2}]
    path = write_jsonl(records, tmp_path / "deep" / "r.jsonl")
    assert read_jsonl(path) == records
    assert path.read_text(encoding="utf-8").count("\n") == 2 and "Zoë" in path.read_text(encoding="utf-8")
