"""A study file: named variants (param overrides in dotted keys), the seeds each runs with, the figures and the
findings the report draws from them (`configs/study.yaml` is the default DeepSeekMath study).

Every variant is an overlay: `params.yaml` + the study's `shared` overrides (its scale) + the variant's own, merged by
the one loader (:func:`dsmath.config.merge`), so every default still lives in params.yaml. A study is validated as a
whole before anything runs: each variant x seed must give valid params.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from dsmath.config import Params, ParamsError, load_raw, merge, parse_params

FINDING_METRICS = ("greedy", "maj@k", "pass@k", "passk@k", "s_per_step", "peak_rss_mb", "trainer_state_mb")
# k: the largest; maj@k / pass@k over the n_samples of every test problem, passk@k the large-k pass@k of the subset
# (evaluate.passk_problems x passk_samples: Fig. 7 at k = 64)


@dataclass(frozen=True)
class Variant:
    name: str
    label: str
    overrides: dict[str, Any]


DEFAULT_EQUIVALENCE_MARGIN = 0.02  # a "matches" claim must be shown within +- 2 points (study file: equivalence_margin)


@dataclass(frozen=True)
class Finding:
    """A claim of the paper as a comparison of variant `a` with variant `b` (or with "sft", the SFT model `a` started
    from) on `metric`: `a` is better (`expect: better`; lower is better for costs) or no different (`expect: same`)."""

    claim: str
    source: str
    a: str
    b: str
    metric: str = "greedy"
    lower_is_better: bool = False
    expect: str = "better"


# switches added after records were made, left out of a run's key at their off value (where they change nothing),
# so the records made before a switch existed still match; switched on, they are in the key and the runs re-run
KEY_NEUTRAL_WHEN_OFF: tuple[tuple[str, str, object], ...] = (("rl", "share_prompts", False),
                                                             ("evaluate", "share_prompts", False),
                                                             ("rl", "threads", 0), ("evaluate", "threads", 0))


@dataclass(frozen=True)
class Cluster:
    """Where a study's runs go when they run on a Prefect work pool (the study file's `cluster:`; docs/study.md)."""

    pool: str | None = None  # the work pool (`--pool` / `make study POOL=...`); None: the runs run here
    remote: str | None = None  # DVC remote URL (directory, NFS, s3://...) every machine reaches; None: the project's
    resubmit: int = 2  # a run whose worker died (Prefect marks it CRASHED) is submitted again, at most this often
    silent_s: int = 150  # no heartbeat for this long: the run's worker is taken for dead (heartbeats every 30 s)


@dataclass(frozen=True)
class Study:
    name: str
    path: str
    seeds: list[int]
    targets: list[str]
    shared: dict[str, Any]
    variants: dict[str, Variant]
    figures: dict[str, list[str]] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    results: str = "study"
    report: str = "reports/study.md"
    profile: str = "params.yaml"  # the params file the variants overlay
    equivalence_margin: float = DEFAULT_EQUIVALENCE_MARGIN  # `expect: same` holds when difference +- 2 SE lies within
    pilot: tuple[str, str] | None = None  # the pilot's two arms (a, b): their runs' variance components plan MDEs
    code_root: str | None = None  # the DVC project whose dvc.yaml and code the code key reads (None: codekey's default)
    chain: list[str] = field(default_factory=list)  # stages shared by the runs, built once before them (default_chain)
    jobs: int = 1  # runs at once on this machine (each with cores / jobs threads); `--jobs` / `make study JOBS=N`
    cluster: Cluster = field(default_factory=lambda: Cluster())  # the runs on a Prefect work pool (`--pool`)

    def __post_init__(self) -> None:
        if not self.chain:
            object.__setattr__(self, "chain", default_chain(self.targets))

    def runs(self, variants: list[str] | None = None, seeds: list[int] | None = None) -> list[tuple[str, int]]:
        """(variant, seed) pairs to run, variant-major in the file's order (a subset when asked)."""
        unknown = sorted(set(variants or []) - set(self.variants))
        if unknown:
            raise ParamsError(f"study {self.name}: no variant {', '.join(unknown)} (has {', '.join(self.variants)})")
        return [(v, s) for v in self.variants if not variants or v in variants
                for s in self.seeds if not seeds or s in seeds]

    def variant_runs(self, variants: list[str] | None = None,
                     seeds: list[int] | None = None) -> list[tuple[str, list[int]]]:
        """(variant, its seeds) to run, in the file's order: :meth:`runs` grouped by variant."""
        grouped: dict[str, list[int]] = {}
        for v, s in self.runs(variants, seeds):
            grouped.setdefault(v, []).append(s)
        return list(grouped.items())

    def overrides(self, variant: str, seed: int) -> dict[str, Any]:
        """The dotted-key overrides of one run (what its key and record hold): shared, the variant's, its RL seed."""
        return self.exp_overrides(variant, [seed])

    def exp_overrides(self, variant: str, seeds: Sequence[int]) -> dict[str, Any]:
        """The overrides of the DVC experiment that runs `seeds` of `variant` together: one rl@<seed> stage per seed
        (a seed's stage does not depend on the others'), one evaluation of them all, the shared stages once."""
        return {**self.shared, **self.variants[variant].overrides, "common.rl_seeds": list(seeds)}

    def settings_key(self, variant: str, seed: int) -> str:
        """Identity of a run's settings (every param it runs with, its targets): the key records had before the code
        joined it (:meth:`run_key`), so the report still finds a record made by other code, and flags it stale."""
        params = variant_params(self, variant, seed, self.profile).model_dump()
        for section, key, off in KEY_NEUTRAL_WHEN_OFF:
            if params[section].get(key) == off:
                del params[section][key]
        text = json.dumps({"params": params, "targets": self.targets}, sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def code_key(self, variant: str, seed: int) -> str:
        """Identity of the code a run depends on: the hash of the code deps dvc.yaml lists for every stage the
        study's targets reach with the run's params (:func:`dsmath.study.codekey.study_code_hash`)."""
        from dsmath.study.codekey import study_code_hash

        params = variant_params(self, variant, seed, self.profile).model_dump()
        return study_code_hash(self.targets, params, Path(self.code_root) if self.code_root else None)

    def run_key(self, variant: str, seed: int) -> str:
        """Identity of a run: its settings (:meth:`settings_key`) and the code it depends on (:meth:`code_key`). A
        finished run whose key still matches is not run again; a change of its settings or of that code re-runs it."""
        text = f"{self.settings_key(variant, seed)}:{self.code_key(variant, seed)}"
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def exp_name(self, variant: str, seeds: Sequence[int]) -> str:
        """The name of the DVC experiment running `seeds` of `variant` (a valid git ref component)."""
        return re.sub(r"[^A-Za-z0-9_-]", "-", f"{self.name}-{variant}-{'-'.join(map(str, seeds))}")

    def result_path(self, variant: str, seed: int) -> Path:
        return Path(self.results) / "runs" / variant / f"seed-{seed}.json"


def default_chain(targets: list[str]) -> list[str]:
    """The stages every run of a study shares, built once before the runs: the SFT model and the targets that do
    not depend on the RL seed (the SFT evaluation)."""
    return list(dict.fromkeys(["sft", *(t for t in targets if not t.startswith(("rl", "evaluate@rl")))]))


def dotted_to_nested(overrides: dict[str, Any]) -> dict:
    """{'rl.beta': 0} -> {'rl': {'beta': 0}} (for :func:`dsmath.config.merge`)."""
    out: dict = {}
    for key, value in overrides.items():
        node = out
        *parents, leaf = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                raise ParamsError(f"{key}: {p} is overridden both as a value and as a section")
        node[leaf] = value
    return out


def apply(raw: dict, overrides: dict[str, Any]) -> dict:
    """A params mapping with dotted-key overrides merged in; a key naming no existing param is refused (a typo must
    not silently run the default)."""
    for key in overrides:
        node = raw
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                raise ParamsError(f"{key}: no such param in the profile")
            node = node[part]
    return merge(raw, dotted_to_nested(overrides))


def variant_params(study: Study, variant: str, seed: int, params_file: str | Path = "params.yaml") -> Params:
    """The validated params one run of the study gets."""
    try:
        return parse_params(apply(load_raw(params_file), study.overrides(variant, seed)))
    except ParamsError as err:
        raise ParamsError(f"study {study.name}, variant {variant}: {err}") from None


def _pilot(path: Path, value: Any, variants: dict) -> tuple[str, str] | None:
    """The study file's `pilot`: {a: variant, b: variant}, the two arms whose runs (the first sitting) measure the
    variance the study's MDEs are planned from; or absent."""
    if value is None:
        return None
    if not isinstance(value, dict) or set(value) != {"a", "b"} or not all(v in variants for v in value.values()):
        raise ParamsError(f"{path}: pilot must be {{a: <variant>, b: <variant>}}, two of the study's variants "
                          f"(the pilot's arms; got {value!r})")
    return str(value["a"]), str(value["b"])


def _jobs(path: Path, value: Any) -> int:
    """The study file's `jobs`: how many runs at once on one machine (a whole number >= 1)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ParamsError(f"{path}: jobs must be a whole number >= 1 (runs at once; got {value!r})")
    return value


def _cluster(path: Path, value: Any) -> Cluster:
    """The study file's `cluster:` mapping (pool, remote, resubmit, silent_s)."""
    value = value or {}
    if not isinstance(value, dict) or set(value) - {"pool", "remote", "resubmit", "silent_s"}:
        raise ParamsError(f"{path}: cluster has the keys pool, remote, resubmit, silent_s (got {value!r})")
    resubmit, silent = value.get("resubmit", Cluster.resubmit), value.get("silent_s", Cluster.silent_s)
    if isinstance(resubmit, bool) or not isinstance(resubmit, int) or resubmit < 0:
        raise ParamsError(f"{path}: cluster.resubmit must be a whole number >= 0 (got {resubmit!r})")
    if isinstance(silent, bool) or not isinstance(silent, int) or silent < 45:
        raise ParamsError(f"{path}: cluster.silent_s must be a whole number of seconds >= 45 (flow runs send a "
                          f"heartbeat every 30 s; got {silent!r})")
    text = lambda k: str(value[k]) if value.get(k) else None  # noqa: E731
    return Cluster(pool=text("pool"), remote=text("remote"), resubmit=resubmit, silent_s=silent)


def load_study(path: str | Path, params_file: str | Path = "params.yaml") -> Study:
    """Read and validate a study file (every variant x seed against `params_file`)."""
    p = Path(path)
    try:
        raw = yaml.safe_load(p.read_text()) or {}
    except FileNotFoundError:
        raise ParamsError(f"{p}: study file not found") from None
    known = {"name", "seeds", "targets", "shared", "variants", "figures", "findings", "results", "report",
             "equivalence_margin", "pilot", "chain", "jobs", "cluster"}
    if extra := sorted(set(raw) - known):
        raise ParamsError(f"{p}: unknown keys {', '.join(extra)} (allowed: {', '.join(sorted(known))})")
    variants = {}
    for name, v in (raw.get("variants") or {}).items():
        v = v or {}
        if extra := sorted(set(v) - {"label", "overrides"}):  # a misspelt key would otherwise be ignored
            raise ParamsError(f"{p}: variant {name}: unknown keys {', '.join(extra)} (allowed: label, overrides)")
        variants[name] = Variant(name, v.get("label", name), dict(v.get("overrides") or {}))
    if not variants:
        raise ParamsError(f"{p}: a study needs at least one variant")
    seeds = [int(s) for s in raw.get("seeds") or []]
    if not seeds:
        raise ParamsError(f"{p}: a study needs at least one seed")
    try:
        findings = [Finding(**f) for f in raw.get("findings") or []]
    except TypeError as err:
        raise ParamsError(f"{p}: a finding has keys claim, source, a, b, metric, lower_is_better, expect ({err})") \
            from None
    figures = {k: list(v) for k, v in (raw.get("figures") or {}).items()}
    study = Study(name=str(raw.get("name") or p.stem), path=str(p), seeds=seeds,
                  targets=list(raw.get("targets") or ["evaluate@sft", "evaluate@rl"]),
                  shared=dict(raw.get("shared") or {}), variants=variants, figures=figures, findings=findings,
                  results=str(raw.get("results") or f"study/{raw.get('name') or p.stem}"),
                  report=str(raw.get("report") or "reports/study.md"), profile=str(params_file),
                  equivalence_margin=float(raw.get("equivalence_margin", DEFAULT_EQUIVALENCE_MARGIN)),
                  pilot=_pilot(p, raw.get("pilot"), variants), chain=list(raw.get("chain") or []),
                  jobs=_jobs(p, raw.get("jobs", 1)), cluster=_cluster(p, raw.get("cluster")))
    for f in findings:
        for v in (f.a, f.b):
            if v not in variants and not (v == "sft" and v is f.b):
                raise ParamsError(f"{p}: finding {f.claim!r} names no variant {v!r}")
        if f.expect not in ("better", "same"):
            raise ParamsError(f"{p}: finding {f.claim!r}: expect must be better or same (got {f.expect!r})")
        if f.metric not in FINDING_METRICS:
            raise ParamsError(f"{p}: finding {f.claim!r}: metric must be one of {', '.join(FINDING_METRICS)}")
    for fig, names in figures.items():
        if missing := [v for v in names if v not in variants]:
            raise ParamsError(f"{p}: figure {fig} names no variant {', '.join(missing)}")
    for name in variants:
        for seed in seeds:
            variant_params(study, name, seed, params_file)
    return study


def write_record(out: Path, result: dict) -> None:
    """Write a run's result record at `out` (a study's :meth:`Study.result_path`)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, indent=1) + "\n")
    os.replace(tmp, out)  # atomic: a kill leaves either no record or a whole one
