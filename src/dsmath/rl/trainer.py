"""The RL engine: GRPO (DeepSeekMath sec. 4.1), PPO, online RFT and RFT sharing rollout, reward, update and logging.

One step (``RLTrainer.step``):
1. take ``prompts_per_step`` questions and sample ``group_size`` outputs each from the *old* policy (the policy as
   it is now; offline RFT samples from the frozen SFT model instead), recording the per-token log-probs;
2. score every output with the rule-based reward (``dsmath.rewards``) and get reference log-probs (frozen SFT model);
3. turn rewards into per-token advantages by the algorithm's rule (the unified paradigm, sec. 5.2.1: each method is a
   data source + a reward function + a gradient coefficient):
   - grpo: group-relative, outcome ``(r - mean) / std`` or process (step rewards), KL to the reference in the loss;
   - ppo: learned critic + GAE on KL-penalised token rewards;
   - online_rft / rft: coefficient 1 on correct outputs, 0 elsewhere (supervised on the policy's / SFT's own
     correct samples), no ratio clipping and no KL;
4. ``mu`` passes of the clipped surrogate over the batch in ``minibatches`` optimiser steps.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable, Sequence

import torch

from dsmath import prompts
from dsmath.rl import ppo as ppo_math
from dsmath.rl.advantages import group_advantages, process_advantages
from dsmath.rl.losses import policy_loss
from dsmath.rl.rollout import Rollout, ToolMode, sample, sequence_logprobs
from dsmath.rl.scoring import Scorer, decode_completions, step_rewards

RFT_LIKE = ("online_rft", "rft")


class RLTrainer:
    """Policy, frozen reference, optional critic, optimiser and the deterministic prompt stream of one RL run."""

    def __init__(self, cfg, policy, tokenizer, problems: Sequence[dict], scorer: Scorer, seed: int,
                 tool_fn: Callable[[list[str]], list[str]] | None = None):
        self.cfg, self.policy, self.tok, self.problems, self.scorer = cfg, policy, tokenizer, list(problems), scorer
        self.ref = _frozen_copy(policy)
        self.opt = torch.optim.AdamW(policy.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        warm = max(cfg.warmup_steps, 1)
        self.sched = torch.optim.lr_scheduler.LambdaLR(self.opt, lambda s: min(1.0, (s + 1) / warm))
        self.critic = self.critic_opt = None
        if cfg.algorithm == "ppo":
            self.critic = ppo_math.ValueModel(copy.deepcopy(policy))
            self.critic_opt = torch.optim.AdamW(self.critic.parameters(), lr=cfg.ppo.critic_lr)
        self.gen = torch.Generator().manual_seed(seed)
        self.seed, self.step_count, self.skipped = seed, 0, 0
        self.tool = ToolMode(tool_fn, tokenizer, max_calls=cfg.max_tool_calls) if tool_fn else None
        self.eos = [tokenizer.eos_token_id]
        self.last_samples: list[dict] = []  # a few completions of the latest step, for the MLflow samples table

    # ---------------------------------------------------------------- data

    def prompt_batch(self, step: int) -> list[dict]:
        """The questions of `step`: consecutive slices of a per-epoch permutation seeded by (seed, epoch)."""
        b, n = self.cfg.prompts_per_step, len(self.problems)
        out = []
        for i in range(step * b, step * b + b):
            epoch, pos = divmod(i, n)
            perm = torch.randperm(n, generator=torch.Generator().manual_seed(self.seed * 1000 + epoch))
            out.append(self.problems[int(perm[pos])])
        return out

    def encode(self, questions: Sequence[str]) -> list[list[int]]:
        texts = [prompts.format_prompt(q, self.cfg.mode, self.tok) for q in questions]
        return [self.tok(t, add_special_tokens=False)["input_ids"] for t in texts]

    # ---------------------------------------------------------------- one step

    def step(self) -> dict[str, float]:
        """One rollout batch and its policy update; returns the step's metrics (namespaced rl/...)."""
        cfg, g = self.cfg, self.cfg.group_size
        if cfg.ref_reset_every and self.step_count and self.step_count % cfg.ref_reset_every == 0:
            self.ref.load_state_dict(self.policy.state_dict())  # iterative GRPO (sec. 4.2)
        batch = self.prompt_batch(self.step_count)
        golds = [p["answer"] for p in batch for _ in range(g)]
        t0 = time.perf_counter()
        ro = self.rollout([ids for ids in self.encode([p["question"] for p in batch]) for _ in range(g)])
        t1 = time.perf_counter()
        texts = decode_completions(self.tok, ro.completion_ids, ro.completion_mask)
        scores = self.scorer(texts, golds)
        self.last_samples = [{"question": batch[i // g]["question"], "gold": golds[i], "completion": texts[i],
                              "reward": float(scores.rewards[i])} for i in range(min(2 * g, len(texts)))]
        t2 = time.perf_counter()
        with torch.no_grad():
            ref_lp = sequence_logprobs(self.ref, ro.input_ids, ro.attention_mask, ro.completion_ids.shape[1],
                                       temperature=cfg.temperature)
        adv, keep, extra = self.advantages(ro, scores, ref_lp, golds)
        stats = self.update(ro, adv, ref_lp, keep, extra)
        t3 = time.perf_counter()
        self.step_count += 1
        return self._metrics(ro, scores, ref_lp, keep, stats, (t1 - t0, t2 - t1, t3 - t2))

    def rollout(self, prompt_ids: list[list[int]], temperature: float | None = None) -> Rollout:
        model = self.ref if self.cfg.algorithm == "rft" else self.policy
        model.eval()
        return sample(model, prompt_ids, max_new_tokens=self.cfg.max_new_tokens, eos_token_id=self.eos,
                      pad_token_id=self.tok.pad_token_id,
                      temperature=self.cfg.temperature if temperature is None else temperature,
                      top_p=self.cfg.top_p, generator=self.gen, tool=self.tool, engine=self.cfg.engine)

    # ---------------------------------------------------------------- advantages per algorithm

    def advantages(self, ro: Rollout, scores, ref_lp: torch.Tensor, golds: list[str]):
        """(advantages (N, T), keep (N,) rows worth a training forward, extra tensors for PPO)."""
        cfg, g = self.cfg, self.cfg.group_size
        n, t = ro.completion_ids.shape
        extra = {}
        if cfg.algorithm == "grpo" and cfg.advantage == "outcome":
            adv = group_advantages(scores.rewards, g, scale=cfg.scale_rewards)[:, None].expand(n, t)
        elif cfg.algorithm == "grpo":
            r, ends, smask = step_rewards(self.tok, ro.completion_ids, ro.loss_mask, golds)
            adv = process_advantages(r, ends, smask, g, t)
        elif cfg.algorithm in RFT_LIKE:
            adv = scores.accuracy[:, None].expand(n, t)
        else:
            adv, extra = self._ppo_advantages(ro, scores, ref_lp)
        # rows with zero advantage everywhere (equal-reward groups, wrong RFT samples) only carry the KL term:
        # skipping their training forward is the main saving of a GRPO step
        keep = (adv != 0).any(dim=1) if cfg.drop_equal_groups else torch.ones(n, dtype=torch.bool)
        return adv.contiguous(), keep, extra

    def _ppo_advantages(self, ro: Rollout, scores, ref_lp: torch.Tensor):
        p, t, c = ro.prompt_ids.shape[1], ro.completion_ids.shape[1], self.cfg.ppo
        with torch.no_grad():
            values = self._values(ro, p, t)
        rewards = ppo_math.kl_penalised_rewards(scores.rewards, ro.logprobs, ref_lp, ro.loss_mask, c.kl_coef)
        adv, returns = ppo_math.gae(rewards, values, ro.loss_mask, c.gamma, c.lam)
        return ppo_math.whiten(adv, ro.loss_mask), {"values": values, "returns": returns}

    def _values(self, ro: Rollout, p: int, t: int) -> torch.Tensor:
        """(N, T) critic values of the state before each completion token (hidden state at the previous position)."""
        from dsmath.rl.sampler import position_ids

        v = self.critic(ro.input_ids, ro.attention_mask, position_ids(ro.attention_mask))
        return v[:, p - 1 : p - 1 + t]

    # ---------------------------------------------------------------- the update

    def update(self, ro: Rollout, adv: torch.Tensor, ref_lp: torch.Tensor, keep: torch.Tensor, extra: dict):
        """`mu` passes over the kept rows in `minibatches` optimiser steps; returns averaged loss statistics."""
        cfg = self.cfg
        rows = keep.nonzero().squeeze(-1)
        if len(rows) == 0:
            return {}
        self.policy.train()
        t = ro.completion_ids.shape[1]
        beta = cfg.beta if cfg.algorithm == "grpo" else 0.0  # PPO: KL is in the reward; RFT: no KL
        acc: dict[str, list[float]] = {}
        for _ in range(cfg.mu):
            order = rows[torch.randperm(len(rows), generator=self.gen)]
            for mb in order.chunk(cfg.minibatches):
                lp = sequence_logprobs(self.policy, ro.input_ids[mb], ro.attention_mask[mb], t,
                                       temperature=cfg.temperature)
                old = lp.detach() if cfg.algorithm in RFT_LIKE else ro.logprobs[mb]
                loss, stats = policy_loss(lp, old, adv[mb], ro.loss_mask[mb], clip_eps=cfg.clip_eps,
                                          ref_logprobs=ref_lp[mb], beta=beta, kl=cfg.kl, aggregation=cfg.aggregation,
                                          clip_eps_high=cfg.clip_eps_high)
                stats["loss"] = float(loss.detach())
                stats |= self._optimise(loss)
                if self.critic is not None:
                    stats |= self._critic_step(ro, mb, extra)
                for k, v in stats.items():
                    acc.setdefault(k, []).append(v)
        return {k: sum(v) / len(v) for k, v in acc.items()}

    def _optimise(self, loss: torch.Tensor) -> dict[str, float]:
        """Backward, clip, step; a non-finite loss or gradient skips the step (counted) instead of corrupting it."""
        self.opt.zero_grad(set_to_none=True)
        if not torch.isfinite(loss):
            self.skipped += 1
            return {"grad_norm": float("nan")}
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(self.policy.parameters(), self.cfg.max_grad_norm)
        if not torch.isfinite(norm):
            self.opt.zero_grad(set_to_none=True)
            self.skipped += 1
            return {"grad_norm": float("nan")}
        self.opt.step()
        self.sched.step()
        return {"grad_norm": float(norm)}

    def _critic_step(self, ro: Rollout, mb: torch.Tensor, extra: dict) -> dict[str, float]:
        p, t = ro.prompt_ids.shape[1], ro.completion_ids.shape[1]
        sub = Rollout(*(getattr(ro, f)[mb] for f in ("prompt_ids", "prompt_mask", "completion_ids",
                                                     "completion_mask", "loss_mask", "logprobs", "finished",
                                                     "tool_calls")))
        v = self._values(sub, p, t)
        loss = ppo_math.value_loss(v, extra["values"][mb], extra["returns"][mb], ro.loss_mask[mb],
                                   self.cfg.ppo.value_clip)
        self.critic_opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.critic.parameters(), self.cfg.max_grad_norm)
        self.critic_opt.step()
        return {"value_loss": float(loss.detach())}

    # ---------------------------------------------------------------- metrics, evaluation, checkpoints

    def _metrics(self, ro: Rollout, scores, ref_lp, keep, stats, times) -> dict[str, float]:
        g = self.cfg.group_size
        lengths = ro.completion_mask.sum(dim=1).float()
        m = ro.loss_mask.float()
        tokens = float(ro.completion_mask.sum())
        out = {
            "reward_mean": float(scores.rewards.mean()),
            "reward_std": float(scores.rewards.std()),
            "accuracy": float(scores.accuracy.mean()),
            "format_rate": float(scores.format.mean()),
            "entropy": float(-(ro.logprobs * m).sum() / m.sum().clamp(min=1)),  # sampled-token estimate
            "response_len_mean": float(lengths.mean()),
            "response_len_max": float(lengths.max()),
            "zero_std_groups": float((scores.rewards.view(-1, g).std(dim=1) == 0).float().mean()),
            "trained_rows": float(keep.sum()),
            "lr": self.sched.get_last_lr()[0],
            "skipped_steps": float(self.skipped),
            "rollout_tokens_per_s": tokens / max(times[0], 1e-9),
            "time_generate_s": times[0],
            "time_score_s": times[1],
            "time_train_s": times[2],
            "tool_calls": float(ro.tool_calls.float().mean()),
        }
        if "kl" not in stats:  # no update this step (every group had equal rewards): KL of the sampled batch
            k3 = torch.exp(ref_lp - ro.logprobs) - (ref_lp - ro.logprobs) - 1
            stats = {"kl": float((k3 * m).sum() / m.sum().clamp(min=1))}
        return {f"rl/{k}": v for k, v in (out | stats).items() if not (isinstance(v, float) and math.isnan(v))}

    def greedy_accuracy(self, problems: Sequence[dict], batch_size: int = 128) -> float:
        """Greedy accuracy of the current policy on `problems` (through the same reward layer)."""
        correct = 0.0
        for i in range(0, len(problems), batch_size):
            chunk = problems[i : i + batch_size]
            self.policy.eval()
            ro = sample(self.policy, self.encode([p["question"] for p in chunk]),
                        max_new_tokens=self.cfg.max_new_tokens, eos_token_id=self.eos,
                        pad_token_id=self.tok.pad_token_id, temperature=0.0, tool=self.tool, engine=self.cfg.engine)
            texts = decode_completions(self.tok, ro.completion_ids, ro.completion_mask)
            correct += float(self.scorer(texts, [p["answer"] for p in chunk]).accuracy.sum())
        return correct / max(len(problems), 1)

    def state_dict(self) -> dict:
        return {
            "policy": self.policy.state_dict(), "ref": self.ref.state_dict(), "opt": self.opt.state_dict(),
            "sched": self.sched.state_dict(), "gen": self.gen.get_state(), "step": self.step_count,
            "skipped": self.skipped, "torch_rng": torch.get_rng_state(),
            "critic": self.critic.state_dict() if self.critic else None,
            "critic_opt": self.critic_opt.state_dict() if self.critic_opt else None,
        }

    def load_state_dict(self, s: dict) -> None:
        self.policy.load_state_dict(s["policy"])
        self.ref.load_state_dict(s["ref"])
        self.opt.load_state_dict(s["opt"])
        self.sched.load_state_dict(s["sched"])
        self.gen.set_state(s["gen"])
        torch.set_rng_state(s["torch_rng"])
        self.step_count, self.skipped = s["step"], s["skipped"]
        if self.critic is not None:
            self.critic.load_state_dict(s["critic"])
            self.critic_opt.load_state_dict(s["critic_opt"])


def _frozen_copy(model):
    ref = copy.deepcopy(model).eval()
    for p in ref.parameters():
        p.requires_grad_(False)
    return ref
