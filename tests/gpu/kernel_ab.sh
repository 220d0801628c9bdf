#!/bin/bash
# kernel_ab.sh OUTDIR ROUNDS NAME=KERNEL_DIR[,ARG...]... -- KERNEL_BENCH_ARGS...
# Times kernel trees against each other in one process order on one GPU: ROUNDS rounds, each running
# kernel_bench once per tree (KJIT_KERNEL_DIR=KERNEL_DIR, the bundle's binaries), then one table of
# every shape (tests/gpu/kernel_ab.py; the first tree is the reference). ARGs after the directory,
# comma-separated, go to that tree's runs only (after the shared ones), so that one tree can also be
# timed against itself with other kernel_bench options. On the GPU machine after
# `source .devpack/env.sh`; trees of earlier commits come with the bundle (make-devpack.sh's
# KJIT_AB_TREES). Examples, the working tree against the commit bundled as "base", and a plan option
# off and on:
#   tests/gpu/kernel_ab.sh OUT 2 base=.devpack/trees/base/kernel_sources head=kernel_sources -- \
#     --proxy sm_120 --kv bf16,fp8 --reps 10 --only 'K2 |K5 |K7 |P1k H8|P4k H8|P16k H8'
#   tests/gpu/kernel_ab.sh OUT 2 off=kernel_sources,--pdl,off on=kernel_sources,--pdl,on -- --only 'P1k H8'
# Writes OUTDIR/ab.md (the table) and OUTDIR/<name>_<round>.md (each run's own tables).
set -u
usage="usage: kernel_ab.sh OUTDIR ROUNDS NAME=KERNEL_DIR[,ARG...]... -- KERNEL_BENCH_ARGS..."
out=${1:?$usage}
rounds=${2:?$usage}
shift 2
trees=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do trees+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
[ ${#trees[@]} -ge 2 ] || { echo "kernel_ab: name two kernel trees or more (NAME=KERNEL_DIR[,ARG...])" >&2; exit 2; }
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
kb=${KJIT_DEVPACK:-$here/../../.devpack}/bin/kernel_bench
mkdir -p "$out"
inputs=()
for t in "${trees[@]}"; do
  spec=${t#*=} dir=${spec%%,*}
  [ -f "$dir/mla_verify/mla_verify.cu" ] || { echo "kernel_ab: $dir is not a kernel_sources tree" >&2; exit 2; }
done
for ((r = 1; r <= rounds; ++r)); do
  for t in "${trees[@]}"; do
    name=${t%%=*} spec=${t#*=}
    dir=$(cd "${spec%%,*}" && pwd)
    own=()
    [ "$spec" != "${spec#*,}" ] && IFS=, read -r -a own <<<"${spec#*,}"
    md=$out/${name}_$r.md
    echo "===== round $r: $name ($dir${own[*]:+; ${own[*]}})"
    KJIT_KERNEL_DIR=$dir "$kb" "$@" "${own[@]}" --out "$md" || { echo "kernel_ab: kernel_bench failed on $name" >&2; exit 1; }
    inputs+=("$name=$md")
  done
done
python3 "$here/kernel_ab.py" "${inputs[@]}" | tee "$out/ab.md"
