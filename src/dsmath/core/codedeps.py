"""The code a stage runs: the import closure of its entry point, read from the source (stdlib only).

Two things rest on it. ``dvc.yaml`` must list every file a stage imports as a dependency, so that a code change
makes ``dvc status`` show the stage stale (a test checks the declared deps against :func:`stage_closure`); and a
training stage's resume checkpoint is keyed by :func:`code_hash` of the same files, so that a rerun after a code
change trains from step 0 instead of "resuming" the finished run of the old code.

The closure follows every ``import`` of a project module, at the top of a file or inside a function (the lazy imports
of the heavy libraries), skipping ``if TYPE_CHECKING:`` blocks; a package import brings its ``__init__.py``; a
string literal naming a sibling ``.py`` file (a worker script started by path) counts as an import of that file.
Modules listed in :data:`OUTPUT_NEUTRAL` are left out of both: they record a run, they do not compute it.
"""

from __future__ import annotations

import ast
import hashlib
from collections.abc import Iterable
from functools import cache
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent  # src/dsmath
ROOT = SRC.parent.parent  # the repository root (stages/ beside src/) in a source checkout
PACKAGES = ("dsmath", "stages")  # the project's import roots; everything else is a library

# project modules a stage imports that cannot change what it computes (each with the reason); every other imported
# project file is a code dependency of the stage
OUTPUT_NEUTRAL = {
    "src/dsmath/runtime/tracking.py":
        "MLflow logging: what a run records (params, curves, tags, registry), not what it makes",
    "src/dsmath/runtime/processes.py":
        "whether the process that opened an MLflow run is gone (tracking's; nothing a stage outputs)",
}


def module_file(module: str, root: Path = ROOT) -> Path | None:
    """The file of a project module (`dsmath.rl.trainer` -> src/dsmath/rl/trainer.py), None if not a project one."""
    parts = module.split(".")
    if parts[0] not in PACKAGES:
        return None
    base = (root / "src" if parts[0] == "dsmath" else root).joinpath(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _package_inits(module: str, root: Path) -> list[Path]:
    """`__init__.py` of every package above `module` (importing a.b.c runs a/__init__ and a/b/__init__)."""
    parts = module.split(".")
    files = (module_file(".".join(parts[:i]), root) for i in range(1, len(parts)))
    return [f for f in files if f is not None and f.name == "__init__.py"]


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imported_names(tree: ast.AST, package: str) -> Iterable[str]:
    """Every module name an import statement of `tree` may load (`from a import b` yields a and a.b)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative import: resolved against the importing file's package
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                mod = ".".join(anchor + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            yield mod
            yield from (f"{mod}.{a.name}" for a in node.names)
        stack.extend(ast.iter_child_nodes(node))


def _script_files(tree: ast.AST, folder: Path) -> Iterable[Path]:
    """Sibling files a module names as a string literal (`"mathverify_worker.py"`, a script it starts by path)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.endswith(".py"):
            f = folder / node.value
            if "/" not in node.value and f.is_file():
                yield f


def _module_name(path: Path, root: Path) -> str:
    rel = path.relative_to(root / "src" if path.is_relative_to(root / "src") else root).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


@cache
def _closure(entry: Path, root: Path) -> frozenset[Path]:
    seen: set[Path] = set()
    todo = [entry, *_package_inits(_module_name(entry, root), root)]
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        tree = ast.parse(path.read_text(), filename=str(path))
        name = _module_name(path, root)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for mod in _imported_names(tree, package):
            f = module_file(mod, root)
            if f is not None:
                todo += [f, *_package_inits(mod, root)]
        todo += list(_script_files(tree, path.parent))
    return frozenset(seen)


def closure(entry_module: str, root: Path = ROOT, neutral: bool = False) -> list[str]:
    """Files (relative to `root`, sorted) that running `python -m entry_module` imports from the project; without
    the :data:`OUTPUT_NEUTRAL` modules unless `neutral`."""
    entry = module_file(entry_module, root)
    if entry is None:
        raise ValueError(f"{entry_module}: no such project module under {root}")
    files = sorted(p.relative_to(root).as_posix() for p in _closure(entry.resolve(), root.resolve()))
    return files if neutral else [f for f in files if f not in OUTPUT_NEUTRAL]


def stage_closure(stage: str, root: Path = ROOT) -> list[str]:
    """The code dependencies of DVC stage `stage` (`rl`, `evaluate`; the foreach item is irrelevant): the closure of
    its entry point `stages/<stage>.py`."""
    return closure(f"stages.{stage}", root)


def code_hash(files: Iterable[str], root: Path = ROOT) -> str:
    """sha256 over the relative path and the bytes of each file (the identity of the code a stage runs)."""
    h = hashlib.sha256()
    for rel in sorted(files):
        h.update(rel.encode() + b"\0" + (root / rel).read_bytes() + b"\0")
    return h.hexdigest()


def stage_code_hash(stage: str, fallback_module: str, root: Path = ROOT) -> str:
    """:func:`code_hash` of a stage's closure; where the project runs from an installed package without its
    `stages/` folder, the closure of `fallback_module` (the library module that does the stage's work)."""
    if module_file(f"stages.{stage}", root) is not None:
        return code_hash(stage_closure(stage, root), root)
    pkg_root = SRC.parent.parent if (SRC.parent.name == "src") else SRC.parent
    return code_hash(closure(fallback_module, pkg_root), pkg_root)


def covered(files: Iterable[str], deps: Iterable[str]) -> list[str]:
    """The `files` that no declared dep covers (a dep covers itself and, as a folder, everything below it)."""
    prefixes = [d.rstrip("/") for d in deps]
    return [f for f in files if not any(f == p or f.startswith(p + "/") for p in prefixes)]


def dvc_code_deps(dvc_yaml: Path = ROOT / "dvc.yaml") -> dict[str, list[str]]:
    """{stage: its declared deps that are project code (under src/ or stages/)} from dvc.yaml (foreach stages by
    their `do` block)."""
    import yaml

    stages = yaml.safe_load(dvc_yaml.read_text())["stages"]
    out = {}
    for name, spec in stages.items():
        spec = spec.get("do", spec)
        out[name] = [d for d in spec.get("deps", []) if isinstance(d, str) and d.startswith(("src/", "stages/"))]
    return out


def missing_deps(dvc_yaml: Path = ROOT / "dvc.yaml", root: Path = ROOT) -> dict[str, list[str]]:
    """{stage: files its entry point imports that dvc.yaml does not declare} (empty lists when all is declared)."""
    return {stage: covered(stage_closure(stage, root), deps) for stage, deps in dvc_code_deps(dvc_yaml).items()}


def unused_deps(dvc_yaml: Path = ROOT / "dvc.yaml", root: Path = ROOT) -> dict[str, list[str]]:
    """{stage: declared code deps that hold no file of its closure} (a stale entry re-runs the stage for nothing)."""
    out = {}
    for stage, deps in dvc_code_deps(dvc_yaml).items():
        files = stage_closure(stage, root)
        out[stage] = [d for d in deps if len(covered(files, [d])) == len(files)]
    return out


def suggested_deps(stage: str, root: Path = ROOT) -> list[str]:
    """A short dep list covering exactly `stage`'s closure: a package folder where the stage imports all of its
    files (recursively), the single files elsewhere."""
    files = set(stage_closure(stage, root))
    out: list[str] = []

    def visit(folder: Path) -> None:
        rel = folder.relative_to(root).as_posix()
        inside = sorted(p.relative_to(root).as_posix() for p in folder.rglob("*.py"))
        if inside and all(f in files for f in inside) and folder != root / "src" / "dsmath":
            out.append(rel)
            return
        out.extend(f for f in sorted(files) if Path(f).parent == Path(rel))
        for sub in sorted(p for p in folder.iterdir() if p.is_dir() and (p / "__init__.py").is_file()):
            if any(f.startswith(sub.relative_to(root).as_posix() + "/") for f in files):
                visit(sub)

    visit(root / "src" / "dsmath")
    return ["stages/__init__.py", f"stages/{stage}.py", *out]


CODE_COMMENT = "# code: the import closure of stages/{stage}.py (`python -m dsmath.core.codedeps --write`)"


def rewrite_dvc_yaml(dvc_yaml: Path = ROOT / "dvc.yaml", root: Path = ROOT) -> str:
    """dvc.yaml's text with each stage's code deps (the entries under src/ and stages/) replaced by
    :func:`suggested_deps`, headed by :data:`CODE_COMMENT`; every other line (data deps, comments) is kept."""
    import re

    out: list[str] = []
    stage, in_deps, done = None, False, False
    for line in dvc_yaml.read_text().split("\n"):
        if m := re.match(r"^  (\w+):\s*$", line):
            stage, in_deps = m.group(1), False
        if re.match(r"^\s+deps:\s*$", line):
            in_deps, done = True, False
            out.append(line)
            continue
        if in_deps:
            if line.strip().startswith("# code:"):
                continue
            item = re.match(r"^(\s+)- (\S+)", line)
            if item is None:
                in_deps = False
            elif item.group(2).startswith(("src/", "stages/")):
                if not done:
                    indent = item.group(1)
                    out.append(indent + CODE_COMMENT.format(stage=stage))
                    out += [f"{indent}- {d}" for d in suggested_deps(stage, root)]
                    done = True
                continue
        out.append(line)
    return "\n".join(out)


if __name__ == "__main__":  # `--write`: refresh dvc.yaml's code deps; without it, print what is missing or unused
    import sys

    if "--write" in sys.argv:
        (ROOT / "dvc.yaml").write_text(rewrite_dvc_yaml())
    missing, unused = missing_deps(), unused_deps()
    bad = {s: {"missing": missing[s], "unused": unused[s]} for s in missing if missing[s] or unused[s]}
    print("dvc.yaml code deps:", f"missing or unused {bad}" if bad else "complete")
    raise SystemExit(1 if bad else 0)
