"""The end-of-SFT accuracy probe: greedy accuracy and pass@k on held-out problems, per solution mode.

It is the evaluation stage's machinery on a small scale (:mod:`dsmath.evaluation.evaluate`: the fast sampler, PoT
programs and tool calls run in the sandbox, answers checked by :mod:`dsmath.rewards`), so the probe's numbers and
``evaluate@sft``'s agree on the same problems. ``probe.mode`` is decoded greedily and sampled k times per problem
(headline keys ``greedy_acc``, ``pass_at_<k>``, ``sample_acc``, and ``<mode>/pass@k``, ``<mode>/maj@k``); every
other mode in ``probe.modes`` greedily only (``<mode>/greedy``, format-error rate, length). In cot mode the greedy
completions' arithmetic comes too (:mod:`dsmath.evaluation.arithmetic`): ``cot/equation_acc`` (share of written
equations whose result is true), ``cot/link_acc`` (share of true ``=`` links), ``cot/n_equations``, ``cot/n_links``;
the per-category breakdown is the evaluate stage's, left out here.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from dsmath.config import Evaluate
from dsmath.evaluation.arithmetic import KEY_PREFIX
from dsmath.evaluation.evaluate import Generator, evaluate_split
from dsmath.runtime.distributed import World


def _eval_cfg(probe) -> Evaluate:
    """The evaluation settings the probe implies: k samples per problem, pass@1 and pass@k, maj@k."""
    return Evaluate(n_samples=probe.k, k=sorted({1, probe.k}), temperature=probe.temperature,
                    max_new_tokens=probe.max_new_tokens, max_tool_calls=probe.max_tool_calls,
                    batch_size=probe.batch_size)


def accuracy_probe(model, tokenizer, records: Sequence[dict], probe, sandbox_cfg, rewards_cfg, seed: int,
                   dtype: torch.dtype | None = None, world: World | None = None) -> tuple[dict[str, float], list[dict]]:
    """Greedy accuracy in every probe mode; pass@k, maj@k and mean sampled accuracy in the headline mode.

    `probe` is the params `Probe` section; `dtype` the decoding precision (params ``common.dtype``, as the evaluate
    stage decodes; None or float32: the model's own). Returns (metrics, rows): rows hold the question, gold, greedy
    completion and verdict of each problem in the headline mode, for an MLflow table. world: the ranks that share
    the decoding (every rank returns the same; default: one process).
    """
    cfg = _eval_cfg(probe)
    gen = Generator(model, tokenizer, cfg, sandbox_cfg, seed, world=world, dtype=dtype)
    metrics: dict[str, float] = {"probe_problems": float(len(records))}
    rows: list[dict] = []
    for mode in dict.fromkeys([probe.mode, *probe.modes]):  # headline first, each mode once
        m, r = evaluate_split(gen, records, mode, cfg, sandbox_cfg, rewards_cfg, sampled=mode == probe.mode)
        metrics |= {f"{mode}/{k}": v for k, v in m.items() if k != "n" and not k.startswith(f"{KEY_PREFIX}/")}
        if mode == probe.mode:
            rows = [{"mode": mode, "question": x["question"], "gold": x["gold"], "greedy": x["greedy"],
                     "correct": x["greedy_correct"]} for x in r]
            metrics |= {"greedy_acc": m["greedy"], f"pass_at_{probe.k}": m[f"pass@{probe.k}"],
                        "sample_acc": m["pass@1"]}  # pass@1 over k samples = the mean sampled accuracy
    return metrics, rows
