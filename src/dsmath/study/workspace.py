"""The isolated workspace one study run (a variant x seed) runs in, never the user's.

A run workspace is a copy of the project as it stands (every file git tracks or would track: the user's uncommitted
code and params included, ignored outputs left out) under ``.dvc/tmp/study/runs/<run>/``, with its own params.yaml
(the study's profile + the run's overrides), its own dvc.lock, metrics/ and plots/. DVC runs in it without git
(``core.no_scm``) and with the *project's* cache (``cache.dir``). A new workspace starts from another's outputs and
dvc.lock (:func:`seed_outputs`: the project's for a chain workspace, a chain workspace's for a run), so the shared
chain (corpus ... SFT, the SFT evaluation) is found up to date instead of built again. The user's params.yaml,
dvc.lock, metrics/ and plots/ are never written.

Stage commands name the interpreter ``common.python`` (``.venv/bin/python``, relative): the workspace links the
project's ``.venv``. MLflow: a relative SQLite store and artifact folder of the profile are made absolute (the
project's), so every run logs to the one store; a server URI is left as it is. A workspace is kept until its run's
record is written, so a killed run resumes in it (its finished stages in dvc.lock, its RL checkpoint).
"""

from __future__ import annotations

import filecmp
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

from dsmath.study.spec import apply

ROOT = Path(".dvc/tmp/study/runs")  # where run workspaces live, inside the project (ignored by git and DVC)


def project_files(source: Path) -> list[str]:
    """The project's files as git sees them: tracked and untracked-but-not-ignored (what a clone plus the user's
    uncommitted work holds), minus the study's own workspaces. Without git: every file but hidden folders'."""
    proc = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=source, capture_output=True)
    if proc.returncode == 0:
        names = [n for n in proc.stdout.decode().split("\0") if n]
    else:  # not a git checkout (e.g. an unpacked release): everything outside hidden folders and .venv
        names = [str(p.relative_to(source)) for p in source.rglob("*")
                 if p.is_file() and not any(part.startswith(".") for part in p.relative_to(source).parts[:-1])]
    return sorted(n for n in names if not n.startswith(str(ROOT) + "/") and (source / n).is_file())


def dvc_cache_dir(source: Path, dvc: str) -> Path:
    """The project's DVC cache folder (``dvc cache dir``; .dvc/cache unless configured)."""
    proc = subprocess.run([dvc, "cache", "dir"], cwd=source, capture_output=True, text=True)
    text = proc.stdout.strip()
    return Path(text) if proc.returncode == 0 and text else source / ".dvc" / "cache"


def absolute_uri(uri: str, source: Path) -> str:
    """A relative SQLite store URI taken from `source` (`sqlite:///mlflow.db` -> `sqlite:////abs/mlflow.db`); any
    other URI as it is."""
    prefix = "sqlite:///"
    if uri.startswith(prefix) and not uri[len(prefix):].startswith("/"):
        return prefix + str((source / uri[len(prefix):]).resolve())
    return uri


def absolute_tracking(raw: dict, source: Path) -> dict:
    """The profile's MLflow settings with a relative SQLite store and artifact folder taken from `source` (so a run
    in a workspace logs to the project's store, as a run in the project would)."""
    tracking = dict(raw["common"]["tracking"])
    tracking["uri"] = absolute_uri(str(tracking.get("uri", "")), source)
    if tracking.get("artifacts") and not Path(tracking["artifacts"]).is_absolute():
        tracking["artifacts"] = str((source / tracking["artifacts"]).resolve())
    return {**raw, "common": {**raw["common"], "tracking": tracking}}


def _sync(source: Path, dest: Path, names: list[str]) -> None:
    """Copy `names` from source to dest where missing or different (a resumed workspace keeps its outputs)."""
    for name in names:
        src, dst = source / name, dest / name
        if dst.exists() and filecmp.cmp(src, dst, shallow=False):
            continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        if dst.is_symlink() or dst.exists():
            dst.unlink()
        shutil.copy2(src, dst)


REMOTE = "study"  # the name a study's DVC remote gets in a workspace's .dvc/config.local


def _dvc_local_config(source: Path, cache_dir: Path, remote: str | None = None) -> str:
    """The workspace's .dvc/config.local: the project's local settings (remotes' credentials), no git, the project's
    cache, outputs linked from it (no stage writes into an output it did not create: DVC removes a stage's outputs
    before its command runs), and the study's `remote` URL (a directory, NFS or s3://...) as the default remote."""
    from configobj import ConfigObj

    conf = ConfigObj(str(source / ".dvc" / "config.local")) if (source / ".dvc" / "config.local").exists() \
        else ConfigObj()
    conf.setdefault("core", {})["no_scm"] = "true"
    conf.setdefault("cache", {})["dir"] = str(cache_dir)
    conf["cache"]["type"] = "reflink,hardlink,copy"  # outputs linked from the cache, not copied (DVC protects them)
    if remote:
        conf[f'remote "{REMOTE}"'] = {"url": remote}
        conf["core"]["remote"] = REMOTE
    return "\n".join(conf.write()) + "\n"


def _lock_stages(lock_path: Path) -> dict[str, dict]:
    """The `stages` of a dvc.lock ({} when there is none)."""
    if not lock_path.exists():
        return {}
    return (yaml.safe_load(lock_path.read_text()) or {}).get("stages") or {}


def lock_graph(lock_path: Path) -> dict[str, dict[str, list[str]]]:
    """{stage: {"deps": paths, "outs": paths}} of a dvc.lock ({} when there is none)."""
    return {name: {k: [d["path"] for d in (st.get(k) or [])] for k in ("deps", "outs")}
            for name, st in _lock_stages(lock_path).items()}


def out_hash(lock_path: Path, out: str) -> str | None:
    """The content hash dvc.lock records for the output `out` of any of its stages (None when none lists it): a
    model's identity across workspaces and machines (one seed's chain built on another CPU is other bits)."""
    for st in _lock_stages(lock_path).values():
        for o in st.get("outs") or []:
            if o.get("path") == out:
                return o.get("md5")
    return None


def upstream(graph: dict[str, dict[str, list[str]]], targets: list[str]) -> list[str]:
    """`targets` and every stage of `graph` whose outputs they depend on, transitively (a dep at or under an out)."""
    def feeds(out: str, dep: str) -> bool:
        return dep == out or dep.startswith(out.rstrip("/") + "/")

    todo, seen = [t for t in targets if t in graph], set()
    while todo:
        stage = todo.pop()
        if stage in seen:
            continue
        seen.add(stage)
        todo += [s for s, st in graph.items() for dep in graph[stage]["deps"] for out in st["outs"] if feeds(out, dep)]
    return sorted(seen)


def _link_or_copy(src: Path, dst: Path, copy: bool) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    if not copy:
        try:
            os.link(src, dst)
            return
        except OSError:  # another file system
            pass
    shutil.copy2(src, dst)


def seed_outputs(origin: Path, dest: Path, stages: list[str], checkpoints: str) -> list[str]:
    """Give `dest` the outputs `origin` has of `stages` and their upstream, and origin's dvc.lock, so DVC finds those
    stages up to date there: no run, no checkout from the cache (the project's run cache may also lack them: a chain
    built before checkpoints stopped being DVC outputs, or on another machine). Files are hard-linked (no stage
    writes into an output it did not create: DVC removes a stage's outputs before its command runs), except anything
    under `checkpoints` (a resumed training writes into it), which is copied. Returns the stages seeded."""
    graph = lock_graph(origin / "dvc.lock")
    chain = upstream(graph, stages)
    ckpt = checkpoints.rstrip("/") + "/"
    for stage in chain:
        for out in graph[stage]["outs"]:
            src = origin / out
            if not src.exists():
                continue
            if (dest / out).is_dir() and not (dest / out).is_symlink():  # the project's tracked copy: replaced
                shutil.rmtree(dest / out)
            elif (dest / out).exists():
                (dest / out).unlink()
            files = [src] if src.is_file() else sorted(p for p in src.rglob("*") if p.is_file())
            for f in files:
                rel = f.relative_to(origin)
                _link_or_copy(f, dest / rel, copy=(str(rel) + "/").startswith(ckpt))
    if (origin / "dvc.lock").exists():
        shutil.copy2(origin / "dvc.lock", dest / "dvc.lock")
    return chain


def prepare(source: Path, name: str, profile_raw: dict, overrides: dict[str, Any], cache_dir: Path,
            outputs_from: Path | None = None, chain: list[str] | None = None, remote: str | None = None) -> Path:
    """The workspace of run `name` under `source` (made, or brought up to date when a killed run left it): the
    project's files, params.yaml = `profile_raw` + `overrides` (tracking made absolute), DVC on the project's cache
    (and the study's `remote`), and (new workspaces) the outputs of the `chain` stages that `outputs_from` holds
    (see :func:`seed_outputs`)."""
    dest = source / ROOT / name
    names = project_files(source)
    resumed = (dest / "dvc.lock").exists()
    if resumed:  # a killed run's workspace: the code again, its own lock and outputs kept
        paths = profile_raw["common"]["paths"]
        outputs = tuple(f"{paths[k].rstrip('/')}/" for k in ("metrics", "plots", "eval") if paths.get(k))
        names = [n for n in names if n != "dvc.lock" and not n.startswith(outputs)]
    dest.mkdir(parents=True, exist_ok=True)
    _sync(source, dest, names)
    if not resumed and outputs_from is not None and chain:
        seed_outputs(outputs_from, dest, chain, profile_raw["common"]["paths"]["checkpoints"])
    raw = absolute_tracking(apply(profile_raw, overrides), source)
    (dest / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    (dest / ".dvc").mkdir(exist_ok=True)
    (dest / ".dvc" / "config.local").write_text(_dvc_local_config(source, cache_dir, remote))
    venv = dest / ".venv"
    if (source / ".venv").exists() and not venv.exists():
        venv.symlink_to((source / ".venv").resolve(), target_is_directory=True)
    return dest


def remove(path: Path) -> None:
    """Delete a finished run's workspace (its outputs stay in the project's DVC cache)."""
    shutil.rmtree(path, ignore_errors=True)


def run_env(parent_run_id: str | None) -> dict[str, str]:
    """The environment of a run's `dvc repro`: the MLflow run its stage runs nest under, the store made absolute."""
    from dsmath.runtime import tracking

    env = dict(os.environ)
    env.pop(tracking.RUN_ID_ENV, None)
    if "MLFLOW_TRACKING_URI" in env:  # mlflow.set_tracking_uri exports it; relative, it would mean the workspace's
        env["MLFLOW_TRACKING_URI"] = absolute_uri(env["MLFLOW_TRACKING_URI"], Path.cwd())
    if parent_run_id:
        env[tracking.PARENT_ENV] = parent_run_id
    return env
