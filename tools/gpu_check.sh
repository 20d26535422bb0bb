#!/usr/bin/env bash
# Every GPU-only check in one run, for a CUDA machine lent for a few minutes (docs/development/gpu.md):
#   1. the CUDA tests (`make test-gpu`'s file): CUDA-graph steps against eager, then FlashInfer against SDPA;
#   2. real-size step costs on a random Qwen3-VL-2B (tools/gpu_step_costs.py), graphs on and off, and the speedup
#      they predict for the shipped small student's measured decode trace;
#   3. `wamdiff bench --device cuda` of the shipped small student against the AR VLA: CUDA graphs on, off, and
#      FlashInfer attention.
# Each stage has its own time limit inside one overall budget (BUDGET_S), so a slow stage (FlashInfer compiles its
# kernels on first use) cannot take the others with it; FlashInfer comes last for that reason. Everything lands in
# OUT: gpu_check.log (every stage's output) and one JSON per measurement.
#
#   OUT=runs/gpu DATA=runs/gpu/data/test.json tools/gpu_check.sh     # DATA: `wamdiff data generate --split test`
#   STAGES="test_cuda_graphs bench_graphs" tools/gpu_check.sh           # a rerun of some stages only
set -u
OUT=${OUT:-runs/gpu}
DATA=${DATA:-runs/gpu/data/test.json}
PY=${PY:-python3}
STUDENT=${STUDENT:-checkpoints/small/small_student_dagger4}
AR=${AR:-checkpoints/ar_vla}
mkdir -p "$OUT"
LOG=$OUT/gpu_check.log
DEADLINE=$(( $(date +%s) + ${BUDGET_S:-460} ))
STAGES=${STAGES:-env test_cuda_graphs step_costs bench_graphs bench_eager test_flashinfer bench_flashinfer}
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}

stage() {  # stage NAME LIMIT_S COMMAND...: run with the smaller of LIMIT_S and what is left of the budget
  local name=$1 limit=$2 left t0 rc
  shift 2
  [[ " $STAGES " == *" $name "* ]] || return 0
  left=$(( DEADLINE - $(date +%s) ))
  (( left < limit )) && limit=$left
  if (( limit < 15 )); then echo "== $name: skipped, out of time" | tee -a "$LOG"; return; fi
  echo "== $name (limit ${limit} s): $*" | tee -a "$LOG"
  t0=$(date +%s)
  timeout "$limit" "$@" >>"$LOG" 2>&1
  rc=$?
  echo "== $name: rc=$rc in $(( $(date +%s) - t0 )) s" | tee -a "$LOG"
}

bench() {  # bench NAME ARGS...: the shipped small student against the AR VLA at its quoted decode, on CUDA
  local name=$1
  shift
  stage "bench_$name" 100 "$PY" -m wamdiff.cli bench --checkpoint "$STUDENT" --ar-checkpoint "$AR" --data "$DATA" \
    --n-prompts 16 --batch 1,8 --blocks fit --taus 0.5 --max-steps 4 --caches exact --ordinal 2 --no-judge \
    --confirm-repeats 3 --device cuda --out "runs/gpu/bench_$name" "$@"
  [[ " $STAGES " == *" bench_$name "* && -f "runs/gpu/bench_$name/bench.json" ]] && cp "runs/gpu/bench_$name/bench.json" "$OUT/bench_$name.json" \
    && cat "runs/gpu/bench_$name/bench.md" >>"$LOG"
}

stage env 30 bash -c "nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; which nvcc; nvcc --version | tail -1;
  $PY -c 'import torch, transformers; print(\"torch\", torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0), \"transformers\", transformers.__version__)';
  $PY -c 'import flashinfer; print(\"flashinfer\", flashinfer.__version__)'; $PY -c 'import wamdiff.cli'"
stage test_cuda_graphs 120 "$PY" -m pytest -q -rs tests/test_decoding_cuda.py -k "not flashinfer"
stage step_costs 170 "$PY" tools/gpu_step_costs.py --out "$OUT/step_costs.json"
bench graphs --dtypes fp32,bf16
bench eager --dtypes fp32,bf16 --no-cuda-graphs
stage test_flashinfer 220 "$PY" -m pytest -q -rs tests/test_decoding_cuda.py -k flashinfer
bench flashinfer --dtypes bf16 --attention flashinfer
echo "== done; left of the budget: $(( DEADLINE - $(date +%s) )) s" | tee -a "$LOG"
