"""The paper-style report: a table of every model of the chain on every dataset (greedy, maj@k, pass@k), the
pass@k / maj@k vs k curves of SFT and RL (DeepSeekMath Fig. 7), the RL reward and KL curves, and the SFT -> RL deltas.

Every number in `reports/report.md` is read from `metrics/eval/<model>.json` (the same files `dvc metrics show`
reads and the evaluate stages logged to MLflow), so the three always agree.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

CHAIN_LABELS = {"base": "code base", "pretrain": "+ math pretraining", "sft": "+ SFT (instruct)", "rl": "+ GRPO (RL)"}


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
    keys = {k for m in metrics.values() for k in m}
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
    return "-" if x is None else f"{100 * x:.1f}"


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


def plot_k_curves(curves: dict[str, list[dict]], dataset: str = "synthetic", mode: str = "cot"):
    """pass@k and maj@k against k for each model (Fig. 7 of the paper: RL lifts maj@k, not pass@k)."""
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


def plot_rl_curves(rows: list[dict], window: int = 10):
    """Reward, training accuracy and KL per RL step (from plots/rl.csv), raw and as a `window`-step moving average;
    the held-out greedy accuracy (val_greedy_acc) as points on the accuracy panel."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.5))
    for ax, key in zip(axes, ("reward_mean", "accuracy", "kl"), strict=True):
        pts = [(int(r["step"]), float(r[key])) for r in rows if r.get(key) not in (None, "")]
        if pts:
            steps, values = zip(*pts, strict=True)
            ax.plot(steps, values, alpha=0.35, label="per step")
            ax.plot(steps, moving_average(list(values), window), label=f"mean of {window}")
        ax.set_title(f"rl {key}")
        ax.set_xlabel("step")
    val = [(int(r["step"]), float(r["val_greedy_acc"])) for r in rows if r.get("val_greedy_acc") not in (None, "")]
    if val:
        axes[1].plot(*zip(*val, strict=True), marker="o", label="held-out greedy")
    for ax in axes:
        if ax.lines:
            ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def greedy_correct(eval_dir: str | Path, model: str, dataset: str = "synthetic", mode: str = "cot") -> dict:
    """{problem id: greedy correct} from a model's predictions.jsonl."""
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


def build_report(params, out_dir: str | Path) -> dict:
    """Write report.md and its figures into `out_dir`; returns the figures' paths and the headline numbers."""
    paths, ev = params.common.paths, params.evaluate
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    metrics = load_eval_metrics(paths.metrics, ev.models)
    k_max = max(k for k in ev.k if k <= ev.n_samples) if ev.n_samples else 0
    cols = columns(metrics, k_max)
    delta_rows = deltas(metrics, cols)
    dataset, mode = ev.primary_metric.split("/")[:2]  # the paired SE and the k curves are of the primary setting
    a, b = greedy_correct(paths.eval, "sft", dataset, mode), greedy_correct(paths.eval, "rl", dataset, mode)
    common_ids = sorted(set(a) & set(b))
    se = standard_error_of_delta([a[i] for i in common_ids], [b[i] for i in common_ids]) if common_ids else None
    figures = {}
    curves = {m: read_csv(Path(paths.eval) / m / "curves.csv") for m in ("sft", "rl")}
    if any(curves.values()):
        figures["k_curves"] = out / "pass_maj_at_k.png"
        plot_k_curves(curves, dataset, mode).savefig(figures["k_curves"], dpi=110)
    rl_rows = read_csv(Path(paths.plots) / "rl.csv")
    if rl_rows:
        figures["rl_curves"] = out / "rl_curves.png"
        plot_rl_curves(rl_rows).savefig(figures["rl_curves"], dpi=110)
    text = render(metrics, cols, delta_rows, se, len(common_ids), figures, params, f"{dataset} {mode}")
    (out / "report.md").write_text(text)
    primary = ev.primary_metric
    return {"figures": {k: str(v) for k, v in figures.items()}, "columns": cols, "metrics": metrics,
            "sft_rl_paired_se": se, "primary_metric": primary,
            "primary": {m: v.get(primary) for m, v in metrics.items()}}


def render(metrics, cols, delta_rows, se, n_paired, figures, params, primary: str) -> str:
    lines = [
        "# dsmath report",
        "",
        "The DeepSeekMath chain at this profile's scale: every model evaluated on the held-out synthetic test split",
        "and the real benchmarks, in chain-of-thought (cot), program-of-thought (pot, run in the sandbox) and",
        "tool-integrated (tool) modes. Values are accuracies in percent; maj@k and pass@k use "
        f"{params.evaluate.n_samples} samples at temperature {params.evaluate.temperature}.",
        "",
        "## Models of the chain",
        "",
        markdown_table(metrics, cols),
        "",
    ]
    if delta_rows:
        lines += ["## SFT -> RL", "", "| metric | sft | rl | delta (points) |", "|---|---:|---:|---:|"]
        lines += [f"| {r['metric'].replace('/', ' ')} | {fmt(r['sft'])} | {fmt(r['rl'])} | "
                  f"{100 * r['delta']:+.1f} |" for r in delta_rows]
        if se is not None and se == se:
            lines += ["", f"Paired standard error of the greedy {primary} difference over {n_paired} problems: "
                          f"{100 * se:.1f} points."]
        lines.append("")
    for key, title in (("k_curves", "pass@k and maj@k against k (paper Fig. 7)"), ("rl_curves", "RL curves")):
        if key in figures:
            lines += [f"## {title}", "", f"![{title}]({Path(figures[key]).name})", ""]
    return "\n".join(lines)
