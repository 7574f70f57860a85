"""Running a study: every variant x seed in a workspace of its own, N at a time, its record kept, resumable.

A run (one variant, one seed) is ``dvc repro`` in its workspace (:mod:`dsmath.study.workspace`: a copy of
the project with params.yaml = the study's profile + shared + variant overrides + ``common.rl_seeds: [seed]``, DVC on
the project's cache). The user's params.yaml, dvc.lock, metrics/ and plots/ are never touched, killed or not.

1. **The shared chain, once.** Before any run, one at a time, a chain workspace per distinct chain (variants whose
   chain stages get the same params share one; `sft.init: base` makes another) starts from the project's outputs
   and reproduces the study's ``chain`` (default: the SFT model and its evaluation): up to date, nothing runs;
   otherwise DVC builds what changed. Chain workspaces are kept after the study (named by that params hash), so the
   next study with the same chain finds it built even where it differs from the project's (a study's `shared`
   overrides may touch the SFT stage); DVC re-runs in it what code changes touch. Delete them to reclaim the space.
2. **The runs, N at a time** (``jobs``): each reproduces the study's targets other than the chain in its workspace
   (the chain's outputs linked from the variant's chain workspace; ``rl@<seed>`` and ``evaluate@rl`` run). ``jobs``
   is how many run at once, never what they compute: a run's torch threads are params (``rl.threads``,
   ``evaluate.threads``, set alike for all runs in the study's ``shared``), because the thread count changes the
   float reduction order and with it an RL run's draws.

After a run the runner copies what the report needs out of its workspace into ``<results>/runs/<variant>/
seed-<seed>.json`` (the RL summary and curve, the evaluation metrics, per-problem correctness of the RL and SFT
models), logs it to the run's MLflow child (under which its stage runs nest) and deletes the workspace. A run whose
record exists with the same key (settings and code) is not run again, so a killed study resumes where it stopped: a
killed run's workspace is still there, its finished stages are in its dvc.lock (or DVC's run cache) and a killed RL
stage resumes from its checkpoint.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import json
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from dsmath.config import load_raw, seed_dir
from dsmath.runtime import provenance, tracking
from dsmath.study import health, workspace
from dsmath.study.spec import Study, variant_params, write_record

_MLFLOW = threading.Lock()  # runs finish on several threads; their MLflow calls go one at a time


class StudyRunFailed(RuntimeError):
    """A variant x seed's `dvc repro` failed; the message carries the tail of its output."""


# ----------------------------------------------------------------------------------------------------------------
# running DVC in a workspace


def hydra_value(value: Any) -> str:
    """A params value in the override grammar of `dvc exp run -S` (Hydra's)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list | tuple):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{hydra_value(v)}" for k, v in value.items()) + "}"
    text = str(value)
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_./@-]*", text) and text not in ("true", "false", "null"):
        return text
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def exp_command(name: str, overrides: dict[str, Any], targets: list[str], dvc: str) -> list[str]:
    """`dvc exp run -n <name> -S key=value ... <targets>`: one run reproduced by hand in the project (a DVC
    experiment; the study itself runs it in a workspace of its own, :mod:`dsmath.study.workspace`)."""
    sets = [a for k, v in overrides.items() for a in ("-S", f"{k}={hydra_value(v)}")]
    return [dvc, "exp", "run", "-n", name, *sets, *targets]


def _stream(cmd: list[str], log_path: Path, on_line: Callable[[str], None], env: dict,
            cwd: Path | None = None) -> tuple[int, list[str]]:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    lines: list[str] = []
    with log_path.open("a") as log, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                                     text=True, bufsize=1, env=env, cwd=cwd) as proc:
        for line in proc.stdout:
            log.write(line)
            log.flush()  # the log follows the run (`tail -f`), also where a worker's output goes elsewhere
            lines.append(line.rstrip("\n"))
            on_line(line.rstrip("\n"))
    return proc.returncode, lines


def _read_csv(path: Path) -> list[dict]:
    if not path.exists():
        return []
    with path.open() as f:
        return [{k: float(v) for k, v in row.items() if v not in ("", None)} for row in csv.DictReader(f)]


def problem_table(predictions: Path, timeout_s: float) -> dict[str, dict[str, list]]:
    """{mode: {id, greedy, maj, pass[, passk]}} over the synthetic test problems of a predictions file: 0/1 per
    problem for greedy, maj@n (vote over all n samples) and pass@n (any sample right), in the file's order; `passk`:
    the pass@k subset's {id, right, samples} (right samples of the samples drawn, per problem), where it was drawn."""
    from dsmath.evaluation.metrics import majority_answer
    from dsmath.rewards.equivalence import is_equivalent

    def eq(a, b):
        return is_equivalent(a, b, timeout_s)

    out: dict[str, dict[str, list]] = {}
    if not predictions.exists():
        return out
    for line in predictions.read_text().splitlines():
        r = json.loads(line)
        if r["dataset"] != "synthetic":
            continue
        t = out.setdefault(r["mode"], {"id": [], "greedy": [], "maj": [], "pass": []})
        t["id"].append(r["id"])
        t["greedy"].append(int(bool(r["greedy_correct"])))
        if "sample_correct" in r:
            voted = majority_answer(r["sample_answers"], eq)
            t["maj"].append(int(voted is not None and eq(voted, r["gold"])))
            t["pass"].append(int(any(r["sample_correct"])))
        if "passk_right" in r:  # the pass@k subset: right samples of passk_samples
            k = t.setdefault("passk", {"id": [], "right": [], "samples": []})
            k["id"].append(r["id"])
            k["right"].append(int(r["passk_right"]))
            k["samples"].append(int(r["passk_samples"]))
    return {m: t if t["maj"] else {k: v for k, v in t.items() if k not in ("maj", "pass")} for m, t in out.items()}


def collect(study: Study, variant: str, seed: int, params, name: str, ws: Path, sft_problems: dict) -> dict:
    """What a finished run left in its workspace `ws`, as the study's result record (`sft_problems`: the
    :func:`problem_table` of its chain's SFT model, shared by every run of that chain)."""
    paths, sd = params.common.paths, seed_dir(seed)

    def read(path: Path) -> dict:
        return json.loads(path.read_text()) if path.exists() else {}

    timeout = params.rewards.equivalence_timeout_s
    rl_eval = read(ws / paths.eval / "rl" / sd / "metrics.json")
    sft_eval = read(ws / paths.metrics / "eval" / "sft.json")
    keep = lambda m: {k: v for k, v in m.items() if k.startswith(("synthetic/", "val/synthetic/"))}  # noqa: E731
    return {
        "study": study.name, "variant": variant, "label": study.variants[variant].label, "seed": seed,
        "key": study.run_key(variant, seed), "settings_key": study.settings_key(variant, seed),
        "code_key": study.code_key(variant, seed), "run_name": name,
        "overrides": study.overrides(variant, seed), "mode": params.rl.mode, "algorithm": params.rl.algorithm,
        "rl": read(ws / paths.metrics / "rl" / f"{sd}.json"),
        "curve": _read_csv(ws / paths.plots / "rl" / f"{sd}.csv"),
        "eval": keep(rl_eval), "sft_eval": keep(sft_eval), "sft": read(ws / paths.metrics / "sft.json"),
        "sft_model": workspace.out_hash(ws / "dvc.lock", f"{paths.models}/sft"),  # which SFT model RL started from
        "problems": {"rl": problem_table(ws / paths.eval / "rl" / sd / "predictions.jsonl", timeout),
                     "sft": sft_problems},
    }


def log_child(run: tracking.StageRun, result: dict, params) -> None:
    """The variant x seed's MLflow child: its curves by step and its evaluation and RL summary metrics."""
    for row in result["curve"]:
        step = int(row.get("step", 0))
        run.log_metrics({f"rl/{k}": v for k, v in row.items() if k != "step"}, step=step)
    run.log_metrics({f"eval/{k}": v for k, v in result["eval"].items()})
    run.log_metrics({f"sft_eval/{k}": v for k, v in result["sft_eval"].items()})
    run.log_metrics({f"rl_summary/{k}": v for k, v in result["rl"].items() if isinstance(v, int | float)})
    run.log_metrics({"study/wall_s": result["wall_s"]})
    run.log_params({"overrides": {k: json.dumps(v) for k, v in result["overrides"].items()},
                    "rl": params.rl.model_dump(), "sft.init": params.sft.init,
                    "evaluate.datasets": params.evaluate.datasets.model_dump()})
    run.set_tags({"dsmath.run_name": result["run_name"], "dsmath.run_key": result["key"],
                  "dsmath.threads": str(result.get("threads") or params.common.num_threads)})


def current_record(study: Study, variant: str, seed: int) -> dict | None:
    """The kept record of a variant x seed if its key (settings and code) still matches (then it is not run again)."""
    out = study.result_path(variant, seed)
    if not out.exists():
        return None
    record = json.loads(out.read_text())
    return record if record.get("key") == study.run_key(variant, seed) else None


def open_parent(study: Study, params) -> tracking.StageRun:
    """The study's MLflow parent run (the same one again when a killed study resumes)."""
    return tracking.open_run(params, f"study {study.name}", {"dsmath.kind": "study", "dsmath.study": study.name},
                             reuse=True)


def machine_record() -> dict:
    """The machine a run ran on: its fp32 matmul rate next to every time (machines here differ by ~2x)."""
    from dsmath.train.flops import matmul_flops_per_s

    return {"matmul_gflops": round(matmul_flops_per_s() / 1e9, 1), "cpu": provenance.cpu_name()}


def dvc_bin() -> str:
    return str(Path(sys.executable).with_name("dvc"))


# ----------------------------------------------------------------------------------------------------------------
# a study: the shared chain, then the runs


@dataclasses.dataclass
class Runner:
    """One study's runs from the project at `source` (the current directory): their workspaces, their MLflow
    children under `parent`, the machine record every record carries."""

    study: Study
    parent: tracking.StageRun | None = None
    source: Path = dataclasses.field(default_factory=Path.cwd)
    on_line: Callable[[str], None] = print
    machine: dict = dataclasses.field(default_factory=dict)
    dvc: str = dataclasses.field(default_factory=dvc_bin)
    jobs: int = 1
    remote: str | None = None  # the study's DVC remote (runs on a work pool), set in every workspace it makes

    def __post_init__(self) -> None:
        if self.remote and "://" not in self.remote:  # a directory: the same for every workspace (and machine)
            self.remote = str(Path(self.remote).expanduser().resolve())
        self.profile_raw = load_raw(self.study.profile)
        self.cache_dir = workspace.dvc_cache_dir(self.source, self.dvc)
        # what a run reproduces: the targets not in the chain (the chain's outputs are in its workspace already;
        # `evaluate@sft` lists common.rl_seeds among its params, so reproduced in a one-seed workspace it would
        # run again for every seed)
        self.run_targets = [t for t in self.study.targets if t not in self.study.chain] or list(self.study.targets)
        self._sft_problems: dict[str, dict] = {}  # chain workspace -> its SFT model's problem table (read once)

    def name(self, variant: str, seed: int) -> str:
        return self.study.exp_name(variant, [seed])

    def log_path(self, name: str) -> Path:
        return Path(self.study.results) / "logs" / f"{name}.log"

    def dvc_command(self, ws: Path, args: list[str], name: str, parent_id: str | None = None) -> None:
        """`dvc <args>` in the workspace, its output streamed and logged; StudyRunFailed with its tail when it fails."""
        prefix = f"[{name}] " if self.jobs > 1 else ""
        self.on_line(f"{prefix}dvc {' '.join(args)}   (in {ws.relative_to(self.source)})")
        code, lines = _stream([self.dvc, *args], self.log_path(name), lambda line: self.on_line(prefix + line),
                              workspace.run_env(parent_id), cwd=ws)
        if code != 0:
            raise StudyRunFailed(f"{name}: dvc {args[0]} failed (exit {code}):\n" + "\n".join(lines[-20:]))

    def repro(self, ws: Path, targets: list[str], name: str, parent_id: str | None) -> None:
        """`dvc repro <targets>` in the workspace (its stage runs nest under the MLflow run `parent_id`)."""
        self.dvc_command(ws, ["repro", *targets], name, parent_id)

    def chain_overrides(self, variant: str) -> dict[str, Any]:
        """The overrides a variant's chain is built with: the variant's, with the study's first seed (the chain
        stages do not read it, but `evaluate@sft` lists common.rl_seeds among its params)."""
        return self.study.overrides(variant, self.study.seeds[0])

    def chain_name(self, variant: str) -> str:
        """The chain workspace of `variant`, shared by every variant whose chain stages get the same params."""
        from dsmath.study.codekey import stages_params_hash

        params = variant_params(self.study, variant, self.study.seeds[0], self.study.profile).model_dump()
        key = stages_params_hash(self.study.chain, params, self.source)
        return f"{self.study.exp_name('chain', [])}{key[:10]}"

    def workspace(self, variant: str, seed: int) -> Path:
        """The run's workspace, its chain's outputs taken from the variant's chain workspace."""
        chain_ws = self.source / workspace.ROOT / self.chain_name(variant)
        return workspace.prepare(self.source, self.name(variant, seed), self.profile_raw,
                                 self.study.overrides(variant, seed), self.cache_dir, chain_ws, self.study.chain,
                                 self.remote)

    def build_chain(self, variant: str) -> Path:
        """The study's chain (corpus ... SFT and its evaluation) for `variant`, in a workspace of its own that starts
        from the project's outputs: up to date there, nothing runs; else DVC builds what changed (all the machine's
        threads: nothing else runs yet). The runs of every variant with the same chain params take it from there."""
        name = self.chain_name(variant)  # kept after the study: the next one finds it up to date
        self.on_line(f"study {self.study.name}: {variant}: the shared chain ({', '.join(self.study.chain)}) in {name}")
        ws = workspace.prepare(self.source, name, self.profile_raw, self.chain_overrides(variant), self.cache_dir,
                               self.source, self.study.chain, self.remote)
        self.repro(ws, self.study.chain, name, self.parent.run_id if self.parent else None)
        return ws

    def run_tags(self, variant: str, seed: int) -> dict[str, str]:
        return {"dsmath.kind": "study-run", "dsmath.study": self.study.name, "dsmath.variant": variant,
                "dsmath.seed": str(seed)}

    def open_child(self, variant: str, seed: int, end_killed: bool = True) -> tracking.StageRun:
        """The variant x seed's MLflow child under the study's parent; `end_killed`: a child a killed attempt left
        RUNNING is marked KILLED first (a resubmission on a pool ends its crashed attempt's child itself)."""
        params = variant_params(self.study, variant, seed, self.study.profile)
        tags = self.run_tags(variant, seed)
        with _MLFLOW:
            if end_killed:
                tracking.end_unfinished(params, tags)  # the run of a killed attempt
            return tracking.open_run(params, f"{variant} seed {seed}", tags,
                                     self.parent.run_id if self.parent else None)

    def record(self, variant: str, seed: int, ws: Path, child: tracking.StageRun, wall: float) -> dict:
        """A finished run's record from its workspace `ws`, logged to its MLflow child (left open)."""
        params = variant_params(self.study, variant, seed, self.study.profile)
        with _MLFLOW:
            tracking.tag_children_from_lock(child.run_id, ws / "dvc.lock")
            chain = self.chain_name(variant)
            if chain not in self._sft_problems:  # the same SFT predictions for every run of the chain
                self._sft_problems[chain] = problem_table(ws / params.common.paths.eval / "sft" / "predictions.jsonl",
                                                          params.rewards.equivalence_timeout_s)
            result = collect(self.study, variant, seed, params, self.name(variant, seed), ws,
                             self._sft_problems[chain]) | {
                "health": health.read(child.run_id), "mlflow_run_id": child.run_id,
                "wall_s": round(wall, 1), "threads": params.rl.threads or params.common.num_threads, "jobs": self.jobs,
                "git_commit": provenance.git_tags()["git.commit"], **self.machine}
            log_child(child, result, params)
        return result

    def run(self, variant: str, seed: int) -> dict:
        """One variant x seed in its workspace: its record (also written to the results folder and MLflow)."""
        child = self.open_child(variant, seed)
        self.on_line(f"study {self.study.name}: {variant} seed {seed}")
        t0 = time.perf_counter()
        try:
            ws = self.workspace(variant, seed)
            self.repro(ws, self.run_targets, self.name(variant, seed), child.run_id)  # stage runs nest under it
        except Exception:
            with _MLFLOW:
                tracking.close_run(child, ok=False)
            raise
        result = self.record(variant, seed, ws, child, time.perf_counter() - t0)
        with _MLFLOW:
            tracking.close_run(child)
        write_record(self.study.result_path(variant, seed), result)
        workspace.remove(ws)
        return result

    def run_all(self, runs: list[tuple[str, int]]) -> tuple[list[dict], list[str]]:
        """`runs` (variant, seed): kept records as they are, the chain of each variant with work once, then the rest
        `jobs` at a time. Returns (records in the order of `runs`, failures); a failure does not stop the others."""
        records, failed = {}, []
        for v, s in runs:
            if (kept := current_record(self.study, v, s)) is not None:
                self.on_line(f"study {self.study.name}: {v} seed {s} done before, kept")
                records[v, s] = kept
        todo = [r for r in runs if r not in records]
        chains = {v: self.chain_name(v) for v in dict.fromkeys(v for v, _ in todo)}
        built: set[str] = set()
        for v, name in chains.items():  # each distinct chain once, before any run
            if name in built or any(f.startswith(f"{name}:") for f in failed):
                continue
            try:
                self.build_chain(v)
                built.add(name)
            except StudyRunFailed as err:
                self.on_line(f"error: {err}")
                failed.append(str(err))
        todo = [(v, s) for v, s in todo if chains[v] in built]
        with ThreadPoolExecutor(max_workers=max(1, self.jobs)) as pool:
            futures = {pool.submit(self.run, v, s): (v, s) for v, s in todo}
            for fut in as_completed(futures):
                try:
                    records[futures[fut]] = fut.result()
                except StudyRunFailed as err:
                    self.on_line(f"error: {err}")
                    failed.append(str(err))
        return [records[r] for r in runs if r in records], failed


@contextlib.contextmanager
def study_session(study: Study, jobs: int = 1, on_line: Callable[[str], None] = print,
                  remote: str | None = None) -> Iterator[Runner]:
    """The frame of a study's runs: its MLflow parent open (FINISHED on success, FAILED otherwise) and a Runner."""
    from dsmath.config import load_params

    params = load_params(study.profile)
    parent = open_parent(study, params)
    parent.set_tags({"dsmath.study_file": study.path, "dsmath.jobs": str(jobs)})
    ok = False
    try:
        yield Runner(study, parent, on_line=on_line, machine=machine_record(), jobs=jobs, remote=remote)
        ok = True
    finally:
        tracking.close_run(parent, ok=ok)


def run_study(study: Study, variants: list[str] | None = None, seeds: list[int] | None = None,
              on_line: Callable[[str], None] = print, report: bool = True, jobs: int = 1) -> list[dict]:
    """Every (selected) variant x seed not run yet, `jobs` at a time, then the report (`make study`). A failed run
    does not stop the others: the report is written from what finished and StudyRunFailed names the failures."""
    from dsmath.study.report import build_study_report

    with study_session(study, jobs, on_line) as runner:
        results, failed = runner.run_all(study.runs(variants, seeds))
        if report:
            build_study_report(study, runner.parent)
        if failed:
            raise StudyRunFailed(f"{len(failed)} run(s) failed (the next `make study` retries them):\n"
                                 + "\n".join(failed))
    return results
