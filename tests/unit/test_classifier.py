"""The hashed n-gram math classifier learns a separable toy task and reports precision/recall."""

import numpy as np

from dsmath.data.classifier import featurize, precision_recall, train_classifier

MATH = [f"Sam has {a} apples and buys {b} more: {a} + {b} = {a + b}. The answer is {a + b}." for a in range(1, 30)
        for b in (2, 7)]
PROSE = [f"The {w} statement binds a name in the local namespace and returns control to the caller {i} times."
         for i, w in enumerate(["import", "return", "global", "yield", "class", "def"] * 10)]


def test_features_are_l2_normalised_and_stable():
    x1 = featurize(["a b c 1 2"], 1024, 2)
    x2 = featurize(["a b c 1 2"], 1024, 2)
    assert np.isclose(np.sqrt(x1.multiply(x1).sum()), 1.0)
    assert (x1 != x2).nnz == 0


def test_learns_math_vs_prose():
    texts, labels = MATH + PROSE, [1] * len(MATH) + [0] * len(PROSE)
    model = train_classifier(texts, labels, n_features=4096, ngram_max=2, epochs=4, lr=0.5, l2=1e-6)
    p = model.predict_proba(["Ann has 5 pens and buys 3 more: 5 + 3 = 8.", "The with statement wraps a block."])
    assert p[0] > 0.5 > p[1]
    pr = precision_recall(model.predict(texts), labels)
    assert pr["precision"] == 1.0 and pr["recall"] == 1.0


def test_precision_recall_hand_computed():
    # tp=1 (idx0), fp=1 (idx2), fn=1 (idx1) -> precision 1/2, recall 1/2, accuracy 2/4
    pr = precision_recall(np.array([True, False, True, False]), [1, 1, 0, 0])
    assert pr == {"precision": 0.5, "recall": 0.5, "accuracy": 0.5}
