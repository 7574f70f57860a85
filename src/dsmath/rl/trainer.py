"""The RL engine: GRPO (DeepSeekMath sec. 4.1), PPO, online RFT and RFT sharing rollout, reward, update and logging.

One step (``RLTrainer.step``):
1. take ``prompts_per_step`` questions and sample ``group_size`` outputs each from the *old* policy (the policy as
   it is now; offline RFT samples from the frozen SFT model instead), recording the per-token log-probs (with
   DAPO's dynamic sampling, more rounds until ``prompts_per_step`` groups have reward spread);
2. score every output with the rule-based reward (``dsmath.rewards``) and get reference log-probs (frozen SFT model);
3. turn rewards into per-token advantages by the algorithm's estimator (:mod:`dsmath.rl.algorithms`, by
   ``rl.algorithm``; the estimators are in :mod:`dsmath.rl.advantages`) (the unified paradigm, sec. 5.2.1: each
   method is a data source + a reward function + a gradient coefficient):
   - grpo: group-relative, outcome ``(r - mean) / std`` or process (step rewards), KL to the reference in the loss;
   - ppo: learned critic + GAE on KL-penalised token rewards;
   - online_rft / rft: coefficient 1 on correct outputs, 0 elsewhere (supervised on the policy's / SFT's own
     correct samples), no ratio clipping and no KL;
4. ``mu`` passes of the clipped surrogate over the batch in ``minibatches`` optimiser steps. By default every output
   of every group is in the objective with denominators over all G outputs (eq. 3); ``skip_zero_advantage`` leaves
   rows with zero advantage out of the forward pass (a saving that drops their KL term, see ``update``).

Across processes (``torchrun`` / ``accelerate launch``, see :mod:`dsmath.runtime.distributed`) the step is
data-parallel:
each rank samples and scores whole groups of the global batch (a group never straddles ranks; each row's sampling
noise is keyed by its global index, so a rank samples exactly what one process would for those rows), the loss
of every rank is normalised by the *global* denominators (the gradient average over ranks then equals the one-process
gradient), and the step's metrics are computed over the rows of every rank. ``rl.prompts_per_step`` is the global
batch: results do not depend on the process count up to floating-point summation order. That bookkeeping lives in
:mod:`dsmath.rl.ranks`; the batch in :mod:`dsmath.rl.batch`, the metrics in :mod:`dsmath.rl.metrics`, the choices
(algorithm, advantage, loss variant, KL estimator, aggregation) in :mod:`dsmath.rl.registry`.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Sequence

import torch

from dsmath.generation.engines import autocast, position_ids
from dsmath.generation.logprobs import bucketed_logprobs, shared_prefix_logprobs
from dsmath.generation.rollout import Rollout, ToolMode, decode_completions, sample
from dsmath.modeling import prompts
from dsmath.rl import ppo as ppo_math
from dsmath.rl import ranks
from dsmath.rl.advantages import Signals, equal_reward_groups, overlong_penalty
from dsmath.rl.algorithms import Algorithm
from dsmath.rl.batch import Batch, concat_batches, spread_first
from dsmath.rl.losses import policy_loss
from dsmath.rl.metrics import step_metrics
from dsmath.rl.registry import ALGORITHMS
from dsmath.rl.scoring import Scorer, Scores, step_rewards
from dsmath.runtime.distributed import World, all_sum, any_rank, average_gradients


class RLTrainer:
    """Policy, frozen reference, optional critic, optimiser and the deterministic prompt stream of one RL run.

    world: this process's rank and device (:mod:`dsmath.runtime.distributed`); the models move to its device, and with
    more than one rank the gradients of the policy (and critic) are averaged over ranks after each backward.
    dtype: the precision of sampling and of the training forwards (autocast; the weights and AdamW state stay
    float32); when it is not float32 the old log-probs are recomputed by the training forward, so the ratio compares
    like with like.
    """

    def __init__(self, cfg, policy, tokenizer, problems: Sequence[dict], scorer: Scorer, seed: int,
                 tool_fn: Callable[[list[str]], list[str]] | None = None, world: World | None = None,
                 dtype: torch.dtype | None = None):
        self.world = world or World()
        self.dtype = None if dtype in (None, torch.float32) else dtype
        policy = policy.to(self.world.device)
        self.cfg, self.policy, self.tok, self.problems, self.scorer = cfg, policy, tokenizer, list(problems), scorer
        self.algo: Algorithm = ALGORITHMS[cfg.algorithm]
        self.ref = _frozen_copy(policy)
        self.opt, self.sched = self._optimiser()
        self.critic = self.critic_opt = None
        if self.algo.critic:
            self.critic = ppo_math.ValueModel(copy.deepcopy(policy)).to(self.world.device)
            self.critic_opt = torch.optim.AdamW(self.critic.parameters(), lr=cfg.ppo.critic_lr)
        self.gen = torch.Generator().manual_seed(seed)  # only draws each rollout's noise seed: the same on every rank
        self.seed, self.step_count, self.skipped, self.cursor = seed, 0, 0, 0
        self.updates = 0  # optimiser updates attempted (made or skipped): the denominator of rl.max_skipped_share
        self.tool = ToolMode(tool_fn, tokenizer, max_calls=cfg.max_tool_calls) if tool_fn else None
        self.eos = [tokenizer.eos_token_id]
        self.last_samples: list[dict] = []  # a few completions of the latest step, for the MLflow samples table
        self.rejection_done = False  # rl.rejection's stage has run (dsmath.rl.rejection)

    def _optimiser(self):
        """AdamW over the policy and its warm-up schedule (linear over rl.warmup_steps)."""
        opt = torch.optim.AdamW(self.policy.parameters(), lr=self.cfg.lr, weight_decay=self.cfg.weight_decay)
        warm = max(self.cfg.warmup_steps, 1)
        return opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warm))

    def restart_from_policy(self) -> None:
        """A new RL stage from the policy as it is (R1's second RL stage, :mod:`dsmath.rl.rejection`): it becomes the
        reference, and the optimiser and its warm-up start afresh."""
        self.ref.load_state_dict(self.policy.state_dict())
        self.opt, self.sched = self._optimiser()

    # ---------------------------------------------------------------- data

    def prompts_at(self, start: int, count: int) -> list[dict]:
        """Questions start .. start+count-1 of the stream: per-epoch permutations seeded by (seed, epoch)."""
        n, out = len(self.problems), []
        for i in range(start, start + count):
            epoch, pos = divmod(i, n)
            perm = torch.randperm(n, generator=torch.Generator().manual_seed(self.seed * 1000 + epoch))
            out.append(self.problems[int(perm[pos])])
        return out

    def prompt_batch(self, step: int) -> list[dict]:
        """The questions of `step` without dynamic sampling: the step-th slice of `prompts_per_step`."""
        return self.prompts_at(step * self.cfg.prompts_per_step, self.cfg.prompts_per_step)

    def encode(self, questions: Sequence[str]) -> list[list[int]]:
        texts = [prompts.format_prompt(q, self.cfg.mode, self.tok) for q in questions]
        return [self.tok(t, add_special_tokens=False)["input_ids"] for t in texts]

    # ---------------------------------------------------------------- one step

    def step(self) -> dict[str, float]:
        """One rollout batch and its policy update; returns the step's metrics (namespaced rl/...)."""
        cfg = self.cfg
        if cfg.ref_reset_every and self.step_count and self.step_count % cfg.ref_reset_every == 0:
            self.ref.load_state_dict(self.policy.state_dict())  # iterative GRPO (sec. 4.2)
        t0 = time.perf_counter()
        batch, sampled, times = self.collect()
        t2 = time.perf_counter()
        ro = batch.rollout
        ref_lp = self.reference_logprobs(ro)
        adv, extra = self.algo.advantages(self.signals(batch, ref_lp), cfg)
        adv = adv.to(ro.completion_ids.device).contiguous()
        keep = (adv != 0).any(dim=1) if cfg.skip_zero_advantage else torch.ones(len(adv), dtype=torch.bool,
                                                                                device=adv.device)
        stats = self.update(ro, adv, ref_lp, keep, extra)
        t3 = time.perf_counter()
        self.step_count += 1
        return step_metrics(cfg, self.world, batch, sampled, ref_lp, keep, stats, lr=self.sched.get_last_lr()[0],
                            skipped=self.skipped, times=(times[0], times[1], t3 - t2), step_s=t2 - t0)

    def reference_logprobs(self, ro: Rollout) -> torch.Tensor:
        """(N, T) log pi_ref of the sampled tokens. Sampled in another precision than training, the rollout's
        log pi_old is first recomputed by the training forward (so that the ratio compares like with like)."""
        t = ro.completion_ids.shape[1]
        with torch.no_grad():
            if self.dtype is not None:
                self.policy.eval()
                ro.logprobs = self.logprobs(self.policy, ro.input_ids, ro.attention_mask, t) * ro.loss_mask
            return self.logprobs(self.ref, ro.input_ids, ro.attention_mask, t)

    def signals(self, batch: Batch, ref_lp: torch.Tensor) -> Signals:
        """What the advantage estimators read of `batch` (step rewards and critic values computed on demand)."""
        ro, sc = batch.rollout, batch.scores

        def values() -> torch.Tensor:
            with torch.no_grad():
                return self.values(ro)

        return Signals(sc.rewards, sc.accuracy, ro.loss_mask, ro.logprobs, ref_lp,
                       steps_of=lambda: step_rewards(self.tok, ro.completion_ids, ro.completion_mask, batch.golds,
                                                     loss_mask=ro.loss_mask, quantities=batch.quantities(),
                                                     scores=sc, mode=self.cfg.mode,
                                                     weights=getattr(self.scorer, "weights", None)),
                       values_of=values if self.critic is not None else None, all_sum=ranks.summer(self.world))

    def collect(self) -> tuple[Batch, Scores, tuple[float, float]]:
        """Sample and score the step's batch; returns (batch, scores of everything sampled, (generate s, score s)).

        Plain: the next `prompts_per_step` questions. Dynamic sampling (DAPO): sample rounds of `prompts_per_step`
        questions until `prompts_per_step` groups with reward spread are found or `dynamic_sampling_rounds` rounds
        are spent; the batch is those groups, filled up with flat groups (in sampling order) when too few were found.
        """
        cfg, g = self.cfg, self.cfg.group_size
        mine = self.world.shard(cfg.prompts_per_step)  # this rank's groups of the global batch
        b = len(mine)
        rounds, gen_s, score_s, found = [], 0.0, 0.0, 0  # found: groups with reward spread so far (this rank)
        for _ in range(cfg.dynamic_sampling_rounds if cfg.dynamic_sampling else 1):
            t0 = time.perf_counter()
            problems = self.prompts_at(self.cursor + mine.start, b)
            if hasattr(self.scorer, "offset"):  # rl.reward random: this batch's first output in the run's stream
                self.scorer.offset = (self.cursor + mine.start) * g
            self.cursor += cfg.prompts_per_step
            golds = [p["answer"] for p in problems for _ in range(g)]
            ro = self.rollout([ids for ids in self.encode([p["question"] for p in problems]) for _ in range(g)],
                              row_keys=range(mine.start * g, mine.stop * g))
            t1 = time.perf_counter()
            scores = self.scorer(decode_completions(self.tok, ro.completion_ids, ro.completion_mask), golds)
            if cfg.overlong_buffer:  # DAPO: a soft penalty for outputs near or at the generation budget
                scores.rewards = scores.rewards + overlong_penalty(ro.completion_mask.sum(dim=1).cpu(),
                                                                   cfg.max_new_tokens, cfg.overlong_buffer,
                                                                   cfg.overlong_penalty)
            rounds.append(Batch(problems, ro, golds, scores.to(ro.completion_ids.device)))
            gen_s, score_s = gen_s + t1 - t0, score_s + time.perf_counter() - t1
            found += int((~equal_reward_groups(scores.rewards, g)).sum())
            if not any_rank(self.world, found < b):  # every rank samples the same number of rounds
                break
        if not cfg.dynamic_sampling:
            batch, sampled = rounds[0], rounds[0].scores
        else:
            batch = spread_first(rounds, b, g, self.tok.pad_token_id)
            sampled = concat_batches(rounds, self.tok.pad_token_id).scores
        self.last_samples = [{"question": batch.problems[i // g]["question"], "gold": batch.golds[i],
                              "completion": batch.scores.texts[i], "reward": float(batch.scores.rewards[i])}
                             for i in range(min(2 * g, len(batch.golds)))]
        return batch, sampled, (gen_s, score_s)

    def rollout(self, prompt_ids: list[list[int]], row_keys: Sequence[int] | None = None) -> Rollout:
        """Sample the rows (row_keys: their global indices, the keys of their sampling noise)."""
        model = self.ref if self.algo.sample_from_reference else self.policy
        model.eval()
        seed = int(torch.randint(0, 2**62, (1,), generator=self.gen))
        return sample(model, prompt_ids, max_new_tokens=self.cfg.max_new_tokens, eos_token_id=self.eos,
                      pad_token_id=self.tok.pad_token_id, temperature=self.cfg.temperature, top_p=self.cfg.top_p,
                      seed=seed, row_keys=row_keys, tool=self.tool, engine=self.cfg.engine, dtype=self.dtype,
                      share_prompts=self.cfg.share_prompts)

    def logprobs(self, model, input_ids: torch.Tensor, attention_mask: torch.Tensor, t: int) -> torch.Tensor:
        """(N, T) log-probs of the completions under `model` at the rollout temperature: one forward, or
        ``rl.train_buckets`` forwards over length-sorted groups of rows, with ``rl.share_prompts`` after one
        forward over the distinct prompts whose keys and values the rows of a group share (in any number of
        processes: the gradients are averaged after the backward, not inside it)."""
        fn = shared_prefix_logprobs if self.cfg.share_prompts else bucketed_logprobs
        return fn(model, input_ids, attention_mask, t, buckets=self.cfg.train_buckets,
                  temperature=self.cfg.temperature, dtype=self.dtype)

    def values(self, ro: Rollout, critic=None) -> torch.Tensor:
        """(N, T) critic values of the state before each completion token (hidden state at the previous position)."""
        p, t = ro.prompt_ids.shape[1], ro.completion_ids.shape[1]
        with autocast(ro.input_ids.device, self.dtype):
            v = (self.critic if critic is None else critic)(ro.input_ids, ro.attention_mask,
                                                             position_ids(ro.attention_mask))
        return v[:, p - 1 : p - 1 + t].float()

    # ---------------------------------------------------------------- the update

    def update(self, ro: Rollout, adv: torch.Tensor, ref_lp: torch.Tensor, keep: torch.Tensor, extra: dict):
        """Maximise the clipped surrogate (eq. 3) over the kept rows: `mu` passes in `minibatches` optimiser steps of

            loss = agg_{i,t} -[min(r_t A_t, clip(r_t, 1 - eps, 1 + eps_high) A_t) - beta KL_t(pi_theta || pi_ref)],
            r_t = pi_theta(o_t) / pi_old(o_t)   (RFT: r_t = 1, the plain log-likelihood gradient),

        the surrogate by ``rl.importance_ratio``, KL_t by ``rl.kl``, agg by ``rl.aggregation``
        (:mod:`dsmath.rl.losses`), beta = 0 where the algorithm has no KL in the loss; and, with a critic, one
        value-loss step per minibatch.
        Returns the loss statistics averaged over the minibatches (and ranks); {} when no row is kept.

        Every row is in the objective unless `skip_zero_advantage` leaves rows whose advantage is 0 on every token
        out of the forward pass; the denominators then stay those of the whole batch, so the policy-gradient term is
        unchanged and only the skipped rows' KL term is lost. Minibatches, their denominators across ranks and the
        statistics' merge are :mod:`dsmath.rl.ranks`'.
        """
        cfg = self.cfg
        rows = keep.nonzero().squeeze(-1)
        if not any_rank(self.world, len(rows) > 0):
            return {}
        self.policy.train()
        t = ro.completion_ids.shape[1]
        beta = cfg.beta if self.algo.kl_in_loss else 0.0
        trained = []
        for mb in ranks.minibatches(self.world, cfg, rows, keep, ro.loss_mask, self.seed, self.step_count):
            i = mb.rows
            logp = self.logprobs(self.policy, ro.input_ids[i], ro.attention_mask[i], t)  # log pi_theta
            old = ro.logprobs[i] if self.algo.ratio else logp.detach()  # log pi_old
            loss, stats = policy_loss(logp, old, adv[i], ro.loss_mask[i], ref_logprobs=ref_lp[i], beta=beta,
                                      kl=cfg.kl, clip_eps=cfg.clip_eps, clip_eps_high=cfg.clip_eps_high,
                                      importance_ratio=cfg.importance_ratio, aggregation=cfg.aggregation, **mb.norm)
            stats["kl_loss"] = stats.pop("kl")  # the in-loss KL of the rows trained (rl/kl is the batch's)
            stats["loss"] = float(loss.detach())
            stats |= self._optimise(loss * mb.scale)
            if self.critic is not None:
                stats |= self._critic_step(ro.select(i), extra["values"][i], extra["returns"][i], mb.weight)
            if mb.weight:
                trained.append(stats)
        return ranks.mean_stats(self.world, trained)

    def _optimise(self, loss: torch.Tensor) -> dict[str, float]:
        """Backward, average the gradients over ranks, clip, step; a non-finite loss or gradient (on any rank) skips
        the step on every rank (counted) instead of corrupting it. The averaged gradient, hence its norm, is the same
        on every rank."""
        self.opt.zero_grad(set_to_none=True)
        self.updates += 1
        if any_rank(self.world, not bool(torch.isfinite(loss))):
            self.skipped += 1
            return {"grad_norm": float("nan")}
        loss.backward()
        average_gradients(self.world, self.policy.parameters())
        norm = torch.nn.utils.clip_grad_norm_(self.policy.parameters(), self.cfg.max_grad_norm)
        if not torch.isfinite(norm):
            self.opt.zero_grad(set_to_none=True)
            self.skipped += 1
            return {"grad_norm": float("nan")}
        self.opt.step()
        self.sched.step()
        return {"grad_norm": float(norm)}

    def _critic_step(self, ro: Rollout, old_values: torch.Tensor, returns: torch.Tensor,
                     weight: float = 1.0) -> dict[str, float]:
        """One critic step; across ranks the value loss is each rank's token mean (the gradients are averaged)."""
        values = self.values(ro)
        loss = ppo_math.value_loss(values, old_values, returns, ro.loss_mask, self.cfg.ppo.value_clip)
        self.critic_opt.zero_grad(set_to_none=True)
        (loss * weight).backward()
        average_gradients(self.world, self.critic.parameters())
        torch.nn.utils.clip_grad_norm_(self.critic.parameters(), self.cfg.max_grad_norm)
        self.critic_opt.step()
        return {"value_loss": float(loss.detach())}

    # ---------------------------------------------------------------- evaluation, checkpoints

    def greedy_accuracy(self, problems: Sequence[dict], batch_size: int = 128) -> float:
        """Greedy accuracy of the current policy on `problems` (through the same reward layer), the problems split
        over ranks."""
        correct = 0.0
        mine = [problems[i] for i in self.world.shard(len(problems))]
        for i in range(0, len(mine), batch_size):
            chunk = mine[i : i + batch_size]
            self.policy.eval()
            ro = sample(self.policy, self.encode([p["question"] for p in chunk]),
                        max_new_tokens=self.cfg.max_new_tokens, eos_token_id=self.eos,
                        pad_token_id=self.tok.pad_token_id, temperature=0.0, tool=self.tool, engine=self.cfg.engine,
                        dtype=self.dtype)
            texts = decode_completions(self.tok, ro.completion_ids, ro.completion_mask)
            correct += float(self.scorer(texts, [p["answer"] for p in chunk]).accuracy.sum())
        return all_sum(self.world, [correct])[0] / max(len(problems), 1)

    def state_dict(self) -> dict:
        return {
            "policy": self.policy.state_dict(), "ref": self.ref.state_dict(), "opt": self.opt.state_dict(),
            "sched": self.sched.state_dict(), "gen": self.gen.get_state(), "step": self.step_count,
            "skipped": self.skipped, "updates": self.updates, "cursor": self.cursor,
            "rejection_done": self.rejection_done, "torch_rng": torch.get_rng_state(),
            "critic": self.critic.state_dict() if self.critic else None,
            "critic_opt": self.critic_opt.state_dict() if self.critic_opt else None,
        }

    def load_state_dict(self, s: dict) -> None:
        self.policy.load_state_dict(s["policy"])
        self.ref.load_state_dict(s["ref"])
        self.opt.load_state_dict(s["opt"])
        self.sched.load_state_dict(s["sched"])
        self.gen.set_state(s["gen"].cpu())
        torch.set_rng_state(s["torch_rng"].cpu())
        self.step_count, self.skipped, self.cursor = s["step"], s["skipped"], s["cursor"]
        self.rejection_done = s.get("rejection_done", False)
        self.updates = s.get("updates", s["step"] * self.cfg.mu * self.cfg.minibatches)  # older states: the most
        if self.critic is not None:
            self.critic.load_state_dict(s["critic"])
            self.critic_opt.load_state_dict(s["critic_opt"])


def _frozen_copy(model):
    ref = copy.deepcopy(model).eval()
    for p in ref.parameters():
        p.requires_grad_(False)
    return ref
