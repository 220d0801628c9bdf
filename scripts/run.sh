#!/bin/bash
# run.sh [kjitd flags...]: install the build dependencies, build kjitd, and run it in the foreground
# with the defaults (Unix socket per PROTOCOL.md; TCP only with --listen). With a GPU, a demo
# ModelInfer runs once the daemon is ready; without one, kjitd fills the cache for sm_120 and sm_90. Ctrl-C (SIGINT) or SIGTERM stops it cleanly.
#   scripts/run.sh                     # defaults
#   scripts/run.sh --listen 127.0.0.1:8001 --arch sm_120
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${KJIT_BUILD_DIR:-$root/build}
"$root/scripts/install-deps.sh"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
gpu=0
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then gpu=1; fi
targets=(kjitd kjit kjit_client kjit_proto_python)
[ $gpu -eq 1 ] && targets+=(e2e_ipc_client)
cmake --build "$build" -j"$(nproc)" --target "${targets[@]}"

socket=""
args=("$@")
# Without a GPU there is nothing local to compile for: fill the cache for the arch we ship for
# (sm_120) and the one we test on (sm_90), unless the caller chose archs.
if [ $gpu -eq 0 ] && ! printf '%s\n' "${args[@]}" | grep -q '^--arch'; then
  args+=(--arch sm_120,sm_90)
fi
for ((i = 0; i < ${#args[@]}; i++)); do
  case "${args[$i]}" in
    --socket) socket=${args[$((i + 1))]:-} ;;
    --socket=*) socket=${args[$i]#--socket=} ;;
  esac
done
if [ -z "$socket" ]; then  # PROTOCOL.md's default, passed explicitly so the path printed is the one used
  if [ -n "${XDG_RUNTIME_DIR:-}" ]; then socket=$XDG_RUNTIME_DIR/kjit/kjitd.sock
  elif [ -d /run/kjit ] && [ -w /run/kjit ]; then socket=/run/kjit/kjitd.sock
  else socket=/tmp/kjit-$(id -u)/kjitd.sock; fi
  args+=(--socket "$socket")
fi
stubs=$build/proto/python
py=python3  # Debian's python3-grpcio lives in the system interpreter, which may not be first in PATH
python3 -c 'import grpc' 2>/dev/null || py=/usr/bin/python3
cat <<MSG
kjitd socket: unix://$socket
example call (Python, generated stubs):
  PYTHONPATH=$stubs $py -c "import grpc; from inference import grpc_service_pb2 as pb, grpc_service_pb2_grpc as g; print(g.GRPCInferenceServiceStub(grpc.insecure_channel('unix://$socket')).ServerMetadata(pb.ServerMetadataRequest()))"
status (health, kernels, sessions, launches): $build/cli/kjit status --target unix://$socket
MSG

"$build/runtime/server/kjitd" "${args[@]}" &
daemon=$!
trap 'kill -TERM $daemon 2>/dev/null; wait $daemon' INT TERM
if [ $gpu -eq 1 ]; then  # a demo launch through CUDA IPC once the daemon answers (it waits up to 60 s)
  "$build/tests/e2e/e2e_ipc_client" --target "unix://$socket" --mode demo || echo "demo call failed (see above)" >&2
fi
wait $daemon
