"""DeepSeek-R1's rejection-sampling stage inside one RL run (``rl.rejection``; R1 sec. 2.3.3).

R1 trains in four stages: cold-start SFT, reasoning RL, SFT on rejection-sampled outputs of the RL model, RL again.
Here the first is the chain's SFT model; after ``rl.rejection.at_step`` RL steps :func:`rejection_stage`

1. samples the policy ``samples`` times on each of the prompt stream's next ``prompts`` questions (at the rollout
   temperature; the questions are used up like an RL step's, so the second RL stage goes on with fresh ones),
2. keeps up to ``keep_per_prompt`` right outputs per question (:func:`keep_rows`, by the run's accuracy reward),
3. fine-tunes the policy on them: ``epochs`` passes in shuffled batches of ``batch_size``, the token-mean negative
   log-likelihood of the tokens the policy wrote (tool outputs excluded), AdamW at ``lr``,
4. and makes the fine-tuned model the reference of the second RL stage, with a fresh RL optimiser and warm-up.

Differences from R1, stated: R1 fine-tunes the *base* model on ~800k rejection-sampled and other samples; here the
RL policy itself is fine-tuned on its own right outputs (the stage is one step of expert iteration between two RL
stages). Its samples count with the run's: a study comparing it with plain GRPO at equal samples runs
``prompts x samples / (prompts_per_step x group_size)`` fewer RL steps.

Across processes every rank samples and fine-tunes on the same rows (the sampling noise is the run's, the gradients
are equal, so their average is each rank's): correct, not faster.
"""

from __future__ import annotations

import torch

from dsmath.generation.logprobs import bucketed_logprobs
from dsmath.generation.rollout import Rollout, concat_rollouts, decode_completions
from dsmath.runtime.distributed import average_gradients


def keep_rows(correct: list[bool], samples: int, keep: int) -> list[int]:
    """The rows to fine-tune on: per question (rows q*samples .. q*samples+samples-1), its first `keep` right ones.

    >>> right = [True, False, True, True, False, False, True, True]
    >>> keep_rows(right, samples=4, keep=2), keep_rows(right, samples=4, keep=1)
    ([0, 2, 6, 7], [0, 6])
    """
    rows = []
    for q in range(0, len(correct), samples):
        rows += [r for r in range(q, q + samples) if correct[r]][:keep]
    return rows


def sample_right(trainer) -> tuple[Rollout | None, dict[str, float]]:
    """Step 1-2: the kept rows (one rollout, or None if nothing was right) and what was drawn."""
    cfg, rs = trainer.cfg, trainer.cfg.rejection
    problems = trainer.prompts_at(trainer.cursor, rs.prompts)
    trainer.cursor += rs.prompts
    kept, right, drawn = [], 0, 0
    for i in range(0, len(problems), cfg.prompts_per_step):  # an RL step's worth of questions at a time
        chunk = problems[i : i + cfg.prompts_per_step]
        ro = trainer.rollout([ids for ids in trainer.encode([p["question"] for p in chunk]) for _ in range(rs.samples)])
        texts = decode_completions(trainer.tok, ro.completion_ids, ro.completion_mask)
        accuracy = trainer.scorer(texts, [p["answer"] for p in chunk for _ in range(rs.samples)]).accuracy
        correct = [bool(a > 0) for a in accuracy.tolist()]
        right, drawn = right + sum(correct), drawn + len(correct)
        if rows := keep_rows(correct, rs.samples, rs.keep_per_prompt):
            kept.append(ro.select(rows))
    pooled = concat_rollouts(kept, trainer.tok.pad_token_id) if kept else None
    n_kept = 0 if pooled is None else pooled.completion_ids.shape[0]
    return pooled, {"rs_samples": float(drawn), "rs_sample_accuracy": right / max(drawn, 1), "rs_kept": float(n_kept)}


def fine_tune(trainer, ro: Rollout, seed: int) -> dict[str, float]:
    """Step 3: `epochs` passes over the rows of `ro` in shuffled batches; returns the first and last batch loss."""
    rs, policy = trainer.cfg.rejection, trainer.policy
    opt = torch.optim.AdamW(policy.parameters(), lr=rs.lr, weight_decay=trainer.cfg.weight_decay)
    order_gen = torch.Generator().manual_seed(seed)
    policy.train()
    losses = []
    for _ in range(rs.epochs):
        for idx in torch.randperm(ro.completion_ids.shape[0], generator=order_gen).split(rs.batch_size):
            part = ro.select(idx)
            logp = bucketed_logprobs(policy, part.input_ids, part.attention_mask, part.completion_ids.shape[1],
                                     buckets=trainer.cfg.train_buckets, temperature=1.0, dtype=trainer.dtype)
            mask = part.loss_mask.float()
            loss = -(logp * mask).sum() / mask.sum().clamp(min=1)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            average_gradients(trainer.world, policy.parameters())
            torch.nn.utils.clip_grad_norm_(policy.parameters(), trainer.cfg.max_grad_norm)
            opt.step()
            losses.append(float(loss.detach()))
    return {"rs_sft_loss_first": losses[0], "rs_sft_loss_last": losses[-1], "rs_sft_steps": float(len(losses))}


def rejection_stage(trainer, seed: int) -> dict[str, float]:
    """Steps 1-4 on `trainer` (once: it then holds ``rejection_done``); returns its metrics (``rl/rs_*``)."""
    ro, out = sample_right(trainer)
    if ro is not None:
        out |= fine_tune(trainer, ro, seed)
    trainer.restart_from_policy()
    trainer.rejection_done = True
    return {f"rl/{k}": v for k, v in out.items()}
