#!/bin/bash
# kernel_ab.sh OUTDIR ROUNDS NAME=KERNEL_DIR... -- KERNEL_BENCH_ARGS...
# Times kernel trees against each other in one process order on one GPU: ROUNDS rounds, each running
# kernel_bench once per tree (KJIT_KERNEL_DIR=KERNEL_DIR, the bundle's binaries), then one table of
# every shape (tests/gpu/kernel_ab.py; the first tree is the reference). On the GPU machine after
# `source .devpack/env.sh`; trees of earlier commits come with the bundle (make-devpack.sh's
# KJIT_AB_TREES). Example, the working tree against the commit bundled as "base":
#   tests/gpu/kernel_ab.sh OUT 2 base=.devpack/trees/base/kernel_sources head=kernel_sources -- \
#     --proxy sm_120 --kv bf16,fp8 --reps 10 --only 'K2 |K5 |K7 |P1k H8|P4k H8|P16k H8'
# Writes OUTDIR/ab.md (the table) and OUTDIR/<name>_<round>.md (each run's own tables).
set -u
out=${1:?usage: kernel_ab.sh OUTDIR ROUNDS NAME=KERNEL_DIR... -- KERNEL_BENCH_ARGS...}
rounds=${2:?usage: kernel_ab.sh OUTDIR ROUNDS NAME=KERNEL_DIR... -- KERNEL_BENCH_ARGS...}
shift 2
trees=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do trees+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
[ ${#trees[@]} -ge 2 ] || { echo "kernel_ab: name two kernel trees or more (NAME=KERNEL_DIR)" >&2; exit 2; }
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
kb=${KJIT_DEVPACK:-$here/../../.devpack}/bin/kernel_bench
mkdir -p "$out"
inputs=()
for t in "${trees[@]}"; do
  dir=${t#*=}
  [ -f "$dir/mla_verify/mla_verify.cu" ] || { echo "kernel_ab: $dir is not a kernel_sources tree" >&2; exit 2; }
done
for ((r = 1; r <= rounds; ++r)); do
  for t in "${trees[@]}"; do
    name=${t%%=*} dir=$(cd "${t#*=}" && pwd)
    md=$out/${name}_$r.md
    echo "===== round $r: $name ($dir)"
    KJIT_KERNEL_DIR=$dir "$kb" "$@" --out "$md" || { echo "kernel_ab: kernel_bench failed on $name" >&2; exit 1; }
    inputs+=("$name=$md")
  done
done
python3 "$here/kernel_ab.py" "${inputs[@]}" | tee "$out/ab.md"
