#!/usr/bin/env bash
# GPU run of the ABISS recipe (docs/generation.md, "ABISS (model)"): the same generation as the SmolLM2
# model test (tests/test_generation_abiss.py), with a larger local model as the council, on more anchors.
#
#   MODEL=Qwen/Qwen2.5-7B-Instruct bash scripts/generate_gpu.sh            # a hub id in the local HF cache
#   MODEL=/path/to/model bash scripts/generate_gpu.sh --limit 50           # or a local folder
#   MODEL=A MODEL2=B MODEL3=C bash scripts/generate_gpu.sh                 # a council of three (ABISS §4.3)
#
# MODEL must already be on the machine: nothing is fetched (HF_HUB_OFFLINE=1). The run stops after
# TIMEOUT seconds (default 540); rerun the same command to resume it (the pipeline's journal).
# Settings: MODEL (required), MODEL2, MODEL3 (optional further council members), ANCHORS (default
# embedded; e.g. spider:<root>), LIMIT (anchors, default 12), PER_ANCHOR (candidates per anchor, default 2),
# OUT (runs/generate_gpu), TIMEOUT (seconds, default 540), PYTHON (.venv/bin/python).
# Extra arguments go to `textsql-clarify generate` and override the ones below.
set -euo pipefail
MODEL=${MODEL:?set MODEL to a local model folder or a hub id in the local HF cache}
OUT=${OUT:-runs/generate_gpu}
PY=${PYTHON:-.venv/bin/python}
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false

council=(--model "$MODEL")
[ -n "${MODEL2:-}" ] && council+=(--model "$MODEL2")
[ -n "${MODEL3:-}" ] && council+=(--model "$MODEL3")

timeout "${TIMEOUT:-540}" "$PY" -m textsql_clarify.cli generate --anchors "${ANCHORS:-embedded}" --recipes abiss \
  "${council[@]}" --device cuda --limit "${LIMIT:-12}" --out "$OUT" --no-progress \
  --option per_anchor="${PER_ANCHOR:-2}" --option schema_scope=all --option max_new_tokens=384 \
  "$@"
echo "samples: $OUT/samples.jsonl; per-stage rejections: $OUT/rejections.json"
"$PY" -m textsql_clarify.cli data validate "$OUT/samples.jsonl" || true
