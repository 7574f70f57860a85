#!/usr/bin/env bash
# SmolLM2-135M-Instruct before and after a short GRPO run, on this CPU (README "Real models and GPUs"):
# the chain of benchmarks/profiles/smollm2_grpo.yaml (an overlay on configs/smollm2.yaml), then a table of greedy
# CoT accuracy on 100 GSM8K / 100 SVAMP / 100 synthetic test problems for the SFT and the GRPO model, the RL s/step
# and the machine's fp32 matmul GFLOP/s. Outputs under runs/smollm2-grpo/; the data are the default corpus stage's.
set -euo pipefail
PY=${PY:-.venv/bin/python}
P=benchmarks/profiles/smollm2_grpo.yaml
export PREFECT_SERVER_ANALYTICS_ENABLED=false MLFLOW_ENABLE_ASYNC_LOGGING=false
[ -f data/synthetic/train.jsonl ] && [ -f data/corpus/math.jsonl ] || "$PY" -m stages.corpus --params "$P"
for stage in tokenizer base pretrain sft "rl 1234" "evaluate sft" "evaluate rl"; do
  set -- $stage
  t0=$(date +%s)
  "$PY" -m "stages.$1" --params "$P" ${2:-} > "/tmp/smollm2-grpo-$1.log" 2>&1 || { tail -30 "/tmp/smollm2-grpo-$1.log"; exit 1; }
  echo "$stage: $(( $(date +%s) - t0 )) s"
done
"$PY" - <<'PYEOF'
import json
from pathlib import Path

from dsmath.train.flops import matmul_flops_per_s

m = Path("runs/smollm2-grpo/metrics")
rl = json.loads((m / "rl" / "seed-1234.json").read_text())
rows = {name: json.loads((m / "eval" / f"{name}.json").read_text()) for name in ("sft", "rl")}
print(f"matmul 2048^2 fp32: {matmul_flops_per_s() / 1e9:.0f} GFLOP/s; RL {rl['steps']} steps, "
      f"{rl['s_per_step']:.1f} s/step, reward last10 {rl['reward_mean_last10']:.3f}, kl last10 {rl['kl_last10']:.4f}")
print("| model | GSM8K cot greedy | SVAMP cot greedy | synthetic cot greedy | val synthetic cot greedy |")
print("|---|---:|---:|---:|---:|")
for name, e in rows.items():
    cells = [e[k] * 100 for k in ("gsm8k_test/cot/greedy", "svamp/cot/greedy", "synthetic/cot/greedy",
                                  "val/synthetic/cot/greedy")]
    print(f"| {name} | " + " | ".join(f"{c:.1f}" for c in cells) + " |")
PYEOF
