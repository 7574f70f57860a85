"""Every params section's validators reject what they must, with the `<key.path>: <reason> (got X)` message:
field bounds, literals, and the combinations that are invalid together (model shapes, batch sizes, mix shares,
reward weights, evaluation settings and the primary metric, RL algorithm options)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dsmath.config import GREEDY_METRICS, Evaluate, ParamsError, load_params, metric_names, parse_params

ROOT = Path(__file__).resolve().parents[2]
PROFILES = ["params.yaml", "configs/smoke.yaml", "configs/smollm2.yaml"]


def rejects(raw: dict) -> str:
    """The one-line ParamsError message of `raw`."""
    with pytest.raises(ParamsError) as err:
        parse_params(raw)
    msg = str(err.value)
    assert "\n" not in msg
    return msg


REJECTED = [
    # ---- model: sizes, literals, shapes that do not fit together
    ({"model": {"hidden_size": 0}}, "model.hidden_size: must be >= 1 (got 0)"),
    ({"model": {"source": "gguf"}}, "model.source: must be one of 'scratch' or 'pretrained' (got 'gguf')"),
    ({"model": {"rope_theta": 0.0}}, "model.rope_theta: must be > 0.0 (got 0.0)"),
    ({"model": {"init_std": -0.02}}, "model.init_std: must be > 0.0 (got -0.02)"),
    ({"model": {"hidden_size": 100, "num_heads": 3, "num_kv_heads": 3}},
     "model.num_heads: must divide hidden_size=100 (got 3)"),
    ({"model": {"hidden_size": 160, "num_heads": 4, "num_kv_heads": 3}},
     "model.num_kv_heads: must divide num_heads=4 (got 3)"),
    ({"model": {"hidden_size": 160, "num_heads": 4, "num_kv_heads": 8}},
     "model.num_kv_heads: must divide num_heads=4 (got 8)"),  # more kv heads than heads
    ({"model": {"hidden_size": 150, "num_heads": 10, "num_kv_heads": 5}},
     "model.num_heads: hidden_size / num_heads (the head dim) must be even for rotary embeddings "
     "(got 150 / 10 = 15)"),
    ({"model": {"source": "pretrained"}}, "model.name_or_path: required when source is 'pretrained'"),
    # ---- training loops (base, pretrain, sft) and their optimizer
    ({"base": {"train": {"max_steps": 0}}}, "base.train.max_steps: must be >= 1 (got 0)"),
    ({"pretrain": {"train": {"global_batch_size": 32, "micro_batch_size": 5}}},
     "pretrain.train.micro_batch_size: must divide global_batch_size=32 (got 5)"),
    ({"sft": {"train": {"global_batch_size": 16, "micro_batch_size": 32}}},
     "sft.train.micro_batch_size: must divide global_batch_size=16 (got 32)"),  # micro batch larger than global
    ({"base": {"train": {"checkpoint_every": -1}}}, "base.train.checkpoint_every: must be >= 0 (got -1)"),
    ({"base": {"train": {"keep_checkpoints": 0}}}, "base.train.keep_checkpoints: must be >= 1 (got 0)"),
    ({"sft": {"train": {"optim": {"lr": 0.0}}}}, "sft.train.optim.lr: must be > 0.0 (got 0.0)"),
    ({"sft": {"train": {"optim": {"beta1": 1.0}}}}, "sft.train.optim.beta1: must be < 1.0 (got 1.0)"),
    ({"sft": {"train": {"optim": {"beta2": -0.1}}}}, "sft.train.optim.beta2: must be >= 0.0 (got -0.1)"),
    ({"sft": {"train": {"optim": {"min_lr_ratio": 1.5}}}}, "sft.train.optim.min_lr_ratio: must be <= 1.0 (got 1.5)"),
    ({"sft": {"train": {"optim": {"grad_clip": 0.0}}}}, "sft.train.optim.grad_clip: must be > 0.0 (got 0.0)"),
    ({"sft": {"train": {"optim": {"warmup_steps": -1}}}}, "sft.train.optim.warmup_steps: must be >= 0 (got -1)"),
    ({"sft": {"train": {"optim": {"momentum": 0.9}}}}, "sft.train.optim.momentum: unknown key"),
    # ---- sft mix: non-negative shares, normalised, so they must not all be 0
    ({"sft": {"mix": {"pot": -0.1}}}, "sft.mix.pot: must be >= 0.0 (got -0.1)"),
    ({"sft": {"mix": {"cot": 0.0, "pot": 0.0, "tool": 0.0}}},
     "sft.mix.cot: the shares cot + pot + tool must sum to > 0 (got 0.0 + 0.0 + 0.0)"),
    ({"sft": {"probe": {"mode": "sql"}}}, "sft.probe.mode: must be one of 'cot', 'pot' or 'tool' (got 'sql')"),
    # ---- rewards
    ({"rewards": {"format_weight": -0.1}}, "rewards.format_weight: must be >= 0.0 (got -0.1)"),
    ({"rewards": {"accuracy_weight": 0.0, "format_weight": 0.0}},
     "rewards.accuracy_weight: accuracy_weight + format_weight must be > 0 (got 0)"),
    ({"rewards": {"equivalence_timeout_s": 0.0}}, "rewards.equivalence_timeout_s: must be > 0.0 (got 0.0)"),
    ({"rewards": {"equivalence_timeout_s": 601.0}}, "rewards.equivalence_timeout_s: must be <= 600.0 (got 601.0)"),
    # ---- sandbox
    ({"sandbox": {"timeout_s": 0.0}}, "sandbox.timeout_s: must be > 0.0 (got 0.0)"),
    ({"sandbox": {"timeout_s": 601.0}}, "sandbox.timeout_s: must be <= 600.0 (got 601.0)"),
    ({"sandbox": {"memory_mb": 32}}, "sandbox.memory_mb: must be >= 64 (got 32)"),
    ({"sandbox": {"max_output_bytes": 100}}, "sandbox.max_output_bytes: must be >= 256 (got 100)"),
    ({"sandbox": {"workers": 0}}, "sandbox.workers: must be >= 1 (got 0)"),
    # ---- evaluate: settings and the combinations among them
    ({"evaluate": {"n_samples": 4, "k": [1, 8]}}, "evaluate.k: every k must be <= n_samples=4 (got [1, 8])"),
    ({"evaluate": {"k": [0]}}, "evaluate.k.0: must be >= 1 (got 0)"),
    ({"evaluate": {"temperature": 0.0}}, "evaluate.temperature: must be > 0.0 (got 0.0)"),
    ({"evaluate": {"modes": ["cot", "sql"]}}, "evaluate.modes.1: must be one of 'cot', 'pot' or 'tool' (got 'sql')"),
    ({"evaluate": {"models": ["sft", "dpo"]}}, "evaluate.models.1: must be one of 'base', 'pretrain', 'sft' or 'rl'"),
    ({"evaluate": {"modes": []}}, "evaluate.modes: must list at least one of cot, pot, tool (got [])"),
    ({"evaluate": {"datasets": {"synthetic": 0, "gsm8k_test": 0, "svamp": 0, "math500": 0}}},
     "evaluate.datasets: at least one dataset must have size > 0 (got all 0)"),
    ({"evaluate": {"engine": "vllm"}}, "evaluate.engine: must be one of 'auto', 'fast' or 'hf' (got 'vllm')"),
    # ---- rl.ppo
    ({"rl": {"ppo": {"gamma": 0.0}}}, "rl.ppo.gamma: must be > 0.0 (got 0.0)"),
    ({"rl": {"ppo": {"gamma": 1.5}}}, "rl.ppo.gamma: must be <= 1.0 (got 1.5)"),
    ({"rl": {"ppo": {"lam": -0.1}}}, "rl.ppo.lam: must be >= 0.0 (got -0.1)"),
    ({"rl": {"ppo": {"lam": 1.1}}}, "rl.ppo.lam: must be <= 1.0 (got 1.1)"),
    ({"rl": {"ppo": {"kl_coef": -0.05}}}, "rl.ppo.kl_coef: must be >= 0.0 (got -0.05)"),
    ({"rl": {"ppo": {"value_clip": 0.0}}}, "rl.ppo.value_clip: must be > 0.0 (got 0.0)"),
    ({"rl": {"ppo": {"critic_lr": 0.0}}}, "rl.ppo.critic_lr: must be > 0.0 (got 0.0)"),
    ({"rl": {"ppo": {"critic": "big"}}}, "rl.ppo.critic: unknown key"),
    # ---- rl: options that are invalid together with the algorithm (wording owned by the RL work: parts only)
    ({"rl": {"algorithm": "ppo", "advantage": "process"}},
     ("rl.advantage: ", "GRPO", "(got algorithm ppo)")),
    ({"rl": {"algorithm": "rft", "advantage": "process"}},
     ("rl.advantage: ", "GRPO", "(got algorithm rft)")),
    ({"rl": {"algorithm": "ppo", "dynamic_sampling": True}},
     ("rl.dynamic_sampling: ", "(got ppo)")),
    ({"rl": {"algorithm": "rft", "dynamic_sampling": True}},
     ("rl.dynamic_sampling: ", "(got rft)")),
    ({"rl": {"group_size": 1}}, "rl.group_size: must be >= 2 (got 1)"),
    ({"rl": {"clip_eps": 1.0}}, "rl.clip_eps: must be < 1.0 (got 1.0)"),
    ({"rl": {"top_p": 0.0}}, "rl.top_p: must be > 0.0 (got 0.0)"),
    ({"rl": {"kl": "k4"}}, "rl.kl: must be one of 'k1', 'k2' or 'k3' (got 'k4')"),
    ({"rl": {"prompt_levels": [6]}}, "rl.prompt_levels.0: must be <= 5 (got 6)"),
    ({"sft": {"levels": [0]}}, "sft.levels.0: must be >= 1 (got 0)"),
    ({"rewards": {"random_p": 1.5}}, ("rewards.random_p: ", "1", "1.5")),
    ({"rewards": {"random_p": -0.1}}, ("rewards.random_p: ", "0", "-0.1")),
    ({"rl": {"reward": "coin"}}, ("rl.reward: ", "random", "coin")),
    ({"evaluate": {"passk_problems": 8, "passk_samples": 16, "passk_k": [1, 64]}},
     ("evaluate.passk_k: ", "passk_samples=16", "64")),
]


def _id(i: int, message: str | tuple[str, ...]) -> str:
    return (message if isinstance(message, str) else message[0]).split(":")[0] + f"-{i}"


@pytest.mark.parametrize(("raw", "message"), REJECTED, ids=[_id(i, m) for i, (_, m) in enumerate(REJECTED)])
def test_section_validators_reject(raw, message):
    """`message`: the whole expected message, or (for sections other agents are still extending) its parts: the
    key path first, then the reason's key words and the offending value."""
    got = rejects(raw)
    if isinstance(message, str):
        assert message in got
    else:
        assert got.startswith(message[0]) and all(part in got for part in message[1:])


@pytest.mark.parametrize(
    "raw",
    [
        {"model": {"hidden_size": 96, "num_heads": 6, "num_kv_heads": 2}},  # head dim 16, 3 heads per kv head
        {"sft": {"train": {"global_batch_size": 32, "micro_batch_size": 8}}},
        {"sft": {"mix": {"cot": 0.0, "pot": 0.0, "tool": 3.0}}},  # shares are normalised: any positive sum
        {"rewards": {"accuracy_weight": 0.0, "format_weight": 1.0}},
        {"rl": {"algorithm": "online_rft", "dynamic_sampling": True}},
        {"rl": {"algorithm": "grpo", "advantage": "process"}},
        {"rl": {"algorithm": "ppo", "ppo": {"gamma": 1.0, "lam": 0.0, "kl_coef": 0.0}}},
        {"evaluate": {"n_samples": 0, "k": [1, 64]}},  # greedy only: k is unused
        {"rl": {"reward": "random"}, "rewards": {"random_p": 0.0}},
        {"rl": {"reward": "random"}, "rewards": {"random_p": 1.0}},
        {"evaluate": {"passk_problems": 32, "passk_samples": 64, "passk_k": [1, 4, 16, 64]}},
    ],
)
def test_valid_neighbours_are_accepted(raw):
    parse_params(raw)


# ----------------------------------------------------------------------------------------------------------------
# evaluate.primary_metric: `<dataset>/<mode>/<metric>` of a metric the evaluation of the RL model reports


@pytest.mark.parametrize("profile", PROFILES)
def test_shipped_profiles_load_and_name_an_evaluated_primary_metric(profile):
    ev = load_params(ROOT / profile).evaluate
    assert ev.primary_metric in metric_names(ev)


def test_metric_names_of_the_defaults():
    names = metric_names(Evaluate())  # 4 datasets x 3 modes x 3 greedy metrics; synthetic cot, tool sampled at k 1..8
    assert len(names) == 4 * 3 * 3 + 2 * 2 * 4 and len(set(names)) == len(names)
    assert {"synthetic/cot/greedy", "math500/tool/mean_length", "synthetic/tool/pass@8", "synthetic/tool/maj@1"} <= set(
        names)
    assert not {n for n in names if "@" in n and not n.startswith(("synthetic/tool/", "synthetic/cot/"))}
    assert metric_names(Evaluate(sampled_models=["sft"])) == [n for n in names if "@" not in n]


PRIMARY_REJECTED = [
    ({"primary_metric": "synthetic/cot/gredy"}, "typo in the metric"),
    ({"primary_metric": "synthetic/cot"}, "no metric"),
    ({"primary_metric": "synthetic/cot/greedy/x"}, "too many parts"),
    ({"primary_metric": "synthtic/cot/greedy"}, "unknown dataset"),
    ({"primary_metric": "gsm8k_test/cot/greedy", "datasets": {"gsm8k_test": 0}}, "dataset skipped (size 0)"),
    ({"primary_metric": "synthetic/pot/greedy", "modes": ["cot", "tool"]}, "mode not evaluated"),
    ({"primary_metric": "synthetic/pot/pass@4"}, "mode not sampled"),
    ({"primary_metric": "svamp/tool/maj@4"}, "dataset not sampled"),
    ({"primary_metric": "synthetic/tool/pass@3"}, "k not in evaluate.k"),
    ({"primary_metric": "synthetic/tool/pass@16"}, "k beyond evaluate.k"),
    ({"primary_metric": "synthetic/tool/pass@8", "n_samples": 4, "k": [1, 2, 4]}, "k > n_samples"),
    ({"primary_metric": "synthetic/tool/maj@1", "n_samples": 0}, "greedy only"),
    ({"primary_metric": "synthetic/tool/pass@1", "sampled_models": ["sft"]}, "the RL model is not sampled"),
    ({"primary_metric": "synthetic/cot/greedy_problems_per_s"}, "a speed, not a quality metric"),
    ({"primary_metric": "synthetic/cot/n"}, "a count, not a quality metric"),
]


def test_primary_metric_must_have_a_validation_split():
    """gsm8k_test/cot/greedy is evaluated, but the champion is chosen on validation and only synthetic has one."""
    assert rejects({"evaluate": {"primary_metric": "gsm8k_test/cot/greedy"}}) == (
        "evaluate.primary_metric: must be a synthetic metric, the only set with a validation split where models are "
        "compared (got 'gsm8k_test/cot/greedy')")


def test_rl_seeds_must_be_distinct_and_present():
    assert rejects({"common": {"rl_seeds": []}}) == "common.rl_seeds: must list at least one seed (got [])"
    assert rejects({"common": {"rl_seeds": [1, 2, 1]}}) == "common.rl_seeds: must not repeat a seed (got [1, 2, 1])"
    assert rejects({"common": {"rl_seeds": [-1]}}).startswith("common.rl_seeds.0: must be >= 0")


@pytest.mark.parametrize(("evaluate", "why"), PRIMARY_REJECTED, ids=[w for _, w in PRIMARY_REJECTED])
def test_primary_metric_must_be_evaluated(evaluate, why):
    msg = rejects({"evaluate": evaluate})
    head, _, rest = msg.partition(": ")
    assert head == "evaluate.primary_metric"
    assert rest.startswith("must be one of the evaluated metrics ")
    assert rest.endswith(f"(got {evaluate['primary_metric']!r})")
    listed = rest.removeprefix("must be one of the evaluated metrics ").rsplit(" (got ", 1)[0].split(", ")
    ev = Evaluate.model_validate({k: v for k, v in evaluate.items() if k != "primary_metric"})  # same settings
    assert listed == metric_names(ev) and listed  # the valid choices, all of them


@pytest.mark.parametrize(
    "evaluate",
    [
        {"primary_metric": "synthetic/tool/pass@8"},
        {"primary_metric": "synthetic/tool/maj@2"},
        {"primary_metric": "synthetic/pot/format_error_rate"},
        {"primary_metric": "synthetic/tool/mean_length"},
        {"primary_metric": "synthetic/cot/maj@4", "sampled_modes": ["cot"]},
    ],
)
def test_primary_metric_accepts_evaluated_metrics(evaluate):
    assert parse_params({"evaluate": evaluate}).evaluate.primary_metric == evaluate["primary_metric"]


def test_metric_names_are_what_evaluate_model_reports(monkeypatch):
    """The validator's list == the keys `evaluate_model` writes (minus speeds, counts and the cot arithmetic
    diagnostics), in a small setting: skipped datasets, two modes of which one is sampled, two sampled datasets
    (generation stubbed)."""
    from dsmath.config import Rewards, Sandbox
    from dsmath.evaluation import evaluate

    cfg = Evaluate(datasets={"synthetic": 2, "gsm8k_test": 0, "svamp": 1, "math500": 0}, modes=["cot", "pot"],
                   sampled_datasets=["synthetic", "svamp"], sampled_modes=["cot"], n_samples=2, k=[1, 2],
                   primary_metric="synthetic/cot/maj@2")

    class FakeGenerator:
        last_number = False

        def __init__(self, *args, **kwargs):
            pass

        def __call__(self, questions, mode, temperature):
            return ["The answer is \\boxed{1}." for _ in questions], [7 for _ in questions]

        def map(self, fn, *columns):
            return fn(*columns)

    monkeypatch.setattr(evaluate, "Generator", FakeGenerator)
    records = {name: [{"id": f"{name}{i}", "question": f"q{i}", "answer": "1"} for i in range(n)]
               for name, n in cfg.datasets.model_dump().items() if n}
    metrics, _ = evaluate.evaluate_model(None, None, records, cfg, Sandbox(), Rewards(), seed=0, sampling=True)
    arithmetic = ("n_equations", "n_links", "equation_acc", "link_acc")  # cot diagnostics, not primary metrics
    reported = {k for k in metrics if k.rsplit("/", 1)[1] not in ("n", "greedy_problems_per_s",
                                                                   "sampled_problems_per_s", *arithmetic)
                and "/equations/" not in k}
    assert reported == set(metric_names(cfg))
    assert {k.rsplit("/", 1)[1] for k in reported if "@" not in k} == set(GREEDY_METRICS)
