"""A small math-text classifier: hashed word n-gram features + logistic regression (numpy).

DeepSeekMath recalls math pages from Common Crawl with a fastText model trained on seed math text (OpenWebMath)
against random web pages. This is the same idea at laptop scale: seed math documents vs non-math text, features
hashed into `n_features` buckets (stable hash, so the model is the same across processes), trained by full-batch
gradient descent on the logistic loss with L2.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

import numpy as np
from scipy import sparse

_TOKEN = re.compile(r"[a-z]+|\d|[^\sa-z\d]")


def _tokens(text: str) -> list[str]:
    """Words, single digits and single symbols: digits and operators are strong math cues."""
    return _TOKEN.findall(text.lower())


def _bucket(feature: str, n_features: int) -> int:
    return int.from_bytes(hashlib.blake2b(feature.encode(), digest_size=8).digest(), "little") % n_features


def featurize(texts: list[str], n_features: int, ngram_max: int) -> sparse.csr_matrix:
    """(N, n_features) sparse L2-normalised term-frequency matrix of hashed 1..ngram_max-grams."""
    rows, cols = [], []
    for i, text in enumerate(texts):
        toks = _tokens(text)
        for n in range(1, ngram_max + 1):
            for j in range(len(toks) - n + 1):
                rows.append(i)
                cols.append(_bucket(" ".join(toks[j : j + n]), n_features))
    x = sparse.csr_matrix((np.ones(len(rows), np.float32), (rows, cols)), shape=(len(texts), n_features))
    x.sum_duplicates()
    norms = np.sqrt(np.asarray(x.multiply(x).sum(axis=1)).ravel())
    norms[norms == 0] = 1.0
    return sparse.csr_matrix(sparse.diags(1.0 / norms).astype(np.float32) @ x)


@dataclass
class MathClassifier:
    weights: np.ndarray  # (n_features,)
    bias: float
    n_features: int
    ngram_max: int
    threshold: float = 0.5

    def predict_proba(self, texts: list[str]) -> np.ndarray:
        """(N,) probability that each text is math."""
        z = featurize(texts, self.n_features, self.ngram_max) @ self.weights + self.bias
        return 1.0 / (1.0 + np.exp(-z))

    def predict(self, texts: list[str]) -> np.ndarray:
        return self.predict_proba(texts) >= self.threshold


def train_classifier(texts: list[str], labels: list[int], *, n_features: int, ngram_max: int, epochs: int,
                     lr: float, l2: float, threshold: float = 0.5, steps_per_epoch: int = 50) -> MathClassifier:
    """Fit logistic regression by full-batch gradient descent: loss = mean BCE + l2/2 * ||w||^2."""
    x = featurize(texts, n_features, ngram_max)
    y = np.asarray(labels, dtype=np.float32)
    w = np.zeros(n_features, dtype=np.float32)
    b = 0.0
    for _ in range(epochs * steps_per_epoch):
        p = 1.0 / (1.0 + np.exp(-(x @ w + b)))
        g = p - y  # dBCE/dz
        w -= lr * (x.T @ g / len(y) + l2 * w)
        b -= lr * float(g.mean())
    return MathClassifier(w, b, n_features, ngram_max, threshold)


def precision_recall(pred: np.ndarray, labels: list[int]) -> dict[str, float]:
    """Precision and recall of boolean predictions against 0/1 labels (0.0 where undefined)."""
    y = np.asarray(labels, dtype=bool)
    tp = int((pred & y).sum())
    fp = int((pred & ~y).sum())
    fn = int((~pred & y).sum())
    return {
        "precision": tp / (tp + fp) if tp + fp else 0.0,
        "recall": tp / (tp + fn) if tp + fn else 0.0,
        "accuracy": float((pred == y).mean()) if len(y) else 0.0,
    }


def split_holdout(n: int, frac: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Random (train_idx, holdout_idx) split of range(n)."""
    perm = rng.permutation(n)
    k = max(1, int(round(n * frac)))
    return perm[k:], perm[:k]
