"""Running a study: every variant x seed as one DVC experiment in the workspace, its results kept, resumable.

One run is ``dvc exp run -n <study>-<variant>-<seed> -S key=value ... evaluate@sft evaluate@rl``: DVC applies the
overrides to params.yaml, re-runs only the stages whose params or inputs they change (the rest come from the run
cache: the corpus, the models of the chain, a shared SFT evaluation) and records the experiment (`dvc exp show`).
The runner then copies what the report needs out of the workspace into ``<results>/runs/<variant>/seed-<seed>.json``
(the RL summary and curve, the evaluation metrics, per-problem correctness of the RL and the SFT model) and logs it
to the run's MLflow child. A run whose results file exists with the same settings key is not run again, so a killed
study resumes where it stopped; the stages of a killed run that had finished come back from DVC's run cache and a
killed RL stage resumes from its checkpoint.

The workspace's params.yaml, dvc.lock, metrics/ and plots/ are saved before the first run and restored after the last
(and after a killed study, by the next one), then ``dvc checkout`` puts the outputs of the restored dvc.lock back.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from dsmath import tracking
from dsmath.config import seed_dir
from dsmath.study.spec import Study, variant_params

STATE = Path(".dvc/tmp/study")  # the saved workspace of a running study (its presence: a study is under way)


class StudyRunFailed(RuntimeError):
    """A variant x seed's `dvc exp run` failed; the message carries the tail of its output."""


# ----------------------------------------------------------------------------------------------------------------
# the workspace a study borrows


def _saved_paths(params) -> list[Path]:
    return [Path("params.yaml"), Path("dvc.lock"), Path(params.common.paths.metrics), Path(params.common.paths.plots)]


def save_workspace(params) -> None:
    """Keep a copy of what the experiments overwrite, unless a killed study's copy is already there."""
    if (STATE / "saved").exists():
        return
    tmp = STATE / "saving"
    shutil.rmtree(tmp, ignore_errors=True)
    for p in _saved_paths(params):
        if p.is_dir():
            shutil.copytree(p, tmp / p)
        elif p.exists():
            (tmp / p).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(p, tmp / p)
    tmp.rename(STATE / "saved")


def recover_killed_experiment(dvc: str) -> None:
    """Undo what a `dvc exp run` killed mid-way leaves behind, which would make the next one fail: files DVC staged
    in the git index (unstaged again; the working tree is untouched), its executor refs (refs/exps/exec/*) and its
    temporary files (`dvc exp clean`). Called only when a study was killed (its saved workspace is still there)."""
    subprocess.run(["git", "reset", "-q"], capture_output=True, text=True)
    refs = subprocess.run(["git", "for-each-ref", "--format=%(refname)", "refs/exps/exec"], capture_output=True,
                          text=True).stdout.split()
    for ref in refs:
        subprocess.run(["git", "update-ref", "-d", ref], capture_output=True, text=True)
    subprocess.run([dvc, "exp", "clean"], capture_output=True, text=True)


def restore_params_file() -> None:
    """params.yaml as it was before the study (each run's overrides apply to it, never to the previous run's)."""
    shutil.copy2(STATE / "saved" / "params.yaml", "params.yaml")


def restore_workspace(params, dvc: str) -> None:
    """Put back params.yaml, dvc.lock, metrics/ and plots/, then the outputs dvc.lock names (from the cache)."""
    saved = STATE / "saved"
    if not saved.exists():
        return
    for p in _saved_paths(params):
        if (saved / p).is_dir():
            shutil.rmtree(p, ignore_errors=True)
            shutil.copytree(saved / p, p)
        elif (saved / p).exists():
            shutil.copy2(saved / p, p)
    subprocess.run([dvc, "checkout", "--quiet"], capture_output=True, text=True)  # outputs missing from the cache stay
    shutil.rmtree(STATE, ignore_errors=True)


# ----------------------------------------------------------------------------------------------------------------
# one variant x seed


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
    """`dvc exp run -n <name> -S key=value ... <targets>` (what a user types to run one variant by hand)."""
    sets = [a for k, v in overrides.items() for a in ("-S", f"{k}={hydra_value(v)}")]
    return [dvc, "exp", "run", "-n", name, *sets, *targets]


def run_experiment(name: str, overrides: dict[str, Any], targets: list[str], log_path: Path,
                   on_line: Callable[[str], None] = print, parent_run_id: str | None = None,
                   dvc: str | None = None) -> None:
    """One DVC experiment in the workspace (its stage runs nest under `parent_run_id` in MLflow); raises
    StudyRunFailed with the tail of its output when it fails."""
    env = os.environ | ({tracking.PARENT_ENV: parent_run_id} if parent_run_id else {})
    dvc = dvc or dvc_bin()
    if exp_ref(name):  # an earlier attempt under this name (killed before its record was kept): replaced
        subprocess.run([dvc, "exp", "remove", name], capture_output=True, text=True)
    cmd = exp_command(name, overrides, targets, dvc)
    on_line(" ".join(["dvc", *cmd[1:]]))
    code, lines = _stream(cmd, log_path, on_line, env)
    if code != 0:
        raise StudyRunFailed(f"{name}: dvc exp run failed (exit {code}):\n" + "\n".join(lines[-20:]))


def exp_ref(name: str) -> str | None:
    """The git ref of the DVC experiment `name` (refs/exps/<baseline>/<name>), if it exists."""
    out = subprocess.run(["git", "for-each-ref", "--format=%(refname) %(objectname)", "refs/exps"],
                         capture_output=True, text=True).stdout
    for line in out.splitlines():
        ref, _, sha = line.partition(" ")
        if ref.rsplit("/", 1)[-1] == name:
            return sha
    return None


def _stream(cmd: list[str], log_path: Path, on_line: Callable[[str], None], env: dict) -> tuple[int, list[str]]:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    lines: list[str] = []
    with log_path.open("w") as log, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                                     text=True, bufsize=1, env=env) as proc:
        for line in proc.stdout:
            log.write(line)
            lines.append(line.rstrip("\n"))
            on_line(line.rstrip("\n"))
    return proc.returncode, lines


def _read_csv(path: Path) -> list[dict]:
    if not path.exists():
        return []
    with path.open() as f:
        return [{k: float(v) for k, v in row.items() if v not in ("", None)} for row in csv.DictReader(f)]


def problem_table(predictions: Path, timeout_s: float) -> dict[str, dict[str, list]]:
    """{mode: {id, greedy, maj, pass}} over the synthetic test problems of a predictions file: 0/1 per problem for
    greedy, maj@n (vote over all n samples) and pass@n (any sample right), in the file's order."""
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
    return {m: t if t["maj"] else {k: v for k, v in t.items() if k not in ("maj", "pass")} for m, t in out.items()}


def collect(study: Study, variant: str, seed: int, params) -> dict:
    """What one finished run left in the workspace, as the study's result record."""
    paths, name = params.common.paths, seed_dir(seed)

    def read(path: Path) -> dict:
        return json.loads(path.read_text()) if path.exists() else {}

    timeout = params.rewards.equivalence_timeout_s
    rl_eval = read(Path(paths.eval) / "rl" / name / "metrics.json")
    sft_eval = read(Path(paths.metrics) / "eval" / "sft.json")
    keep = lambda m: {k: v for k, v in m.items() if k.startswith(("synthetic/", "val/synthetic/"))}  # noqa: E731
    return {
        "study": study.name, "variant": variant, "label": study.variants[variant].label, "seed": seed,
        "key": study.run_key(variant, seed), "exp_name": study.exp_name(variant, seed),
        "overrides": study.overrides(variant, seed), "mode": params.rl.mode, "algorithm": params.rl.algorithm,
        "rl": read(Path(paths.metrics) / "rl" / f"{name}.json"),
        "curve": _read_csv(Path(paths.plots) / "rl" / f"{name}.csv"),
        "eval": keep(rl_eval), "sft_eval": keep(sft_eval), "sft": read(Path(paths.metrics) / "sft.json"),
        "problems": {"rl": problem_table(Path(paths.eval) / "rl" / name / "predictions.jsonl", timeout),
                     "sft": problem_table(Path(paths.eval) / "sft" / "predictions.jsonl", timeout)},
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
    run.set_tags({"dvc.exp": result["exp_name"], "dvc.exp_ref": result.get("exp_ref") or "",
                  "dsmath.run_key": result["key"]})


def run_one(study: Study, variant: str, seed: int, parent: tracking.StageRun | None, dvc: str,
            on_line: Callable[[str], None] = print, machine: dict | None = None) -> dict:
    """Run (or skip, when its results are current) one variant x seed; returns its result record."""
    out = study.result_path(variant, seed)
    if out.exists() and json.loads(out.read_text()).get("key") == study.run_key(variant, seed):
        on_line(f"study {study.name}: {variant} seed {seed} done before, kept")
        return json.loads(out.read_text())
    restore_params_file()
    params = variant_params(study, variant, seed, study.profile)
    tags = {"dsmath.kind": "study-run", "dsmath.study": study.name, "dsmath.variant": variant,
            "dsmath.seed": str(seed)}
    tracking.end_unfinished(params, tags)  # the child of a killed attempt
    child = tracking.open_run(params, f"{variant} seed {seed}", tags, parent.run_id if parent else None)
    on_line(f"study {study.name}: {variant} seed {seed}")
    t0 = time.perf_counter()
    try:  # the stage runs nest under this variant x seed's run
        run_experiment(study.exp_name(variant, seed), study.overrides(variant, seed), study.targets,
                       Path(study.results) / "logs" / f"{variant}-seed-{seed}.log", on_line, child.run_id, dvc)
    except StudyRunFailed:
        tracking.close_run(child, ok=False)
        raise
    tracking.tag_children_from_lock(child.run_id)
    result = collect(study, variant, seed, params) | {"wall_s": round(time.perf_counter() - t0, 1),
                                                      "exp_ref": exp_ref(study.exp_name(variant, seed)),
                                                      "git_commit": tracking.git_tags()["git.commit"],
                                                      **(machine or {})}
    log_child(child, result, params)
    tracking.close_run(child)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, indent=1) + "\n")
    os.replace(tmp, out)  # atomic: a kill leaves either no record or a whole one
    return result


def open_parent(study: Study, params) -> tracking.StageRun:
    """The study's MLflow parent run (the same one again when a killed study resumes)."""
    return tracking.open_run(params, f"study {study.name}", {"dsmath.kind": "study", "dsmath.study": study.name},
                             reuse=True)


def machine_record() -> dict:
    """The machine a run ran on: its fp32 matmul rate next to every time (machines here differ by ~2x)."""
    from dsmath.train.flops import matmul_flops_per_s

    return {"matmul_gflops": round(matmul_flops_per_s() / 1e9, 1), "cpu": tracking.cpu_name()}


def dvc_bin() -> str:
    return str(Path(sys.executable).with_name("dvc"))


@contextlib.contextmanager
def study_session(study: Study) -> Iterator[tuple[Study, tracking.StageRun, dict, str]]:
    """The frame of a study's runs: the workspace saved (and restored afterwards, even on failure), the MLflow parent
    open (FINISHED on success, FAILED otherwise). Yields (the study, its variants overlaying the saved params.yaml
    while the experiments rewrite the real one; the parent run; the machine record; the dvc executable)."""
    from dsmath.config import load_params

    resumed = (STATE / "saved").exists()
    params = load_params(STATE / "saved" / "params.yaml" if resumed else "params.yaml")
    dvc = dvc_bin()
    if resumed:  # a killed study: clear what its experiment left, put the workspace back, then save it again
        recover_killed_experiment(dvc)
        restore_workspace(params, dvc)
    save_workspace(params)
    study = dataclasses.replace(study, profile=str(STATE / "saved" / "params.yaml"))
    parent = open_parent(study, params)
    parent.set_tags({"dsmath.study_file": study.path})
    ok = False
    try:
        yield study, parent, machine_record(), dvc
        ok = True
    finally:
        restore_workspace(params, dvc)
        tracking.close_run(parent, ok=ok)


def run_study(study: Study, variants: list[str] | None = None, seeds: list[int] | None = None,
              on_line: Callable[[str], None] = print, report: bool = True) -> list[dict]:
    """Every (selected) variant x seed not run yet, then the report (`make study`). A failed run does not stop the
    others: the report is written from what finished and StudyRunFailed names the failures at the end."""
    from dsmath.study.report import build_study_report

    with study_session(study) as (study, parent, machine, dvc):
        results, failed = [], []
        for v, s in study.runs(variants, seeds):
            try:
                results.append(run_one(study, v, s, parent, dvc, on_line, machine))
            except StudyRunFailed as err:
                on_line(f"error: {err}")
                failed.append(str(err))
        if report:
            build_study_report(study, parent)
        if failed:
            raise StudyRunFailed(f"{len(failed)} run(s) failed (the next `make study` retries them):\n"
                                 + "\n".join(failed))
    return results
