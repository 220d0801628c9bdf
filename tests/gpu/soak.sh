#!/bin/bash
# soak.sh OUTDIR SECONDS [CLIENTS]: kjitd from the bundle, tests/gpu/soak.py against it for SECONDS
# (default 16 clients), then the daemon must stop cleanly. Report in OUTDIR/soak.md, the daemon's log
# in OUTDIR/soak-kjitd.log.
#   source .devpack/env.sh && tests/gpu/soak.sh $OUT 630
set -u
out=${1:?usage: soak.sh OUTDIR SECONDS [CLIENTS]}
seconds=${2:?usage: soak.sh OUTDIR SECONDS [CLIENTS]}
clients=${3:-16}
mkdir -p "$out"
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
pack=${KJIT_DEVPACK:-$root/.devpack}
bin=$pack/bin
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:False PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
if [ -z "${KJIT_CLIENT_LIB:-}" ] && [ -f "$pack/lib/libkjit_client.so.1" ]; then
  export KJIT_CLIENT_LIB=$pack/lib/libkjit_client.so.1
fi
fail=0
source "$root/tests/gpu/lib.sh"
dir=$(mktemp -d /tmp/kjit-soak-XXXXXX)
if start_kjitd "$dir"; then
  step soak timeout --kill-after=10 $((seconds + 240)) python3 "$root/tests/gpu/soak.py" --target "$target" \
    --daemon-pid "$daemon" --seconds "$seconds" --clients "$clients" --out "$out/soak.md"
  stop_kjitd "$dir" >"$out/soak-kjitd.log" 2>&1 || true
  grep -q "FAIL" "$out/soak-kjitd.log" && { grep FAIL "$out/soak-kjitd.log"; fail=1; }
else
  fail=1
fi
rm -rf "$dir"
[ $fail -eq 0 ] && echo "soak: OK" || echo "soak: FAIL"
exit $fail
