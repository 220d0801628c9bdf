#!/bin/bash
# run-suite.sh OUTDIR: every GPU test and benchmark, on the GPU test machine, from a bundle made by
# tests/gpu/make-devpack.sh. Builds nothing. Writes suite.log (everything), summary.md and the
# benchmarks' own tables into OUTDIR (at most a handful of files), and prints the summary last.
#   source .devpack/env.sh && tests/gpu/run-suite.sh $OUT
# KJIT_SUITE_ONLY=regex limits the steps that run (by step name). KJIT_SUITE_BUDGET_S (default 540)
# bounds the whole suite: a step is cut to the time left, and steps past the budget are skipped, so a
# device lease never ends with nothing reported. Steps run most important first.
set -u
out=${1:?usage: run-suite.sh OUTDIR}
mkdir -p "$out"
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
pack=${KJIT_DEVPACK:-$root/.devpack}
bin=$pack/bin
log=$out/suite.log
summary=$out/summary.md
export KJIT_GOLDEN_DIR=${KJIT_GOLDEN_DIR:-$root/tests/reference/golden}
export KJIT_CACHE_DIR=${KJIT_CACHE_DIR:-/tmp/kjit-suite-cache}
export KJIT_KERNEL_DIR=${KJIT_KERNEL_DIR:-$root/kernel_sources}
: >"$log"
printf '| step | result | seconds |\n|---|---|---|\n' >"$summary"
failed=0
budget=${KJIT_SUITE_BUDGET_S:-540}

step() {  # step NAME TIMEOUT_S COMMAND...
  local name=$1 limit=$2; shift 2
  if [ -n "${KJIT_SUITE_ONLY:-}" ] && ! [[ $name =~ $KJIT_SUITE_ONLY ]]; then return; fi
  local left=$((budget - SECONDS))
  if [ "$left" -lt 15 ]; then
    echo "| $name | SKIPPED (suite budget spent) | 0 |" >>"$summary"; failed=$((failed + 1)); return
  fi
  [ "$limit" -le "$left" ] || limit=$left
  echo "===== $name: $*" >>"$log"
  local t0=$SECONDS rc
  timeout --kill-after=10 "$limit" "$@" >>"$log" 2>&1
  rc=$?
  local res=ok
  [ $rc -eq 0 ] || { res="FAIL (rc $rc)"; failed=$((failed + 1)); }
  echo "===== $name: $res in $((SECONDS - t0)) s" >>"$log"
  echo "| $name | $res | $((SECONDS - t0)) |" >>"$summary"
}

step gpu-info 30 nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv
# Correctness first (it also fills the cache that the later steps load), then the kernel's numbers,
# then the daemon end to end, then the slower checkers.
for t in "$bin"/gpu_*; do
  [ -x "$t" ] || continue
  step "$(basename "$t")" 180 "$t"
done
[ -x "$bin/kernel_bench" ] && step kernel_bench 180 "$bin/kernel_bench" --out "$out/kernel_bench.md"
for s in "$here"/e2e_*.sh; do  # daemon + client processes
  [ -f "$s" ] || continue
  step "$(basename "$s" .sh)" 150 bash "$s" "$out"
done
step client_suite 240 env PYTORCH_CUDA_ALLOC_CONF=expandable_segments:False bash "$here/client_suite.sh" "$out"
[ -x "$bin/launch_bench" ] && step launch_bench 90 "$bin/launch_bench" --out "$out/launch_bench.md"
# Two GPUs (one daemon, a client per GPU, kernel time alone vs both busy): only where there are two.
if [ "$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')" -ge 2 ]; then
  step multi_gpu 240 bash "$here/multi_gpu.sh" "$out"
else
  echo "| multi_gpu | not run: one GPU on this machine | 0 |" >>"$summary"
fi
if command -v compute-sanitizer >/dev/null && [ -x "$bin/gpu_mla_verify_test" ]; then
  step memcheck 120 compute-sanitizer --tool memcheck --error-exitcode 9 "$bin/gpu_mla_verify_test" --gtest_filter='*Sanitize*'
  step racecheck 120 compute-sanitizer --tool racecheck --error-exitcode 9 "$bin/gpu_mla_verify_test" --gtest_filter='*Sanitize*'
  step synccheck 120 compute-sanitizer --tool synccheck --error-exitcode 9 "$bin/gpu_mla_verify_test" --gtest_filter='*Sanitize*'
fi
[ -x "$bin/jit_bench" ] && step jit_bench 60 "$bin/jit_bench" --out "$out/jit_bench_gpu.md"

echo "failed steps: $failed" >>"$summary"
cat "$summary"
[ "$failed" -eq 0 ]
