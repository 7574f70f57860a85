"""The study's statistics: a run's metrics, the difference of two variants with its uncertainty (paired over the
test problems, pooled across seeds), and the rule each finding is judged by. Pure functions of the run records."""

from __future__ import annotations

import math

from dsmath.reporting.paper import sd, standard_error_of_delta
from dsmath.study.spec import DEFAULT_EQUIVALENCE_MARGIN, Finding

COST_METRICS = {"s_per_step": "s/step", "peak_rss_mb": "peak RSS (MB)", "trainer_state_mb": "trainer state (MB)"}


def k_max(result: dict, mode: str) -> int | None:
    ks = [int(k.rsplit("@", 1)[1]) for k in result["eval"] if k.startswith(f"synthetic/{mode}/maj@")]
    return max(ks) if ks else None


def metric_of(result: dict, metric: str, mode: str, model: str = "rl") -> float | None:
    """A run's value of `metric` (greedy | maj@8 | pass@8 | a cost) on the synthetic test split in `mode`."""
    if metric in COST_METRICS:
        return result["rl"].get(metric)
    if metric.endswith("@k"):
        k = k_max(result, mode)
        if k is None:
            return None
        metric = f"{metric[:-2]}@{k}"
    source = result["eval"] if model == "rl" else result["sft_eval"]
    return source.get(f"synthetic/{mode}/{metric}")


def per_problem(result: dict, metric: str, mode: str, model: str = "rl") -> dict[str, int] | None:
    """{problem id: 0/1} of greedy / maj@n / pass@n (n = the samples drawn: `maj@k` and `pass@k` at the largest k)."""
    table = result["problems"][model].get(mode)
    column = metric.split("@")[0]
    if not table or column not in table:
        return None
    return dict(zip(table["id"], table[column], strict=True))


def mean(values: list[float]) -> float | None:
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def paired_difference(a_runs: dict[int, dict], b_runs: dict[int, dict], metric: str, mode: str,
                      b_model: str = "rl") -> dict:
    """a - b on `metric`: per-seed differences (seeds both have), their mean and sd across seeds, and the paired
    standard error over problems of the seed-mean difference (d_i = mean_s a_si - mean_s b_si; None for costs)."""
    seeds = sorted(set(a_runs) & set(b_runs)) if b_model == "rl" else sorted(a_runs)
    b_of = (lambda s: b_runs[s]) if b_model == "rl" else (lambda s: a_runs[s])  # noqa: E731  (sft: a's own)
    diffs = []
    for s in seeds:
        va, vb = metric_of(a_runs[s], metric, mode), metric_of(b_of(s), metric, mode, b_model)
        if va is not None and vb is not None:
            diffs.append(va - vb)
    out = {"n_seeds": len(diffs), "diff": mean(diffs), "sd_seeds": sd(diffs) if diffs else float("nan"),
           "paired_se": None, "n_problems": 0}
    if metric in COST_METRICS or not diffs:
        return out
    tables_a = [per_problem(a_runs[s], metric, mode) for s in seeds]
    tables_b = [per_problem(b_of(s), metric, mode, b_model) for s in seeds]
    if any(t is None for t in tables_a + tables_b):
        return out
    ids = sorted(set.intersection(*(set(t) for t in tables_a + tables_b)))
    if len(ids) < 2:
        return out
    mean_a = [sum(t[i] for t in tables_a) / len(tables_a) for i in ids]
    mean_b = [sum(t[i] for t in tables_b) / len(tables_b) for i in ids]
    out |= {"paired_se": standard_error_of_delta(mean_b, mean_a), "n_problems": len(ids)}
    return out


def pooled_seed_sd(results: dict[str, dict[int, dict]], metric: str, mode: str) -> tuple[float, int] | None:
    """The across-seed sd of `metric` pooled over every variant run in `mode` (each variant's seed variance, weighted
    by its degrees of freedom), and those degrees of freedom; None with no variant of two seeds. With two seeds a
    pair's own sd has one degree of freedom; the pool has one per variant."""
    ss, df = 0.0, 0
    for runs in results.values():
        values = [v for r in runs.values() if r["mode"] == mode
                  and (v := metric_of(r, metric, mode)) is not None]
        if len(values) >= 2:
            ss += sd(values) ** 2 * (len(values) - 1)
            df += len(values) - 1
    return (math.sqrt(ss / df), df) if df else None


def total_se(d: dict) -> float | None:
    """Standard error of the mean difference from both sources, added in quadrature: the test problems (paired SE)
    and the seeds (`seed_se` when set, else the pair's own sd / sqrt(n)); None when neither is known."""
    parts = []
    if d.get("paired_se") is not None:
        parts.append(d["paired_se"])
    if d.get("seed_se") is not None:
        parts.append(d["seed_se"])
    elif d["n_seeds"] >= 2 and not math.isnan(d["sd_seeds"]):
        parts.append(d["sd_seeds"] / math.sqrt(d["n_seeds"]))
    return math.sqrt(sum(p * p for p in parts)) if parts else None


def verdict(diff: float | None, se: float | None, lower_is_better: bool = False, expect: str = "better",
            margin: float = DEFAULT_EQUIVALENCE_MARGIN) -> str:
    """The rule every finding is judged by. `better`: the claimed direction beats the other by more than 2 standard
    errors -> holds; the opposite direction by more than 2 -> does not hold; otherwise (or no SE) -> inconclusive.
    `same` (no difference claimed): |difference| > 2 SE -> does not hold; the whole interval difference +- 2 SE
    inside +- `margin` -> holds (equivalence shown); otherwise inconclusive (too uncertain to tell)."""
    if diff is None or se is None:
        return "inconclusive"
    if expect == "same":
        if abs(diff) > 2 * se:
            return "does not hold"
        return "holds" if abs(diff) + 2 * se <= margin else "inconclusive"
    signed = -diff if lower_is_better else diff
    if se == 0:
        return "holds" if signed > 0 else "does not hold" if signed < 0 else "inconclusive"
    if signed > 2 * se:
        return "holds"
    if signed < -2 * se:
        return "does not hold"
    return "inconclusive"


def finding_row(f: Finding, results: dict[str, dict[int, dict]],
                margin: float = DEFAULT_EQUIVALENCE_MARGIN) -> dict:
    """One claim's difference, its uncertainty and verdict. For accuracies the seed part of the SE is the pooled
    across-seed sd (:func:`pooled_seed_sd`) times sqrt(2/n) over the n seeds both have (sqrt(1/n) against the SFT
    model, one fixed model); costs use the pair's own sd over seeds."""
    if f.a not in results or (f.b not in results and f.b != "sft"):
        return {"finding": f, "diff": None, "se": None, "verdict": "not run"}
    mode = next(iter(results[f.a].values()))["mode"]
    if f.b == "sft":
        d = paired_difference(results[f.a], {}, f.metric, mode, b_model="sft")
    else:
        d = paired_difference(results[f.a], results[f.b], f.metric, mode)
    d["seed_se"], d["pooled_sd"], d["pooled_df"] = None, None, 0
    pooled = None if f.metric in COST_METRICS else pooled_seed_sd(results, f.metric, mode)
    if pooled is not None and d["n_seeds"]:  # over the n seeds the difference is averaged on: a's and b's runs
        d["pooled_sd"], d["pooled_df"] = pooled
        d["seed_se"] = pooled[0] * math.sqrt((1 if f.b == "sft" else 2) / d["n_seeds"])
    se = total_se(d)
    return {"finding": f, "mode": mode, **d, "se": se,
            "verdict": verdict(d["diff"], se, f.lower_is_better, f.expect, margin)}
