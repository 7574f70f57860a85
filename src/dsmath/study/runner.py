"""Running a study: each variant's seeds as one DVC experiment in the workspace, its results kept, resumable.

One experiment is ``dvc exp run -n <study>-<variant>-<seeds> -S key=value ... -S common.rl_seeds=[...] evaluate@sft
evaluate@rl``: DVC applies the overrides to params.yaml, re-runs only the stages whose params or inputs they change
(the rest come from the run cache: the corpus, the models of the chain, a shared SFT evaluation), runs one rl@<seed>
stage per seed and one evaluation of them all, and records the experiment (`dvc exp show`). The runner then copies
what the report needs out of the workspace into ``<results>/runs/<variant>/seed-<seed>.json``, one record per seed
(the RL summary and curve, the evaluation metrics, per-problem correctness of the RL and the SFT model), and logs
each to its MLflow child. A seed whose record exists with the same settings key is not run again, so a killed study
resumes where it stopped; the stages of a killed experiment that had finished come back from DVC's run cache and a
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

from dsmath.config import seed_dir
from dsmath.runtime import tracking
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


def collect(study: Study, variant: str, seed: int, params, exp_name: str, sft_problems: dict) -> dict:
    """What one seed of a finished experiment left in the workspace, as the study's result record (`sft_problems`:
    the SFT model's :func:`problem_table`, shared by the experiment's seeds)."""
    paths, name = params.common.paths, seed_dir(seed)

    def read(path: Path) -> dict:
        return json.loads(path.read_text()) if path.exists() else {}

    timeout = params.rewards.equivalence_timeout_s
    rl_eval = read(Path(paths.eval) / "rl" / name / "metrics.json")
    sft_eval = read(Path(paths.metrics) / "eval" / "sft.json")
    keep = lambda m: {k: v for k, v in m.items() if k.startswith(("synthetic/", "val/synthetic/"))}  # noqa: E731
    return {
        "study": study.name, "variant": variant, "label": study.variants[variant].label, "seed": seed,
        "key": study.run_key(variant, seed), "settings_key": study.settings_key(variant, seed),
        "code_key": study.code_key(variant, seed), "exp_name": exp_name,
        "overrides": study.overrides(variant, seed), "mode": params.rl.mode, "algorithm": params.rl.algorithm,
        "rl": read(Path(paths.metrics) / "rl" / f"{name}.json"),
        "curve": _read_csv(Path(paths.plots) / "rl" / f"{name}.csv"),
        "eval": keep(rl_eval), "sft_eval": keep(sft_eval), "sft": read(Path(paths.metrics) / "sft.json"),
        "problems": {"rl": problem_table(Path(paths.eval) / "rl" / name / "predictions.jsonl", timeout),
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
    run.set_tags({"dvc.exp": result["exp_name"], "dvc.exp_ref": result.get("exp_ref") or "",
                  "dsmath.run_key": result["key"]})


def current_record(study: Study, variant: str, seed: int) -> dict | None:
    """The kept record of a variant x seed if its key (settings and code) still matches (then it is not run again)."""
    out = study.result_path(variant, seed)
    if not out.exists():
        return None
    record = json.loads(out.read_text())
    return record if record.get("key") == study.run_key(variant, seed) else None


def run_variant(study: Study, variant: str, seeds: list[int], parent: tracking.StageRun | None, dvc: str,
                on_line: Callable[[str], None] = print, machine: dict | None = None) -> list[dict]:
    """The seeds of one variant not run yet, as *one* DVC experiment (``common.rl_seeds`` = those seeds: an
    rl@<seed> stage each, one evaluate@rl over them, the shared stages once); returns every seed's record.

    MLflow: the experiment's stage runs nest under one run of the variant (kind ``study-exp``); each seed gets its
    own child of the study's parent (kind ``study-run``: curves, evaluation, the experiment's name and ref), so the
    compare view lines seeds and variants up. A seed's results do not depend on which seeds share its experiment.
    """
    kept = {s: r for s in seeds if (r := current_record(study, variant, s)) is not None}
    for s in kept:
        on_line(f"study {study.name}: {variant} seed {s} done before, kept")
    todo = [s for s in seeds if s not in kept]
    if not todo:
        return [kept[s] for s in seeds]
    restore_params_file()
    params = {s: variant_params(study, variant, s, study.profile) for s in todo}
    first = params[todo[0]]
    name, pid = study.exp_name(variant, todo), parent.run_id if parent else None
    tags = {"dsmath.study": study.name, "dsmath.variant": variant}
    seed_tags = {s: {"dsmath.kind": "study-run", **tags, "dsmath.seed": str(s)} for s in todo}
    exp_tags = {"dsmath.kind": "study-exp", **tags}
    for t in (exp_tags, *seed_tags.values()):
        tracking.end_unfinished(first, t)  # the runs of a killed attempt
    exp_run = tracking.open_run(first, f"{variant}: dvc exp {name}", exp_tags | {"dvc.exp": name}, pid)
    children = {s: tracking.open_run(params[s], f"{variant} seed {s}", seed_tags[s], pid) for s in todo}
    on_line(f"study {study.name}: {variant} seed{'s' if len(todo) > 1 else ''} {', '.join(map(str, todo))}")
    t0 = time.perf_counter()
    try:  # the stage runs nest under the variant's experiment run
        run_experiment(name, study.exp_overrides(variant, todo), study.targets,
                       Path(study.results) / "logs" / f"{name}.log", on_line, exp_run.run_id, dvc)
    except StudyRunFailed:
        for run in (exp_run, *children.values()):
            tracking.close_run(run, ok=False)
        raise
    wall = time.perf_counter() - t0
    tracking.tag_children_from_lock(exp_run.run_id)
    ref = exp_ref(name)
    common = {"wall_s": round(wall / len(todo), 1), "exp_wall_s": round(wall, 1), "exp_seeds": todo, "exp_ref": ref,
              "git_commit": tracking.git_tags()["git.commit"], **(machine or {})}
    sft_problems = problem_table(Path(first.common.paths.eval) / "sft" / "predictions.jsonl",
                                 first.rewards.equivalence_timeout_s)  # the same SFT model for every seed
    for s in todo:
        result = collect(study, variant, s, params[s], name, sft_problems) | common
        log_child(children[s], result, params[s])
        children[s].set_tags({"dsmath.exp_run_id": exp_run.run_id})
        tracking.close_run(children[s])
        _write_record(study.result_path(variant, s), result)
        kept[s] = result
    exp_run.set_tags({"dvc.exp_ref": ref or ""})
    exp_run.log_metrics({"study/exp_wall_s": wall})
    tracking.close_run(exp_run)
    return [kept[s] for s in seeds]


def _write_record(out: Path, result: dict) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, indent=1) + "\n")
    os.replace(tmp, out)  # atomic: a kill leaves either no record or a whole one


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
    """Every (selected) variant x seed not run yet (a variant's seeds in one experiment), then the report (`make
    study`). A failed experiment does not stop the others: the report is written from what finished and
    StudyRunFailed names the failures at the end."""
    from dsmath.study.report import build_study_report

    with study_session(study) as (study, parent, machine, dvc):
        results, failed = [], []
        for v, todo in study.variant_runs(variants, seeds):
            try:
                results += run_variant(study, v, todo, parent, dvc, on_line, machine)
            except StudyRunFailed as err:
                on_line(f"error: {err}")
                failed.append(str(err))
        if report:
            build_study_report(study, parent)
        if failed:
            raise StudyRunFailed(f"{len(failed)} run(s) failed (the next `make study` retries them):\n"
                                 + "\n".join(failed))
    return results
