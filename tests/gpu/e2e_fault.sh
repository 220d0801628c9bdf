#!/bin/bash
# e2e_fault.sh: a GPU fault on purpose (run by run-suite.sh as step e2e_fault; output on stdout,
# which the suite keeps in suite.log; the OUTDIR argument it passes is unused).
#   1. kjitd from the bundle with --enable-fault-injection (test only) on a temporary socket
#   2. fault_inject.py: the model kjit_fault_inject writes to an invalid address; that call answers
#      UNAVAILABLE, health turns NOT_SERVING, a concurrent mla_verify client gets OK or UNAVAILABLE
#      and never hangs
#   3. kjitd exits 1 within 60 s (for its supervisor), says why in its log and removes its socket
#   4. a fresh kjitd on the same cache is healthy and launches (the cache survived)
set -u
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
pack=${KJIT_DEVPACK:-$root/.devpack}
bin=$pack/bin
dir=$(mktemp -d /tmp/kjit-fault-XXXXXX)
fail=0
source "$root/tests/gpu/lib.sh"
desc=$pack/python/kjit_protos.desc
if ! python3 -c "import grpc, google.protobuf" 2>/dev/null || [ ! -f "$desc" ]; then
  echo "FAIL: e2e_fault needs python3 with grpc and $desc (tests/gpu/make-devpack.sh copies it)"; exit 1
fi
start_kjitd "$dir" --enable-fault-injection || exit 1
step fault_inject timeout --kill-after=5 90 python3 "$root/tests/gpu/fault_inject.py" --target "$target" --descriptors "$desc"

echo "== kjitd exits 1 after the fault"
for _ in $(seq 1 600); do
  kill -0 "$daemon" 2>/dev/null || break
  sleep 0.1
done
if kill -0 "$daemon" 2>/dev/null; then
  echo "FAIL: kjitd still runs 60 s after the fault"; kill -9 "$daemon"; fail=1
fi
wait "$daemon"
rc=$?
[ $rc -eq 1 ] && echo "kjitd exited 1" || { echo "FAIL: kjitd exited $rc, not 1"; fail=1; }
grep -q "CUDA context unusable" "$dir/kjitd.log" || { echo "FAIL: kjitd's log does not say why it stopped"; fail=1; }
[ -e "$sock" ] && { echo "FAIL: socket left behind"; fail=1; }
echo "== kjitd log"; cat "$dir/kjitd.log"

echo "== a fresh kjitd (no fault injection) after the fault"
if start_kjitd "$dir"; then
  step after-fault-launch python3 -c "
import sys
sys.path.insert(0, '$root/tests/gpu')
import grpc, fault_inject as f
m = f.Messages('$desc')
ch = grpc.insecure_channel('$target')
m.method(ch, 'inference.GRPCInferenceService', 'ModelInfer')(f.normal_request(m), timeout=f.DEADLINE_S)
fault = m['inference.ModelInferRequest'](model_name='kjit_fault_inject')
try:
    m.method(ch, 'inference.GRPCInferenceService', 'ModelInfer')(fault, timeout=f.DEADLINE_S)
    sys.exit('kjit_fault_inject ran without --enable-fault-injection')
except grpc.RpcError as e:
    assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, e
print('after the fault: a launch OK; kjit_fault_inject unknown without the flag')
"
  stop_kjitd "$dir"
else
  fail=1
fi
rm -rf "$dir"
[ $fail -eq 0 ] && echo "e2e_fault: OK" || echo "e2e_fault: FAIL"
exit $fail
