#!/bin/bash
# client_suite.sh OUTDIR: kjit's Python package on torch CUDA tensors (run by run-suite.sh; output on
# stdout, which the suite keeps in suite.log).
#   1. kjitd from the bundle on a temporary socket; tests/gpu/client_torch.py against it (every
#      launch mode vs float64, kernel errors, Unsupported, CUDA graphs, 8 processes, SGLang's Triton
#      kernel and the stand-in SGLang backend); its lines in OUTDIR/client_torch.txt
#   2. a fresh kjitd; bench/client_bench/client_bench.py (host and GPU time per call and mode, graph
#      replay, decode-step projection vs Triton); its report in OUTDIR/client_bench.md
# The Triton rows and checks run when the bundle has sglang/extend_attention.py and
# prefill_attention.py (tests/gpu/make-devpack.sh with KJIT_SGLANG_GIT). torch's allocator runs
# without expandable segments: the ring and remote modes share its allocations with kjitd.
set -u
out=${1:?usage: client_suite.sh OUTDIR}
mkdir -p "$out"
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
pack=${KJIT_DEVPACK:-$root/.devpack}
bin=$pack/bin
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:False
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
if [ -z "${KJIT_CLIENT_LIB:-}" ] && [ -f "$pack/lib/libkjit_client.so.1" ]; then
  export KJIT_CLIENT_LIB=$pack/lib/libkjit_client.so.1
fi
if ! python3 -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
  echo "FAIL: this python3 has no torch with CUDA"; exit 1
fi
fail=0
source "$root/tests/gpu/lib.sh"
extra=()
if [ -f "$pack/sglang/extend_attention.py" ] && [ -f "$pack/sglang/prefill_attention.py" ]; then
  extra=(--triton-dir "$pack/sglang")
else
  echo "== no $pack/sglang/{extend,prefill}_attention.py: the Triton rows and checks are skipped"
fi
cache=()
[ -n "${KJIT_CACHE_DIR:-}" ] && cache=(--cache-dir "$KJIT_CACHE_DIR")

dir=$(mktemp -d /tmp/kjit-client-XXXXXX)
if start_kjitd "$dir"; then
  step client_torch timeout --kill-after=5 150 python3 "$root/tests/gpu/client_torch.py" --target "$target" \
    ${cache[@]+"${cache[@]}"} ${extra[@]+"${extra[@]}"} --out "$out/client_torch.txt"
  stop_kjitd "$dir"
else
  fail=1
fi
rm -rf "$dir"

left=$((230 - SECONDS))  # what the suite's 240 s step leaves; client_torch takes at most 155 s
[ "$left" -ge 30 ] || left=30
dir=$(mktemp -d /tmp/kjit-client-XXXXXX)
if start_kjitd "$dir"; then
  step client_bench timeout --kill-after=5 "$left" python3 "$root/bench/client_bench/client_bench.py" --target "$target" \
    ${extra[@]+"${extra[@]}"} --out "$out/client_bench.md"
  stop_kjitd "$dir"
else
  fail=1
fi
rm -rf "$dir"
[ $fail -eq 0 ] && echo "client_suite: OK" || echo "client_suite: FAIL"
exit $fail
