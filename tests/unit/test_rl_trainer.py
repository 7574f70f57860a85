"""The RL engine on a tiny random model: every algorithm steps, parameters move, degenerate batches are safe,
checkpoint/resume reproduces an uninterrupted run."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from dsmath.config import Rl
from dsmath.modeling.tokenizer import train_tokenizer
from dsmath.rl.scoring import Scores
from dsmath.rl.trainer import RLTrainer

TEXTS = [f"What is {a} + {b}? {a} + {b} = {a + b}. The answer is \\boxed{{{a + b}}}." for a in range(30)
         for b in range(5)]
PROBLEMS = [{"question": f"What is {a} + 3?", "answer": str(a + 3)} for a in range(40)]


@pytest.fixture(scope="module")
def tok():
    return train_tokenizer(TEXTS, vocab_size=300)


def tiny_model(tok, seed=0):
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                      num_key_value_heads=2, intermediate_size=64, max_position_embeddings=256,
                      pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    return LlamaForCausalLM(cfg).float()


class LengthScorer:
    """Reward 1 when the completion has an even number of characters: random models give mixed groups."""

    def __init__(self, constant: float | None = None):
        self.constant = constant

    def __call__(self, texts, golds):
        r = [self.constant if self.constant is not None else float(len(t) % 2 == 0) for t in texts]
        t = torch.tensor(r)
        return Scores(texts, t, t.clone(), torch.ones_like(t))


def cfg(**kw):
    base = dict(steps=2, prompts_per_step=2, group_size=4, max_new_tokens=8, lr=1e-2, warmup_steps=0,
                beta=0.04, eval_every=0, mode="cot", train_buckets=1, share_prompts=False)
    return Rl(**(base | kw))


@pytest.mark.parametrize("algorithm", ["grpo", "ppo", "online_rft", "rft"])
def test_each_algorithm_steps_and_moves_parameters(tok, algorithm):
    model = tiny_model(tok)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    trainer = RLTrainer(cfg(algorithm=algorithm, skip_zero_advantage=False), model, tok, PROBLEMS, LengthScorer(),
                        seed=1)
    metrics = trainer.step()
    for key in ("rl/reward_mean", "rl/accuracy", "rl/kl", "rl/entropy", "rl/response_len_mean", "rl/lr",
                "rl/rollout_tokens_per_s", "rl/zero_std_groups", "rl/time_train_s"):
        assert key in metrics and torch.isfinite(torch.tensor(metrics[key])), key
    cut = metrics["rl/truncated_rate"] * 8  # rows cut by max_new_tokens = 8, of the step's 8 rows
    assert cut == round(cut) and (cut == 0 or metrics["rl/response_len_max"] == 8)
    moved = [n for n, p in model.named_parameters() if not torch.equal(p, before[n])]
    if algorithm in ("online_rft", "rft") and metrics["rl/accuracy"] == 0:
        assert moved == []
    else:
        assert moved, "no parameter moved"
        assert "rl/clip_frac" in metrics and "rl/ratio_mean" in metrics
    if algorithm == "ppo":
        assert "rl/value_loss" in metrics


@pytest.mark.parametrize("skip", [True, False])
def test_all_equal_groups_without_nan(tok, skip):
    """Equal rewards everywhere: the skip option trains no row; the faithful objective still trains every row (its
    KL term), without NaN either way."""
    model = tiny_model(tok)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    trainer = RLTrainer(cfg(skip_zero_advantage=skip), model, tok, PROBLEMS, LengthScorer(constant=1.0), seed=1)
    metrics = trainer.step()
    assert metrics["rl/zero_std_groups"] == 1.0
    assert metrics["rl/trained_rows"] == (0 if skip else 8)
    if skip:
        assert all(torch.equal(p, before[n]) for n, p in model.named_parameters())
        assert "rl/kl_loss" not in metrics
    else:
        assert "rl/kl_loss" in metrics
    assert "rl/kl" in metrics
    assert all(v == v for v in metrics.values())  # no NaN


def test_nan_loss_is_skipped_and_counted(tok):
    model = tiny_model(tok)
    trainer = RLTrainer(cfg(), model, tok, PROBLEMS, LengthScorer(), seed=1)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    stats = trainer._optimise(torch.tensor(float("nan"), requires_grad=True))
    assert stats["grad_norm"] != stats["grad_norm"]  # NaN reported
    assert trainer.skipped == 1
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters())


def test_prompt_stream_is_deterministic_and_covers_an_epoch(tok):
    t = RLTrainer(cfg(prompts_per_step=8), tiny_model(tok), tok, PROBLEMS, LengthScorer(), seed=3)
    seen = [p["question"] for s in range(5) for p in t.prompt_batch(s)]
    assert sorted(seen) == sorted(p["question"] for p in PROBLEMS)  # 5 x 8 = one epoch of 40
    assert t.prompt_batch(2) == RLTrainer(cfg(prompts_per_step=8), tiny_model(tok), tok, PROBLEMS, LengthScorer(),
                                          seed=3).prompt_batch(2)


def test_resume_equals_uninterrupted(tok):
    straight = RLTrainer(cfg(), tiny_model(tok), tok, PROBLEMS, LengthScorer(), seed=5)
    straight.step()
    straight.step()

    first = RLTrainer(cfg(), tiny_model(tok), tok, PROBLEMS, LengthScorer(), seed=5)
    first.step()
    state = first.state_dict()
    resumed = RLTrainer(cfg(), tiny_model(tok, seed=99), tok, PROBLEMS, LengthScorer(), seed=5)
    resumed.load_state_dict(state)
    resumed.step()
    for (n, a), (_, b) in zip(straight.policy.named_parameters(), resumed.policy.named_parameters(), strict=True):
        torch.testing.assert_close(a, b, msg=n)


@pytest.mark.parametrize("extra", [{}, {"algorithm": "ppo"}, {"skip_zero_advantage": True}, {"minibatches": 2},
                                   {"advantage": "process"}], ids=["grpo", "ppo", "skip", "minibatches", "process"])
def test_bucketed_and_shared_training_forwards_follow_the_single_forward(tok, extra):
    """rl.train_buckets > 1 and rl.share_prompts change only how the reference and policy forwards are batched:
    same metrics and weights after two steps as one forward over the padded batch, up to floating-point order."""
    ends = []
    for buckets, share in ((1, False), (3, False), (1, True), (3, True)):
        t = RLTrainer(cfg(train_buckets=buckets, share_prompts=share, max_new_tokens=12, **extra), tiny_model(tok),
                      tok, PROBLEMS, LengthScorer(), seed=5)
        metrics = [t.step(), t.step()]
        ends.append((metrics, torch.cat([p.detach().flatten() for p in t.policy.parameters()])))
    for end in ends[1:]:
        for key in ("rl/loss", "rl/kl", "rl/kl_loss", "rl/reward_mean"):
            assert end[0][-1][key] == pytest.approx(ends[0][0][-1][key], rel=1e-3, abs=1e-6), key
        # Adam divides by the gradient's own scale: a weight whose gradient is ~0 moves by a rounding-dependent step
        torch.testing.assert_close(end[1], ends[0][1], rtol=1e-3, atol=5e-5)


def test_iterative_grpo_resets_the_reference(tok):
    t = RLTrainer(cfg(ref_reset_every=1, skip_zero_advantage=False), tiny_model(tok), tok, PROBLEMS, LengthScorer(),
                  seed=1)
    t.step()
    after_first = {n: p.detach().clone() for n, p in t.policy.named_parameters()}
    assert not all(torch.equal(p, t.ref.get_parameter(n)) for n, p in after_first.items())
    t.step()  # step 2 starts by copying the policy into the reference, then updates the policy again
    assert all(torch.equal(p, t.ref.get_parameter(n)) for n, p in after_first.items())


def test_bfloat16_training_recomputes_pi_old_with_the_training_forward(tok):
    """In bf16 the sampler and the training forward round differently; pi_old is then rescored by the training
    forward, so on the first pass (mu = 1) the ratio is exactly 1 and nothing is clipped. Weights stay float32."""
    trainer = RLTrainer(cfg(skip_zero_advantage=False), tiny_model(tok), tok, PROBLEMS, LengthScorer(), seed=1,
                        dtype=torch.bfloat16)
    m = trainer.step()
    assert m["rl/ratio_min"] == m["rl/ratio_max"] == 1.0 and m["rl/clip_frac"] == 0.0
    assert all(p.dtype == torch.float32 for p in trainer.policy.parameters())
    assert torch.isfinite(torch.tensor(m["rl/loss"])) and m["rl/kl"] >= 0.0


def test_world_shard_splits_in_order_with_sizes_within_one():
    from dsmath.runtime.distributed import World

    for n, size in [(16, 2), (7, 3), (2, 4), (0, 2)]:
        parts = [World(rank, size).shard(n) for rank in range(size)]
        assert [i for p in parts for i in p] == list(range(n))
        assert max(map(len, parts)) - min(map(len, parts)) <= 1


def test_the_rejection_stage_fine_tunes_on_right_samples_and_restarts_rl_from_them(tok):
    """rl.rejection (R1's middle stages): the stream's next questions sampled, right outputs kept (even length here),
    the policy fine-tuned on them, then reference := policy and a fresh optimiser; the flag survives a checkpoint."""
    from dsmath.config import Rejection
    from dsmath.generation.rollout import decode_completions
    from dsmath.rl.rejection import rejection_stage, sample_right

    rs = Rejection(at_step=1, prompts=4, samples=4, keep_per_prompt=2, epochs=2, batch_size=3, lr=1e-2)
    trainer = RLTrainer(cfg(steps=3, rejection=rs), tiny_model(tok), tok, PROBLEMS, LengthScorer(), seed=1)
    trainer.step()
    probe = RLTrainer(cfg(steps=3, rejection=rs), tiny_model(tok), tok, PROBLEMS, LengthScorer(), seed=1)
    probe.load_state_dict(trainer.state_dict())
    kept, drawn = sample_right(probe)  # what the stage will sample: the same stream, the same noise
    texts = decode_completions(tok, kept.completion_ids, kept.completion_mask)
    assert all(len(t) % 2 == 0 for t in texts) and drawn["rs_samples"] == 16  # 4 questions x 4 samples
    assert drawn["rs_kept"] == len(texts) <= 8  # at most 2 per question
    before = {n: p.detach().clone() for n, p in trainer.policy.named_parameters()}
    cursor = trainer.cursor
    m = rejection_stage(trainer, seed=1)
    assert trainer.cursor == cursor + 4 and trainer.rejection_done
    assert m["rl/rs_kept"] == drawn["rs_kept"] and m["rl/rs_samples"] == 16
    assert m["rl/rs_sft_steps"] == 2 * -(-drawn["rs_kept"] // 3)  # epochs x batches of 3
    assert any(not torch.equal(p, before[n]) for n, p in trainer.policy.named_parameters())
    assert all(torch.equal(p, trainer.ref.state_dict()[n]) for n, p in trainer.policy.state_dict().items())
    assert trainer.opt.state == {} and trainer.sched.last_epoch == 0  # a fresh optimiser and warm-up
    trainer.step()
    resumed = RLTrainer(cfg(steps=3, rejection=rs), tiny_model(tok), tok, PROBLEMS, LengthScorer(), seed=1)
    resumed.load_state_dict(trainer.state_dict())
    assert resumed.rejection_done and resumed.step_count == 2
