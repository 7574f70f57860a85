"""Per-problem figures of the evaluate stage's prediction rows, and differences between two arms paired by problem:
the statistics `bench_precision_sft.py --sampled` reports next to its by-seed ones (pure functions, no runs)."""

from __future__ import annotations

from statistics import mean, stdev


def per_problem(rows: list[dict], n_k: int = 8) -> dict[str, list[float]]:
    """Each problem's greedy correctness, maj@`n_k`, pass@1 and pass@`n_k` of its samples (unbiased), and pass@k of
    its `passk_samples` where it has them (k = 16, 64), in the rows' order; keyed like the stage's metrics."""
    from dsmath.evaluation.metrics import maj_at_k, pass_at_k
    from dsmath.rewards import is_equivalent

    out: dict[str, list[float]] = {"greedy": [float(r["greedy_correct"]) for r in rows]}
    sampled = [r for r in rows if "sample_correct" in r]
    if len(sampled) == len(rows):
        out[f"maj@{n_k}"] = [float(maj_at_k(r["sample_answers"], r["gold"], n_k, is_equivalent)) for r in rows]
        out["pass@1"] = [sum(r["sample_correct"]) / len(r["sample_correct"]) for r in rows]
        out[f"pass@{n_k}"] = [pass_at_k(len(r["sample_correct"]), int(sum(r["sample_correct"])), n_k) for r in rows]
    sub = [r for r in rows if "passk_right" in r]
    for k in (16, 64):
        if sub and k <= sub[0]["passk_samples"]:
            out[f"passk@{k}"] = [pass_at_k(r["passk_samples"], r["passk_right"], k) for r in sub]
    return out


def sampled_result(sft: dict, rl: dict) -> dict:
    """The scalars of :func:`sampled_eval`'s SFT and RL evaluations, `sampled/sft/<metric>`, `sampled/rl/<metric>`
    and `sampled/gain/<metric>` (RL minus SFT)."""
    out = {}
    for m in sft["metrics"]:
        if (m == "greedy" or m.startswith(("maj@", "pass@", "passk@"))) and m in rl["metrics"]:
            out |= {f"sampled/sft/{m}": sft["metrics"][m], f"sampled/rl/{m}": rl["metrics"][m],
                    f"sampled/gain/{m}": rl["metrics"][m] - sft["metrics"][m]}
    return out


def by_problem(problems: dict[str, dict[int, dict]], arms: list[str]) -> dict:
    """Each other arm minus the first, paired by problem: per (model, metric), per problem the mean over the seeds
    both arms have of their difference; its mean and SE (sd over problems / sqrt(n)). `problems[arm][seed]` is
    {"sft": per_problem, "rl": per_problem, "ids": [...]}; `gain` is rl - sft per problem."""
    first, out = arms[0], {}
    for d in arms[1:]:
        seeds = sorted(set(problems[first]) & set(problems[d]))
        if not seeds:
            continue
        for model in ("sft", "rl", "gain"):
            for m in problems[first][seeds[0]]["sft"]:
                def vec(arm, s, model=model, m=m):
                    p = problems[arm][s]
                    if model == "gain":
                        return [b - a for a, b in zip(p["sft"][m], p["rl"][m], strict=True)]
                    return p[model][m]
                for s in seeds:  # the arms must have scored the same problems in the same order
                    if problems[d][s]["ids"] != problems[first][s]["ids"]:
                        raise SystemExit(f"seed {s}: the arms' problems differ")
                diffs = [mean(x) for x in zip(*[[b - a for a, b in zip(vec(first, s), vec(d, s), strict=True)]
                                                 for s in seeds], strict=True)]
                se = stdev(diffs) / len(diffs) ** 0.5 if len(diffs) > 1 else None
                out[f"{d} - {first}/{model}/{m}"] = {"mean": mean(diffs), "se": se, "problems": len(diffs),
                                                     "seeds": len(seeds)}
    return out
