#!/bin/bash
# soak.sh OUTDIR SECONDS [CLIENTS [SOAK_FLAGS...]]: kjitd from the bundle, tests/gpu/soak.py against it
# for SECONDS (default 16 clients; SOAK_FLAGS go to soak.py, e.g. --no-probe), then the daemon must
# stop cleanly. Report in OUTDIR/soak.md, the daemon's log in OUTDIR/soak-kjitd.log.
#   source .devpack/env.sh && tests/gpu/soak.sh $OUT 630
# A short soak, same criteria: a client killed every 30 s while more than 45 s are left (two in
# 120 s), every client's normal exit at the end, then the samples after the load and the probe
# (about 4 minutes in all):
#   source .devpack/env.sh && tests/gpu/soak.sh $OUT 120
set -u
out=${1:?usage: soak.sh OUTDIR SECONDS [CLIENTS [SOAK_FLAGS...]]}
seconds=${2:?usage: soak.sh OUTDIR SECONDS [CLIENTS [SOAK_FLAGS...]]}
clients=${3:-16}
shift $(($# < 3 ? $# : 3))
mkdir -p "$out"
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
pack=${KJIT_DEVPACK:-$root/.devpack}
bin=$pack/bin
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:False PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
if [ -z "${KJIT_CLIENT_LIB:-}" ] && [ -f "$pack/lib/libkjit_client.so.1" ]; then
  export KJIT_CLIENT_LIB=$pack/lib/libkjit_client.so.1
fi
# The CLI for the report's `kjit status --json` samples: the bundle's, else one on PATH.
kjit=$bin/kjit
[ -x "$kjit" ] || kjit=$(command -v kjit || true)
[ -n "$kjit" ] || echo "soak: no kjit binary in $bin or on PATH: the report will have no kjit status samples"
fail=0
source "$root/tests/gpu/lib.sh"
dir=$(mktemp -d /tmp/kjit-soak-XXXXXX)
if start_kjitd "$dir"; then
  # The run, up to 180 s for the clients to finish, the samples after the load and the probe.
  step soak timeout --kill-after=10 $((seconds + 420)) python3 "$root/tests/gpu/soak.py" --target "$target" \
    --daemon-pid "$daemon" --seconds "$seconds" --clients "$clients" --out "$out/soak.md" \
    --kjit "$kjit" --daemon-log "$dir/kjitd.log" "$@"
  stop_kjitd "$dir" >"$out/soak-kjitd.log" 2>&1 || true
  grep -q "FAIL" "$out/soak-kjitd.log" && { grep FAIL "$out/soak-kjitd.log"; fail=1; }
else
  fail=1
fi
rm -rf "$dir"
[ $fail -eq 0 ] && echo "soak: OK" || echo "soak: FAIL"
exit $fail
