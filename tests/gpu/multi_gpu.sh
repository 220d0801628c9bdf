#!/bin/bash
# multi_gpu.sh OUTDIR: one kjitd serving two GPUs, as SGLang's tensor-parallel workers use it (run by
# run-suite.sh on a machine with two or more GPUs; exits 3 with a message on fewer).
#   1. kjitd loads the catalog on both GPUs
#   2. two client processes, one per GPU, at the same time: sync (CUDA regions and inline tensors,
#      both models, bitwise equal to in-process launches of GetKernel cubins, float64 reference),
#      then async (IPC events)
#   3. regions of GPU 0 named by a launch on GPU 1: INVALID_ARGUMENT
#   4. a client whose CUDA_VISIBLE_DEVICES puts GPU 1 first, registering as device_id 0: INVALID_ARGUMENT
#   5. SIGTERM: exit 0
#   6. kernel time per GPU: kernel_bench on each GPU alone, then on both at once; every KERNEL.md
#      shape's concurrent median within 5% of the same GPU's alone median (tables in OUTDIR)
set -u
out=${1:?usage: multi_gpu.sh OUTDIR}
mkdir -p "$out"
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bin=${KJIT_DEVPACK:-$root/.devpack}/bin
export NCCL_NVLS_ENABLE=0  # no NVLink multicast (the device machine's rule); kjit itself uses no NCCL
ngpu=$(nvidia-smi -L | grep -c '^GPU')
if [ "$ngpu" -lt 2 ]; then echo "multi_gpu: needs two GPUs, this machine has $ngpu"; exit 3; fi
dir=$(mktemp -d /tmp/kjit-mgpu-XXXXXX)
fail=0
source "$root/tests/gpu/lib.sh"
start_kjitd "$dir" || exit 1

both() {  # both MODE: one client per GPU, concurrently
  local mode=$1 p0 p1 r0 r1
  echo "== $mode on GPU 0 and GPU 1 at once"
  "$bin/e2e_ipc_client" --target "$target" --mode "$mode" --device 0 --prefix "gpu0-$mode" >"$dir/$mode.0" 2>&1 &
  p0=$!
  "$bin/e2e_ipc_client" --target "$target" --mode "$mode" --device 1 --prefix "gpu1-$mode" >"$dir/$mode.1" 2>&1 &
  p1=$!
  wait $p0; r0=$?
  wait $p1; r1=$?
  cat "$dir/$mode.0" "$dir/$mode.1"
  if [ $r0 -eq 0 ] && [ $r1 -eq 0 ]; then echo "== $mode: ok"; else echo "== $mode: FAIL ($r0, $r1)"; fail=1; fi
}
both sync
both async
step cross "$bin/e2e_ipc_client" --target "$target" --mode cross --device 0 --other-device 1 --prefix cross
step wrong-device env CUDA_VISIBLE_DEVICES=1 "$bin/e2e_ipc_client" --target "$target" --mode wrong-device \
  --device 0 --prefix wrongdev
# A launch on GPU 1 from a thread whose current device is GPU 0 leaves it GPU 0, in every mode (the
# client makes GPU 1's context current for the launch and puts the caller's back).
echo "== launches on GPU 1 leave torch's current device at GPU 0"
PYTHONPATH="$root/tests/gpu:$root/client/python" PYTORCH_CUDA_ALLOC_CONF=expandable_segments:False \
  python3 - "$target" <<'EOF' || fail=1
import sys
import torch
import kjit
from client_cases import Case, build_index, call_args, call_kwargs, make_kv_cache, make_tensors, poison
from client_cases import reference_of
from mla_reference_torch import compare
case = Case("current_device_b1_h8", 8, (300,), (5,), seed=3)
kv = make_kv_cache(1024, 5, device="cuda:1")
t = make_tensors(case, build_index(case, 1024), device="cuda:1")
ref = reference_of(t, case, kv)
bad = 0
for mode in ("in-process", "ring", "remote"):
    c = kjit.Client(target=sys.argv[1], modes=mode, deadline_ms=10000, client_name="current-device")
    torch.cuda.set_device(0)
    poison(t)
    kjit.verify_attention(*call_args(t, case, kv, kv[..., :512]), **call_kwargs(t, case), client=c)
    now = torch.cuda.current_device()
    torch.cuda.synchronize(1)
    ok, detail = compare(t.o, ref)
    ok = ok and now == 0
    print(f"{'PASS' if ok else 'FAIL'} {mode}: current device after the call {now}; {detail}", flush=True)
    bad |= not ok
    c.close()
sys.exit(bad)
EOF
stop_kjitd "$dir"

echo "== kernel time per GPU: alone, then both at once"
for g in 0 1; do
  CUDA_VISIBLE_DEVICES=$g "$bin/kernel_bench" --only K --reps 60 --out "$out/kb_alone_gpu$g.md" >"$dir/alone$g" 2>&1 ||
    { echo "FAIL: kernel_bench alone on GPU $g"; cat "$dir/alone$g"; fail=1; }
done
CUDA_VISIBLE_DEVICES=0 "$bin/kernel_bench" --only K --reps 60 --out "$out/kb_both_gpu0.md" >"$dir/both0" 2>&1 &
b0=$!
CUDA_VISIBLE_DEVICES=1 "$bin/kernel_bench" --only K --reps 60 --out "$out/kb_both_gpu1.md" >"$dir/both1" 2>&1 &
b1=$!
wait $b0 || { echo "FAIL: kernel_bench concurrent on GPU 0"; cat "$dir/both0"; fail=1; }
wait $b1 || { echo "FAIL: kernel_bench concurrent on GPU 1"; cat "$dir/both1"; fail=1; }
python3 - "$out" <<'EOF' || fail=1
import sys
out = sys.argv[1]
def graph_us(path):  # shape label -> "graph us" column of kernel_bench's table
    rows = {}
    for line in open(path):
        cells = [c.strip() for c in line.strip().strip('|').split('|')]
        if len(cells) >= 12 and cells[0].startswith('K'):  # 13 since "graph xN us/call"
            rows[cells[0]] = float(cells[10])
    return rows
bad = 0
print("| GPU | shape | alone us | both GPUs busy us | ratio |")
print("|---|---|---|---|---|")
for g in (0, 1):
    alone, both = graph_us(f"{out}/kb_alone_gpu{g}.md"), graph_us(f"{out}/kb_both_gpu{g}.md")
    if not alone or set(alone) != set(both):
        print(f"FAIL: GPU {g}: tables differ or are empty"); bad = 1; continue
    for k in alone:
        r = both[k] / alone[k]
        flag = "" if r <= 1.05 else " FAIL (> 1.05)"
        bad |= r > 1.05
        print(f"| {g} | {k} | {alone[k]:.1f} | {both[k]:.1f} | {r:.3f}{flag} |")
sys.exit(bad)
EOF
rm -rf "$dir"
[ $fail -eq 0 ] && echo "multi_gpu: OK" || echo "multi_gpu: FAIL"
exit $fail
