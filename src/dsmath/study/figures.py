"""The study report's figures (matplotlib, PNG): held-out accuracy against RL step per variant (Fig. 5 / 6),
maj@k / pass@k against k (Fig. 7) and the mean response length during RL (R1's self-evolution curve), drawn from
the rows :mod:`dsmath.study.report` builds from the records."""

from __future__ import annotations


def val_points(rows: list[dict], variant: str) -> dict[int, list[float]]:
    """{RL step: held-out greedy accuracy of each seed} of one variant, steps in order."""
    by: dict[int, list[float]] = {}
    for r in rows:
        if r["variant"] == variant and r["val_greedy_acc"] is not None:
            by.setdefault(r["step"], []).append(r["val_greedy_acc"])
    return dict(sorted(by.items()))


def length_curve(rows: list[dict], variant: str, window: int = 10) -> tuple[list[int], list[float]]:
    """(steps, mean response length): the seed mean at each RL step, then the trailing mean over `window` steps
    (one step's 128 samples are noisy).

    >>> rows = [{"variant": "v", "step": s, "response_len_mean": float(s)} for s in (1, 2, 3)]
    >>> length_curve(rows, "v", window=2)
    ([1, 2, 3], [1.0, 1.5, 2.5])
    """
    by: dict[int, list[float]] = {}
    for r in rows:
        if r["variant"] == variant and r.get("response_len_mean") is not None:
            by.setdefault(r["step"], []).append(r["response_len_mean"])
    steps = sorted(by)
    means = [sum(by[s]) / len(by[s]) for s in steps]
    smooth = [sum(means[max(0, i - window + 1) : i + 1]) / len(means[max(0, i - window + 1) : i + 1])
              for i in range(len(means))]
    return steps, smooth


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


def plot_lengths(rows: list[dict], variants: list[str], labels: dict[str, str]):
    """Mean response length (tokens) against RL step per variant: seed mean, trailing 10-step mean."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4))
    for v in variants:
        steps, lengths = length_curve(rows, v)
        if steps:
            ax.plot(steps, lengths, label=labels.get(v, v))
    ax.set_xlabel("RL step")
    ax.set_ylabel("mean response length (tokens)")
    ax.set_title("response length during RL (10-step trailing mean)")
    if ax.get_lines():
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig
