#!/bin/bash
# e2e_status.sh: the operator's view of a GPU daemon (run by run-suite.sh as step e2e_status; output
# on stdout, which the suite keeps in suite.log; the OUTDIR argument it passes is unused).
#   1. kjitd from the bundle with --metrics-listen on a free loopback port
#   2. e2e_ipc_client sync and ring launches
#   3. `kjit status --json`: SERVING, ready, every GPU healthy with its arch and loaded kernels, the
#      launches counted for mla_verify; `kjit status --health` exits 0; `kjit status` prints
#   4. /metrics: kjit_gpu_healthy 1 for GPU 0, launches counted in grpc_sync and ring_sync, their
#      latency histograms filled, kjit_compile_only 0
set -u
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
pack=${KJIT_DEVPACK:-$root/.devpack}
bin=$pack/bin
dir=$(mktemp -d /tmp/kjit-status-XXXXXX)
fail=0
source "$root/tests/gpu/lib.sh"
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
start_kjitd "$dir" --metrics-listen "127.0.0.1:$port" || exit 1
step sync "$bin/e2e_ipc_client" --target "$target" --mode sync
step ring "$bin/e2e_ipc_client" --target "$target" --mode ring
step health "$bin/kjit" status --health --target "$target"
step status-text "$bin/kjit" status --target "$target"
"$bin/kjit" status --json --target "$target" >"$dir/status.json"
step status-json python3 - "$dir/status.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
assert s["health"] == "SERVING" and s["ready"] and not s["poisoned"], s
assert s["gpus"], "no GPU listed"
for g in s["gpus"]:
    assert g["healthy"] and g["arch"].startswith("sm_") and g["kernels_loaded"] > 0, g
models = {m["model"]: m for m in s["models"]}
assert models["mla_verify"]["success"] > 0, models
print("kjit status: %d GPU(s), %d kernels, %d mla_verify launches" %
      (len(s["gpus"]), len(s["kernels"]), models["mla_verify"]["success"]))
PY
curl -sf "http://127.0.0.1:$port/metrics" -o "$dir/metrics.txt" || python3 -c "
import urllib.request, sys
open(sys.argv[1], 'wb').write(urllib.request.urlopen('http://127.0.0.1:$port/metrics', timeout=10).read())" "$dir/metrics.txt"
step metrics python3 - "$dir/metrics.txt" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
def value(name, **labels):
    for line in text.splitlines():
        m = re.match(r'^(\w+)(\{[^}]*\})? (\S+)$', line)
        if not m or m.group(1) != name:
            continue
        got = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
        if all(got.get(k) == v for k, v in labels.items()):
            return float(m.group(3))
    raise AssertionError(f"no sample {name} {labels}")
assert value("kjit_gpu_healthy", gpu="0") == 1
assert value("kjit_compile_only") == 0 and value("kjit_ready") == 1
for mode in ("grpc_sync", "ring_sync"):
    n = value("kjit_launches_total", model="mla_verify", mode=mode)
    assert n > 0, (mode, n)
    assert value("kjit_launch_latency_seconds_count", model="mla_verify", mode=mode) > 0, mode
print("metrics: GPU 0 healthy; grpc_sync %d, ring_sync %d launches" %
      (value("kjit_launches_total", model="mla_verify", mode="grpc_sync"),
       value("kjit_launches_total", model="mla_verify", mode="ring_sync")))
PY
stop_kjitd "$dir"
rm -rf "$dir"
[ $fail -eq 0 ] && echo "e2e_status: OK" || echo "e2e_status: FAIL"
exit $fail
