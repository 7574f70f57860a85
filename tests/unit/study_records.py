"""Hand-made study run records for the study's unit tests (test_study.py, test_study_stats.py)."""

from __future__ import annotations


def record(greedy: list[int], sft: list[int], s_per_step: float, maj: list[int] | None = None) -> dict:
    ids = [f"p{i}" for i in range(len(greedy))]
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    rl_table = {"id": ids, "greedy": greedy} | ({"maj": maj, "pass": maj} if maj else {})
    ev = {"synthetic/tool/greedy": mean(greedy)} | ({"synthetic/tool/maj@8": mean(maj),
                                                     "synthetic/tool/pass@8": mean(maj)} if maj else {})
    sft_ev = {"synthetic/tool/greedy": mean(sft)} | ({"synthetic/tool/maj@8": mean(sft),
                                                     "synthetic/tool/pass@8": mean(sft)} if maj else {})
    sft_table = {"id": ids, "greedy": sft} | ({"maj": sft, "pass": sft} if maj else {})
    return {"mode": "tool", "eval": ev, "sft_eval": sft_ev,
            "rl": {"s_per_step": s_per_step, "peak_rss_mb": 100.0, "trainer_state_mb": 5.0},
            "problems": {"rl": {"tool": rl_table}, "sft": {"tool": sft_table}}, "curve": []}
