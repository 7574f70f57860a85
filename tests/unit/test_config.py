"""Params validation: typed, frozen, unknown keys refused, messages name the key path and the allowed range."""

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from dsmath.config import ParamsError, load_params, parse_params

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("profile", ["params.yaml", "configs/smoke.yaml"])
def test_shipped_profiles_are_valid(profile):
    params = load_params(ROOT / profile)
    assert params.common.seed >= 0


def test_profiles_set_every_key_explicitly():
    """smoke.yaml is a complete alternative params file: the same key tree as params.yaml."""

    def keys(d, prefix=""):
        out = set()
        for k, v in d.items():
            out.add(prefix + k)
            if isinstance(v, dict):
                out |= keys(v, prefix + k + ".")
        return out

    main = keys(yaml.safe_load((ROOT / "params.yaml").read_text()))
    smoke = keys(yaml.safe_load((ROOT / "configs/smoke.yaml").read_text()))
    assert main == smoke, f"only in params.yaml: {main - smoke}; only in smoke.yaml: {smoke - main}"


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"corpus": {"decontamination": {"ngram": 2}}}, "corpus.decontamination.ngram: must be >= 3 (got 2)"),
        ({"common": {"seed": "x"}}, "common.seed: Input should be a valid integer (got 'x')"),
        ({"common": {"seeed": 1}}, "common.seeed: unknown key"),
        ({"data": {"synthetic": {"n_train": 0}}}, "data.synthetic.n_train: must be >= 1 (got 0)"),
        ({"corpus": {"decontamination": {"short_max": 12}}}, "corpus.decontamination.short_max: must be < ngram=10"),
        ({"common": {"device": "tpu"}}, "common.device: must be one of 'auto', 'cpu', 'cuda' or 'mps' (got 'tpu')"),
        ({"corpus": {"classifier": {"holdout_frac": 1.5}}}, "corpus.classifier.holdout_frac: must be < 1.0 (got 1.5)"),
    ],
)
def test_bad_params_name_the_key(raw, message):
    with pytest.raises(ParamsError) as err:
        parse_params(raw)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_params_are_frozen():
    params = parse_params({})
    with pytest.raises(ValidationError, match="frozen"):
        params.common.seed = 3


def test_int_accepted_for_float_but_not_str_for_int():
    assert parse_params({"corpus": {"classifier": {"lr": 1}}}).corpus.classifier.lr == 1.0
    with pytest.raises(ParamsError):
        parse_params({"corpus": {"code_max_files": "10"}})


def test_stage_with_bad_params_exits_2_and_writes_nothing(tmp_path):
    bad = yaml.safe_load((ROOT / "configs/smoke.yaml").read_text())
    bad["corpus"]["decontamination"]["ngram"] = 1
    bad["common"]["paths"] = {k: str(tmp_path / k) for k in bad["common"]["paths"]}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(bad))
    proc = subprocess.run([sys.executable, "-m", "stages.corpus", "--params", str(tmp_path / "params.yaml")], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == (
        "error: invalid params: corpus.decontamination.ngram: must be >= 3 (got 1)")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["params.yaml"]


def test_corpus_snapshot_round_trip_and_the_corpus_never_reads_the_live_stdlib(tmp_path, monkeypatch):
    """The corpus stage reads the pinned snapshot in data/raw/code, so the interpreter's own library cannot change
    it; a snapshot keeps rows exactly (also text with U+2028, which str.splitlines would cut)."""
    from dsmath.data import corpus

    rows = [("a.py", "x = 1\n"), ("b.py", "s = '\u2028'\n\u00e9")]
    assert corpus.read_snapshot(corpus.write_snapshot(rows, tmp_path / "s.jsonl.xz", "path"), "path") == rows

    def live(*_a, **_k):
        raise AssertionError("the live standard library was read")

    monkeypatch.setattr(corpus, "stdlib_sources", live)
    monkeypatch.setattr(corpus, "pydoc_topics", live)
    cfg = parse_params({"corpus": {"code_max_files": 3, "recall_pool_files": 5, "math_synthetic_docs": 0,
                                   "include_gsm8k_train": False, "classifier": {"n_features": 1024, "epochs": 1}}})
    docs = [{"id": f"s{i}", "source": "synthetic", "text": f"{i} + 2 = {i + 2}. The answer is {i + 2}."}
            for i in range(40)]
    result = corpus.build_corpus(docs, set(), ROOT / "data/raw", ROOT / "data/extra", cfg.corpus, 0)
    assert len(result.code) == 3 and all(d["source"] == "python-stdlib" for d in result.code)


def test_an_overlay_takes_every_default_it_does_not_list_from_params_yaml():
    """configs/smollm2.yaml extends params.yaml: what it lists wins, everything else is params.yaml's (the class
    defaults of dsmath.config are never reached)."""
    from dsmath.config import load_raw

    main, real = load_raw(ROOT / "params.yaml"), load_raw(ROOT / "configs/smollm2.yaml")
    listed = yaml.safe_load((ROOT / "configs/smollm2.yaml").read_text())
    assert "extends" not in real and real["rl"]["mode"] == listed["rl"]["mode"] == "cot"
    assert real["rl"]["beta"] == main["rl"]["beta"] and "beta" not in listed["rl"]
    assert real["sft"]["train"]["optim"]["beta2"] == main["sft"]["train"]["optim"]["beta2"]  # merged key by key
    assert real["common"]["paths"]["synthetic"] == main["common"]["paths"]["synthetic"]  # the shared data
    assert real["evaluate"]["modes"] == ["cot"]  # a list replaces, never appends
    assert load_params(ROOT / "configs/smollm2.yaml").model.source == "pretrained"


def test_overlays_chain_and_refuse_loops(tmp_path):
    from dsmath.config import merge

    assert merge({"a": {"b": 1, "c": [1, 2]}, "d": 1}, {"a": {"c": [3]}, "e": 2}) == {"a": {"b": 1, "c": [3]},
                                                                                     "d": 1, "e": 2}
    (tmp_path / "one.yaml").write_text(f"extends: {ROOT / 'params.yaml'}\nrl: {{steps: 7}}\n")
    (tmp_path / "two.yaml").write_text("extends: one.yaml\nrl: {group_size: 4}\n")
    p = load_params(tmp_path / "two.yaml")
    assert (p.rl.steps, p.rl.group_size, p.rl.lr) == (7, 4, load_params(ROOT / "params.yaml").rl.lr)
    (tmp_path / "loop.yaml").write_text("extends: loop.yaml\n")
    with pytest.raises(ParamsError, match="loops back"):
        load_params(tmp_path / "loop.yaml")
    (tmp_path / "bad.yaml").write_text("extends: 3\n")
    with pytest.raises(ParamsError, match="must name a params file"):
        load_params(tmp_path / "bad.yaml")


def test_every_default_lives_once_code_defaults_equal_params_yaml():
    """One source of every default: each key of params.yaml has a code default equal to it, and the code has no key
    params.yaml lacks, so what a reader sees in src/dsmath/config/ is what runs."""
    from dsmath.config import Params, load_raw
    from dsmath.runtime.tracking import flatten

    code = flatten(Params().model_dump())
    yaml_ = flatten(load_params(ROOT / "params.yaml").model_dump())
    listed = flatten(load_raw(ROOT / "params.yaml"))
    assert set(listed) == set(code), f"in one only: {sorted(set(listed) ^ set(code))}"
    assert {k: (code[k], yaml_[k]) for k in code if code[k] != yaml_[k]} == {}


@pytest.mark.parametrize("text", ["", "\n", "# nothing but a comment\n", "{}\n"])
def test_an_empty_params_file_is_refused(tmp_path, text):
    (tmp_path / "params.yaml").write_text(text)
    with pytest.raises(ParamsError, match="params file is empty"):
        load_params(tmp_path / "params.yaml")


@pytest.mark.parametrize("value", [".inf", "-.inf", ".nan"])
def test_non_finite_numbers_are_refused(tmp_path, value):
    (tmp_path / "params.yaml").write_text(f"extends: {ROOT / 'params.yaml'}\nrl:\n  lr: {value}\n")
    with pytest.raises(ParamsError, match=r"rl.lr: must be a finite number"):
        load_params(tmp_path / "params.yaml")
