#!/bin/bash
# kernel_study.sh OUTDIR: the kernel measurements behind bench/results/*-short-* and *-sm120-proxy-*,
# on the GPU test machine after `source .devpack/env.sh` (not part of run-suite.sh):
#   kernel_bench.md  every shape (KERNEL.md's, the batch sweeps at P16k/P4k/P1k, the prefix sweep)
#   timeline.md      per-CTA timestamps of the short-prefix rows
#   splits.md        forced split counts at short prefixes against the plan's choice
#   proxy.md         the sm_120 proxy: every shape, projected onto the RTX PRO 6000
#   ncu_proxy_K5/    ncu of the sm_120 tile (proxy) on K5
#   proxy_qreg.md    the same proxy with the 32x32 Q-in-registers tile (--tile 32x32, bf16 caches)
#   ncu_proxy_qreg_K5/  ncu of that tile (proxy) on K5
# KJIT_STUDY_ONLY=regex limits the parts (by the names above, without .md).
set -u
out=${1:?usage: kernel_study.sh OUTDIR}
mkdir -p "$out"
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
kb=${KJIT_DEVPACK:-$here/../../.devpack}/bin/kernel_bench
part() {  # part NAME COMMAND...
  local name=$1; shift
  if [ -n "${KJIT_STUDY_ONLY:-}" ] && ! [[ $name =~ $KJIT_STUDY_ONLY ]]; then return; fi
  echo "===== $name: $*"
  local t0=$SECONDS
  "$@"
  echo "===== $name: rc $? in $((SECONDS - t0)) s"
}
short='P1k H8|P2k H8|K1 |P8k H8|P16k H8|bs8 H8 D16 P1k'
part kernel_bench "$kb" --reps 40 --out "$out/kernel_bench.md"
part timeline "$kb" --timeline --reps 20 --only "$short" --out "$out/timeline.md"
part splits "$kb" --splits 0,1,2,4,8,16,32,64 --reps 30 --only 'P1k H8|K1 |P16k H8' --out "$out/splits.md"
part proxy "$kb" --proxy sm_120 --reps 30 --out "$out/proxy.md"
part ncu_proxy_K5 env KJIT_BENCH_ARGS="--proxy sm_120" bash "$here/profile.sh" "$out/ncu_proxy_K5" "K5 "
part proxy_qreg "$kb" --proxy sm_120 --tile 32x32 --kv bf16 --reps 30 --out "$out/proxy_qreg.md"
part ncu_proxy_qreg_K5 env KJIT_BENCH_ARGS="--proxy sm_120 --tile 32x32 --kv bf16" bash "$here/profile.sh" \
  "$out/ncu_proxy_qreg_K5" "K5 "
