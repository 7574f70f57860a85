"""Decontamination (DeepSeekMath sec. 2.1): 10-gram overlap, exact short matches, synthetic identity."""

from dsmath.data.decontam import build_index, decontaminate, ngrams, words

GSM = {"id": "t0", "question": "Natalia sold clips to 48 of her friends in April, and then she sold half as many "
                               "clips in May. How many clips did Natalia sell altogether?", "solution": None}
SHORT = {"id": "m0", "question": r"Compute $\dbinom{8}{4}$.", "solution": None}


def test_words_normalise_case_and_punctuation():
    assert words("It costs $1,200.") == ["it", "costs", "1", "200"]
    assert list(ngrams(["a", "b", "c"], 2)) == [("a", "b"), ("b", "c")]


def test_copy_and_paraphrase_sharing_a_10gram_are_removed():
    index = build_index({"gsm8k_test": [GSM], "math500": [SHORT]})
    docs = [
        {"id": "copy", "text": "Q: " + GSM["question"].upper()},
        # a paraphrase that keeps one 10-word run: "she sold half as many clips in may how many clips"
        {"id": "para", "text": "Tom had pens. Later she sold half as many clips in May! How many clips were left?"},
        {"id": "near", "text": "she sold half as many clips in June. How many clips did she have?"},  # 9-gram run only
        {"id": "short", "text": "Exercise: compute dbinom 8 4 and explain."},
        {"id": "clean", "text": "Sam buys 3 boxes of 12 pencils: 3 * 12 = 36."},
    ]
    kept, removed = decontaminate(docs, index)
    assert [d["id"] for d in kept] == ["near", "clean"]
    assert removed == {"gsm8k_test": 2, "math500": 1}


def test_short_texts_need_at_least_short_min_words():
    index = build_index({"math500": [{"question": "Find x.", "solution": None}]})  # 2 words: not indexed
    kept, removed = decontaminate([{"id": "a", "text": "Find x. It is 3."}], index)
    assert len(kept) == 1 and removed == {}


def test_synthetic_heldout_by_identity_not_ngrams():
    index = build_index({})
    docs = [{"id": "a", "key": "arith.buy:3,12", "text": "x"}, {"id": "b", "key": "arith.buy:4,12", "text": "x"}]
    kept, removed = decontaminate(docs, index, blocked_keys={"arith.buy:3,12"})
    assert [d["id"] for d in kept] == ["b"] and removed == {"synthetic_heldout": 1}
