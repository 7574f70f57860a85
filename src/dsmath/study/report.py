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
- the health of each arm's RL runs (:mod:`dsmath.study.health`): flat groups, clipped tokens, entropy, KL, lengths,
  format rate and gradient norm, early and late in the run;
- the records: the commit(s) each variant's records come from, and which were made by other code than the
  workspace's (stale: `make study` runs them again).

This module turns the records into rows and writes the files; the text is :mod:`dsmath.study.markdown`'s, the
figures :mod:`dsmath.study.figures`'.
"""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

from dsmath.reporting.paper import sd
from dsmath.study import fits, health
from dsmath.study.codekey import stages_params_hash
from dsmath.study.figures import plot_k, plot_lengths, plot_val_curves, val_points
from dsmath.study.markdown import render
from dsmath.study.spec import Study, variant_params
from dsmath.study.stats import (
    COST_METRICS,
    finding_row,
    k_max,
    mean,
    metric_of,
    paired_difference,
    pilot_components,
)


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
                     "no_key": [s for s in stale if not runs[s].get("code_key")],
                     "sft_models": sorted({(r.get("sft_model") or "?")[:8] for r in runs.values()}),
                     "sft_chain": sft_chain(study, name)})
    for group in mixed_sft_models(rows):
        for r in rows:
            if r["variant"] in group:
                r["sft_mixed"] = group
    return rows


def sft_chain(study: Study, variant: str) -> str:
    """The hash of the params of the stages up to `sft` for `variant`: variants with the same one must have started
    RL from the same SFT model (:func:`mixed_sft_models` checks that the records did)."""
    params = variant_params(study, variant, study.seeds[0], study.profile).model_dump()
    return stages_params_hash(["sft"], params)


def mixed_sft_models(code: list[dict]) -> list[list[str]]:
    """The groups of variants (same SFT params) whose records name more than one SFT model (a chain built again, on
    another machine or by other code: its runs cannot be paired with the others'); records without the hash (made
    before it was recorded) do not count."""
    groups: dict[str, dict[str, set[str]]] = {}
    for r in code:
        models = {m for m in r.get("sft_models", []) if m != "?"}
        groups.setdefault(r.get("sft_chain", ""), {})[r["variant"]] = models
    return [sorted(g) for g in groups.values() if len(set().union(*g.values())) > 1]


def fit_rows(results: dict[str, dict[int, dict]], study: Study) -> list[dict]:
    """Per variant: ScaleRL's fit (:func:`dsmath.study.fits.fit_seeds`) of held-out greedy accuracy against RL
    samples (step x prompts_per_step x group_size of the variant's params, and rl.rejection's) over its seeds'
    curves."""
    rows = []
    for name in study.variants:
        runs = results.get(name)
        if not runs:
            continue
        seed = min(runs)
        rl = variant_params(study, name, seed, study.profile).rl
        per_step = rl.prompts_per_step * rl.group_size
        rejection = (rl.rejection.at_step, rl.rejection.prompts * rl.rejection.samples)  # its samples count too
        curves = [c for r in runs.values() if (c := fits.run_curve(r.get("curve") or [], per_step, rejection))]
        rows.append({"variant": name, "mode": runs[seed]["mode"], "samples_per_step": per_step,
                     **fits.fit_seeds(curves)})
    return rows


def pilot_row(study: Study, results: dict[str, dict[int, dict]]) -> dict | None:
    """The variance components of the study's pilot (its two arms' greedy differences over the seeds both ran), or
    None without a pilot or its runs."""
    if study.pilot is None:
        return None
    a, b = study.pilot
    if a not in results or b not in results:
        return None
    comp = pilot_components(results[a], results[b], next(iter(results[a].values()))["mode"])
    return None if comp is None else comp | {"a": a, "b": b}


def health_rows(results: dict[str, dict[int, dict]], study: Study) -> list[dict]:
    """Per variant with health curves: the seed mean of each signal's early and late mean, and the response cap its
    runs sampled under (`cap`, rl.max_new_tokens)."""
    caps = {name: variant_params(study, name, study.seeds[0], study.profile).rl.max_new_tokens
            for name in study.variants}
    return [{"variant": name, **summary, "cap": caps[name]} for name in study.variants
            if (summary := health.variant_summary(results.get(name) or {}, cap=caps[name])) is not None]


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
                             "kl": c.get("kl"), "response_len_mean": c.get("response_len_mean")})
    return rows


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


def write_csv(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["variant"])
        w.writeheader()
        w.writerows(rows)


def build_study_report(study: Study, parent=None) -> dict:
    """Write the report, its figures and their data; log them to the study's parent run when given."""
    results = load_results(study)
    report = Path(study.report)
    fig_dir = report.with_suffix("")  # reports/study/
    fig_dir.mkdir(parents=True, exist_ok=True)
    labels = {v: study.variants[v].label for v in study.variants}
    rows = variant_rows(results, study)
    pilot = pilot_row(study, results)
    findings = [finding_row(f, results, study.equivalence_margin, pilot) for f in study.findings]
    fit, code, health_table = fit_rows(results, study), code_status(study, results), health_rows(results, study)
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
    if any(r["response_len_mean"] is not None for r in curves):
        path = fig_dir / "response_length.png"
        plot_lengths(curves, [v for v in study.variants if v in results], labels).savefig(path, dpi=110)
        figures["mean response length vs RL step"] = str(path)
    if ks:
        path = fig_dir / "maj_pass_at_k.png"
        plot_k(ks, [v for v in study.variants if v in results], labels).savefig(path, dpi=110)
        figures["maj@k and pass@k vs k"] = str(path)
    report.write_text(render(study, rows, findings, figures, results, report.parent, fit, code,
                             health_table, pilot))
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
                                                      "health": health_table, "records": code}, indent=1) + "\n")
    if parent is not None:
        parent.log_artifact(report, "study")
        for path in [*figures.values(), fig_dir / "curves.csv", fig_dir / "k_curves.csv", fig_dir / "summary.json"]:
            parent.log_artifact(path, "study")
        parent.log_table(table, "study/variants.json")
        parent.log_metrics({f"{r['variant']}/greedy_mean": r["greedy"][0] for r in rows
                            if r["greedy"][0] is not None})
    return {"report": str(report), "figures": figures, "rows": rows, "findings": verdicts}
