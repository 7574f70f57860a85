"""Health signals of a study's RL runs: per step, the share of groups whose rewards are all equal (no learning
signal), the clipped share of tokens, the sampled-token entropy, the KL to the reference, the response lengths, the
format rate and the gradient norm, as the RL stage logged them to MLflow (`rl/<key>`). A run's record keeps them as
its `health` curve; the report puts their early and late means side by side per variant, so an arm that wins or loses
can be read for why (collapsed entropy, flat groups, a drifting KL, truncated or shrinking responses).

The RL stage's DVC plot (`plots/rl/seed-<seed>.csv`) holds only a few of these keys; the full set is in the MLflow
store the stage logged to, under the run's study child (the stage runs nest under it). Records made before this
module can be filled in from the store afterwards: ``python -m dsmath.study health``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from dsmath.runtime import tracking
from dsmath.study.stats import mean

KEYS = ("zero_std_groups", "clip_frac", "entropy", "kl", "response_len_mean", "response_len_max", "truncated_rate",
        "format_rate", "grad_norm")
WINDOW = 10  # steps averaged at the start and at the end of a run


def rows_from_history(history: dict[str, Iterable[tuple[int, float]]]) -> list[dict]:
    """{key: [(step, value), ...]} -> one row per step, sorted: {"step": s, key: value, ...} (the last value of a
    step that was logged twice, e.g. by a resumed run).

    >>> rows_from_history({"kl": [(2, 0.5), (1, 0.1)], "entropy": [(1, 2.0)]})
    [{'step': 1, 'kl': 0.1, 'entropy': 2.0}, {'step': 2, 'kl': 0.5}]
    """
    by_step: dict[int, dict] = {}
    for key, points in history.items():
        for step, value in points:
            by_step.setdefault(int(step), {"step": int(step)})[key] = float(value)
    return [by_step[s] for s in sorted(by_step)]


def summary(curve: list[dict], window: int = WINDOW) -> dict[str, float | None]:
    """Per key, the mean over the first `window` steps (`<key>/start`) and over the last `window` (`<key>/end`)
    of one run's health curve; None where the key was never logged.

    >>> c = [{"step": s, "kl": float(s)} for s in range(1, 21)]
    >>> s = summary(c, window=5)
    >>> s["kl/start"], s["kl/end"], s["entropy/start"]
    (3.0, 18.0, None)
    """
    steps = sorted(curve, key=lambda r: r["step"])
    out: dict[str, float | None] = {}
    for key in KEYS:
        vals = [r[key] for r in steps if r.get(key) is not None and r[key] == r[key]]
        out[f"{key}/start"] = mean(vals[:window]) if vals else None
        out[f"{key}/end"] = mean(vals[-window:]) if vals else None
    return out


def variant_summary(runs: dict[int, dict], window: int = WINDOW,
                    cap: int | None = None) -> dict[str, float | None] | None:
    """The mean over a variant's seeds of :func:`summary` (seeds without a health curve left out), the longest
    response of any step of any seed (`longest_ever`: below the cap, no output was truncated) and, given the cap
    (rl.max_new_tokens), the share of steps (all seeds) in which some response reached it (`capped_steps`); None if
    none has a curve."""
    per_seed = [summary(r["health"], window) for r in runs.values() if r.get("health")]
    if not per_seed:
        return None
    longest = [x["response_len_max"] for r in runs.values() for x in r.get("health") or []
               if x.get("response_len_max") is not None]
    capped = None if cap is None or not longest else sum(x >= cap for x in longest) / len(longest)
    return {k: mean([s[k] for s in per_seed if s[k] is not None]) if any(s[k] is not None for s in per_seed)
            else None for k in per_seed[0]} | {"seeds": len(per_seed), "longest_ever": max(longest, default=None),
                                               "capped_steps": capped}


# ----------------------------------------------------------------------------------------------------------------
# the MLflow store


def read(child_id: str) -> list[dict]:
    """The health curve of the RL stage run nested under the study child `child_id` ([] if there is none). A run
    that was killed and resumed (its RL stage continuing from a checkpoint under a new child) logged its steps in
    several stage runs: those of the unfinished children of the same study, variant and seed right before this one
    (its killed attempts) are merged in, oldest first, so each step holds the value of the last attempt that ran
    it. A finished earlier run (another sitting, other code) is not an attempt of this one and stays out."""
    mlflow = tracking._mlflow()
    tags = mlflow.get_run(child_id).data.tags
    same = {k: tags[k] for k in ("dsmath.kind", "dsmath.study", "dsmath.variant", "dsmath.seed") if k in tags}
    if len(same) == 4:
        query = " and ".join(f"tags.`{k}` = '{v}'" for k, v in same.items())
        children = mlflow.search_runs(search_all_experiments=True, output_format="list", filter_string=query)
        start = mlflow.get_run(child_id).info.start_time or 0
        earlier = sorted((c for c in children if (c.info.start_time or 0) <= start and c.info.run_id != child_id),
                         key=lambda c: c.info.start_time or 0)
        ids = [child_id]
        for c in reversed(earlier):  # the unfinished attempts right before this one (a finished run ends the chain)
            if c.info.status == "FINISHED":
                break
            ids.insert(0, c.info.run_id)
    else:
        ids = [child_id]
    stage_runs = []
    for parent in ids:
        runs = mlflow.search_runs(search_all_experiments=True, output_format="list",
                                  filter_string=f"tags.mlflow.parentRunId = '{parent}'")
        stage_runs += sorted((r for r in runs if r.data.tags.get("dsmath.stage", "").startswith("rl")),
                             key=lambda r: r.info.start_time or 0)
    client = mlflow.MlflowClient()
    history: dict[str, list[tuple[int, float]]] = {k: [] for k in KEYS}
    for run in stage_runs:  # oldest first: a later attempt's value of a step wins
        for k in KEYS:
            history[k] += [(m.step, m.value) for m in
                           sorted(client.get_metric_history(run.info.run_id, f"rl/{k}"), key=lambda m: m.timestamp)]
    return rows_from_history({k: v for k, v in history.items() if v})


def find_child(study: str, variant: str, seed: int) -> str | None:
    """The newest finished study child of (variant, seed) in the MLflow store, by the tags the runner gives it."""
    mlflow = tracking._mlflow()
    runs = mlflow.search_runs(
        search_all_experiments=True, output_format="list",
        filter_string=(f"tags.`dsmath.kind` = 'study-run' and tags.`dsmath.study` = '{study}' and "
                       f"tags.`dsmath.variant` = '{variant}' and tags.`dsmath.seed` = '{seed}' and "
                       "attributes.status = 'FINISHED'"))
    return max(runs, key=lambda r: r.info.start_time or 0).info.run_id if runs else None


def backfill(study, on_line=print, variants: list[str] | None = None, seeds: list[int] | None = None) -> int:
    """Give every record of `study` (of `variants` x `seeds` when given) that has no health curve the one its run
    logged to the MLflow store (found by the run's study tags); returns how many records were filled. The record's
    key is left as it is."""
    from dsmath.study.spec import variant_params, write_record

    runs = study.runs(variants, seeds)
    if not runs:
        return 0
    tracking.setup(variant_params(study, *runs[0], study.profile).common.tracking)
    filled = 0
    for variant, seed in runs:
        path = study.result_path(variant, seed)
        if not path.exists():
            continue
        record = json.loads(path.read_text())
        if record.get("health"):
            continue
        child = record.get("mlflow_run_id") or find_child(study.name, variant, seed)
        curve = read(child) if child else []
        if curve:
            write_record(path, record | {"health": curve, "mlflow_run_id": child})
            filled += 1
        on_line(f"{variant} seed {seed}: " + (f"{len(curve)} steps" if curve else "no RL run found in the store"))
    return filled
