"""Evaluate one model of the chain: greedy accuracy, maj@k, pass@k, format-error rate and output length, per
dataset (synthetic test, GSM8K test, SVAMP, MATH-500) and per mode (CoT, PoT with the program run in the sandbox,
tool-integrated), with the same fast sampler as RL. Per-sample predictions are kept for inspection. In CoT mode
the greedy completions' equations are also checked (:mod:`dsmath.evaluation.arithmetic`): ``equation_acc``,
``link_acc``, their counts, and ``equations/<operator>/<digits>/{acc,n}`` per category.

Across processes (``torchrun`` / ``accelerate launch``) each rank decodes a contiguous shard of every batch of
questions and the completions are gathered in order, so every rank scores the whole set (the metrics are the
one-process metrics: a sampled row's noise is keyed by its index, whichever rank draws it).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import torch
from tqdm import tqdm

from dsmath.evaluation.arithmetic import equation_table, table_metrics
from dsmath.evaluation.metrics import maj_at_k, mean_pass_at_k
from dsmath.generation.rollout import ToolMode, decode_completions, sample
from dsmath.generation.tools import sandbox_tool
from dsmath.modeling import prompts
from dsmath.rewards import (
    are_equivalent,
    build_reward,
    code_blocks,
    extract_answer,
    is_equivalent,
    own_text,
    program_answer,
)
from dsmath.runtime.distributed import World, gather_lists


def final_answers(texts: Sequence[str], mode: str, sandbox_cfg, last_number: bool = False) -> list[str | None]:
    """The answer of each completion: the printed output of the last program (pot), else the extracted answer, in
    tool mode from the model's own text, not the interpreter's ```output blocks (`last_number`: fall back to the
    last number in that text, for base models that never learnt the answer line)."""
    if mode != "pot":
        return [extract_answer(own_text(t, mode), last_number_fallback=last_number) for t in texts]
    from dsmath.sandbox.pool import RESULTS, run_python_batch

    programs = [(code_blocks(t) or [None])[-1] for t in texts]
    runnable = [i for i, p in enumerate(programs) if p is not None]
    results = run_python_batch([programs[i] for i in runnable], sandbox_cfg.timeout_s, sandbox_cfg.memory_mb,
                               sandbox_cfg.max_output_bytes, sandbox_cfg.workers, RESULTS)
    answers: list[str | None] = [None] * len(texts)
    for i, res in zip(runnable, results, strict=True):
        answers[i] = program_answer(res.stdout) if res.ok else None
    return answers


class Generator:
    """Batched decoding of prompts for one model (greedy or sampled), tool calls through the sandbox.

    world: the ranks to split the questions over and the device to decode on (default: one process, the model's
    device); dtype: the decoding precision (None: the model's)."""

    def __init__(self, model, tokenizer, cfg, sandbox_cfg, seed: int, last_number: bool = False,
                 world: World | None = None, dtype: torch.dtype | None = None):
        self.world = world or World(device=model.device)
        self.model, self.tok, self.cfg, self.sandbox = model.to(self.world.device).eval(), tokenizer, cfg, sandbox_cfg
        self.last_number, self.dtype = last_number, dtype
        self.gen = torch.Generator().manual_seed(seed)  # one noise seed per call, the same on every rank

    def __call__(self, questions: Sequence[str], mode: str, temperature: float) -> tuple[list[str], list[int]]:
        """Completions and their lengths in tokens, in the order of `questions` (on every rank)."""
        tool = None
        if mode == "tool":
            tool = ToolMode(sandbox_tool(self.sandbox), self.tok, max_calls=self.cfg.max_tool_calls)
        seed = int(torch.randint(0, 2**62, (1,), generator=self.gen))
        mine = self.world.shard(len(questions))
        texts, lengths = [], []
        ids = [self.tok(prompts.format_prompt(questions[i], mode, self.tok), add_special_tokens=False)["input_ids"]
               for i in mine]
        for i in range(0, len(ids), self.cfg.batch_size):
            start = mine.start + i  # the global index of the batch's first question: its rows' noise keys
            batch = ids[i : i + self.cfg.batch_size]
            ro = sample(self.model, batch, max_new_tokens=self.cfg.max_new_tokens,
                        eos_token_id=[self.tok.eos_token_id], pad_token_id=self.tok.pad_token_id,
                        temperature=temperature, seed=seed, row_keys=range(start, start + len(batch)), tool=tool,
                        engine=self.cfg.engine, dtype=self.dtype, share_prompts=self.cfg.share_prompts)
            texts += decode_completions(self.tok, ro.completion_ids, ro.completion_mask)
            lengths += ro.completion_mask.sum(dim=1).tolist()
        return gather_lists(self.world, texts), gather_lists(self.world, lengths)

    def map(self, fn: Callable[..., list], *columns: Sequence) -> list:
        """``fn(*columns)`` (a list per item) computed by each rank over its contiguous share of the items and
        gathered in order on every rank: the scoring of completions (programs run, answers checked) is split over
        the ranks like the decoding. In one process: ``fn(*columns)``."""
        mine = self.world.shard(len(columns[0]))
        return gather_lists(self.world, fn(*(list(c[mine.start : mine.stop]) for c in columns)))


def evaluate_split(gen: Generator, records: Sequence[dict], mode: str, cfg, sandbox_cfg, rewards_cfg,
                   sampled: bool) -> tuple[dict[str, float], list[dict]]:
    """Metrics of one (dataset, mode) and the per-problem prediction rows; in cot mode with the arithmetic of the
    greedy completions' equations (:func:`dsmath.evaluation.arithmetic.table_metrics`)."""
    questions, golds = [r["question"] for r in records], [r["answer"] for r in records]
    t0 = time.perf_counter()
    greedy, lengths = gen(questions, mode, 0.0)
    greedy_answers = gen.map(lambda t: final_answers(t, mode, sandbox_cfg, gen.last_number), greedy)
    greedy_ok = gen.map(lambda a, g: are_equivalent(a, g, rewards_cfg.equivalence_timeout_s), greedy_answers, golds)
    fmt = gen.map(build_reward("format", mode, rewards_cfg, sandbox_cfg), greedy, golds)
    metrics = {
        "greedy": sum(greedy_ok) / max(len(records), 1),
        "format_error_rate": 1.0 - sum(fmt) / max(len(fmt), 1),
        "mean_length": sum(lengths) / max(len(lengths), 1),
        "greedy_problems_per_s": len(records) / max(time.perf_counter() - t0, 1e-9),
        "n": float(len(records)),
    }
    metrics |= greedy_by_level(records, greedy_ok)
    if mode == "cot":  # every rank holds every completion: the (cheap) check runs on each
        metrics |= table_metrics(equation_table(greedy))
    rows = [{"id": r["id"], "mode": mode, "question": r["question"], "gold": g, "greedy": c, "greedy_answer": a,
             "greedy_correct": ok} for r, g, c, a, ok in zip(records, golds, greedy, greedy_answers, greedy_ok,
                                                             strict=True)]
    if sampled and cfg.n_samples > 0:
        metrics |= _sampling_metrics(gen, questions, golds, mode, cfg, sandbox_cfg, rewards_cfg, rows)
    return metrics, rows


def greedy_by_level(records: Sequence[dict], correct: Sequence[bool]) -> dict[str, float]:
    """`greedy_level<L>` per synthetic level (the problem's step count) where the records span more than one level
    (the synthetic world: where RL's gains land); {} elsewhere."""
    by: dict[int, list[bool]] = {}
    for record, ok in zip(records, correct, strict=True):
        if "level" in record:
            by.setdefault(int(record["level"]), []).append(bool(ok))
    if len(by) < 2:
        return {}
    return {f"greedy_level{level}": sum(oks) / len(oks) for level, oks in sorted(by.items())}


PASSK_SEED_OFFSET = 64_064  # the pass@k subset's draws: a Generator seeded apart from the maj@k draws'


def passk_metrics(correct: Sequence[Sequence[bool]], ks: Sequence[int]) -> dict[str, float]:
    """`passk@<k>` (the unbiased estimator, Chen et al. 2021, mean over problems) for each k of `ks` <= the
    samples per problem, and `passk_problems`, from `correct[i]`, the correctness of problem i's samples."""
    n = min((len(c) for c in correct), default=0)
    out = {f"passk@{k}": mean_pass_at_k(correct, k) for k in ks if k <= n}
    return out | {"passk_problems": float(len(correct))}


def evaluate_passk(gen: Generator, records: Sequence[dict], mode: str, cfg, sandbox_cfg,
                   rewards_cfg) -> tuple[dict[str, float], list[int]]:
    """pass@k up to large k on a subset (evaluate.passk_*; Limit-of-RLVR 2025): `passk_samples` samples of each
    record at `temperature`, scored like the maj@k samples. Returns the metrics and each record's number of right
    samples (with the sample count, any pass@k of one problem: what a study's per-problem analysis needs)."""
    n, golds = cfg.passk_samples, [r["answer"] for r in records]
    texts, _ = gen([r["question"] for r in records for _ in range(n)], mode, cfg.temperature)
    answers = gen.map(lambda t: final_answers(t, mode, sandbox_cfg, gen.last_number), texts)
    flat = gen.map(lambda a, g: are_equivalent(a, g, rewards_cfg.equivalence_timeout_s), answers,
                   [g for g in golds for _ in range(n)])
    correct = [flat[i * n : (i + 1) * n] for i in range(len(records))]
    return passk_metrics(correct, cfg.passk_k), [int(sum(c)) for c in correct]


def _sampling_metrics(gen, questions, golds, mode, cfg, sandbox_cfg, rewards_cfg, rows) -> dict[str, float]:
    n = cfg.n_samples
    t0 = time.perf_counter()
    texts, _ = gen([q for q in questions for _ in range(n)], mode, cfg.temperature)
    answers = gen.map(lambda t: final_answers(t, mode, sandbox_cfg, gen.last_number), texts)
    flat = gen.map(lambda a, g: are_equivalent(a, g, rewards_cfg.equivalence_timeout_s), answers,
                   [g for g in golds for _ in range(n)])
    per_problem = [answers[i * n : (i + 1) * n] for i in range(len(questions))]
    correct = [flat[i * n : (i + 1) * n] for i in range(len(questions))]
    out = {"sampled_problems_per_s": len(questions) / max(time.perf_counter() - t0, 1e-9)}
    for k in cfg.k:
        if k <= n:
            out[f"pass@{k}"] = mean_pass_at_k(correct, k)
            out[f"maj@{k}"] = sum(maj_at_k(ans, g, k, is_equivalent) for ans, g in zip(per_problem, golds,
                                                                                          strict=True)) / len(golds)
    for row, ans, ok in zip(rows, per_problem, correct, strict=True):
        row["sample_answers"], row["sample_correct"] = ans, ok
    return out


def evaluate_model(model, tokenizer, datasets: dict[str, list[dict]], cfg, sandbox_cfg, rewards_cfg,
                   seed: int, last_number: bool = False, sampling: bool = True, world: World | None = None,
                   dtype: torch.dtype | None = None) -> tuple[dict[str, float], list[dict]]:
    """Flat metrics `<dataset>/<mode>/<metric>` over every dataset and mode, and all prediction rows.
    Samples (maj@k, pass@k) are drawn where `sampling` and the (dataset, mode) is in the sampled lists; with
    `passk_problems` > 0 also `passk_samples` per problem of the first `passk_problems` synthetic test problems in
    each sampled mode (`synthetic/<mode>/passk@<k>`, `synthetic/<mode>/passk_problems`; per problem, its row's
    `passk_right` of `passk_samples`), from a Generator of its own seeded `seed + PASSK_SEED_OFFSET`, after every
    other draw.
    world, dtype: as in :class:`Generator` (every rank returns the same metrics and rows)."""
    gen = Generator(model, tokenizer, cfg, sandbox_cfg, seed, last_number, world, dtype)
    metrics: dict[str, float] = {}
    rows: list[dict] = []
    for name, records in tqdm(list(datasets.items()), desc="evaluate", disable=not (world or World()).is_main):
        for mode in cfg.modes:
            m, r = evaluate_split(gen, records, mode, cfg, sandbox_cfg, rewards_cfg,
                                  sampled=sampling and name in cfg.sampled_datasets and mode in cfg.sampled_modes)
            metrics |= {f"{name}/{mode}/{k}": v for k, v in m.items()}
            rows += [{"dataset": name, **row} for row in r]
    if sampling and cfg.passk_problems and datasets.get("synthetic"):  # off by default (passk_problems: 0)
        subset = datasets["synthetic"][: cfg.passk_problems]
        passk_gen = Generator(model, tokenizer, cfg, sandbox_cfg, seed + PASSK_SEED_OFFSET, last_number, world, dtype)
        for mode in [m for m in cfg.modes if m in cfg.sampled_modes]:
            m, right = evaluate_passk(passk_gen, subset, mode, cfg, sandbox_cfg, rewards_cfg)
            metrics |= {f"synthetic/{mode}/{k}": v for k, v in m.items()}
            index = {(row["dataset"], row["mode"], row["id"]): row for row in rows}
            for record, c in zip(subset, right, strict=True):  # the subset's rows: right samples of passk_samples
                row = index[("synthetic", mode, record["id"])]
                row["passk_right"], row["passk_samples"] = c, cfg.passk_samples
    return metrics, rows
