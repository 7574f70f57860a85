"""Behaviour of the RL engine in every algorithm x mode: a few steps on a tiny warm model with a scripted reward
raise the log-probability of the rewarded completion and lower that of the unrewarded one.

Set-up (module-scoped, shared by both modes): a tiny Llama trained by plain cross-entropy on two questions per mode,
each with two candidate completions A (rewarded) and B (not) in equal numbers, so that sampling at temperature 1
gives A or B with probability ~1/2 each and (almost) nothing else. The scorer is scripted: reward 1 for exactly A.
A's steps are right and B's wrong, so process supervision (which checks each line's arithmetic and the answer line
itself) agrees with it.

The two questions put the choice between A and B at two places that a correct engine must both reach:

- ``3 + 4`` (choice early): the first step line says ``= 7`` or ``= 8``; in tool mode that line comes *before* the
  python block, and the program, its output and the answer line after it are the same for A and B, so the outcome
  reward at the end must flow back across the tool-output hole of ``loss_mask`` (PPO: GAE must not restart there);
- ``6 + 2`` (choice late): only the digit inside the final ``\\boxed{}`` differs; in tool mode it comes *after* the
  output block, two tokens before EOS, so the score must sit on the true last policy token (not ``mask.sum() - 1``,
  which the hole shifts back by its length) and a process step must end where its tokens really are.

Rollouts go through the real sampler with a deterministic ``tool_fn`` that prints what the program would print, so
the forced output tokens are the ones the warm model was trained on.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from dsmath.config import Rl
from dsmath.config.rl import Ppo
from dsmath.generation.logprobs import sequence_logprobs
from dsmath.generation.rollout import tool_output_block
from dsmath.modeling import prompts
from dsmath.modeling.tokenizer import train_tokenizer
from dsmath.rl.scoring import Scores
from dsmath.rl.trainer import RLTrainer

MODES = ("cot", "tool")

OUT = object()  # marks a tool-output segment: (OUT, printed text)
_CODE = "Let me use Python.\n```python\nprint({})\n```"

# mode -> [(question, gold, A segments, B segments)]; a segment is policy text, or (OUT, output) for a tool output
CASES: dict[str, list[tuple[str, str, list, list]]] = {
    "cot": [
        ("What is 3 + 4?", "7", ["3 + 4 = 7\nThe answer is \\boxed{7}."],
         ["3 + 4 = 8\nThe answer is \\boxed{8}."]),
        ("What is 6 + 2?", "8", ["6 + 2 = 8\nThe answer is \\boxed{8}."],
         ["6 + 2 = 8\nThe answer is \\boxed{9}."]),
    ],
    "tool": [
        ("What is 3 + 4?", "7", ["3 + 4 = 7\n```python\nprint(3 + 4)\n```", (OUT, "7"), "The answer is \\boxed{7}."],
         ["3 + 4 = 8\n```python\nprint(3 + 4)\n```", (OUT, "7"), "The answer is \\boxed{7}."]),
        ("What is 6 + 2?", "8", [_CODE.format("6 + 2"), (OUT, "8"), "The answer is \\boxed{8}."],
         [_CODE.format("6 + 2"), (OUT, "8"), "The answer is \\boxed{9}."]),
    ],
}
PRINTS = {"print(3 + 4)": "7", "print(6 + 2)": "8"}

# (algorithm, advantage) x mode; ids like ppo-tool
ALGORITHMS = [("grpo", "outcome", "grpo_outcome"), ("grpo", "process", "grpo_process"), ("ppo", "outcome", "ppo"),
              ("online_rft", "outcome", "online_rft"), ("rft", "outcome", "rft")]
COMBOS = [pytest.param(alg, adv, mode, id=f"{name}-{mode}") for mode in MODES for alg, adv, name in ALGORITHMS]

RL_STEPS, RL_LR = 4, 3e-4
# after RL_STEPS steps: log p(A) must rise by more than RISE and log p(B) fall by more than FALL (nats), on both
# questions. Measured with these seeds (warm seed 0, trainer seed 1): a correct engine gives rises >= 0.44 and falls
# >= 0.91 in every combination (p(A) ~0.48 -> >= 0.75); with the score at mask.sum() - 1 (PPO, tool) the late-choice
# question moves the wrong way (-0.97 / +0.48), with process step ends counted without the hole it stays at
# |change| < 0.02, with GAE restarting at the hole the early-choice question gets +0.16 / -0.22. Over other seeds
# (3 warm x 2 trainer seeds, 60 runs) correct engines gave rises 0.31-0.66 and falls 0.72-4.8 except two falls of
# ~0.5 (grpo_outcome-tool and ppo-tool, early choice, warm seed 1): the thresholds have margin only at these seeds.
RISE, FALL = 0.25, 0.5


def tool_fn(codes: list[str]) -> list[str]:
    return [PRINTS.get(code.strip(), "NameError") for code in codes]


class ScriptedScorer:
    """Reward 1 for exactly the completion A of the question (told apart by its gold answer), else 0; accuracy =
    reward, format always 1. Exact match, not "the boxed answer is right": a hybrid such as B's wrong step with A's
    answer would otherwise be rewarded too and the policy could drift to it, away from A."""

    def __init__(self, mode: str):
        self.rewarded = {gold: _full_text(a) for _, gold, a, _ in CASES[mode]}

    def __call__(self, texts: list[str], golds: list[str]) -> Scores:
        r = torch.tensor([float(t.strip() == self.rewarded[g]) for t, g in zip(texts, golds, strict=True)])
        return Scores(list(texts), r, r.clone(), torch.ones_like(r))


# ---------------------------------------------------------------------------------------------------------------
# the shared fixture: tokenizer, token ids of the candidates, warm models


def _full_text(segments: list) -> str:
    text = ""
    for s in segments:
        text += tool_output_block(text, s[1]) if isinstance(s, tuple) else s
    return text


@pytest.fixture(scope="module")
def tok():
    corpus = []
    for mode, cases in CASES.items():
        for q, _, a, b in cases:
            corpus += [prompts.user_message(q, mode)] * 4 + [_full_text(a)] * 4 + [_full_text(b)] * 4
    return train_tokenizer(corpus, vocab_size=400)


def completion_ids(tok, segments: list) -> tuple[list[int], list[int]]:
    """Token ids of a completion as the sampler produces them (policy text, then the output block tokenised on its
    own, as ``ToolMode`` does), with EOS; and the policy mask (0 on tool-output tokens)."""
    ids: list[int] = []
    policy: list[int] = []
    for s in segments:
        forced = isinstance(s, tuple)
        text = tool_output_block(tok.decode(ids), s[1]) if forced else s
        new = tok(text, add_special_tokens=False)["input_ids"]
        ids += new
        policy += [0 if forced else 1] * len(new)
    return ids + [tok.eos_token_id], policy + [1]


def prompt_ids(tok, question: str, mode: str) -> list[int]:
    return tok(prompts.format_prompt(question, mode, tok), add_special_tokens=False)["input_ids"]


def warm_model(tok, steps: int = 150, seed: int = 0):
    """A tiny Llama fitted by cross-entropy to prompt + A and prompt + B of every question of both modes (1:1)."""
    torch.manual_seed(seed)
    model = LlamaForCausalLM(LlamaConfig(
        vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
        intermediate_size=64, max_position_embeddings=256, pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id))
    rows = []
    for mode, cases in CASES.items():
        for q, _, a, b in cases:
            p = prompt_ids(tok, q, mode)
            for segments in (a, b):
                c, _ = completion_ids(tok, segments)
                rows.append((p + c, [-100] * len(p) + c))
    width = max(len(ids) for ids, _ in rows)
    ids = torch.tensor([x + [tok.pad_token_id] * (width - len(x)) for x, _ in rows])
    labels = torch.tensor([y + [-100] * (width - len(y)) for _, y in rows])
    mask = (ids != tok.pad_token_id).long()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model.train()
    for _ in range(steps):
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return model.eval()


@pytest.fixture(scope="module")
def warm(tok):
    """The warm model (both modes: the prompt's instruction line tells them apart), shared by the module's tests."""
    return warm_model(tok)


def candidate_logprobs(model, tok, mode: str) -> list[tuple[float, float]]:
    """(log p(A), log p(B)) per question: sums of the policy tokens' log-probs (tool output left out)."""
    out = []
    for q, _, a, b in CASES[mode]:
        p = prompt_ids(tok, q, mode)
        pair = []
        for segments in (a, b):
            c, policy = completion_ids(tok, segments)
            x = torch.tensor([p + c])
            with torch.no_grad():
                lp = sequence_logprobs(model, x, torch.ones_like(x), len(c))[0]
            pair.append(float((lp * torch.tensor(policy, dtype=lp.dtype)).sum()))
        out.append((pair[0], pair[1]))
    return out


def rl_config(algorithm: str, advantage: str, mode: str, lr: float = RL_LR) -> Rl:
    # PPO: kl_coef 0 makes the scripted score the only token reward (the KL penalty has its own tests), and
    # gamma = lam = 1 gives every policy token the full score minus the baseline, however far before the end it is
    return Rl(algorithm=algorithm, advantage=advantage, mode=mode, steps=RL_STEPS, prompts_per_step=2, group_size=8,
              lr=lr, warmup_steps=0, max_new_tokens=64, eval_every=0, ppo=Ppo(kl_coef=0.0, lam=1.0))


def run_rl(model, tok, algorithm: str, advantage: str, mode: str, *, steps: int = RL_STEPS, lr: float = RL_LR,
           seed: int = 1) -> list[float]:
    """Train `model` in place for `steps` RL steps; returns the accuracy of each step's samples."""
    cfg = rl_config(algorithm, advantage, mode, lr)
    problems = [{"question": q, "answer": g} for q, g, *_ in CASES[mode]]
    trainer = RLTrainer(cfg, model, tok, problems, ScriptedScorer(mode), seed=seed,
                        tool_fn=tool_fn if mode == "tool" else None)
    return [trainer.step()["rl/accuracy"] for _ in range(steps)]


# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_warm_model_samples_both_candidates(tok, warm, mode):
    """The premise: the warm model gives A and B about 1/2 each, and the sampler reproduces their tokens."""
    for log_a, log_b in candidate_logprobs(warm, tok, mode):
        assert log_a > math.log(0.35) and log_b > math.log(0.35), (log_a, log_b)
    trainer = RLTrainer(rl_config("grpo", "outcome", mode), copy.deepcopy(warm), tok,
                        [{"question": q, "answer": g} for q, g, *_ in CASES[mode]], ScriptedScorer(mode), seed=0,
                        tool_fn=tool_fn if mode == "tool" else None)
    ro = trainer.rollout([ids for q, *_ in CASES[mode] for ids in [prompt_ids(tok, q, mode)] * 8])
    texts = tok.batch_decode([r[m.bool()].tolist() for r, m in zip(ro.completion_ids, ro.completion_mask,
                                                                     strict=True)], skip_special_tokens=True)
    known = {_full_text(s) for _, _, a, b in CASES[mode] for s in (a, b)}
    assert sum(t in known for t in texts) >= 0.8 * len(texts), texts
    if mode == "tool":
        assert bool((ro.tool_calls == 1).float().mean() >= 0.8) and bool((ro.loss_mask < ro.completion_mask).any())


@pytest.mark.parametrize(("algorithm", "advantage", "mode"), COMBOS)
def test_rewarded_completion_gains_probability(tok, warm, algorithm, advantage, mode):
    torch.manual_seed(0)  # independent of the order tests run in (the global RNG is not the trainer's)
    policy = copy.deepcopy(warm)
    before = candidate_logprobs(policy, tok, mode)
    accuracy = run_rl(policy, tok, algorithm, advantage, mode)
    after = candidate_logprobs(policy, tok, mode)
    for (q, *_), (a0, b0), (a1, b1) in zip(CASES[mode], before, after, strict=True):
        msg = f"{q!r}: log p(A) {a0:.3f} -> {a1:.3f}, log p(B) {b0:.3f} -> {b1:.3f}; accuracy per step {accuracy}"
        assert a1 - a0 > RISE, msg
        assert b1 - b0 < -FALL, msg
