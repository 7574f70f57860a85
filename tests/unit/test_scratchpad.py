"""The place-value scratchpad, the common-denominator chain of fractions and the arithmetic drills: every link exact,
one-digit facts written directly."""

from __future__ import annotations

import random
from fractions import Fraction

import pytest

from dsmath.config.data import Drills
from dsmath.data.synthetic import drills, generate_problem, sympy_value, verify_record
from dsmath.data.synthetic.core import Ctx, E, working
from dsmath.data.synthetic.drills import drill_documents, fraction_line
from dsmath.data.synthetic.scratch import chain_text, fraction_chain, place_value_chain
from dsmath.data.synthetic.verify import extract_chain


@pytest.mark.parametrize(("a", "op", "b", "text"), [
    (47, "+", 36, "47 + 36 = 40 + 30 + 7 + 6 = 70 + 13 = 83"),
    (42, "+", 5, "42 + 5 = 40 + 2 + 5 = 40 + 7 = 47"),
    (83, "-", 36, "83 - 36 = 70 - 30 + 13 - 6 = 40 + 7 = 47"),  # the borrow written out
    (87, "-", 6, "87 - 6 = 80 + 7 - 6 = 80 + 1 = 81"),
    (100, "-", 36, "100 - 36 = 90 - 30 + 10 - 6 = 60 + 4 = 64"),
    (17, "*", 5, "17 * 5 = 10 * 5 + 7 * 5 = 50 + 35 = 85"),
    (5, "*", 17, "5 * 17 = 5 * 10 + 5 * 7 = 50 + 35 = 85"),  # the written order kept
    (12, "*", 15, "12 * 15 = 12 * 10 + 12 * 5 = 120 + 60 = 180"),
    (96, "/", 8, "96 / 8 = 80 / 8 + 16 / 8 = 10 + 2 = 12"),
])
def test_place_value_chains_by_hand(a, op, b, text):
    assert chain_text(a, op, b, text.rsplit(" = ", 1)[1]) == text


@pytest.mark.parametrize(("a", "op", "b"), [
    (7, "+", 6), (13, "-", 6), (7, "*", 8), (56, "/", 8),  # one-digit facts and their inverses
    (20, "+", 4), (30, "*", 4), (80, "/", 8), (24, "/", 12),  # splitting would only repeat the expression
    (1, "*", 17), (47, "+", 0),
])
def test_facts_and_trivial_splits_are_written_directly(a, op, b):
    assert place_value_chain(a, op, b) == []


def test_every_link_of_every_chain_holds():
    rng = random.Random(0)
    for _ in range(3000):
        op = rng.choice("+-*/")
        a, b = rng.randint(0, 400), rng.randint(1, 40)
        if op == "-":
            a, b = max(a, b), min(a, b)
        if op == "/":
            a = a * b
        result = sympy_value(f"{a} {op} {b}")
        values = [sympy_value(x) for x in [f"{a} {op} {b}", *place_value_chain(a, op, b)]]
        assert values == [result] * len(values), (a, op, b)


def test_compound_expressions_reduce_one_operation_at_a_time():
    n = {k: E(Fraction(k), str(k), "", "") for k in (9, 2, 1, 14, 5, 100)}
    assert working(n[9] * n[2] + n[1], "int") == ["18 + 1", "10 + 8 + 1", "10 + 9"]
    assert working(n[14] * n[5] / n[100], "decimal") == ["70 / 100"]  # 0.7: no whole-number scratchpad
    assert working(n[14] * n[5], "int") == ["10 * 5 + 4 * 5", "50 + 20"]


def test_scratchpad_records_verify_and_keep_their_quantities():
    rng = random.Random(3)
    for i in range(300):
        family = ("arithmetic", "linear", "fraction_percent")[i % 3]
        rec = generate_problem(rng, family, 1 + i % 2, 20, scratchpad=True)
        assert verify_record(rec, runner=None) == []
        steps = [extract_chain(line) for line in rec["cot"].splitlines()[:-1]]
        assert [c[-1] for c in steps if c] == rec["quantities"]


def test_the_same_seed_draws_the_same_problem_with_or_without_scratchpad():
    a = generate_problem(random.Random(5), "arithmetic", 2, 20, scratchpad=False)
    b = generate_problem(random.Random(5), "arithmetic", 2, 20, scratchpad=True)
    assert (a["key"], a["answer"], a["tool"], a["quantities"]) == (b["key"], b["answer"], b["tool"], b["quantities"])


def test_drills_are_true_deterministic_and_cover_the_one_digit_tables():
    docs = drill_documents(200, 40, 0.3, 200, 20, seed=1)
    assert docs == drill_documents(200, 40, 0.3, 200, 20, seed=1)
    lines = [x for d in docs for x in d["text"].splitlines()[1:]]
    assert len(lines) == 200 * 40 and all(d["source"] == "drill" and "key" not in d for d in docs)
    for line in lines:
        chain = extract_chain(line)
        assert chain and len({sympy_value(x) for x in chain}) == 1, line
    facts = {line for line in lines if line.count("=") == 1 and all(len(t) == 1 for t in line.split()[0:3:2])}
    adds = {f for f in facts if " + " in f}
    assert len(adds) > 90  # of the 100 one-digit sums: ~1,200 fact lines, a quarter of them sums


FRACTION_CHAINS = [
    "1/5 + 3/10 = 2/10 + 3/10 = 5/10 = 1/2",
    "7/6 + 1/4 = 14/12 + 3/12 = 17/12",
    "1 - 7/12 = 12/12 - 7/12 = 5/12",  # a whole number over the common denominator
    "2/5 + 1/5 = 3/5",  # same denominator, already reduced: nothing between
    "1/4 + 1/4 = 2/4 = 1/2",
    "3/4 - 1/4 = 2/4 = 1/2",
    "1/5 + 1/10 = 2/10 + 1/10 = 3/10",
    "1/2 + 1/2 = 2/2 = 1",
]


def _operands(text: str) -> tuple[Fraction, str, Fraction, str]:
    a, op, b = text.split(" = ")[0].split()
    return Fraction(a), op, Fraction(b), text.rsplit(" = ", 1)[1]


@pytest.mark.parametrize("text", FRACTION_CHAINS)
def test_fraction_chains_by_hand(text):
    a, op, b, result = _operands(text)
    assert chain_text(a, op, b, result) == text
    n = {"a": E(a, str(a), "", ""), "b": E(b, str(b), "", "")}
    step = n["a"] + n["b"] if op == "+" else n["a"] - n["b"]
    for style in ("fraction", "int"):  # the steps of the world, as Ctx.step writes them
        assert " = ".join([step.cot, *working(step, style), str(step.value)]) == text
    values = {sympy_value(x) for x in text.split(" = ")}
    assert len(values) == 1


def test_fraction_chains_only_for_sums_and_differences_with_a_fraction():
    assert fraction_chain(Fraction(3, 4), "*", Fraction(1, 2)) == []
    assert fraction_chain(3, "+", 4) == []
    half = E(Fraction(1, 2), "1/2", "", "")
    quarter = E(Fraction(1, 4), "1/4", "", "")
    assert working(half + quarter, "decimal") == []  # decimal style is written whole, as before


def test_every_link_of_every_fraction_chain_holds():
    rng = random.Random(0)
    for _ in range(2000):
        a = Fraction(rng.randint(0, 30), rng.randint(1, 12))
        b = Fraction(rng.randint(1, 30), rng.randint(2, 12))
        op = rng.choice("+-")
        if op == "-" and a < b:
            a, b = b, a
        value = a + b if op == "+" else a - b
        chain = [f"{a} {op} {b}", *fraction_chain(a, op, b), str(value)]
        assert {sympy_value(x) for x in chain} == {sympy_value(str(value))}, chain
        assert len(set(chain)) == len(chain), chain  # nothing repeated


def test_fraction_records_write_the_chain_and_verify():
    rng = random.Random(4)
    chained = 0
    for _ in range(200):
        rec = generate_problem(rng, "fraction_percent", rng.randint(1, 4), 20, scratchpad=True)
        assert verify_record(rec, runner=None) == []
        steps = [extract_chain(line) for line in rec["cot"].splitlines()[:-1]]
        assert [c[-1] for c in steps if c] == rec["quantities"]
        chained += sum(1 for c in steps if c and any("/" in x and " " in x and "/ " not in x for x in c[1:-1]))
    assert chained > 50


def test_fraction_problems_draw_the_same_with_or_without_scratchpad():
    for seed in range(20):
        a = generate_problem(random.Random(seed), "fraction_percent", 3, 20, scratchpad=False)
        b = generate_problem(random.Random(seed), "fraction_percent", 3, 20, scratchpad=True)
        assert (a["key"], a["answer"], a["pot"], a["tool"], a["quantities"]) == \
               (b["key"], b["answer"], b["pot"], b["tool"], b["quantities"])


def test_ctx_step_writes_the_fraction_chain():
    ctx = Ctx(random.Random(0), 20, "t", style="fraction", scratchpad=True)
    total = ctx.step("With Leo's part", ctx.num(Fraction(1, 5), "a") + ctx.num(Fraction(1, 10), "b"), "eaten")
    ctx.step("Left", ctx.lit(1) - total, "left")
    assert ctx.cot == ["With Leo's part: 1/5 + 1/10 = 2/10 + 1/10 = 3/10.", "Left: 1 - 3/10 = 10/10 - 3/10 = 7/10."]


def test_fraction_drill_lines_verify():
    rng = random.Random(2)
    lines = [fraction_line(rng) for _ in range(3000)]
    for line in lines:
        chain = extract_chain(line)
        assert chain and len({sympy_value(x) for x in chain}) == 1, line
        assert all(sympy_value(x) >= 0 for x in chain), line
    equivalences = [x for x in lines if x.count("=") == 1 and " " not in x.split(" = ")[0]]
    assert 0.4 < len(equivalences) / len(lines) < 0.6
    sums = [x for x in lines if " + " in x]
    differences = [x for x in lines if " - " in x]
    assert 0.2 < len(sums) / len(lines) < 0.3 and 0.2 < len(differences) / len(lines) < 0.3
    assert any(x.count("=") == 3 for x in sums)  # over the common denominator, then reduced


@pytest.mark.parametrize(("one_digit", "fraction"), [(0.3, 0.2), (0.5, 0.5), (1.0, 0.2), (0.0, 0.0), (0.2, 0.0)])
def test_drill_shares_are_of_all_lines(monkeypatch, one_digit, fraction):
    monkeypatch.setattr(drills, "one_digit_fact", lambda rng: "fact")
    monkeypatch.setattr(drills, "fraction_line", lambda rng: "fraction")
    monkeypatch.setattr(drills, "operation", lambda rng, m, d: "whole")
    docs = drill_documents(100, 40, one_digit, 200, 20, seed=3, fraction_share=fraction)
    lines = [x for d in docs for x in d["text"].splitlines()[1:]]
    share = {k: lines.count(k) / len(lines) for k in ("fact", "fraction", "whole")}
    assert share["fact"] == pytest.approx(one_digit, abs=0.03)
    assert share["fraction"] == pytest.approx(min(fraction, 1 - one_digit), abs=0.03)
    assert share["whole"] == pytest.approx(max(0.0, 1 - one_digit - fraction), abs=0.03)


def test_drill_docs_with_fraction_lines_verify():
    docs = drill_documents(50, 40, 0.5, 200, 20, seed=2, fraction_share=0.2)
    lines = [x for d in docs for x in d["text"].splitlines()[1:]]
    for line in lines:
        chain = extract_chain(line)
        assert chain and len({sympy_value(x) for x in chain}) == 1, line
    fractions = [x for x in lines if "/" in x.split(" = ")[0].replace(" / ", "")]
    assert 0.15 < len(fractions) / len(lines) < 0.25


def test_drill_shares_must_fit_in_one():
    with pytest.raises(ValueError, match="fraction_share"):
        Drills(one_digit_share=0.9, fraction_share=0.2)


# ----------------------------------------------------------------------------------------------------------------
# decimals (data.synthetic.decimal_scratchpad, corpus.drills.decimal_share)


@pytest.mark.parametrize("text", [
    "19 - 2.85 = 18 - 2 + 1 - 0.85 = 16 + 0.15 = 16.15",  # a borrow of one whole
    "14 - 0.7 = 13 + 1 - 0.7 = 13 + 0.3 = 13.3",
    "35 - 17.5 = 20 - 10 + 14 - 7 + 1 - 0.5 = 10 + 7 + 0.5 = 17 + 0.5 = 17.5",  # whole parts by place value
    "13.3 + 2.45 = 10 + 3 + 2 + 0.3 + 0.45 = 10 + 5 + 0.75 = 15 + 0.75 = 15.75",
    "18 + 3.6 = 10 + 8 + 3 + 0.6 = 10 + 11 + 0.6 = 21 + 0.6 = 21.6",
    "2.7 + 0.5 = 2 + 0.7 + 0.5 = 2 + 1.2 = 3.2",
    "13.3 * 4 = 10 * 4 + 3 * 4 + 0.3 * 4 = 40 + 12 + 1.2 = 52 + 1.2 = 53.2",  # every product a one-digit fact
    "17.15 * 5 = 10 * 5 + 7 * 5 + 0.1 * 5 + 0.05 * 5 = 50 + 35 + 0.5 + 0.25 = 85 + 0.75 = 85.75",
    "6 * 16.5 = 6 * 10 + 6 * 6 + 6 * 0.5 = 60 + 36 + 3 = 99",  # the written order kept
    "0.7 + 0.5 = 1.2", "0.15 * 5 = 0.75", "1.5 * 1.5 = 2.25", "1 - 0.85 = 0.15",  # facts: written whole
])
def test_decimal_chains_by_hand(text):
    from dsmath.data.synthetic.scratch import decimal_chain

    expr, *links, result = text.split(" = ")
    a, op, b = expr.split(" ")
    assert decimal_chain(Fraction(a), op, Fraction(b)) == links


def test_every_link_of_every_decimal_chain_holds():
    from dsmath.data.synthetic.scratch import decimal_chain, decimal_text

    rng = random.Random(0)
    for _ in range(3000):
        a, b = (Fraction(rng.randint(0, 3000), rng.choice([1, 10, 100])) for _ in range(2))
        op = rng.choice("+-*")
        if op == "*":
            b = Fraction(rng.randint(0, 12))
        if op == "-" and a < b:
            a, b = b, a
        value = {"+": a + b, "-": a - b, "*": a * b}[op]
        chain = [f"{decimal_text(a)} {op} {decimal_text(b)}", *decimal_chain(a, op, b), decimal_text(value)]
        assert {sympy_value(x) for x in chain} == {sympy_value(str(value))}, chain
        assert len(set(chain)) == len(chain), chain


def test_decimal_records_write_the_chain_verify_and_draw_the_same_problems():
    chained = 0
    for seed in range(300):
        off = generate_problem(random.Random(seed), "fraction_percent", 1 + seed % 4, 20, scratchpad=True)
        on = generate_problem(random.Random(seed), "fraction_percent", 1 + seed % 4, 20, scratchpad=True,
                              decimals=True)
        assert verify_record(on, runner=None) == []
        assert (on["key"], on["answer"], on["pot"], on["tool"], on["quantities"]) == \
               (off["key"], off["answer"], off["pot"], off["tool"], off["quantities"])
        chained += on["cot"] != off["cot"]
        steps = [extract_chain(line) for line in on["cot"].splitlines()[:-1]]
        assert [c[-1] for c in steps if c] == on["quantities"]
    assert chained > 30  # the decimal-style templates' money steps


def test_decimal_drill_lines_verify_and_their_share_is_of_all_lines():
    docs = drill_documents(60, 40, 0.4, 200, 20, seed=5, fraction_share=0.2, decimal_share=0.25)
    lines = [x for d in docs for x in d["text"].splitlines()[1:]]
    for line in lines:
        chain = extract_chain(line)
        assert chain and len({sympy_value(x) for x in chain}) == 1, line
        assert all(sympy_value(x) >= 0 for x in chain), line
    decimal = [x for x in lines if "." in x]
    assert 0.2 < len(decimal) / len(lines) < 0.3
    assert any(x.count("=") == 3 for x in decimal)  # whole and decimal parts apart, then together
    same = drill_documents(60, 40, 0.4, 200, 20, seed=5, fraction_share=0.2)
    assert not any("." in x for d in same for x in d["text"].splitlines()[1:])  # decimal_share 0: none
    with pytest.raises(ValueError, match="decimal_share"):
        Drills(one_digit_share=0.5, fraction_share=0.2, decimal_share=0.4)
