#!/bin/bash
# make-devpack.sh [BUILD_DIR]: build the GPU tests, benchmarks and daemon, and bundle them with the
# shared libraries the GPU machine lacks into .devpack/ (kept out of git). Then, on the GPU machine:
#   source .devpack/env.sh && tests/gpu/run-suite.sh $OUT
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${1:-$root/build}
cd "$root"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
# KJIT_TARGETS="a b c" builds only those targets (default: everything).
cmake --build "$build" -j"$(nproc)" ${KJIT_TARGETS:+--target $KJIT_TARGETS kjit_proto_descriptors}
rm -rf .devpack
bins=()
for b in "$build"/tests/gpu/gpu_* "$build"/bench/*/kernel_bench "$build"/bench/*/launch_bench \
         "$build"/bench/*/jit_bench "$build"/runtime/server/kjitd "$build"/cli/kjit \
         "$build"/tests/e2e/e2e_*; do
  [ -f "$b" ] && [ -x "$b" ] && bins+=("$b")
done
[ ${#bins[@]} -gt 0 ] || { echo "nothing built to bundle" >&2; exit 1; }
"$root/../shared/gpu/bundle.sh" .devpack "${bins[@]}"
[ -d client/python ] && cp -r client/python .devpack/python
mkdir -p .devpack/python && cp "$build/proto/kjit_protos.desc" .devpack/python/  # for tests/gpu/e2e_torch.py
echo "bundled: ${bins[*]##*/}"
