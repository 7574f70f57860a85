"""docs/extending.md kept true: its worked examples, applied to the code in memory (the function defined in its module,
the registry line added to its registry, as the page says to edit them), train a step on the tiny model and give a
valid study arm; then they are removed again. And the page's map of the RL core lists every file of it."""

from __future__ import annotations

import ast
import contextlib
import importlib
import re
from pathlib import Path

import pytest
import torch
import yaml

from dsmath.config import ParamsError, Rl, load_raw, merge, parse_params
from dsmath.core import codedeps
from dsmath.rl import registry
from dsmath.rl.trainer import RLTrainer
from dsmath.study.spec import load_study, variant_params
from tests.unit.test_rl_trainer import PROBLEMS, LengthScorer, tiny_model
from tests.unit.test_rl_trainer import tok as tok  # noqa: F401  (module fixture)

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "extending.md"
BASE = dict(steps=1, prompts_per_step=2, group_size=4, max_new_tokens=8, lr=1e-2, warmup_steps=0, eval_every=0,
            mode="cot", train_buckets=1, share_prompts=False)


def blocks(example: str) -> list[tuple[str, dict[str, str], str]]:
    """(language, attributes, code) of the page's fenced blocks marked ``example=<example>``, in order."""
    out = []
    for lang, info, body in re.findall(r"^```(\w+)([^\n]*)\n(.*?)^```$", DOC.read_text(), re.M | re.S):
        attrs = dict(a.split("=", 1) for a in info.split())
        if attrs.get("example") == example:
            out.append((lang, attrs, body))
    assert out, f"docs/extending.md has no example={example} block"
    return out


def _module(file: str) -> str:
    return ".".join(Path(file).with_suffix("").parts[1:])  # src/dsmath/rl/x.py -> dsmath.rl.x


def _with_line(source: str, name: str, line: str) -> str:
    """registry.py's text with `line` added as the last entry of registry `name` (the edit the page describes)."""
    start = source.index(f"\n{name} = Registry(")
    end = source.index("\n})", start)
    return source[:end] + "\n" + line.rstrip("\n") + source[end:]


@contextlib.contextmanager
def applied(example: str, monkeypatch):
    """The example's two edits, in memory: its function defined in the module its block names, the entry its registry
    block gives added to that registry as registry.py would hold it. Yields (registry, name, params, calls)."""
    (_, fn_attrs, fn_code), = [b for b in blocks(example) if b[0] == "python" and "registry" not in b[1]]
    (_, reg_attrs, line), = [b for b in blocks(example) if "registry" in b[1]]
    (_, _, params), = [b for b in blocks(example) if b[0] == "yaml"]
    module = importlib.import_module(_module(fn_attrs["file"]))
    namespace = dict(vars(module))
    exec(compile(fn_code, fn_attrs["file"], "exec"), namespace)
    fn_name = ast.parse(fn_code).body[0].name
    calls = []

    def counted(*args, **kw):
        calls.append(1)
        return namespace[fn_name](*args, **kw)

    monkeypatch.setattr(module, fn_name, counted, raising=False)
    edited: dict = {}
    exec(compile(_with_line(Path(registry.__file__).read_text(), reg_attrs["registry"], line), "registry.py", "exec"),
         edited)
    target_registry = getattr(registry, reg_attrs["registry"])
    (name, entry), = [(n, e) for n, e in edited[reg_attrs["registry"]]._entries.items() if n not in target_registry]
    assert entry == f"{module.__name__}:{fn_name}", "the registry line names the function of the example"
    target_registry.register(name, entry)
    try:
        yield target_registry, name, yaml.safe_load(params)["rl"], calls
    finally:
        target_registry.unregister(name)


@pytest.mark.parametrize("example", ["advantage", "loss"])
def test_the_worked_example_trains_a_step_and_goes_away_again(tok, example, monkeypatch):
    with applied(example, monkeypatch) as (reg, name, params, calls):
        assert params[reg.key] == name
        model = tiny_model(tok)
        before = [p.detach().clone() for p in model.parameters()]
        m = RLTrainer(Rl(**(BASE | params)), model, tok, PROBLEMS, LengthScorer(), seed=1).step()
        assert calls, f"{name} was not called"
        assert m["rl/trained_rows"] == 8 and all(v == v and abs(v) != float("inf") for v in m.values())
        assert any(not torch.equal(p, b) for p, b in zip(model.parameters(), before, strict=True))
    assert name not in reg
    with pytest.raises(ParamsError, match=rf"^rl\.{reg.key}: must be one of .* \(got '{name}'\)$"):
        _params(params)


def _params(rl: dict):
    return parse_params(merge(load_raw(ROOT / "params.yaml"), {"rl": rl}))


def test_the_refusal_the_page_quotes_is_the_one_given(monkeypatch):
    quoted = re.search(r"`(rl\.advantage: must be one of [^`]*)`", DOC.read_text().replace("\n", " ")).group(1)
    misspelt = re.search(r"\(got '(\w+)'\)", quoted).group(1)
    with applied("advantage", monkeypatch), pytest.raises(ParamsError) as err:
        _params({"advantage": misspelt})
    assert str(err.value) == quoted


def test_the_study_arm_is_a_valid_variant_of_the_study(tmp_path, monkeypatch):
    (_, attrs, arm), = blocks("study")
    study_file = ROOT / attrs["file"]
    raw, added = yaml.safe_load(study_file.read_text()), yaml.safe_load(arm)
    raw["variants"] |= added["variants"]
    raw["findings"] = raw.get("findings", []) + added["findings"]
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(raw))
    [variant] = added["variants"]
    with applied("advantage", monkeypatch):
        study = load_study(tmp_path / "study.yaml", ROOT / "params.yaml")
        assert variant_params(study, variant, study.seeds[0], ROOT / "params.yaml").rl.advantage == "median_baseline"
    assert any(f.a == variant for f in study.findings)
    with pytest.raises(ParamsError, match="rl.advantage: must be one of"):  # unregistered: the study is refused
        load_study(tmp_path / "study.yaml", ROOT / "params.yaml")


def test_the_runtime_registration_block_registers_and_removes(monkeypatch):
    (_, _, code), = blocks("runtime")
    namespace = {"median_baseline": lambda x, cfg: (x.rewards, {})}
    register, rest = code.split("# ...", 1)
    exec(register, namespace)
    try:
        assert registry.ADVANTAGES["median_baseline"] is namespace["median_baseline"]
        assert Rl(advantage="median_baseline").advantage == "median_baseline"
    finally:
        exec(rest.split("\n", 1)[1], namespace)
    assert "median_baseline" not in registry.ADVANTAGES


def test_every_registry_entry_resolves_into_the_rl_stage_code():
    """A registry names its functions by "module:attribute" (no import): each must exist and be a file of the rl
    stage's import closure, or a change to it would not re-run the stage (dsmath.core.codedeps)."""
    closure = set(codedeps.stage_closure("rl"))
    for key, reg in registry.REGISTRIES.items():
        for name, entry in reg._entries.items():
            assert isinstance(entry, str) and re.fullmatch(r"dsmath(\.\w+)+:\w+", entry), (key, name)
            assert reg[name] is not None
            module = entry.partition(":")[0]
            assert str(codedeps.module_file(module).relative_to(codedeps.ROOT)) in closure, (key, name, module)


def test_the_map_lists_every_file_of_the_rl_core():
    text = DOC.read_text()
    listed = set(re.findall(r"^\| `(\w+\.py)` \|", text, re.M))
    assert listed == {p.name for p in (ROOT / "src" / "dsmath" / "rl").glob("*.py")} - {"__init__.py"}
    for path in set(re.findall(r"(?:src|tests|configs|docs)/[\w/.]+\.(?:py|yaml|md)", text)):
        assert (ROOT / path).exists(), path
