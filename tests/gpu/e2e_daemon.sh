#!/bin/bash
# e2e_daemon.sh: kjitd and client processes on the GPU machine (run by run-suite.sh; everything is
# printed to stdout, which the suite keeps in suite.log; the OUTDIR argument it passes is unused).
#   1. start kjitd from the bundle on a temporary socket (the suite's KJIT_CACHE_DIR is warm by now)
#   2. e2e_ipc_client async, sync and ring (a shared-memory launch ring): CUDA IPC regions,
#      ModelInfer, bitwise equal to in-process
#   3. e2e_torch.py: a Python client with torch CUDA tensors (regions from torch's allocator),
#      ModelInfer against a float64 torch reference, bitwise equal across request forms
#   4. a client killed with SIGKILL in the middle of launches: its regions and event are released,
#      the daemon stays healthy and serves the next client correctly
#   5. SIGTERM: the daemon exits 0
set -u
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
pack=${KJIT_DEVPACK:-$root/.devpack}
bin=$pack/bin
dir=$(mktemp -d /tmp/kjit-e2e-XXXXXX)
fail=0
source "$root/tests/gpu/lib.sh"
start_kjitd "$dir" || exit 1
# async first: its check that a launch growing the daemon's workspace replies without waiting needs
# a workspace that no other client has grown yet.
step async "$bin/e2e_ipc_client" --target "$target" --mode async
step sync "$bin/e2e_ipc_client" --target "$target" --mode sync
step ring "$bin/e2e_ipc_client" --target "$target" --mode ring
if python3 -c "import grpc, torch; assert torch.cuda.is_available()" 2>/dev/null; then
  if [ -f "$pack/python/kjit_protos.desc" ]; then
    step torch python3 "$root/tests/gpu/e2e_torch.py" --target "$target" --descriptors "$pack/python/kjit_protos.desc"
  else
    echo "== torch: FAIL: the bundle has no python/kjit_protos.desc (tests/gpu/make-devpack.sh copies it)"; fail=1
  fi
else
  echo "== torch: not run: this python3 has no grpc, or no torch with CUDA"
fi

echo "== kill -9 of a client in the middle of launches"
"$bin/e2e_ipc_client" --target "$target" --mode victim >"$dir/victim.out" 2>&1 &
victim=$!
for _ in $(seq 1 600); do
  grep -q '^ready' "$dir/victim.out" 2>/dev/null && break
  kill -0 $victim 2>/dev/null || break
  sleep 0.1
done
if grep -q '^ready' "$dir/victim.out"; then
  sleep 1  # let it launch for a while
  kill -9 $victim
  wait $victim 2>/dev/null
  step after-kill "$bin/e2e_ipc_client" --target "$target" --mode after-kill
else
  echo "FAIL: the victim client never got ready"; cat "$dir/victim.out"; kill -9 $victim 2>/dev/null; fail=1
fi
stop_kjitd "$dir"
rm -rf "$dir"
[ $fail -eq 0 ] && echo "e2e_daemon: OK" || echo "e2e_daemon: FAIL"
exit $fail
