"""The two pretraining corpora: code (for the "coder" base) and decontaminated math (for continual pretraining).

DeepSeekMath starts from DeepSeek-Coder-Base and continues on a math corpus recalled from Common Crawl by a fastText
classifier, decontaminated against the evaluation sets (sec. 2.1). Here, at laptop scale:
- code: Python source of the standard library, chosen by a stable hash of the path, read from a pinned snapshot in
  `data/raw/code/` (written once by `python -m dsmath.data.snapshot`), so every machine builds the same corpus
  whatever interpreter it has;
- math: synthetic worked solutions (train split only), GSM8K *train* solutions, user-supplied math text files,
  standard-library docstrings that the math classifier recalls from a pool of non-curated text, and arithmetic
  drill pages in the CoT's format (`dsmath.data.synthetic.drills`: the facts a tiny model must see many times);
- decontamination: word 10-grams / short exact matches against GSM8K test, MATH-500 and SVAMP; synthetic problems by
  identity (`key`) against the synthetic validation and test splits.
"""

from __future__ import annotations

import ast
import hashlib
import json
import lzma
import re
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from dsmath.config import Corpus
from dsmath.data import classifier as clf
from dsmath.data.benchmarks import load_benchmark
from dsmath.data.decontam import build_index, decontaminate
from dsmath.data.io import DataError, parse_jsonl, read_jsonl
from dsmath.data.synthetic.drills import drill_documents

_SKIP_DIRS = {"test", "tests", "idlelib", "site-packages", "turtledemo", "lib2to3", "ensurepip", "__pycache__"}
_CALC_NOTE = re.compile(r"<<[^>]*>>")


def _stable_rank(name: str) -> str:
    return hashlib.sha1(name.encode()).hexdigest()


def stdlib_sources() -> list[tuple[str, str]]:
    """(relative path, source) of the running interpreter's standard-library .py files, sorted by path: what a
    snapshot holds (the corpus stage reads the snapshot, never the live library)."""
    root = Path(sysconfig.get_paths()["stdlib"])
    out = []
    for p in sorted(root.rglob("*.py")):
        rel = p.relative_to(root)
        if _SKIP_DIRS.intersection(rel.parts[:-1]) or rel.name.startswith("test_"):
            continue
        try:
            out.append((str(rel), p.read_text(encoding="utf-8")))
        except (UnicodeDecodeError, OSError):
            continue
    return out


def code_documents(sources: list[tuple[str, str]], max_files: int, max_chars: int, min_chars: int) -> list[dict]:
    """Up to `max_files` source files (stable pseudo-random choice by path hash), each cut to `max_chars`."""
    chosen = sorted((s for s in sources if len(s[1]) >= min_chars), key=lambda s: _stable_rank(s[0]))[:max_files]
    return [{"id": f"code-{rel}", "source": "python-stdlib", "text": src[:max_chars]} for rel, src in chosen]


def docstring_pool(sources: list[tuple[str, str]], min_chars: int = 80) -> list[dict]:
    """Module/class/function docstrings of the given sources: the non-curated text the classifier recalls from."""
    pool = []
    for rel, src in sources:
        try:
            tree = ast.parse(src)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                doc = ast.get_docstring(node)
                if doc and len(doc) >= min_chars:
                    name = getattr(node, "name", "<module>")
                    pool.append({"id": f"doc-{rel}:{name}", "source": "stdlib-docstring", "text": doc})
    return pool


def pydoc_topics() -> list[tuple[str, str]]:
    """(topic, text) of the running interpreter's language reference (`pydoc_data`), sorted by topic."""
    from pydoc_data.topics import topics

    return sorted(topics.items())


def nonmath_seed_texts(topics: list[tuple[str, str]], min_chars: int = 80) -> list[str]:
    """Non-math seed text: paragraphs of the Python language reference topics (English prose)."""
    paragraphs = (p.strip() for _, t in topics for p in re.split(r"\n\s*\n", t))
    return [p for p in paragraphs if len(p) >= min_chars]


def write_snapshot(rows: list[tuple[str, str]], path: str | Path, key: str) -> Path:
    """Rows `(name, text)` as xz-compressed JSON Lines `{key: name, "text": text}`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = "".join(json.dumps({key: name, "text": text}, ensure_ascii=False) + "\n" for name, text in rows)
    path.write_bytes(lzma.compress(data.encode("utf-8"), preset=9 | lzma.PRESET_EXTREME))
    return path


def read_snapshot(path: str | Path, key: str) -> list[tuple[str, str]]:
    """The rows of :func:`write_snapshot`, in file order (a bad line raises DataError naming file and line)."""
    try:
        data = lzma.decompress(Path(path).read_bytes())
    except lzma.LZMAError as e:
        raise DataError(f"{path}: not an xz-compressed snapshot ({e})") from None
    lines = data.split(b"\n")  # not splitlines(): it also splits at U+2028 inside strings
    return [(r[key], r["text"]) for r in parse_jsonl(lines, path, {key: str, "text": str})]


def gsm8k_documents(records: list[dict]) -> list[dict]:
    """GSM8K train problems as worked-solution text; calculator notes `<<3*4=12>>` dropped, `####` kept."""
    return [
        {"id": r["id"], "source": "gsm8k-train", "text": f"{r['question']}\n{_CALC_NOTE.sub('', r['solution'])}"}
        for r in records
    ]


def read_text_docs(path: str | Path, source: str) -> list[dict]:
    """A user-supplied math text file: jsonl with a `text` field per line, or plain text split on blank lines."""
    path = Path(path)
    if path.suffix == ".jsonl":
        texts = [r["text"] for r in read_jsonl(path, {"text": str})]
    else:
        texts = [t.strip() for t in re.split(r"\n\s*\n", path.read_text(encoding="utf-8")) if t.strip()]
    return [{"id": f"{source}-{i}", "source": source, "text": t} for i, t in enumerate(texts)]


@dataclass
class ClassifierReport:
    model: clf.MathClassifier
    metrics: dict[str, float] = field(default_factory=dict)


def train_math_classifier(math_docs: list[dict], nonmath: list[str], cfg, seed: int) -> ClassifierReport:
    """Train on seed math (label 1) vs non-math (label 0); precision/recall on a random held-out part."""
    rng = np.random.default_rng(seed)
    k = min(len(math_docs), len(nonmath))  # balanced classes
    pos = [math_docs[i]["text"] for i in rng.choice(len(math_docs), size=k, replace=False)] if k else []
    texts, labels = pos + nonmath, [1] * len(pos) + [0] * len(nonmath)
    tr, ho = clf.split_holdout(len(texts), cfg.holdout_frac, rng)
    model = clf.train_classifier(
        [texts[i] for i in tr], [labels[i] for i in tr], n_features=cfg.n_features, ngram_max=cfg.ngram_max,
        epochs=cfg.epochs, lr=cfg.lr, l2=cfg.l2, threshold=cfg.threshold,
    )
    pr = clf.precision_recall(model.predict([texts[i] for i in ho]), [labels[i] for i in ho])
    return ClassifierReport(model, {f"classifier_{k}": v for k, v in pr.items()} | {"classifier_holdout": len(ho)})


@dataclass
class CorpusResult:
    code: list[dict]
    math: list[dict]
    metrics: dict


def build_math_corpus(candidates: list[dict], eval_sets: dict[str, list[dict]], heldout_keys: set[str],
                      cfg: Corpus) -> tuple[list[dict], dict]:
    """Decontaminate candidate math documents; returns (kept, metrics with removal counts per benchmark)."""
    d = cfg.decontamination
    for b in d.benchmarks:
        if not eval_sets.get(b):
            raise DataError(f"decontamination benchmark {b}: no records; params corpus.decontamination.benchmarks "
                            "asks for it")
    index = build_index({b: eval_sets[b] for b in d.benchmarks}, n=d.ngram, short_min=d.short_min,
                        short_max=d.short_max)
    kept, removed = decontaminate(candidates, index, heldout_keys)
    metrics = {f"removed_{b}": removed.get(b, 0) for b in [*d.benchmarks, "synthetic_heldout"]}
    metrics |= {"math_candidates": len(candidates), "math_docs": len(kept), "removed_total": sum(removed.values())}
    return kept, metrics


def build_corpus(synthetic_docs: list[dict], heldout_keys: set[str], raw_dir: str | Path, extra_dir: str | Path,
                 cfg: Corpus, seed: int) -> CorpusResult:
    """Everything the corpus stage produces, from in-memory synthetic documents and the raw benchmark folder.

    The benchmarks are read first: a bad or empty one (DataError naming the file and the params key that asks for
    it) stops the stage before any work, never a corpus left undecontaminated against it."""
    eval_sets = {b: load_benchmark(b, raw_dir, wanted_by="corpus.decontamination.benchmarks")
                 for b in cfg.decontamination.benchmarks}
    gsm8k_train = load_benchmark("gsm8k_train", raw_dir, wanted_by="corpus.include_gsm8k_train") \
        if cfg.include_gsm8k_train else []
    sources = read_snapshot(Path(raw_dir) / cfg.code_snapshot, "path")
    code = code_documents(sources, cfg.code_max_files, cfg.code_max_chars_per_file, cfg.code_min_chars)
    seed_math = list(synthetic_docs)
    if cfg.include_gsm8k_train:
        seed_math += gsm8k_documents(gsm8k_train)
    for name in cfg.extra_math_files:
        seed_math += read_text_docs(Path(extra_dir) / name, f"extra-{Path(name).stem}")
    prose = nonmath_seed_texts(read_snapshot(Path(raw_dir) / cfg.prose_snapshot, "topic"))
    report = train_math_classifier(seed_math, prose, cfg.classifier, seed)
    pool = docstring_pool(sorted(sources, key=lambda s: _stable_rank(s[0]))[: cfg.recall_pool_files])
    recalled = [d for d, keep in zip(pool, report.model.predict([d["text"] for d in pool]), strict=True) if keep]
    dr = cfg.drills
    drills = drill_documents(dr.docs, dr.lines_per_doc, dr.one_digit_share, dr.max_operand, dr.max_divisor, seed,
                             fraction_share=dr.fraction_share, decimal_share=dr.decimal_share)
    math, metrics = build_math_corpus(seed_math + recalled + drills, eval_sets, heldout_keys, cfg)
    metrics |= report.metrics | {
        "code_docs": len(code),
        "code_chars": sum(len(d["text"]) for d in code),
        "math_chars": sum(len(d["text"]) for d in math),
        "recall_pool": len(pool),
        "recalled_math_docs": len(recalled),
        "math_docs_by_source": _count_by(math, "source"),
    }
    return CorpusResult(code, math, metrics)


def _count_by(docs: list[dict], key: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for d in docs:
        out[d[key]] = out.get(d[key], 0) + 1
    return dict(sorted(out.items()))
