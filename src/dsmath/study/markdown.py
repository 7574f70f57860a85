"""The study report's text: `reports/study.md` from the rows, findings, fits and code status that
:mod:`dsmath.study.report` builds from the records."""

from __future__ import annotations

import json
from pathlib import Path

from dsmath.reporting.paper import fmt
from dsmath.study import fits, health
from dsmath.study.spec import Study
from dsmath.study.stats import ALPHA, COST_METRICS, POWER, critical, mde, planned_mde, seeds_needed

UNITS = {"s_per_step": "s/step", "peak_rss_mb": "MB", "trainer_state_mb": "MB"}  # accuracies: points




def pct_sd(pair: tuple[float | None, float] | None) -> str:
    if not pair or pair[0] is None:
        return "-"
    m, s = pair
    return fmt(m) if s != s else f"{fmt(m)} ± {100 * s:.1f}"


def num(x: float | None, digits: int = 1) -> str:
    return "-" if x is None or x != x else f"{x:.{digits}f}"


def _scaled(x: float | None, scale: float, signed: bool = False) -> str:
    return "-" if x is None or x != x else f"{scale * x:+.2f}" if signed else f"{scale * x:.2f}"


def _override_text(overrides: dict) -> str:
    return ", ".join(f"`{k}={json.dumps(v)}`" for k, v in overrides.items()) or "(none: the reference)"


def _mde_text(x: float | None, metric: str) -> str:
    if x is None:
        return "MDE -"
    if metric in COST_METRICS:
        return f"MDE {x:.2f} {UNITS[metric]}"
    return f"MDE {100 * x:.1f} points"


def _ci(x: float | None, ci: tuple[float, float] | None, scale: float = 1.0, digits: int = 2) -> str:
    if x is None:
        return "-"
    text = f"{scale * x:.{digits}f}"
    return text + (f" [{scale * ci[0]:.{digits}f}, {scale * ci[1]:.{digits}f}]" if ci else "")


def findings_section(study: Study, findings: list[dict], pilot: dict | None = None) -> list[str]:
    """The findings: the rule, how the SE and the MDE are made, and one row per claim."""
    n = len(study.seeds)
    lines = ["## Findings", "",
             "Rule: the claimed direction exceeds the other by more than 2 standard errors (Student's t where "
             "the df are few) -> **holds**; the opposite by more than 2 -> **does not hold**; neither, but the "
             f"interval difference ± 2 SE inside ±{_scaled(study.equivalence_margin, 100.0)} points -> "
             "**equivalent** (any advantage is smaller than that: the claim does not hold at this scale); else "
             "**inconclusive**. A claim of no difference: more than 2 SE apart -> **does not hold**; the interval "
             "inside the margin -> **holds**; else **inconclusive**. Costs have no equivalence margin.", "",
             "The comparison is blocked on the seed: a seed is the same prompt order and sampling stream in both "
             "arms, so for each seed s both have, d_s = a(s) - b(s) (against the SFT model: a's run minus the SFT "
             "model it started from). Difference = mean d_s. Only the two arms enter it. SE (kind *seeds x "
             "problems*): every seed runs the same test problems, so the SE counts both: the two-way random-effects "
             "model of the seeds x problems table of paired differences (seed, problem, residual; a component whose "
             "mean square does not exceed the residual's is zero), on Satterthwaite's df (docs/study.md, "
             "\"Reading the findings\"). Kind *seeds*: sd(d_s) / sqrt(n) on n - 1 df, for metrics without per-problem "
             "results (passk@k: its problems held fixed) and costs. Kind *seeds + SFT draw (bound)*: passk@k against "
             "the SFT model, whose pass@k was sampled once and enters every d_s alike, so the seeds' spread does not "
             "hold its sampling noise: its variance, at most q(1 - q) / N for an accuracy q measured on N problems, "
             "is added in full (a bound: this SE is conservative; Welch-Satterthwaite df). Per-problem pass@k "
             "results would replace the bound by the estimate (kind *seeds x problems*). Beside it: the paired SE "
             "over the problems of "
             "one seed's difference (root mean square over the seeds); with one seed it is the SE (kind *problems "
             "(1 seed)*, the normal's df).", "",
             f"MDE: the true difference a two-sided test at level {ALPHA:g} detects with {POWER:.0%} power, "
             "(t_{0.975,df} + t_{0.80,df}) x SE (normal quantiles without df). Few seeds cost much: with df = 1 "
             f"it is {mde(1.0, 1):.1f} SE, with df = 4 {mde(1.0, 4):.1f} SE. "
             "The rule's 2 SE widen to Student's t_{0.975,df} SE where that is larger" + (
                 f" (kind *seeds* with {n} seeds: {critical(n - 1):.2f} SE)" if n >= 2 else "")
             + ", so that a true zero difference passes it at most 5% of the time; read a verdict together with "
               "its MDE."]
    if pilot is not None:
        v = (pilot["v_seed"], pilot["v_problem"], pilot["v_res"])
        p = pilot["n_problems"]
        planned = planned_mde(*v, n, p) if n >= 2 else None
        need = seeds_needed(*v, p, study.equivalence_margin)
        lines += ["", f"Planned from the pilot (study file `pilot`: {pilot['a']} vs {pilot['b']}, greedy, seeds "
                  f"{', '.join(map(str, pilot['seeds']))}, {p} problems): variance components of one problem's "
                  f"paired difference: seed {1e4 * v[0]:.2f}, problem {1e4 * v[1]:.1f}, residual {1e4 * v[2]:.0f} "
                  f"(points²; the problems' share of the SE, problem / P, is what more seeds cannot remove). "
                  f"{n} seeds x {p} problems give an MDE of {'-' if planned is None else f'{100 * planned:.1f}'} "
                  f"points; an MDE of the equivalence margin ({100 * study.equivalence_margin:g} points) needs "
                  f"{need or 'more than 1,000'} seeds. The column *planned MDE* is the one a finding's seeds and "
                  "problems give (its accuracy metric's components taken as greedy's)."]
    lines += ["", "| paper's claim | source | comparison | difference | seeds | sd of d_s | SE (kind, df) "
              "| paired SE over problems (one seed) | MDE | planned MDE | verdict |",
              "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for row in findings:
        f = row["finding"]
        if row["verdict"] == "not run":
            lines.append(f"| {f.claim} | {f.source} | {f.a} vs {f.b} | - | - | - | - | - | - | - | not run |")
            continue
        scale = 1.0 if f.metric in COST_METRICS else 100.0
        unit = f" {UNITS[f.metric]}" if f.metric in COST_METRICS else " pts"
        kind = row.get("se_kind") or "none"
        fixed_problems = kind in ("seeds", "seeds + SFT draw (bound)") and f.metric not in COST_METRICS
        se = "-" if row["se"] is None else (
            f"{_scaled(row['se'], scale)} ({kind}" + (f", df {row['df']:.3g})" if row.get("df") else ")"))
        lines.append(f"| {f.claim} | {f.source} | {f.a} - {f.b}, {f.metric} ({row.get('mode')}) | "
                     f"{_scaled(row['diff'], scale, True)}{unit} | {row['n_seeds']} | "
                     f"{_scaled(row['sd_seeds'], scale)} | {se} | {_scaled(row['paired_se'], scale)} | "
                     f"{_scaled(row['mde'], scale)} | {_scaled(row.get('planned_mde'), scale)} | "
                     f"**{row['verdict']}** ({_mde_text(row['mde'], f.metric)}"
                     f"{'; its test problems held fixed' if fixed_problems else ''}"
                     ") |")
    return lines


def fits_section(fit: list[dict]) -> list[str]:
    """ScaleRL's compute curves: one table per rollout mode."""
    if not fit:
        return []
    lines = ["## Compute curves (ScaleRL's sigmoid)", "",
             "Held-out greedy accuracy R against RL samples C (step x prompts per step x group size; DAPO's dynamic "
             "sampling draws more than that) fitted per variant on the seed-mean curve as "
             "R(C) = R0 + (A - R0) / (1 + (C_mid / C)^B) (Khatri et al. 2025, arXiv 2510.13786): R0 the start value, "
             "A the asymptote, B the efficiency exponent, C_mid the samples at which half of A - R0 is reached "
             "(least squares, 0 <= A <= 1, B > 0, C_mid > 0). Intervals: 2.5 and 97.5 percentiles of "
             f"{fits.BOOTSTRAP_RESAMPLES} refits on seeds resampled with replacement (fixed seed; with few seeds "
             "there are few distinct resamples). Accuracies in percent."]
    for mode in dict.fromkeys(r["mode"] for r in fit):
        lines += ["", f"Mode {mode}:", "",
                  "| variant | seeds | points | R0 | A [95%] | B [95%] | C_mid (samples) | fit rmse | note |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
        for r in (x for x in fit if x["mode"] == mode):
            lines.append(f"| {r['variant']} | {r['n_seeds']} | {r['points']} | {fmt(r['R0'])} | "
                         f"{_ci(r['A'], r['A_ci'], 100.0, 1)} | {_ci(r['B'], r['B_ci'])} | "
                         f"{'-' if r['C_mid'] is None else format(r['C_mid'], '.3g')} | "
                         f"{_scaled(r['rmse'], 100.0)} | {r['note'] or '-'} |")
    return lines


def _truncated(longest: float | None, cap: int | None, capped_steps: float | None = None) -> str:
    """Whether any response reached the cap: "none (<= 131 of 160)" / "160 reached in 2.5% of steps"; "-" unknown.

    >>> _truncated(131.0, 160), _truncated(160.0, 160, 0.025), _truncated(None, 160)
    ('none (<= 131 of 160)', '160 reached in 2.5% of steps', '-')
    """
    if longest is None or cap is None:
        return "-"
    if longest < cap:
        return f"none (<= {longest:.0f} of {cap})"
    return f"{cap} reached" + ("" if capped_steps is None else f" in {100 * capped_steps:.1f}% of steps")


def health_section(rows: list[dict]) -> list[str]:
    """The health of each arm's RL runs: early -> late means of the signals, seed means."""
    if not rows:
        return []
    w = health.WINDOW

    def arrow(r: dict, key: str, scale: float = 1.0, digits: int = 2) -> str:
        a, b = r.get(f"{key}/start"), r.get(f"{key}/end")
        if a is None or b is None:
            return "-"
        return " -> ".join(f"{scale * x:.{digits}f}".replace("-0." + "0" * digits, "0." + "0" * digits)
                           for x in (a, b))  # no "-0.0000" for a tiny negative estimate

    def truncated(r: dict) -> str:  # the logged rate of rows cut by the cap; else whether any length reached it
        if r.get("truncated_rate/start") is not None:
            return arrow(r, "truncated_rate", 100.0, 1) + " %"
        return _truncated(r.get("longest_ever"), r.get("cap"), r.get("capped_steps"))

    lines = ["## Health of the RL runs", "",
             f"Per variant, the mean of each signal over the first {w} and the last {w} RL steps (first -> last), "
             "averaged over the seeds whose record holds the RL stage's logged curve. Flat groups: share of groups "
             "whose rewards are all equal (no learning signal; DAPO's dynamic sampling counts the groups it drew); "
             "clipped: share of policy tokens whose ratio the clip cut (0 when every step is on-policy, `mu: 1`); "
             "entropy: sampled-token estimate, nats per token; KL: k3 estimate to the reference, per token; length: "
             "mean and longest response in tokens; truncated: the share of responses cut by the cap "
             "(rl.max_new_tokens, no end of text) where the RL stage logged it; for older records whether any "
             "response reached the cap and in what share of the steps (of all seeds) one did (none: the longest of "
             "all stayed below it, so no output was cut); format: share of samples with a well-formed answer.", "",
             "| variant | seeds | flat groups % | clipped % | entropy | KL | mean length | longest | truncated "
             "| format % | grad norm |", "|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['variant']} | {r['seeds']} | {arrow(r, 'zero_std_groups', 100.0, 0)} | "
                     f"{arrow(r, 'clip_frac', 100.0, 1)} | {arrow(r, 'entropy')} | {arrow(r, 'kl', 1.0, 4)} | "
                     f"{arrow(r, 'response_len_mean', 1.0, 0)} | {arrow(r, 'response_len_max', 1.0, 0)} | "
                     f"{truncated(r)} | "
                     f"{arrow(r, 'format_rate', 100.0, 0)} | "
                     f"{arrow(r, 'grad_norm')} |")
    return lines


def code_section(code: list[dict]) -> list[str]:
    """The commit(s) each variant's records come from and whether the code they depend on is the workspace's."""
    if not code:
        return []
    stale = sum(len(r["stale"]) for r in code)
    total = sum(len(r["seeds"]) for r in code)
    lines = ["## Records and code", "",
             "A record's key holds the hash of the code its run depends on (the code deps dvc.yaml lists for every "
             "stage the study's targets reach); a record made by other code than the workspace's is **stale**: it "
             f"is reported, and the next `make study` runs it again. {stale} of {total} records are stale. A record "
             "also names the SFT model its RL started from (dvc.lock's hash of it): one seed's chain built again on "
             "another kind of CPU is other bits, and its runs cannot be paired with the first chain's."]
    for group in dict.fromkeys(tuple(r["sft_mixed"]) for r in code if r.get("sft_mixed")):
        lines += ["", f"**Records from different SFT models** among {', '.join(group)}: their comparisons pair runs "
                      "that did not start from the same model; run them again from one chain."]
    lines += ["", "| variant | seeds | commit(s) | code key(s) of the records | code key now | SFT model(s) | status |",
              "|---|---|---|---|---|---|---|"]
    for r in code:
        if not r["stale"]:
            status = "current"
        elif r["no_key"] and len(r["no_key"]) == len(r["stale"]):
            status = f"**stale** (seeds {', '.join(map(str, r['stale']))}: recorded before code keys)"
        else:
            status = f"**stale** (seeds {', '.join(map(str, r['stale']))}: the code changed since)"
        lines.append(f"| {r['variant']} | {', '.join(map(str, r['seeds']))} | {', '.join(r['commits'])} | "
                     f"{', '.join(r['code_keys'])} | {', '.join(r['code_now'])} | "
                     f"{', '.join(r.get('sft_models') or ['?'])} | {status} |")
    return lines


def cost_section(runs: list[dict], workers: tuple[int, ...] = (1, 2, 4)) -> list[str]:
    """What the recorded runs cost: CPU-hours (each run's wall time x its threads) and the wall time of running them
    again on 1..N machines like the one they ran on, each running `jobs` at once as they did (a run's wall time
    already holds the slowdown of sharing the machine with the other jobs)."""
    timed = [r for r in runs if r.get("wall_s")]
    if not timed:
        return []
    cpu_h = sum(r["wall_s"] * (r.get("threads") or 1) for r in timed) / 3600
    jobs = sorted({int(r.get("jobs") or 1) for r in timed})
    per_machine = sum(r["wall_s"] / max(int(r.get("jobs") or 1), 1) for r in timed) / 3600
    lines = ["## Cost", "",
             f"{len(timed)} runs: {cpu_h:.1f} CPU-hours (each run's wall time x its threads), "
             f"{sum(r['wall_s'] for r in timed) / len(timed) / 60:.1f} min per run on average, "
             f"{'/'.join(map(str, jobs))} run(s) at a time per machine. Wall time to run them again on N such machines "
             "(a Prefect work pool, docs/study.md; the runs divide evenly, the shared chain not included):", "",
             "| machines | wall time (h) |", "|---:|---:|"]
    lines += [f"| {n} | {per_machine / n:.1f} |" for n in workers]
    return lines


def render(study: Study, rows: list[dict], findings: list[dict], figures: dict[str, str], results: dict,
           report_dir: Path, fit: list[dict] | None = None, code: list[dict] | None = None,
           health_rows: list[dict] | None = None, pilot: dict | None = None) -> str:
    runs = [r for v in results.values() for r in v.values()]
    wall = sum(r.get("wall_s", 0.0) for r in runs)
    gflops = sorted({r.get("matmul_gflops") for r in runs if r.get("matmul_gflops")})
    n_test = sorted({len(t["id"]) for r in runs for t in r["problems"]["rl"].values()})
    lines = [f"# Study `{study.name}`: DeepSeekMath's comparisons at laptop scale", "",
             f"Generated by `python -m dsmath.study report` from the run records in `{study.results}/runs/` "
             f"(study file `{study.path}`). {len(runs)} runs ({len(results)} variants x seeds "
             f"{', '.join(map(str, study.seeds))}); their wall times add up to "
             f"{wall / 60:.1f} min on a "
             f"machine whose fp32 2048² matmul runs at {', '.join(f'{g:.0f}' for g in gflops) or '?'} GFLOP/s "
             f"(the shared chain, built once before the runs, not included; runs side by side count each their own).",
             "", "## What was held fixed", "",
             "Every variant is params.yaml plus the study's shared overrides plus its own; it differs from the "
             "reference only in the keys listed for it. Shared overrides (the study's scale):", "",
             _override_text(study.shared), "",
             f"The test split ({' / '.join(map(str, n_test)) or '?'} synthetic problems) is only read by the "
             "evaluate stages; nothing in the study is tuned on it. Uncertainty: sd across seeds; differences "
             "are blocked on the seed (see Findings).", "",
             "## Variants", "",
             "| variant | mode | changes | seeds | greedy | maj@k | pass@k | gain over SFT (SE) | s/step "
             "| peak RSS MB | trainer state MB |", "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        k = r["k"]
        gain = "-" if r["gain"] is None else f"{100 * r['gain']:+.1f} ({fmt(r['gain_se'])})"
        lines.append(f"| {r['variant']} ({r['label']}) | {r['mode']} | {_override_text(r['overrides'])} | "
                     f"{len(r['seeds'])} | {pct_sd(r['greedy'])} | {pct_sd(r.get(f'maj@{k}'))} | "
                     f"{pct_sd(r.get(f'pass@{k}'))} | {gain} | "
                     f"{num(r['s_per_step'], 2)} | {num(r['peak_rss_mb'], 0)} | {num(r['trainer_state_mb'], 1)} |")
    lines += ["", "Accuracies in percent on the synthetic test split in the variant's rollout mode (mean ± sd over "
              "seeds); k = the samples drawn per problem (maj@k votes over them, pass@k: any is right). Each variant's "
              "SFT model (the one it started from) is evaluated alike: "
              + "; ".join(f"{r['variant']} {fmt(r['sft_greedy'])}" for r in rows) + ".", "",
              *findings_section(study, findings, pilot), "", *fits_section(fit or []), "",
              *health_section(health_rows or []), "", *cost_section(runs), "", *code_section(code or [])]
    lines += ["", "## Figures", ""]
    for name, path in figures.items():
        lines += [f"![{name}]({Path(path).relative_to(report_dir).as_posix()})", ""]
    return "\n".join(lines) + "\n"
