"""Compute-performance curves of RL runs in the form of ScaleRL (Khatri et al. 2025, arXiv 2510.13786): held-out
accuracy against RL samples C follows a saturating sigmoid from its start value R0,

    R(C) = R0 + (A - R0) / (1 + (C_mid / C) ** B)

with A the asymptote (the accuracy the recipe tends to with unlimited compute), B the efficiency exponent (how
steeply it gets there) and C_mid the compute at which half of the gain A - R0 is reached. Fitted per variant on the
seed-mean curve (R0 fixed at the mean start value, the curve at C = 0), with percentile intervals of A and B from a
bootstrap over seeds. Pure functions of the curves.

>>> c = [100.0, 200.0, 400.0, 800.0, 1600.0]
>>> y = [sigmoid(x, 0.8, 1.5, 300.0, 0.5) for x in c]
>>> fit = fit_curve(c, y, r0=0.5)
>>> round(fit["A"], 4), round(fit["B"], 4), round(fit["C_mid"], 2)
(0.8, 1.5, 300.0)
>>> sigmoid(0.0, 0.8, 1.5, 300.0, 0.5)
0.5
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence

import numpy as np

MIN_POINTS = 4  # the start value and at least three points after it: three parameters A, B, C_mid
BOOTSTRAP_RESAMPLES = 200
BOOTSTRAP_SEED = 0
B_MAX = 50.0  # the efficiency exponent's upper bound (beyond it the curve is a step)


def sigmoid(c, a: float, b: float, c_mid: float, r0: float):
    """R(C) = R0 + (A - R0) / (1 + (C_mid / C)^B); R(0) = R0 (scalars or arrays)."""
    c = np.asarray(c, dtype=float)
    with np.errstate(divide="ignore", over="ignore"):
        ratio = np.where(c > 0, (c_mid / np.where(c > 0, c, 1.0)) ** b, np.inf)
        out = r0 + (a - r0) / (1.0 + ratio)
    return float(out) if out.ndim == 0 else out


def fit_curve(compute: Sequence[float], acc: Sequence[float], r0: float) -> dict | None:
    """Least-squares A, B, C_mid of :func:`sigmoid` through (compute, acc) at C > 0 with R0 fixed (bounds
    0 <= A <= 1, B > 0, C_mid > 0; compute is scaled by its largest value while fitting). Returns {A, B, C_mid,
    rmse, n} or None when the fit fails or fewer than three points with C > 0 are given."""
    from scipy.optimize import curve_fit

    pts = [(float(c), float(y)) for c, y in zip(compute, acc, strict=True) if c > 0 and y is not None]
    if len(pts) < MIN_POINTS - 1:
        return None
    c = np.array([p[0] for p in pts])
    y = np.array([p[1] for p in pts])
    scale = float(c.max())
    x = c / scale
    a0 = float(np.clip(y[-1] + 0.5 * (y[-1] - r0), 0.0, 1.0))  # past the last point, in the curve's direction
    bounds = ([0.0, 1e-6, 1e-9], [1.0, B_MAX, 1e6])

    def model(xx, a, b, c_mid):
        return sigmoid(xx, a, b, c_mid, r0)

    best, best_sse = None, math.inf
    starts = ((a0, 1.0, float(np.median(x))), (a0, 3.0, float(x[0])), (float(y.max()), 0.5, 1.0))
    for method in ("dogbox", "trf"):  # a few starts and two methods: a curve of few points has flat directions
        for p0 in starts:              # (a plateau: B towards its bound) where one start or method stalls
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    params, _ = curve_fit(model, x, y, p0=p0, bounds=bounds, method=method, maxfev=2000)
            except (RuntimeError, ValueError):
                continue
            sse = float(np.sum((model(x, *params) - y) ** 2))
            if sse < best_sse:
                best, best_sse = params, sse
        if best is not None:
            break
    if best is None:
        return None
    params = best
    a, b, c_mid = (float(v) for v in params)
    if not all(math.isfinite(v) for v in (a, b, c_mid)):
        return None
    rmse = float(np.sqrt(np.mean((model(x, a, b, c_mid) - y) ** 2)))
    return {"A": a, "B": b, "C_mid": c_mid * scale, "rmse": rmse, "n": len(pts) + 1}


def mean_curve(curves: Sequence[dict[float, float]]) -> dict[float, float]:
    """{compute: mean accuracy} over the points every curve has (seeds sharing the evaluation steps)."""
    if not curves:
        return {}
    common = sorted(set.intersection(*(set(c) for c in curves)))
    return {x: sum(c[x] for c in curves) / len(curves) for x in common}


def fit_seeds(curves: Sequence[dict[float, float]], resamples: int = BOOTSTRAP_RESAMPLES,
              seed: int = BOOTSTRAP_SEED) -> dict:
    """The fit of the seed-mean curve of `curves` ({compute: accuracy} per seed, with C = 0 the start value R0) and
    95% percentile intervals of A and B from `resamples` bootstrap resamples of the seeds (drawn with replacement,
    each resample's mean curve refitted; fixed `seed`). Returns {n_seeds, points, R0, A, B, C_mid, rmse, A_ci, B_ci,
    boot_ok, note}; A, B, C_mid are None and `note` says why when there is no fit."""
    mean = mean_curve(curves)
    out: dict = {"n_seeds": len(curves), "points": len(mean), "R0": mean.get(0.0), "A": None, "B": None,
                 "C_mid": None, "rmse": None, "A_ci": None, "B_ci": None, "boot_ok": 0, "note": ""}
    if len(mean) < MIN_POINTS:
        out["note"] = f"{len(mean)} points (< {MIN_POINTS}): no fit"
        return out
    if 0.0 not in mean:
        out["note"] = "no start value (C = 0): no fit"
        return out

    def fit(c: dict[float, float]) -> dict | None:
        return fit_curve(list(c), list(c.values()), c[0.0])

    main = fit(mean)
    if main is None:
        out["note"] = "fit failed"
        return out
    out |= {k: main[k] for k in ("A", "B", "C_mid", "rmse")}
    notes = []
    if len(mean) == MIN_POINTS:
        notes.append("3 parameters on 3 points after the start: no residual degrees of freedom")
    if main["C_mid"] > max(mean):
        notes.append("C_mid beyond the last point: A is an extrapolation")
    if main["C_mid"] < min(c for c in mean if c > 0):
        notes.append("C_mid before the first point: the rise is not resolved")
    if main["B"] >= 0.99 * B_MAX:
        notes.append(f"B at its bound {B_MAX:g}: a step, not a curve")
    if main["A"] <= 1e-6 or main["A"] >= 1 - 1e-6:
        notes.append("A at its bound")
    rng = np.random.default_rng(seed)
    boot_a, boot_b = [], []
    done: dict[tuple[int, ...], dict | None] = {}  # a resample's mean curve depends on which seeds, not their order
    for _ in range(resamples if len(curves) >= 2 else 0):
        pick = tuple(sorted(int(i) for i in rng.integers(0, len(curves), size=len(curves))))
        if pick not in done:
            done[pick] = fit(mean_curve([curves[i] for i in pick]))
        f = done[pick]
        if f is not None:
            boot_a.append(f["A"])
            boot_b.append(f["B"])
    out["boot_ok"] = len(boot_a)
    if boot_a:
        out["A_ci"] = tuple(float(v) for v in np.percentile(boot_a, [2.5, 97.5]))
        out["B_ci"] = tuple(float(v) for v in np.percentile(boot_b, [2.5, 97.5]))
    elif len(curves) < 2:
        notes.append("1 seed: no interval")
    out["note"] = "; ".join(notes)
    return out


def run_curve(curve: Sequence[dict], samples_per_step: float, extra: tuple[int, float] = (0, 0.0)
              ) -> dict[float, float]:
    """{RL samples: held-out greedy accuracy} of a run record's curve (rows with `step` and `val_greedy_acc`):
    samples = step x prompts_per_step x group_size (`samples_per_step`), plus `extra` = (after step, samples) drawn
    once between steps (rl.rejection's sampling: from that step on).

    >>> run_curve([{"step": 0, "val_greedy_acc": 0.5}, {"step": 2, "val_greedy_acc": 0.6}], 10, extra=(1, 5))
    {0.0: 0.5, 25.0: 0.6}
    """
    after, more = extra
    return {float(r.get("step", 0)) * samples_per_step + (more if after and r.get("step", 0) > after else 0.0):
            float(r["val_greedy_acc"]) for r in curve if r.get("val_greedy_acc") is not None}
