"""The study's report: `reports/study.md`, its figures (PNG) and their data (CSV, DVC plots), from the result records
of the runs alone, and the same figures and tables as artefacts of the study's MLflow parent run.

- held-out greedy accuracy (validation, the RL stage's probe) against RL step per method (DeepSeekMath Fig. 5), and
  iterative vs plain GRPO (Fig. 6);
- maj@k and pass@k against k on the synthetic test split per method, SFT included (Fig. 7);
- a table per variant: greedy, maj@k, pass@k (mean and sd over seeds), the gain over its SFT model with its standard
  error (blocked on the seed), s/step, peak RSS and the trainer's state;
- the findings: each of the paper's claims as a difference between two variants, blocked on the seed, with its
  uncertainty, the minimum detectable effect its seeds give and a verdict by the rule in
  :func:`dsmath.study.stats.verdict`;
- the compute curves: ScaleRL's saturating fit of held-out accuracy against RL samples per variant
  (:mod:`dsmath.study.fits`), asymptote A and efficiency B with bootstrap intervals over seeds;
- the records: the commit(s) each variant's records come from, and which were made by other code than the
  workspace's (stale: `make study` runs them again).
"""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

from dsmath.reporting.paper import fmt, sd
from dsmath.study import fits
from dsmath.study.spec import Study, variant_params
from dsmath.study.stats import (
    ALPHA,
    COST_METRICS,
    POWER,
    finding_row,
    k_max,
    mde,
    mean,
    metric_of,
    paired_difference,
    seeds_needed,
)

UNITS = {"s_per_step": "s/step", "peak_rss_mb": "MB", "trainer_state_mb": "MB"}  # accuracies: points


def load_results(study: Study) -> dict[str, dict[int, dict]]:
    """{variant: {seed: result record}} of the runs whose records match the study's current settings (made by the
    workspace's code or not: :func:`code_status` tells which are stale)."""
    out: dict[str, dict[int, dict]] = {}
    for variant, seed in study.runs():
        path = study.result_path(variant, seed)
        if path.exists():
            r = json.loads(path.read_text())  # records made before code keys hold the settings key as `key`
            if (r.get("settings_key", r.get("key")) == study.settings_key(variant, seed)
                    or r.get("key") == study.run_key(variant, seed)):
                out.setdefault(variant, {})[seed] = r
    return out


def code_status(study: Study, results: dict[str, dict[int, dict]]) -> list[dict]:
    """Per variant: its records' commits, their code keys, the workspace's code key, and the seeds whose record was
    made by other code (`stale`: its key is not the run's key now, so the runner runs it again; `no_key`: those
    recorded before code keys)."""
    rows = []
    for name in study.variants:
        runs = results.get(name)
        if not runs:
            continue
        now = {s: study.code_key(name, s) for s in runs}
        stale = [s for s, r in sorted(runs.items()) if r.get("key") != study.run_key(name, s)]
        rows.append({"variant": name, "seeds": sorted(runs),
                     "commits": sorted({str(r.get("git_commit") or "?")[:7] for r in runs.values()}),
                     "code_keys": sorted({r.get("code_key") or "-" for r in runs.values()}),
                     "code_now": sorted(set(now.values())), "stale": stale,
                     "no_key": [s for s in stale if not runs[s].get("code_key")]})
    return rows


def fit_rows(results: dict[str, dict[int, dict]], study: Study) -> list[dict]:
    """Per variant: ScaleRL's fit (:func:`dsmath.study.fits.fit_seeds`) of held-out greedy accuracy against RL
    samples (step x prompts_per_step x group_size of the variant's params) over its seeds' curves."""
    rows = []
    for name in study.variants:
        runs = results.get(name)
        if not runs:
            continue
        seed = min(runs)
        rl = variant_params(study, name, seed, study.profile).rl
        per_step = rl.prompts_per_step * rl.group_size
        curves = [c for r in runs.values() if (c := fits.run_curve(r.get("curve") or [], per_step))]
        rows.append({"variant": name, "mode": runs[seed]["mode"], "samples_per_step": per_step,
                     **fits.fit_seeds(curves)})
    return rows


def variant_rows(results: dict[str, dict[int, dict]], study: Study) -> list[dict]:
    """One row per variant: its mode, test metrics (mean, sd over seeds), the gain over its SFT model, costs."""
    rows = []
    for name in study.variants:
        runs = results.get(name)
        if not runs:
            continue
        first = next(iter(runs.values()))
        mode, k = first["mode"], k_max(first, first["mode"])
        row = {"variant": name, "label": study.variants[name].label, "mode": mode, "seeds": sorted(runs), "k": k,
               "overrides": study.variants[name].overrides}
        for metric in ("greedy", *( (f"maj@{k}", f"pass@{k}") if k else ())):
            vals = [metric_of(r, metric, mode) for r in runs.values()]
            vals = [v for v in vals if v is not None]
            row[metric] = (mean(vals), sd(vals) if vals else float("nan"))
            sft_vals = [metric_of(r, metric, mode, "sft") for r in runs.values()]
            row[f"sft_{metric}"] = mean([v for v in sft_vals if v is not None])
        gain = paired_difference(runs, {}, "greedy", mode, b_model="sft")
        row["gain"], row["gain_sd"], row["gain_se"] = gain["diff"], gain["sd_seeds"], gain["se"]
        row["gain_se_kind"], row["gain_paired_se"] = gain["se_kind"], gain["paired_se"]
        for c in COST_METRICS:
            row[c] = mean([r["rl"].get(c) for r in runs.values()])
        row["wall_s"] = sum(r.get("wall_s", 0.0) for r in runs.values())
        rows.append(row)
    return rows


# ----------------------------------------------------------------------------------------------------------------
# figures and their data


def curve_rows(results: dict[str, dict[int, dict]]) -> list[dict]:
    """Long table of every run's RL curve (the DVC plot and the figures' data)."""
    rows = []
    for variant, runs in results.items():
        for seed, r in runs.items():
            for c in r["curve"]:
                rows.append({"variant": variant, "seed": seed, "step": int(c.get("step", 0)),
                             "val_greedy_acc": c.get("val_greedy_acc"), "reward_mean": c.get("reward_mean"),
                             "kl": c.get("kl")})
    return rows


def val_points(rows: list[dict], variant: str) -> dict[int, list[float]]:
    """{RL step: held-out greedy accuracy of each seed} of one variant, steps in order."""
    by: dict[int, list[float]] = {}
    for r in rows:
        if r["variant"] == variant and r["val_greedy_acc"] is not None:
            by.setdefault(r["step"], []).append(r["val_greedy_acc"])
    return dict(sorted(by.items()))


def write_val_curves(rows: list[dict], out_dir: Path) -> None:
    """One CSV per variant, `step,val_greedy_acc` (mean over seeds): the DVC plot of dvc.yaml's top-level `plots`."""
    shutil.rmtree(out_dir, ignore_errors=True)
    out_dir.mkdir(parents=True)
    for v in dict.fromkeys(r["variant"] for r in rows):
        if points := val_points(rows, v):
            write_csv(out_dir / f"{v}.csv", [{"step": s, "val_greedy_acc": sum(x) / len(x)} for s, x in points.items()])


def k_rows(results: dict[str, dict[int, dict]]) -> list[dict]:
    """maj@k / pass@k against k per variant (mean over seeds) and of the SFT model each started from."""
    rows = []
    for variant, runs in results.items():
        first = next(iter(runs.values()))
        mode, km = first["mode"], k_max(first, first["mode"])
        if not km:
            continue
        sft_from = "from the code base" if first.get("overrides", {}).get("sft.init") == "base" else "the recipe's"
        prefix = f"synthetic/{mode}/maj@"
        ks = sorted({int(key.rsplit("@", 1)[1]) for key in first["eval"] if key.startswith(prefix)})
        for model in ("rl", "sft"):
            for k in ks:
                vals = {m: mean([metric_of(r, f"{m}@{k}", mode, model) for r in runs.values()])
                        for m in ("maj", "pass")}
                rows.append({"variant": variant, "model": model, "mode": mode, "k": k, "sft_from": sft_from,
                             "maj_at_k": vals["maj"], "pass_at_k": vals["pass"]})
    return rows


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_val_curves(rows: list[dict], variants: list[str], labels: dict[str, str], title: str):
    """Held-out greedy accuracy against RL step, mean over seeds (the band: min to max)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4))
    for v in variants:
        by = {s: [100 * x for x in accs] for s, accs in val_points(rows, v).items()}
        steps = list(by)
        if not steps:
            continue
        ax.plot(steps, [sum(by[s]) / len(by[s]) for s in steps], marker="o", label=labels.get(v, v))
        ax.fill_between(steps, [min(by[s]) for s in steps], [max(by[s]) for s in steps], alpha=0.15)
    ax.set_xlabel("RL step")
    ax.set_ylabel("held-out greedy accuracy (%)")
    ax.set_title(title)
    if ax.get_lines():
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_k(rows: list[dict], variants: list[str], labels: dict[str, str]):
    """maj@k and pass@k against k per variant, the SFT models dashed (Fig. 7)."""
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    sft_drawn = set()
    for v in variants:
        for model in ("rl", "sft"):
            pts = sorted((r for r in rows if r["variant"] == v and r["model"] == model), key=lambda r: r["k"])
            if not pts:
                continue
            key = (model, pts[0]["mode"], tuple(round(r["pass_at_k"] or 0, 6) for r in pts))
            if model == "sft" and key in sft_drawn:
                continue  # variants sharing one SFT model draw it once
            sft_drawn.add(key)
            label = labels.get(v, v) if model == "rl" else f"SFT model, {pts[0]['mode']} ({pts[0]['sft_from']})"
            style = "-" if model == "rl" else "--"
            for ax, col in zip(axes, ("pass_at_k", "maj_at_k"), strict=True):
                ax.plot([r["k"] for r in pts], [100 * (r[col] or 0) for r in pts], style, marker="o", label=label)
    for ax, title in zip(axes, ("pass@k", "maj@k"), strict=True):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("k")
        ax.set_ylabel("accuracy (%)")
        ax.set_title(f"{title}, synthetic test")
    if axes[1].get_lines():
        axes[1].legend(fontsize=7)
    fig.tight_layout()
    return fig


def write_csv(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["variant"])
        w.writeheader()
        w.writerows(rows)


# ----------------------------------------------------------------------------------------------------------------
# the markdown


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


def findings_section(study: Study, findings: list[dict]) -> list[str]:
    """The findings: the rule, how the SE and the MDE are made, and one row per claim."""
    from scipy.stats import t

    n = len(study.seeds)
    lines = ["## Findings", "",
             "Rule: the claimed direction exceeds the other by more than 2 standard errors -> **holds**; the opposite "
             "by more than 2 -> **does not hold**; else **inconclusive**. A claim of no difference: more than 2 SE "
             "apart -> **does not hold**; the interval difference ± 2 SE inside "
             f"±{_scaled(study.equivalence_margin, 100.0)} points -> **holds**; else **inconclusive**.", "",
             "The comparison is blocked on the seed: a seed is the same prompt order and sampling stream in both "
             "arms, so for each seed s both have, d_s = a(s) - b(s) (against the SFT model: a's run minus the SFT "
             "model it started from). Difference = mean d_s; SE = sd(d_s) / sqrt(n) on df = n - 1 (SE kind "
             "*seeds*). Only the two arms enter it: no other variant's seed variance. Each seed's accuracy already "
             "holds the noise of its test problems, so the paired SE over problems of one seed's difference (root "
             "mean square over the seeds) is shown beside it, not added to it; with one seed it is the SE (kind "
             "*problems (1 seed)*, df = the normal's). Costs have no per-problem error.", "",
             f"MDE: the true difference a two-sided test at level {ALPHA:g} detects with {POWER:.0%} power, "
             "(t_{0.975,df} + t_{0.80,df}) x SE (normal quantiles without df). Few seeds cost much: with df = 1 "
             f"it is {mde(1.0, 1):.1f} SE, with df = 4 {mde(1.0, 4):.1f} SE. "
             "The 2-SE rule does not widen with few df" + (
                 f": with {n} seeds a difference of zero passes it {2 * t.sf(2, n - 1):.0%} of the time"
                 if n >= 2 else "") + "; read a verdict together with its MDE."]
    if study.pilot_sd is not None:
        sd_d = study.pilot_sd / 100
        planned = mde(sd_d / n ** 0.5, n - 1) if n >= 2 else None
        need = seeds_needed(sd_d, study.equivalence_margin)
        lines += ["", f"Planned (study file `pilot_sd`: a pilot's sd of per-seed paired differences, "
                  f"{study.pilot_sd:g} points): {n} seeds give an MDE of "
                  f"{'-' if planned is None else f'{100 * planned:.1f}'} points; an MDE of the equivalence margin "
                  f"({100 * study.equivalence_margin:g} points) needs {need or 'more than 10,000'} seeds. The column "
                  "*planned MDE* is the one the seeds a finding has give."]
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
        se = "-" if row["se"] is None else (
            f"{_scaled(row['se'], scale)} ({kind}" + (f", df {row['df']})" if row.get("df") else ")"))
        lines.append(f"| {f.claim} | {f.source} | {f.a} - {f.b}, {f.metric} ({row.get('mode')}) | "
                     f"{_scaled(row['diff'], scale, True)}{unit} | {row['n_seeds']} | "
                     f"{_scaled(row['sd_seeds'], scale)} | {se} | {_scaled(row['paired_se'], scale)} | "
                     f"{_scaled(row['mde'], scale)} | {_scaled(row.get('planned_mde'), scale)} | "
                     f"**{row['verdict']}** ({_mde_text(row['mde'], f.metric)}) |")
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


def code_section(code: list[dict]) -> list[str]:
    """The commit(s) each variant's records come from and whether the code they depend on is the workspace's."""
    if not code:
        return []
    stale = sum(len(r["stale"]) for r in code)
    total = sum(len(r["seeds"]) for r in code)
    lines = ["## Records and code", "",
             "A record's key holds the hash of the code its run depends on (the code deps dvc.yaml lists for every "
             "stage the study's targets reach); a record made by other code than the workspace's is **stale**: it "
             f"is reported, and the next `make study` runs it again. {stale} of {total} records are stale.", "",
             "| variant | seeds | commit(s) | code key(s) of the records | code key now | status |",
             "|---|---|---|---|---|---|"]
    for r in code:
        if not r["stale"]:
            status = "current"
        elif r["no_key"] and len(r["no_key"]) == len(r["stale"]):
            status = f"**stale** (seeds {', '.join(map(str, r['stale']))}: recorded before code keys)"
        else:
            status = f"**stale** (seeds {', '.join(map(str, r['stale']))}: the code changed since)"
        lines.append(f"| {r['variant']} | {', '.join(map(str, r['seeds']))} | {', '.join(r['commits'])} | "
                     f"{', '.join(r['code_keys'])} | {', '.join(r['code_now'])} | {status} |")
    return lines


def render(study: Study, rows: list[dict], findings: list[dict], figures: dict[str, str], results: dict,
           report_dir: Path, fit: list[dict] | None = None, code: list[dict] | None = None) -> str:
    runs = [r for v in results.values() for r in v.values()]
    wall = sum(r.get("wall_s", 0.0) for r in runs)
    gflops = sorted({r.get("matmul_gflops") for r in runs if r.get("matmul_gflops")})
    n_test = sorted({len(t["id"]) for r in runs for t in r["problems"]["rl"].values()})
    lines = [f"# Study `{study.name}`: DeepSeekMath's comparisons at laptop scale", "",
             f"Generated by `python -m dsmath.study report` from the run records in `{study.results}/runs/` "
             f"(study file `{study.path}`). {len(runs)} runs ({len(results)} variants x seeds "
             f"{', '.join(map(str, study.seeds))}); their wall times add up to {wall / 60:.1f} min on a "
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
             "| variant | mode | changes | greedy | maj@k | pass@k | gain over SFT (SE) | s/step | peak RSS MB "
             "| trainer state MB |", "|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        k = r["k"]
        gain = "-" if r["gain"] is None else f"{100 * r['gain']:+.1f} ({fmt(r['gain_se'])})"
        lines.append(f"| {r['variant']} ({r['label']}) | {r['mode']} | {_override_text(r['overrides'])} | "
                     f"{pct_sd(r['greedy'])} | {pct_sd(r.get(f'maj@{k}'))} | {pct_sd(r.get(f'pass@{k}'))} | {gain} | "
                     f"{num(r['s_per_step'], 2)} | {num(r['peak_rss_mb'], 0)} | {num(r['trainer_state_mb'], 1)} |")
    lines += ["", "Accuracies in percent on the synthetic test split in the variant's rollout mode (mean ± sd over "
              "seeds); k = the samples drawn per problem (maj@k votes over them, pass@k: any is right). Each variant's "
              "SFT model (the one it started from) is evaluated alike: "
              + "; ".join(f"{r['variant']} {fmt(r['sft_greedy'])}" for r in rows) + ".", "",
              *findings_section(study, findings), "", *fits_section(fit or []), "", *code_section(code or [])]
    lines += ["", "## Figures", ""]
    for name, path in figures.items():
        lines += [f"![{name}]({Path(path).relative_to(report_dir).as_posix()})", ""]
    return "\n".join(lines) + "\n"


def build_study_report(study: Study, parent=None) -> dict:
    """Write the report, its figures and their data; log them to the study's parent run when given."""
    results = load_results(study)
    report = Path(study.report)
    fig_dir = report.with_suffix("")  # reports/study/
    fig_dir.mkdir(parents=True, exist_ok=True)
    labels = {v: study.variants[v].label for v in study.variants}
    rows = variant_rows(results, study)
    findings = [finding_row(f, results, study.equivalence_margin, study.pilot_sd) for f in study.findings]
    fit, code = fit_rows(results, study), code_status(study, results)
    curves, ks = curve_rows(results), k_rows(results)
    write_csv(fig_dir / "curves.csv", curves)
    write_csv(fig_dir / "k_curves.csv", ks)
    write_val_curves(curves, fig_dir / "val_curves")
    figures = {}
    groups = study.figures or {"methods": list(study.variants)}
    for name, variants in groups.items():
        present = [v for v in variants if v in results]
        if not present:
            continue
        path = fig_dir / f"{name}.png"
        fig = plot_val_curves(curves, present, labels, f"held-out greedy accuracy during RL: {name}")
        fig.savefig(path, dpi=110)
        figures[f"{name}: held-out accuracy vs RL step"] = str(path)
    if ks:
        path = fig_dir / "maj_pass_at_k.png"
        plot_k(ks, [v for v in study.variants if v in results], labels).savefig(path, dpi=110)
        figures["maj@k and pass@k vs k"] = str(path)
    report.write_text(render(study, rows, findings, figures, results, report.parent, fit, code))
    table = [{"variant": r["variant"], "mode": r["mode"], "seeds": len(r["seeds"]),
              "greedy_mean": r["greedy"][0], "greedy_sd": r["greedy"][1], "gain": r["gain"],
              "gain_se": r["gain_se"], "gain_paired_se": r["gain_paired_se"], "s_per_step": r["s_per_step"],
              "peak_rss_mb": r["peak_rss_mb"]}
             for r in rows]
    verdicts = [{"claim": x["finding"].claim, "a": x["finding"].a, "b": x["finding"].b,
                 "metric": x["finding"].metric, "diff": x.get("diff"), "se": x.get("se"),
                 "se_kind": x.get("se_kind"), "df": x.get("df"), "n_seeds": x.get("n_seeds"),
                 "paired_se": x.get("paired_se"), "mde": x.get("mde"), "planned_mde": x.get("planned_mde"),
                 "verdict": x["verdict"]} for x in findings]
    (fig_dir / "summary.json").write_text(json.dumps({"variants": table, "findings": verdicts, "fits": fit,
                                                      "records": code}, indent=1) + "\n")
    if parent is not None:
        parent.log_artifact(report, "study")
        for path in [*figures.values(), fig_dir / "curves.csv", fig_dir / "k_curves.csv", fig_dir / "summary.json"]:
            parent.log_artifact(path, "study")
        parent.log_table(table, "study/variants.json")
        parent.log_metrics({f"{r['variant']}/greedy_mean": r["greedy"][0] for r in rows
                            if r["greedy"][0] is not None})
    return {"report": str(report), "figures": figures, "rows": rows, "findings": verdicts}
