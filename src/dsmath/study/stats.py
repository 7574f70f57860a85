"""The study's statistics: a run's metrics, the difference of two variants with its uncertainty (blocked on the
seed: the same seed is the same prompt order and sampling stream in both arms), the effect its seeds can detect
(MDE at 80% power), the seeds a target MDE needs, and the rule each finding is judged by. Pure functions of the run
records."""

from __future__ import annotations

import math

from dsmath.reporting.paper import sd, standard_error_of_delta
from dsmath.study.spec import DEFAULT_EQUIVALENCE_MARGIN, Finding

ALPHA, POWER = 0.05, 0.80  # two-sided level and power of the minimum detectable effect
COST_METRICS = {"s_per_step": "s/step", "peak_rss_mb": "peak RSS (MB)", "trainer_state_mb": "trainer state (MB)"}


def k_max(result: dict, mode: str, kind: str = "maj") -> int | None:
    """The largest k of a run's `kind`@k metrics (maj / pass: the n_samples draws; passk: the large-k subset)."""
    ks = [int(k.rsplit("@", 1)[1]) for k in result["eval"] if k.startswith(f"synthetic/{mode}/{kind}@")]
    return max(ks) if ks else None


def metric_of(result: dict, metric: str, mode: str, model: str = "rl") -> float | None:
    """A run's value of `metric` (greedy | maj@8 | pass@8 | passk@64 | a cost; maj@k, pass@k, passk@k at the
    largest k) on the synthetic test split in `mode`."""
    if metric in COST_METRICS:
        return result["rl"].get(metric)
    if metric.endswith("@k"):
        k = k_max(result, mode, "passk" if metric == "passk@k" else "maj")
        if k is None:
            return None
        metric = f"{metric[:-2]}@{k}"
    source = result["eval"] if model == "rl" else result["sft_eval"]
    return source.get(f"synthetic/{mode}/{metric}")


def per_problem(result: dict, metric: str, mode: str, model: str = "rl") -> dict[str, float] | None:
    """{problem id: value} of greedy / maj@n / pass@n (0/1; n = the samples drawn: `maj@k` and `pass@k` at the
    largest k) and of passk@k (the unbiased pass@k of each problem of the subset, k the run's largest)."""
    from dsmath.evaluation.metrics import pass_at_k

    table = result["problems"][model].get(mode)
    column = metric.split("@")[0]
    if not table or column not in table:
        return None
    if column == "passk":
        k, sub = k_max(result, mode, "passk"), table["passk"]
        if k is None:
            return None
        return {i: pass_at_k(n, c, k) for i, c, n in zip(sub["id"], sub["right"], sub["samples"], strict=True)}
    return dict(zip(table["id"], table[column], strict=True))


def measured_on(result: dict, metric: str, mode: str, model: str = "rl") -> int | None:
    """The number of test problems a run's `metric` was measured on: passk@k on the evaluate stage's
    `passk_problems`, the others on the per-problem table's."""
    if metric == "passk@k":
        n = (result["eval"] if model == "rl" else result["sft_eval"]).get(f"synthetic/{mode}/passk_problems")
        return int(n) if n else None
    table = result["problems"][model].get(mode)
    return len(table["id"]) if table else None


def fixed_draw_variance(q: float, n: int) -> float:
    """An upper bound on the sampling variance of a model's accuracy q measured once on n problems (each problem's
    estimate in [0, 1], its own mean q_i): Var = sum q_i (1 - q_i) / n^2 <= q (1 - q) / n, by concavity. The SFT
    model's sampled metrics are measured once and shared by every seed, so no seed's spread holds their noise.

    >>> round(fixed_draw_variance(0.925, 200), 9)  # an SD of at most 1.9 points
    0.000346875
    """
    return q * (1.0 - q) / n


def mean(values: list[float]) -> float | None:
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def t_quantile(p: float, df: float | None = None) -> float:
    """The p-quantile of Student's t with `df` degrees of freedom (the normal's for df None or infinite)."""
    from scipy.stats import norm, t

    if df is None or math.isinf(df):
        return float(norm.ppf(p))
    return float(t.ppf(p, df))


def mde(se: float | None, df: float | None = None, alpha: float = ALPHA, power: float = POWER) -> float | None:
    """Minimum detectable effect: the true difference a two-sided test at level `alpha` detects with probability
    `power`, given the standard error `se` on `df` degrees of freedom: (t_{1-alpha/2,df} + t_{power,df}) * SE.

    >>> round(mde(0.01), 5)  # normal: (1.95996 + 0.84162) * 0.01
    0.02802
    >>> round(mde(0.01, df=2), 5)  # two seeds' worth of freedom cost: (4.30265 + 1.06066) * 0.01
    0.05363
    """
    if se is None or se != se or (df is not None and df < 1):
        return None
    return (t_quantile(1 - alpha / 2, df) + t_quantile(power, df)) * se


def seeds_needed(v_seed: float, v_problem: float, v_res: float, p: int, target_mde: float,
                 max_n: int = 1_000) -> int | None:
    """The fewest seeds n (>= 2) whose analysis over n seeds x `p` problems (:func:`planned_mde`, a pilot's variance
    components) detects `target_mde` at 80% power; None when more than `max_n` would not, e.g. when the problems'
    share v_problem / p alone exceeds it (more seeds cannot remove it: it takes more test problems).

    >>> seeds_needed(0.0003, 0.0, 0.05, 1000, 0.03)  # seed sd 1.7 points, flip noise 22 points per problem
    6
    """
    for n in range(2, max_n + 1):
        m = planned_mde(v_seed, v_problem, v_res, n, p)
        if m is not None and m <= target_mde:
            return n
    return None


def seed_blocked(diffs: list[float]) -> dict:
    """Mean of the per-seed paired differences d_s and its standard error sd(d_s) / sqrt(n) on n - 1 degrees of
    freedom (None below two seeds).

    >>> r = seed_blocked([0.02, 0.04, 0.03])
    >>> round(r["diff"], 6), round(r["sd"], 6), round(r["se"], 6), r["df"]
    (0.03, 0.01, 0.005774, 2)
    """
    n = len(diffs)
    s = sd(diffs) if n else float("nan")
    return {"n": n, "diff": mean(diffs), "sd": s, "se": s / math.sqrt(n) if n >= 2 else None,
            "df": n - 1 if n >= 2 else None}


def mean_squares(table: list[list[float]]) -> tuple[float, float, float]:
    """MS_seed (df n - 1), MS_problem (df P - 1) and MS_res (df (n - 1)(P - 1)) of an n seeds x P problems table
    (the two-way layout without replication)."""
    n, p = len(table), len(table[0])
    grand = sum(map(sum, table)) / (n * p)
    rows = [sum(r) / p for r in table]
    cols = [sum(table[s][j] for s in range(n)) / n for j in range(p)]
    ms_seed = p * sum((x - grand) ** 2 for x in rows) / (n - 1)
    ms_prob = n * sum((x - grand) ** 2 for x in cols) / (p - 1)
    ms_res = sum((table[s][j] - rows[s] - cols[j] + grand) ** 2 for s in range(n) for j in range(p)) / (
        (n - 1) * (p - 1))
    return ms_seed, ms_prob, ms_res


def crossed_se(ms_seed: float, ms_prob: float, ms_res: float, n: int, p: int) -> tuple[float, float | None]:
    """SE of the table's mean and its Satterthwaite df from the three mean squares (see :func:`crossed`):
    n P Var = [MS_seed - MS_res]+ + [MS_problem - MS_res]+ + MS_res."""
    shown = ms_res * (1 + 1e-9) + 1e-15  # a component shows when its mean square exceeds the residual's (not by
    k_seed, k_prob = float(ms_seed > shown), float(ms_prob > shown)  # rounding): the others are zero
    k_res = 1.0 - k_seed - k_prob
    total = k_seed * ms_seed + k_prob * ms_prob + k_res * ms_res
    denom = ((k_seed * ms_seed) ** 2 / (n - 1) + (k_prob * ms_prob) ** 2 / (p - 1)
             + (k_res * ms_res) ** 2 / ((n - 1) * (p - 1)))
    return math.sqrt(max(total, 0.0) / (n * p)), (total ** 2 / denom if denom > 0 else None)


def crossed(table: list[list[float]]) -> dict:
    """The mean of a seeds x problems table of paired differences d[s][p] and its standard error under the two-way
    random-effects model (seed, problem, residual; each seed runs every problem): Var(mean) = v_seed / n +
    v_problem / P + v_res / (n P), from the mean squares MS_seed (df n - 1), MS_problem (df P - 1) and MS_res
    (df (n - 1)(P - 1)), with v_seed = (MS_seed - MS_res) / P and v_problem = (MS_problem - MS_res) / n truncated at
    zero (a component the data do not show is zero, as REML has it). Equivalently n P Var = [MS_seed - MS_res]+ +
    [MS_problem - MS_res]+ + MS_res, on Satterthwaite's degrees of freedom for that combination. Cases: no seed
    variance shown -> MS_problem / (n P) on P - 1 df (the problems' SE of the seed-mean differences); no problem
    variance shown -> MS_seed / (n P) = sd(d_s)^2 / n on n - 1 df (the seeds' SE).

    >>> r = crossed([[1, 0, 1, 0], [1, 1, 0, -1]])
    >>> round(r["diff"], 4), round(r["se"], 4), round(r["df"], 2)
    (0.375, 0.3146, 3.0)
    """
    n, p = len(table), len(table[0])
    ms_seed, ms_prob, ms_res = mean_squares(table)
    se, df = crossed_se(ms_seed, ms_prob, ms_res, n, p)
    return {"diff": sum(map(sum, table)) / (n * p), "se": se, "df": df, "ms_seed": ms_seed, "ms_problem": ms_prob,
            "ms_res": ms_res, "n_problems": p, "n_seeds": n,
            "v_seed": max(ms_seed - ms_res, 0.0) / p, "v_problem": max(ms_prob - ms_res, 0.0) / n, "v_res": ms_res}


def planned_se(v_seed: float, v_problem: float, v_res: float, n: int, p: int) -> tuple[float, float | None]:
    """The SE and df :func:`crossed` expects for n seeds x P problems given variance components (a pilot's): the
    expected mean squares P v_seed + v_res, n v_problem + v_res and v_res through :func:`crossed_se`.

    >>> se, df = planned_se(0.0, 0.0, 0.05, 5, 1000)  # flip noise alone: sqrt(0.05 / 5000) on 3996 df
    >>> round(se, 5), df
    (0.00316, 3996.0)
    """
    return crossed_se(p * v_seed + v_res, n * v_problem + v_res, v_res, n, p)


def planned_mde(v_seed: float, v_problem: float, v_res: float, n: int, p: int) -> float | None:
    """The MDE at 80% power :func:`planned_se` gives for n seeds x P problems."""
    return mde(*planned_se(v_seed, v_problem, v_res, n, p)) if n >= 2 and p >= 2 else None


def paired_difference(a_runs: dict[int, dict], b_runs: dict[int, dict], metric: str, mode: str,
                      b_model: str = "rl") -> dict:
    """a - b on `metric`, blocked on the seed: a seed is the same prompt order and sampling stream in both arms, so
    d_s = metric(a, s) - metric(b, s) over the seeds both have (against the SFT model, b_model "sft": a's run minus
    the SFT model it started from, in the same record). The difference is mean d_s.

    Its SE, for accuracies with per-problem tables (`se_kind` "seeds x problems"): every seed runs the same test
    problems, so the difference varies with the seed and with the problems drawn (which a new test set would
    change); :func:`crossed` estimates both from the seeds x problems table of paired differences. Costs, and
    metrics without per-problem tables (passk@k), get the seeds' SE sd(d_s) / sqrt(n) on n - 1 df (`se_kind`
    "seeds"): the test problems' share is not in it; against the SFT model, whose one measurement every d_s shares,
    with a bound on that measurement's sampling variance added (:func:`_with_sft_draw`). With one seed: the paired
    SE over its problems (`se_kind` "problems (1 seed)", df None: the normal). Beside them: `seed_se` (the seeds'
    SE) and `paired_se`, the paired SE over the problems of one seed's difference (root mean square over the
    seeds)."""
    seeds = sorted(set(a_runs) & set(b_runs)) if b_model == "rl" else sorted(a_runs)
    b_of = (lambda s: b_runs[s]) if b_model == "rl" else (lambda s: a_runs[s])  # noqa: E731  (sft: a's own)
    diffs, used = [], []
    for s in seeds:
        va, vb = metric_of(a_runs[s], metric, mode), metric_of(b_of(s), metric, mode, b_model)
        if va is not None and vb is not None:
            diffs.append(va - vb)
            used.append(s)
    blocked = seed_blocked(diffs)
    out = {"n_seeds": blocked["n"], "seeds": used, "diffs": diffs, "diff": blocked["diff"], "sd_seeds": blocked["sd"],
           "seed_se": blocked["se"], "df": blocked["df"], "paired_se": None, "n_problems": 0,
           "se": blocked["se"], "se_kind": "seeds" if blocked["se"] is not None else None}
    if metric in COST_METRICS or not diffs:
        return out
    per_seed, n_problems, tables = [], [], []
    for s in used:
        ta, tb = per_problem(a_runs[s], metric, mode), per_problem(b_of(s), metric, mode, b_model)
        if ta is None or tb is None:
            return _with_sft_draw(out, a_runs[used[0]], metric, mode) if b_model == "sft" else out
        ids = sorted(set(ta) & set(tb))
        if len(ids) < 2:
            return out
        per_seed.append(standard_error_of_delta([tb[i] for i in ids], [ta[i] for i in ids]))
        n_problems.append(len(ids))
        tables.append({i: ta[i] - tb[i] for i in ids})
    out |= {"paired_se": math.sqrt(sum(x * x for x in per_seed) / len(per_seed)), "n_problems": min(n_problems)}
    if out["se"] is None:  # one seed: its problem noise is all there is to go on
        out |= {"se": out["paired_se"], "se_kind": "problems (1 seed)"}
        return out
    common = sorted(set.intersection(*(set(t) for t in tables)))
    if len(common) >= 2:
        c = crossed([[t[i] for i in common] for t in tables])
        out |= {"se": c["se"], "df": c["df"], "se_kind": "seeds x problems", "n_problems": c["n_problems"],
                "diff_common": c["diff"], "v_seed": c["v_seed"], "v_problem": c["v_problem"], "v_res": c["v_res"]}
    return out


def _with_sft_draw(out: dict, result: dict, metric: str, mode: str) -> dict:
    """The seeds' SE of a difference against the SFT model on a metric without per-problem results (passk@k) with
    the SFT model's one draw added: its sampling variance, at most q (1 - q) / N (:func:`fixed_draw_variance`), is
    the same in every d_s, so the seeds' spread does not hold it. df: Welch-Satterthwaite with the bound's df
    infinite. `se_kind` "seeds + SFT draw (bound)"; `sft_draw_se` the bound's square root."""
    q, n = metric_of(result, metric, mode, "sft"), measured_on(result, metric, mode, "sft")
    if out["se"] is None or q is None or not n:
        return out
    v_seeds, v_draw = out["se"] ** 2, fixed_draw_variance(q, n)
    df = (v_seeds + v_draw) ** 2 / (v_seeds ** 2 / out["df"]) if v_seeds > 0 else None
    return out | {"se": math.sqrt(v_seeds + v_draw), "df": df, "se_kind": "seeds + SFT draw (bound)",
                  "sft_draw_se": math.sqrt(v_draw), "n_problems": n}


def pilot_components(a_runs: dict[int, dict], b_runs: dict[int, dict], mode: str) -> dict | None:
    """A pilot's variance components of greedy accuracy differences (a - b) from its runs' per-problem results
    (:func:`crossed` over the seeds both have; None with fewer than two)."""
    d = paired_difference(a_runs, b_runs, "greedy", mode)
    if d.get("se_kind") != "seeds x problems":
        return None
    return {k: d[k] for k in ("v_seed", "v_problem", "v_res", "n_problems", "seeds")}


def critical(df: float | None = None) -> float:
    """How many standard errors a difference must exceed: 2 (the project's rule, the normal's 1.96 rounded up), or
    Student's t_{0.975, df} where that is larger (few seeds: with 2 seeds, df 1, it is 12.7; with 7 seeds 2.45), so
    that a true zero difference passes at most ~5% of the time whatever the number of seeds.

    >>> critical(), round(critical(1), 2), round(critical(6), 2), critical(100)
    (2.0, 12.71, 2.45, 2.0)
    """
    return max(2.0, t_quantile(0.975, df)) if df is not None and not math.isinf(df) else 2.0


def verdict(diff: float | None, se: float | None, lower_is_better: bool = False, expect: str = "better",
            margin: float | None = DEFAULT_EQUIVALENCE_MARGIN, df: float | None = None) -> str:
    """The rule every finding is judged by, with c = :func:`critical` (df) standard errors (2 for many seeds).
    `better`: the claimed direction beats the other by more than c SE -> holds; the opposite direction by more than
    c -> does not hold; neither, but the whole interval difference +- c SE inside +- `margin` -> equivalent (any
    advantage is smaller than the margin: a decision against the claim at this scale); otherwise (or no SE) ->
    inconclusive. `same` (no difference claimed): |difference| > c SE -> does not hold; the interval inside +-
    `margin` -> holds (equivalence shown); otherwise inconclusive (too uncertain to tell). `margin` None (costs,
    which have no accuracy margin): no equivalence verdict."""
    if diff is None or se is None:
        return "inconclusive"
    c = critical(df)
    within = margin is not None and abs(diff) + c * se <= margin
    if expect == "same":
        if abs(diff) > c * se:
            return "does not hold"
        return "holds" if within else "inconclusive"
    signed = -diff if lower_is_better else diff
    if se == 0:
        return "holds" if signed > 0 else "does not hold" if signed < 0 else "inconclusive"
    if signed > c * se:
        return "holds"
    if signed < -c * se:
        return "does not hold"
    return "equivalent" if within else "inconclusive"


def finding_row(f: Finding, results: dict[str, dict[int, dict]],
                margin: float = DEFAULT_EQUIVALENCE_MARGIN, pilot: dict | None = None) -> dict:
    """One claim's seed-blocked difference (:func:`paired_difference`), its SE, the MDE at 80% power its seeds give
    (`mde`), the verdict by :func:`verdict`, and with a pilot's variance components (`pilot`, from
    :func:`pilot_components`; accuracies with per-problem results only) the MDE planned for its seeds and problems
    (`planned_mde`). Every comparison is of `a` and `b` alone: no other variant's seed variance enters it."""
    if f.a not in results or (f.b not in results and f.b != "sft"):
        return {"finding": f, "diff": None, "se": None, "mde": None, "planned_mde": None, "verdict": "not run"}
    mode = next(iter(results[f.a].values()))["mode"]
    if f.b == "sft":
        d = paired_difference(results[f.a], {}, f.metric, mode, b_model="sft")
    else:
        d = paired_difference(results[f.a], results[f.b], f.metric, mode)
    planned = None
    if pilot is not None and d.get("se_kind") == "seeds x problems":
        planned = planned_mde(pilot["v_seed"], pilot["v_problem"], pilot["v_res"], d["n_seeds"], d["n_problems"])
    return {"finding": f, "mode": mode, **d, "mde": mde(d["se"], d["df"]), "planned_mde": planned,
            "verdict": verdict(d["diff"], d["se"], f.lower_is_better, f.expect,
                               None if f.metric in COST_METRICS else margin, d.get("df"))}
