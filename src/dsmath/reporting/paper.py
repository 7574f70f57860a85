"""The paper-style report: a table of every model of the chain on every dataset (greedy, maj@k, pass@k), the
pass@k / maj@k vs k curves of SFT and RL (DeepSeekMath Fig. 7), the RL reward and KL curves, and the SFT -> RL deltas
over the RL seeds: mean and sd across seeds next to the paired standard error over problems, and the arithmetic of
the chain-of-thought completions: the share of written equations that are true, by operator and digit count.

Every number in `reports/report.md` is read from `metrics/eval/<model>.json` (the same files `dvc metrics show`
reads and the evaluate stages logged to MLflow; for rl the mean over seeds), the per-seed
`eval/rl/seed-<seed>/metrics.json` and the prediction files, so they always agree.
"""

from __future__ import annotations

import csv
import json
import math
import re
from pathlib import Path

from dsmath.config import seed_dir

CHAIN_LABELS = {"base": "code base", "pretrain": "+ math pretraining", "sft": "+ SFT (instruct)", "rl": "+ GRPO (RL)"}
# the per-equation arithmetic keys the evaluation writes in cot mode (dsmath.evaluation.arithmetic.table_metrics):
# <dataset>/cot/{equation_acc,n_equations,link_acc,n_links} and <dataset>/cot/equations/<operator>/<digits>/{acc,n}
EQUATION_OPERATORS = ("add", "sub", "mul", "div", "mixed", "fraction", "decimal")
EQUATION_SYMBOLS = {"add": "+", "sub": "-", "mul": "*", "div": "/"}
EQUATION_DIGITS = ("1", "2", "3plus")


def load_eval_metrics(metrics_dir: str | Path, models: list[str]) -> dict[str, dict[str, float]]:
    """{model: flat metrics} for the models whose evaluation exists."""
    out = {}
    for m in models:
        path = Path(metrics_dir) / "eval" / f"{m}.json"
        if path.exists():
            out[m] = json.loads(path.read_text())
    return out


def columns(metrics: dict[str, dict[str, float]], k_max: int) -> list[str]:
    """Table columns `<dataset>/<mode>/<metric>` present for any model: greedy everywhere, maj@k and pass@k where
    sampled (k = the largest k evaluated)."""
    keys = {k for m in metrics.values() for k in m if not k.startswith("val/")}  # validation: selection only
    prefixes = sorted({k.rsplit("/", 1)[0] for k in keys if k.endswith("/greedy")}, key=_dataset_order)
    cols = []
    for p in prefixes:
        cols.append(f"{p}/greedy")
        cols += [c for c in (f"{p}/maj@{k_max}", f"{p}/pass@{k_max}") if c in keys]
    return cols


def _dataset_order(prefix: str) -> tuple[int, str]:
    order = ["synthetic", "gsm8k_test", "svamp", "math500"]
    ds = prefix.split("/")[0]
    return (order.index(ds) if ds in order else len(order), prefix)


def fmt(x: float | None) -> str:
    """A fraction as percent with one decimal; "-" when not measured (None) or undefined (NaN, e.g. one seed's sd)."""
    return "-" if x is None or x != x else f"{100 * x:.1f}"


def markdown_table(metrics: dict[str, dict[str, float]], cols: list[str]) -> str:
    """Rows = models of the chain, columns = dataset/mode/metric, values in percent with one decimal."""
    head = "| model | " + " | ".join(c.replace("/", " ") for c in cols) + " |"
    sep = "|---|" + "---:|" * len(cols)
    rows = [f"| {m} ({CHAIN_LABELS.get(m, m)}) | " + " | ".join(fmt(v.get(c)) for c in cols) + " |"
            for m, v in metrics.items()]
    return "\n".join([head, sep, *rows])


def deltas(metrics: dict[str, dict[str, float]], cols: list[str], a: str = "sft", b: str = "rl") -> list[dict]:
    """b - a on every column both have (points)."""
    if a not in metrics or b not in metrics:
        return []
    return [{"metric": c, a: metrics[a][c], b: metrics[b][c], "delta": metrics[b][c] - metrics[a][c]}
            for c in cols if c in metrics[a] and c in metrics[b]]


def standard_error_of_delta(rows_a: list[bool], rows_b: list[bool]) -> float:
    """Paired standard error of the accuracy difference over the same problems: std(b_i - a_i) / sqrt(n)."""
    n = len(rows_a)
    if n < 2:
        return float("nan")
    d = [float(b) - float(a) for a, b in zip(rows_a, rows_b, strict=True)]
    mean = sum(d) / n
    return (sum((x - mean) ** 2 for x in d) / (n - 1) / n) ** 0.5


def read_csv(path: str | Path) -> list[dict]:
    path = Path(path)
    if not path.exists():
        return []
    with path.open() as f:
        return list(csv.DictReader(f))


def passk_points(metrics: dict[str, dict[str, float]], ks: list[int], dataset: str,
                 mode: str) -> dict[str, list[tuple[int, float]]]:
    """{model: [(k, passk@k)]} of the pass@k subset (evaluate.passk_problems > 0), where the model reports it."""
    pts = {m: [(k, v[f"{dataset}/{mode}/passk@{k}"]) for k in ks if f"{dataset}/{mode}/passk@{k}" in v]
           for m, v in metrics.items()}
    return {m: p for m, p in pts.items() if p}


def plot_k_curves(curves: dict[str, list[dict]], dataset: str = "synthetic", mode: str = "cot",
                  passk: dict[str, list[tuple[int, float]]] | None = None, passk_label: str = ""):
    """pass@k and maj@k against k for each model (Fig. 7 of the paper: RL lifts maj@k, not pass@k); `passk`: the
    pass@k subset's points per model, drawn dashed on the pass@k panel as "<model> <passk_label>"."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for model, rows in curves.items():
        pts = [r for r in rows if r["dataset"] == dataset and r["mode"] == mode]
        if not pts:
            continue
        ks = [int(r["k"]) for r in pts]
        axes[0].plot(ks, [100 * float(r["pass_at_k"]) for r in pts], marker="o", label=model)
        axes[1].plot(ks, [100 * float(r["maj_at_k"]) for r in pts], marker="o", label=model)
    for model, pts in (passk or {}).items():
        axes[0].plot([k for k, _ in pts], [100 * v for _, v in pts], marker="s", linestyle="--",
                     label=f"{model} {passk_label}")
    for ax, title in zip(axes, ("pass@k", "maj@k"), strict=True):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("k")
        ax.set_ylabel("accuracy (%)")
        ax.set_title(f"{title} — {dataset} {mode}")
        ax.legend()
    fig.tight_layout()
    return fig


def moving_average(values: list[float], window: int) -> list[float]:
    """Trailing mean over the last `window` values (fewer at the start)."""
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v - (values[i - window] if i >= window else 0.0)
        out.append(total / min(i + 1, window))
    return out


def plot_rl_curves(runs: dict[str, list[dict]], window: int = 10):
    """Reward, training accuracy and KL per RL step (from plots/rl/seed-<seed>.csv) as a `window`-step moving
    average, one line per seed; the held-out greedy accuracy (val_greedy_acc) as points on the accuracy panel."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.5))
    for run, rows in runs.items():
        for ax, key in zip(axes, ("reward_mean", "accuracy", "kl"), strict=True):
            pts = [(int(r["step"]), float(r[key])) for r in rows if r.get(key) not in (None, "")]
            if pts:
                steps, values = zip(*pts, strict=True)
                line, = ax.plot(steps, moving_average(list(values), window), label=run)
                ax.set_title(f"rl {key} (mean of {window} steps)")
                ax.set_xlabel("step")
                if key == "accuracy":
                    val = [(int(r["step"]), float(r["val_greedy_acc"])) for r in rows
                           if r.get("val_greedy_acc") not in (None, "")]
                    if val:
                        ax.plot(*zip(*val, strict=True), marker="o", linestyle=":", color=line.get_color(),
                                label=f"{run} held-out greedy")
    for ax in axes:
        if ax.lines:
            ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def greedy_correct(eval_dir: str | Path, model: str, dataset: str = "synthetic", mode: str = "cot") -> dict:
    """{problem id: greedy correct} from a model's predictions.jsonl (`model` may be `rl/seed-1234`)."""
    path = Path(eval_dir) / model / "predictions.jsonl"
    if not path.exists():
        return {}
    out = {}
    with path.open() as f:
        for line in f:
            r = json.loads(line)
            if r["dataset"] == dataset and r["mode"] == mode:
                out[r["id"]] = bool(r["greedy_correct"])
    return out


def sd(values: list[float]) -> float:
    """Sample standard deviation (n - 1); NaN for fewer than two values."""
    n = len(values)
    if n < 2:
        return float("nan")
    mean = sum(values) / n
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))


def paired_over_seeds(a: dict, runs: dict[str, dict]) -> dict:
    """SFT -> RL on the same problems: `a` = {id: SFT correct}, `runs` = {seed run: {id: RL correct}}. Returns the
    mean gain, its sd across seeds, and the paired standard error over problems of the seed-mean gain
    (d_i = mean over seeds of b_si - a_i), on the problems every run has."""
    ids = sorted(set(a).intersection(*runs.values())) if runs else []
    if not ids:
        return {"n": 0, "gain": None, "sd_seeds": None, "paired_se": None}
    gains = [sum(float(b[i]) - float(a[i]) for i in ids) / len(ids) for b in runs.values()]
    mean_b = [sum(float(b[i]) for b in runs.values()) / len(runs) for i in ids]
    return {"n": len(ids), "gain": sum(gains) / len(gains), "sd_seeds": sd(gains),
            "paired_se": standard_error_of_delta([a[i] for i in ids], mean_b)}


def seed_rows(metrics_sft: dict, runs: dict[str, dict], a: dict, corrects: dict[str, dict], primary: str) -> list[dict]:
    """One row per RL seed: its validation and test value of the primary metric, its test gain over SFT and the
    paired standard error of that gain."""
    rows = []
    for run, m in runs.items():
        ids = sorted(set(a) & set(corrects[run]))
        se = standard_error_of_delta([a[i] for i in ids], [corrects[run][i] for i in ids]) if ids else None
        test = m.get(primary)
        rows.append({"run": run, "val": m.get(f"val/{primary}"), "test": test,
                     "gain": None if test is None or primary not in metrics_sft else test - metrics_sft[primary],
                     "paired_se": se})
    return rows


def seed_spread(runs: dict[str, dict], cols: list[str]) -> dict[str, float]:
    """{column: sd across the RL seeds}."""
    return {c: sd([m[c] for m in runs.values() if c in m]) for c in cols}


def load_seed_metrics(eval_dir: str | Path, seeds: list[int]) -> dict[str, dict]:
    """{`seed-1234`: the metrics of that RL run} from eval/rl/seed-<seed>/metrics.json (the runs that exist)."""
    out = {}
    for s in seeds:
        path = Path(eval_dir) / "rl" / seed_dir(s) / "metrics.json"
        if path.exists():
            out[seed_dir(s)] = json.loads(path.read_text())
    return out


def best_on_validation(rows: list[dict]) -> dict | None:
    """The seed row with the highest validation value (the champion candidate; ties: the first seed)."""
    scored = [r for r in rows if r["val"] is not None]
    return max(scored, key=lambda r: r["val"]) if scored else None


def empty_figure(text: str):
    """A figure that only says why there is nothing to plot."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 1.5))
    ax.axis("off")
    ax.text(0.5, 0.5, text, ha="center", va="center")
    return fig


def _pooled(runs: list[dict[str, float]], acc_key: str, n_key: str) -> tuple[float, float | None]:
    """(summed count, count-weighted accuracy) of one measure over runs; accuracy None when the count is 0."""
    n = sum(m.get(n_key, 0.0) for m in runs)
    hits = sum(m[acc_key] * m[n_key] for m in runs if acc_key in m and n_key in m)
    return n, (hits / n if n else None)


def equation_summary(runs: list[dict[str, float]], prefix: str = "synthetic/cot/") -> dict | None:
    """One model's per-equation arithmetic from its metrics (`runs`: one dict, or one per RL seed, pooled: counts
    summed, accuracies weighted by their counts): ``{"n_equations", "equation_acc", "n_links", "link_acc",
    "cells": {(operator, digits): (n, acc)}}`` in table order. None when no run has the keys (an evaluation
    written before they existed, or without cot)."""
    runs = [m for m in runs if f"{prefix}n_equations" in m]
    if not runs:
        return None
    out: dict = {}
    for name in ("equation", "link"):
        short = "equations" if name == "equation" else "links"
        out[f"n_{short}"], out[f"{name}_acc"] = _pooled(runs, f"{prefix}{name}_acc", f"{prefix}n_{short}")
    pattern = re.compile(rf"{re.escape(prefix)}equations/([^/]+)/([^/]+)/n")
    found = {match.groups() for m in runs for k in m if (match := pattern.fullmatch(k))}
    out["cells"] = {(op, d): _pooled(runs, f"{prefix}equations/{op}/{d}/acc", f"{prefix}equations/{op}/{d}/n")
                    for op, d in sorted(found, key=_cell_order)}
    return out


def _cell_order(cell: tuple[str, str]) -> tuple:
    """Table order of (operator, digits): the known operators and digit buckets first, in their order."""
    op, digits = cell
    return (EQUATION_OPERATORS.index(op) if op in EQUATION_OPERATORS else len(EQUATION_OPERATORS),
            EQUATION_DIGITS.index(digits) if digits in EQUATION_DIGITS else len(EQUATION_DIGITS), cell)


def arithmetic_section(summaries: dict[str, dict | None], n_seeds: int = 0) -> list[str]:
    """The report's "Arithmetic in chain of thought" section: per category (operator, digits) and model, the
    number of equations and the percent whose written result is true, then all equations and all `=` links."""
    lines = ["## Arithmetic in chain of thought", ""]
    have = {m: t for m, t in summaries.items() if t is not None}
    if not have:
        return lines + ["Not measured: the evaluation files hold no per-equation arithmetic (written before it was "
                        "recorded, or no cot evaluation); rerun the evaluate stages.", ""]
    pooled = f" The rl columns pool its {n_seeds} seeds (counts summed)." if "rl" in have and n_seeds > 1 else ""
    lines += ["Every chain `a op b = ... = r` on a line of the greedy chain-of-thought completions of the synthetic "
              "test problems is one equation, true when its last written value equals the exact value of its first "
              "expression (exact fractions; a rounded decimal counts); each `=` of the chain (the place-value "
              "scratchpad's included) is one link. The category is the first expression's: its operator when it is "
              "one operation on two numbers, `mixed` for several, `fraction` / `decimal` when an operand is written "
              "`a/b` / with a decimal point; digits: the largest operand's digit count. n: equations; acc: percent "
              f"true.{pooled}", ""]
    models = list(have)
    lines += ["| operator | digits | " + " | ".join(f"{m} n | {m} acc" for m in models) + " |",
              "|---|---|" + "---:|---:|" * len(models)]
    cells = {c: None for t in have.values() for c in t["cells"]}

    def pair(n: float, acc: float | None) -> str:
        return f"{int(n)} | {fmt(acc)}" if n else "0 | -"

    for op, digits in sorted(cells, key=_cell_order):
        values = [pair(*have[m]["cells"].get((op, digits), (0.0, None))) for m in models]
        lines.append(f"| `{EQUATION_SYMBOLS.get(op, op)}` | {digits.replace('plus', '+')} | " + " | ".join(values)
                     + " |")
    lines.append("| all equations | | " + " | ".join(pair(have[m]["n_equations"], have[m]["equation_acc"])
                                                      for m in models) + " |")
    lines.append("| all `=` links | | " + " | ".join(pair(have[m]["n_links"], have[m]["link_acc"])
                                                      for m in models) + " |")
    return lines + [""]


def build_report(params, out_dir: str | Path) -> dict:
    """Write report.md and its figures into `out_dir`; returns the figures' paths and the headline numbers."""
    paths, ev = params.common.paths, params.evaluate
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    metrics = load_eval_metrics(paths.metrics, ev.models)
    k_max = max(k for k in ev.k if k <= ev.n_samples) if ev.n_samples else 0
    cols = columns(metrics, k_max)
    runs = load_seed_metrics(paths.eval, params.common.rl_seeds)
    delta_rows = deltas(metrics, cols)
    spread = seed_spread(runs, cols)
    for r in delta_rows:
        r["sd_seeds"] = spread.get(r["metric"])
    primary = ev.primary_metric
    dataset, mode = primary.split("/")[:2]  # the paired SE and the k curves are of the primary setting
    a = greedy_correct(paths.eval, "sft", dataset, mode)
    corrects = {run: greedy_correct(paths.eval, f"rl/{run}", dataset, mode) for run in runs}
    paired = paired_over_seeds(a, corrects)
    per_seed = seed_rows(metrics.get("sft", {}), runs, a, corrects, primary)
    # both figures are always written (they are the stage's declared outputs): a note where there is nothing to draw
    curves = {m: read_csv(Path(paths.eval) / m / "curves.csv") for m in ("sft", "rl")}
    rl_rows = {seed_dir(s): read_csv(Path(paths.plots) / "rl" / f"{seed_dir(s)}.csv") for s in params.common.rl_seeds}
    figures = {"k_curves": out / "pass_maj_at_k.png", "rl_curves": out / "rl_curves.png"}
    passk = passk_points(metrics, ev.passk_k, dataset, mode) if ev.passk_problems else {}
    label = f"pass@k (subset of {ev.passk_problems}, n={ev.passk_samples})"
    k_fig = (plot_k_curves(curves, dataset, mode, passk, label) if any(curves.values())
             else empty_figure("no sampled evaluation (evaluate.n_samples: 0)"))
    k_fig.savefig(figures["k_curves"], dpi=110)
    rl_fig = plot_rl_curves(rl_rows) if any(rl_rows.values()) else empty_figure("no RL curves")
    rl_fig.savefig(figures["rl_curves"], dpi=110)
    arithmetic = {m: equation_summary(list(runs.values()) if m == "rl" and runs else [v]) for m, v in metrics.items()}
    text = render(metrics, cols, delta_rows, paired, per_seed, figures, params, f"{dataset} {mode}", arithmetic)
    (out / "report.md").write_text(text)
    return {"figures": {k: str(v) for k, v in figures.items()}, "columns": cols, "metrics": metrics,
            "sft_rl_paired_se": paired["paired_se"], "sft_rl_gain": paired["gain"],
            "sft_rl_gain_sd_seeds": paired["sd_seeds"], "seeds": per_seed, "primary_metric": primary,
            "primary": {m: v.get(primary) for m, v in metrics.items()},
            "champion_candidate": best_on_validation(per_seed),
            "arithmetic": {m: {k: v for k, v in t.items() if k != "cells"} for m, t in arithmetic.items() if t}}


def _signed(x: float | None) -> str:
    return "-" if x is None or x != x else f"{100 * x:+.1f}"


def render(metrics, cols, delta_rows, paired, per_seed, figures, params, primary: str,
           arithmetic: dict[str, dict | None] | None = None) -> str:
    n_seeds = len(per_seed)
    lines = [
        "# dsmath report",
        "",
        "The DeepSeekMath chain at this profile's scale: every model evaluated on the held-out synthetic test split",
        "and the real benchmarks, in chain-of-thought (cot), program-of-thought (pot, run in the sandbox) and",
        "tool-integrated (tool) modes. Values are accuracies in percent; maj@k and pass@k use "
        f"{params.evaluate.n_samples} samples at temperature {params.evaluate.temperature}. The rl row is the mean "
        f"over {n_seeds} RL seed(s) ({', '.join(map(str, params.common.rl_seeds))}) from the same SFT model.",
        "",
        "## Models of the chain",
        "",
        markdown_table(metrics, cols),
        "",
    ]
    if delta_rows:
        lines += [f"## SFT -> RL (mean over {n_seeds} seeds)", "",
                  "| metric | sft | rl | sd across seeds | delta (points) |", "|---|---:|---:|---:|---:|"]
        lines += [f"| {r['metric'].replace('/', ' ')} | {fmt(r['sft'])} | {fmt(r['rl'])} | {fmt(r['sd_seeds'])} | "
                  f"{100 * r['delta']:+.1f} |" for r in delta_rows]
        if paired["gain"] is not None:
            lines += ["", f"Greedy {primary} over {paired['n']} test problems: gain {100 * paired['gain']:+.1f} "
                          f"points, sd across seeds {fmt(paired['sd_seeds'])}, paired standard error over problems "
                          f"(of the seed-mean gain) {fmt(paired['paired_se'])}."]
        lines.append("")
    if per_seed:
        metric = params.evaluate.primary_metric
        lines += ["### Per seed", "", f"Primary metric `{metric}`: validation ({params.evaluate.val_problems} "
                  "problems; where the champion is chosen) and test (reported).", "",
                  "| run | val | test | gain over sft (points) | paired SE |", "|---|---:|---:|---:|---:|"]
        sft = metrics.get("sft", {})
        if metric in sft:
            lines.append(f"| sft | {fmt(sft.get(f'val/{metric}'))} | {fmt(sft[metric])} | | |")
        lines += [f"| {r['run']} | {fmt(r['val'])} | {fmt(r['test'])} | {_signed(r['gain'])} | "
                  f"{fmt(r['paired_se'])} |" for r in per_seed]
        lines.append("")
    lines += arithmetic_section(arithmetic or {}, n_seeds)
    for key, title in (("k_curves", "pass@k and maj@k against k (paper Fig. 7)"), ("rl_curves", "RL curves")):
        if key in figures:
            lines += [f"## {title}", "", f"![{title}]({Path(figures[key]).name})", ""]
    return "\n".join(lines)
