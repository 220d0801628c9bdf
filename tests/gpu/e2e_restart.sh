#!/bin/bash
# e2e_restart.sh: kjit clients across a kjitd restart (run by run-suite.sh as step e2e_restart;
# output on stdout, which the suite keeps in suite.log; the OUTDIR argument it passes is unused).
# client_restart.py starts kjitd from the bundle itself, kills it with SIGKILL while ring, remote
# and in-process clients are connected, starts it again on the same socket and checks that the same
# clients launch correctly again (and answer within the deadline while it is away).
set -u
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
pack=${KJIT_DEVPACK:-$root/.devpack}
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:False PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
if [ -z "${KJIT_CLIENT_LIB:-}" ] && [ -f "$pack/lib/libkjit_client.so.1" ]; then
  export KJIT_CLIENT_LIB=$pack/lib/libkjit_client.so.1
fi
if ! python3 -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
  echo "FAIL: e2e_restart needs python3 with torch and CUDA"; exit 1
fi
timeout --kill-after=5 140 python3 "$root/tests/gpu/client_restart.py" --kjitd "$pack/bin/kjitd"
