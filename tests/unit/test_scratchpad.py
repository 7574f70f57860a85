"""The place-value scratchpad and the arithmetic drills: every link exact, one-digit facts written directly."""

from __future__ import annotations

import random
from fractions import Fraction

import pytest

from dsmath.data.synthetic import generate_problem, sympy_value, verify_record
from dsmath.data.synthetic.core import E, working
from dsmath.data.synthetic.drills import drill_documents
from dsmath.data.synthetic.scratch import chain_text, place_value_chain
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
