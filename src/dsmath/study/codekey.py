"""The code a study's run depends on, as one hash: the code dependencies (paths under src/ and stages/, files or
folders) that dvc.yaml lists for every stage the study's targets reach, followed upstream through the stages' data
deps and outputs (evaluate@rl -> rl@<seed> -> sft -> pretrain -> ...). dvc.yaml's code deps are the stages' import
closures (:mod:`dsmath.core.codedeps` checks them), so this is the code DVC itself would re-run a stage for.

A record made by other code than the workspace's is stale: its key (:meth:`dsmath.study.spec.Study.run_key`) holds
this hash, so the runner runs it again, and the report flags it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path

import yaml

from dsmath.core import codedeps

CODE_PREFIXES = ("src/", "stages/")
_VAR = re.compile(r"\$\{([^}]+)\}")
_SKIP_PARTS = {"__pycache__"}


def default_root() -> Path:
    """The DVC project the study runs in: the working directory when it holds dvc.yaml (where `dvc exp run` runs),
    else the source checkout of the package."""
    return Path.cwd() if (Path.cwd() / "dvc.yaml").is_file() else codedeps.ROOT


@lru_cache(maxsize=8)
def _parse(text: str) -> dict:
    return (yaml.safe_load(text) or {}).get("stages") or {}


def _lookup(params: dict, key: str, item: object) -> object:
    if key == "item":
        return item
    node: object = params
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            raise KeyError(key)
        node = node[part]
    return node


def interpolate(text: str, params: dict, item: object = None) -> str:
    """`${a.b}` and `${item}` of a dvc.yaml string from `params` (a nested mapping); a name params lack stays as
    written (two unresolved templates still match when they are the same text).

    >>> interpolate("${common.paths.models}/rl/seed-${item}", {"common": {"paths": {"models": "models"}}}, 1234)
    'models/rl/seed-1234'
    >>> interpolate("${nope.x}/a", {})
    '${nope.x}/a'
    """
    def sub(m: re.Match) -> str:
        try:
            return str(_lookup(params, m.group(1), item))
        except KeyError:
            return m.group(0)

    return _VAR.sub(sub, text)


def _paths(entries: Iterable) -> list[str]:
    """The paths of a deps/outs/metrics/plots list (entries are a path or {path: options})."""
    out = []
    for e in entries or []:
        out += [e] if isinstance(e, str) else [str(k) for k in e] if isinstance(e, dict) else []
    return out


def stage_instances(stages: dict, params: dict) -> dict[str, dict]:
    """{stage name (`rl@1234` for a foreach item): {code: [...], deps: [...], outs: [...]}} with params
    interpolated; outs include metrics and plots (what another stage may read)."""
    out = {}
    for name, spec in stages.items():
        if "foreach" in spec:
            items = spec["foreach"]
            if isinstance(items, str):
                m = _VAR.fullmatch(items.strip())
                try:
                    items = _lookup(params, m.group(1), None) if m else []
                except KeyError:
                    items = []
            items = list(items) if isinstance(items, list | tuple) else list(items or {})
            body = spec.get("do") or {}
            insts = [(f"{name}@{i}", body, i) for i in items]
        else:
            insts = [(name, spec, None)]
        for inst, body, item in insts:
            deps = _paths(body.get("deps"))
            produced = _paths(body.get("outs")) + _paths(body.get("metrics")) + _paths(body.get("plots"))
            out[inst] = {"code": [d for d in deps if d.startswith(CODE_PREFIXES)],
                         "deps": [interpolate(d, params, item) for d in deps if not d.startswith(CODE_PREFIXES)],
                         "outs": [interpolate(o, params, item) for o in produced]}
    return out


def _overlaps(a: str, b: str) -> bool:
    a, b = a.rstrip("/"), b.rstrip("/")
    return a == b or a.startswith(b + "/") or b.startswith(a + "/")


def reached_stages(stages: dict, targets: list[str], params: dict) -> list[str]:
    """The stage instances `targets` reach (themselves and every stage upstream of them), sorted. A target names an
    instance (`evaluate@rl`) or a stage (`evaluate`: all its items)."""
    return _reach(stage_instances(stages, params), targets)


def _reach(inst: dict[str, dict], targets: list[str]) -> list[str]:
    todo = [n for t in targets for n in inst if n == t or n.split("@", 1)[0] == t]
    seen: set[str] = set()
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        for dep in inst[n]["deps"]:
            todo += [m for m, s in inst.items() if m not in seen and any(_overlaps(dep, o) for o in s["outs"])]
    return sorted(seen)


def code_files(deps: Iterable[str], root: Path) -> list[str]:
    """The files (relative to `root`, sorted) of code deps that are files or folders (every file below a folder,
    bytecode caches aside); a dep that does not exist counts as no file."""
    files = set()
    for d in deps:
        p = root / d
        if p.is_file():
            files.add(Path(d).as_posix())
        elif p.is_dir():
            files.update(f.relative_to(root).as_posix() for f in p.rglob("*")
                         if f.is_file() and not _SKIP_PARTS & set(f.relative_to(root).parts))
    return sorted(files)


def study_code_hash(targets: list[str], params: dict, root: Path | None = None) -> str:
    """sha256 (16 hex digits) over the sorted (path, bytes) of the code deps of every stage `targets` reach, per
    dvc.yaml at `root` (:func:`default_root`) and `params` (the run's: which stages a run reaches can depend on
    them, e.g. `sft.init`). Changing one byte of one such file changes it; anything else does not."""
    root = Path(root) if root is not None else default_root()
    dvc_yaml = root / "dvc.yaml"
    if not dvc_yaml.is_file():
        return "no-dvc-yaml"
    inst = stage_instances(_parse(dvc_yaml.read_text()), params)
    deps = {d for n in _reach(inst, targets) for d in inst[n]["code"]}
    return codedeps.code_hash(code_files(deps, root), root)[:16]


def stages_params_hash(targets: list[str], params: dict, root: Path | None = None) -> str:
    """sha256 (16 hex digits) over the params of every stage `targets` reach: for each stage instance, the keys its
    dvc.yaml `params` list names with their values in `params`. Two runs with the same hash (and the same code, data
    and command) reproduce those stages alike: a study's variants with the same hash for its chain share one built
    chain (:class:`dsmath.study.runner.Runner`)."""
    import hashlib
    import json

    root = Path(root) if root is not None else default_root()
    dvc_yaml = root / "dvc.yaml"
    if not dvc_yaml.is_file():
        return "no-dvc-yaml"
    stages = _parse(dvc_yaml.read_text())
    values: dict[str, dict] = {}
    for name in reached_stages(stages, targets, params):
        spec = stages[name.split("@", 1)[0]]
        body = spec.get("do") or {} if "foreach" in spec else spec
        keys = [k for k in body.get("params") or [] if isinstance(k, str)]
        values[name] = {k: _value(params, k) for k in keys}
    return hashlib.sha256(json.dumps(values, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _value(params: dict, key: str) -> object:
    try:
        return _lookup(params, key, None)
    except KeyError:
        return None
