#!/bin/bash
# The 1,600 paired test scenes of the results notes: the test split and five world variants (three of
# configs/default.yaml's `data.variants`, two settings no stage trains on), regenerated from their seeds, then
# `wamdiff eval pdms` for every planner spec given, and every planner paired with REF (`eval paired --ref`: its
# result-file name or a unique part of it), per split and pooled, in OUT/paired.
#   tools/paired_scenes.sh OUT ar_vla "model:checkpoints/ar_vla,mode=ar,batch=16" \
#     "model:checkpoints/small/small_student_dagger4,mode=block,block=17,steps=4,threshold=0.5,ordinal=2,batch=16"
# Re-running regenerates nothing that exists and re-plans nothing already planned.
set -euo pipefail
usage="usage: tools/paired_scenes.sh OUT REF PLANNER_SPEC..."
[ $# -ge 3 ] || { echo "$usage" >&2; exit 2; }
out=$1 ref=$2; shift 2
W=${WAMDIFF:-wamdiff}
declare -A world=(
  [test]=""
  [dense_fast]="--density 1.6 --speed-scale 1.15"
  [sparse_slow]="--density 0.6 --speed-scale 0.85"
  [along_routes]="--t0-spread 16"
  [hv_a]="--density 0.8 --speed-scale 1.1 --t0-spread 8"
  [hv_b]="--density 1.4 --speed-scale 0.9"
)
declare -A per_family=([test]=50 [dense_fast]=50 [sparse_slow]=50 [along_routes]=50 [hv_a]=100 [hv_b]=100)
splits=(test dense_fast sparse_slow along_routes hv_a hv_b)
planners=()
for spec in "$@"; do planners+=(-p "$spec"); done
for s in "${splits[@]}"; do
  # shellcheck disable=SC2086  # the world flags are words
  $W data generate --split test --format delta --workers 2 --n "${per_family[$s]}" ${world[$s]} --out "$out/data/$s"
  $W eval pdms "${planners[@]}" --data "$out/data/$s/scenes" --split test --workers 2 --out "$out/$s"
done
$W eval paired "${splits[@]/#/$out/}" --ref "$ref" --out "$out/paired"
