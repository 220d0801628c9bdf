#!/bin/bash
# kernel_study.sh OUTDIR: the kernel measurements behind bench/results/*-short-* and *-sm120-proxy-*,
# on the GPU test machine after `source .devpack/env.sh` (not part of run-suite.sh):
#   kernel_bench.md  every shape (KERNEL.md's, the batch sweeps at P16k/P4k/P1k, the prefix sweep)
#   timeline.md      per-CTA timestamps of the short-prefix rows
#   splits.md        forced split counts at short prefixes against the plan's choice
#   proxy.md         the sm_120 proxy: every shape, projected onto the RTX PRO 6000 (sm_120's own
#                    tile: 32x32 with Q in registers, for both cache types)
#   ncu_proxy_K5/    ncu of the sm_120 tile (proxy) on K5
#   proxy_t32x16.md  the same proxy with the 32x16 tile on bf16 caches (sm_120's bf16 tile until 2026-12-05)
#   ncu_proxy_t32x16_K5/  ncu of that tile (proxy) on K5
#   proxy_fp8_q32x32.md   the proxy's fp8 rows (both numerics) on the 32x32 tile's fp8 variant
#   proxy_fp8_t32x16.md   the same rows on the 32x16 tile (sm_120's fp8 tile until 2026-12-06)
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
# profile.sh's SKIP passes the sanity checks' launches (a split and a combine per case: 3 bf16 and
# 3 fp8 cases on the one tile) and the first warm-up launch of K5.
part ncu_proxy_K5 env KJIT_BENCH_ARGS="--proxy sm_120" bash "$here/profile.sh" "$out/ncu_proxy_K5" "K5 " 14
part proxy_t32x16 "$kb" --proxy sm_120 --tile 32x16 --kv bf16 --reps 30 --out "$out/proxy_t32x16.md"
part ncu_proxy_t32x16_K5 env KJIT_BENCH_ARGS="--proxy sm_120 --tile 32x16 --kv bf16" bash "$here/profile.sh" \
  "$out/ncu_proxy_t32x16_K5" "K5 " 14
fp8_rows='K2 |K3 |K4 |K5 |K6 |K7 |P1k H8|P4k H8|P16k H8'
part proxy_fp8_q32x32 "$kb" --proxy sm_120 --tile 32x32 --kv bf16,fp8,fp8-numerics --reps 20 --only "$fp8_rows" \
  --out "$out/proxy_fp8_q32x32.md"
part proxy_fp8_t32x16 "$kb" --proxy sm_120 --tile 32x16 --kv fp8,fp8-numerics --reps 20 --only "$fp8_rows" \
  --out "$out/proxy_fp8_t32x16.md"
