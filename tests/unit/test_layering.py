"""The house has floors, and every package imports only from the floors below it (and from itself): the order is
declared once in FLOORS, bottom first, and every package of src/dsmath must be on a floor. Two packages on one floor do
not import each other. One exception, declared: config validates the RL choices against rl's leaf registry of names.
And no module of the house is in an import circle."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "dsmath"

FLOORS = (  # bottom first
    ("core",),  # stdlib-only helpers: errors, the code closure, worker pools
    ("config",),  # the validated params
    ("runtime",),  # what every stage process shares: run_stage, restore, processes and devices, MLflow tracking
    ("data",),  # corpus, benchmarks, synthetic problems
    ("modeling",),  # model factory, fused LM head, tokenizer, prompt format
    ("sandbox",),  # model-written programs run contained
    ("rewards", "generation"),  # scoring answers; sampling and log-probs
    ("evaluation",),
    ("train",),  # pretraining and SFT, and the training-stage lifecycle
    ("rl",),
    ("reporting",),  # the paper-style report and the README results
    ("study",),  # the seed/variant study, its runs in workspaces here or on other machines
    ("orchestration",),  # the pipeline plumbing of `make repro` and the flows; a study's runs on a Prefect work pool
)
EXCEPTIONS = {("config", "dsmath.rl.registry")}  # (package, module it may import against the order)
FLOOR = {pkg: i for i, floor in enumerate(FLOORS) for pkg in floor}


def imported_modules(package: str) -> dict[str, set[str]]:
    """{file: every dsmath module it imports (top level or inside functions)} for the files of one package."""
    out = {}
    for path in sorted((SRC / package).rglob("*.py")):
        names = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                names |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
        out[str(path.relative_to(SRC))] = {n for n in names if n.startswith("dsmath")}
    return out


def test_every_package_is_on_a_floor_and_nothing_sits_beside_them():
    packages = {p.name for p in SRC.iterdir() if (p / "__init__.py").is_file()}
    assert packages == set(FLOOR), f"packages not on a floor: {packages - set(FLOOR)}; floors without one: " \
                                   f"{set(FLOOR) - packages}"
    assert sorted(p.name for p in SRC.glob("*.py")) == ["__init__.py"], "modules beside the packages"


def upward(package: str, module: str) -> bool:
    """Whether `package` importing `module` breaks the order (a module of another package on its floor or above)."""
    other = module.split(".")[1] if module.count(".") else "dsmath"
    allowed = any(p == package and (module == e or module.startswith(e + ".")) for p, e in EXCEPTIONS)
    return other != package and other in FLOOR and FLOOR[other] >= FLOOR[package] and not allowed


@pytest.mark.parametrize("package", sorted(FLOOR))
def test_packages_import_downward_only(package):
    bad = {f: sorted(m for m in mods if upward(package, m)) for f, mods in imported_modules(package).items()}
    assert not {f: m for f, m in bad.items() if m}, f"{package} (floor {FLOOR[package]}) imports upward: {bad}"


def test_the_floor_check_sees_an_upward_import():
    assert "dsmath.generation.rollout" in imported_modules("rl")["rl/trainer.py"]
    assert upward("generation", "dsmath.rl.trainer") and upward("rewards", "dsmath.generation.rollout")
    assert upward("config", "dsmath.rl.trainer") and not upward("config", "dsmath.rl.registry.REGISTRIES")
    assert not upward("rl", "dsmath.generation.rollout") and not upward("rl", "dsmath.rl.trainer")
    assert FLOOR["rl"] > FLOOR["generation"] > FLOOR["sandbox"] > FLOOR["core"]


# ---------------------------------------------------------------- no import circles


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(type_checking: bool = False) -> dict[str, set[str]]:
    """{dsmath module: the dsmath modules it imports}, top level or inside functions, `if TYPE_CHECKING:` blocks
    left out unless `type_checking`. `from a import b` is an import of module a.b where that is a module, else of a
    (a package's own submodules are no import of the package: Python runs a package's __init__ before any of them)."""
    files = {_module_name(p): p for p in SRC.rglob("*.py")}
    graph = {}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found, todo = set(), [ast.parse(path.read_text())]
        while todo:
            node = todo.pop()
            if isinstance(node, ast.If) and _type_checking(node) and not type_checking:
                todo.extend(node.orelse)
                continue
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + [node.module or ""]).strip(".") \
                    if node.level else node.module
                subs = {f"{base}.{a.name}" for a in node.names} & files.keys()
                found |= subs or {base}
                if len(subs) < len(node.names):
                    found.add(base)
            todo.extend(ast.iter_child_nodes(node))
        graph[name] = {m for m in found if m in files and m != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every import circle a depth-first search meets (each as the modules around it, the first repeated)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    found, path = [], []

    def visit(m: str) -> None:
        state[m] = 1
        path.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                found.append(path[path.index(n):] + [n])
            elif n not in state:
                visit(n)
        path.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)
    return found


def test_no_import_circle_among_the_modules():
    """Runtime imports (TYPE_CHECKING blocks excluded): the RL estimators take tensors and a config section, not the
    trainer, so algorithms.py and trainer.py no longer import each other."""
    assert cycles(import_graph()) == []


def test_no_import_circle_even_for_type_checking():
    """The trainer <-> rule circle was a TYPE_CHECKING one; no such circle is left either."""
    assert cycles(import_graph(type_checking=True)) == []


def test_the_cycle_scan_finds_a_circle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    graph = import_graph()
    assert "dsmath.rl.registry" in graph["dsmath.config.rl"]  # the lazy import inside the validator is seen
    assert "dsmath.rl.trainer" in graph["dsmath.rl.run"]


def test_config_reads_only_the_leaf_registry_of_rl():
    """The params validate the RL choices against the registries' names without importing the RL code: config
    imports of rl only dsmath.rl.registry, which imports nothing of dsmath and no torch."""
    graph = import_graph()
    from_config = {m for c, mods in graph.items() if c.startswith("dsmath.config") for m in mods}
    assert {m for m in from_config if m.startswith("dsmath.rl")} == {"dsmath.rl.registry"}
    registry = imported_modules("rl")["rl/registry.py"]
    assert registry == set()
    tree = ast.parse((SRC / "rl" / "registry.py").read_text())
    assert not [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)
                and "torch" in ([a.name for a in n.names] + [getattr(n, "module", "") or ""])]
