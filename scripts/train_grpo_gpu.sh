#!/usr/bin/env bash
# GPU recipe for examples/train_grpo.py (docs/training.md, "On a GPU"): the same pipeline as the CPU run,
# with a bigger local model, bfloat16, LoRA adapters, the whole held-out ambiguous set and many more steps.
#
#   MODEL=/path/to/Qwen2.5-7B-Instruct bash scripts/train_grpo_gpu.sh            # or a hub id in the local HF cache
#   MODEL=Qwen/Qwen2.5-7B-Instruct OUT=runs/qwen7b bash scripts/train_grpo_gpu.sh --grpo-steps 100
#
# MODEL must already be on the machine (a folder, or a hub id in the local HF cache): nothing is fetched
# (HF_HUB_OFFLINE=1). Extra arguments go to examples/train_grpo.py and override the ones below.
# Settings: MODEL (required), OUT (runs/train_grpo_gpu), PYTHON (.venv/bin/python), DATA_ROOT
# (../shared/data next to the repository).
set -euo pipefail
MODEL=${MODEL:?set MODEL to a local model folder or a hub id in the local HF cache}
OUT=${OUT:-runs/train_grpo_gpu}
PY=${PYTHON:-.venv/bin/python}
cd "$(dirname "$0")/.."
DATA_ROOT=${DATA_ROOT:-$(cd .. && pwd)/shared/data}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false

exec "$PY" examples/train_grpo.py --model "$MODEL" --out "$OUT" --data-root "$DATA_ROOT" \
  --bf16 --lora --lora-r 32 --no-prefer-short \
  --eval-per-group 64 --num-envs 32 --eval-max-new-tokens 192 \
  --sft-per-group 128 --sft-steps 200 --sft-batch 4 --sft-grad-accum 2 --sft-lr 1e-4 \
  --grpo-per-group 128 --grpo-steps 200 --grpo-prompts-per-step 8 --num-generations 8 \
  --max-new-tokens 192 --max-completion-length 768 --grpo-lr 5e-6 --temperature 1.0 \
  "$@"
