#!/bin/bash
# make-devpack.sh [BUILD_DIR]: build the GPU tests, benchmarks, daemon and client library, and bundle
# them with the shared libraries the GPU machine lacks into .devpack/ (kept out of git). Then, on the
# GPU machine:
#   source .devpack/env.sh && tests/gpu/run-suite.sh $OUT
# KJIT_SGLANG_GIT (a git directory of an SGLang checkout or mirror) brings SGLang's Triton
# extend_attention.py and prefill_attention.py into .devpack/sglang/ for the side-by-side rows;
# they are never committed.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${1:-$root/build}
cd "$root"
for t in ${KJIT_AB_TREES:-}; do  # checked before anything is built (bundled at the end)
  [[ ${t%%=*} =~ ^[A-Za-z0-9_.-]+$ ]] || { echo "KJIT_AB_TREES: bad tree name '${t%%=*}'" >&2; exit 2; }
  git rev-parse --verify -q "${t#*=}^{commit}" >/dev/null || { echo "KJIT_AB_TREES: no commit '${t#*=}'" >&2; exit 2; }
done
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
lib=$build/client/cpp/libkjit_client.so.1
[ -f "$lib" ] && bins+=("$lib")
"$root/../shared/gpu/bundle.sh" .devpack "${bins[@]}"
if [ -f .devpack/bin/libkjit_client.so.1 ]; then
  mv .devpack/bin/libkjit_client.so.1 .devpack/lib/
  echo 'export KJIT_CLIENT_LIB="$here/lib/libkjit_client.so.1"' >>.devpack/env.sh
fi
if [ -n "${KJIT_SGLANG_GIT:-}" ]; then
  mkdir -p .devpack/sglang
  for f in extend_attention.py prefill_attention.py; do
    git --git-dir="$KJIT_SGLANG_GIT" show "HEAD:python/sglang/srt/layers/attention/triton_ops/$f" >".devpack/sglang/$f"
  done
fi
# KJIT_BASE_BUILD (a build directory) and KJIT_BASE_TREE (its source tree, e.g. a git worktree of
# an earlier commit) bundle a base for tests/gpu/client_ab.sh into .devpack/base.
if [ -n "${KJIT_BASE_BUILD:-}" ] && [ -n "${KJIT_BASE_TREE:-}" ]; then
  mkdir -p .devpack/base/bin .devpack/base/lib .devpack/base/tree/bench .devpack/base/tree/client .devpack/base/tree/tests
  cp "$KJIT_BASE_BUILD/runtime/server/kjitd" .devpack/base/bin/
  cp -L "$KJIT_BASE_BUILD/client/cpp/libkjit_client.so.1" .devpack/base/lib/
  cp -r "$KJIT_BASE_TREE/bench/client_bench" .devpack/base/tree/bench/
  cp -r "$KJIT_BASE_TREE/client/python" .devpack/base/tree/client/
  cp -r "$KJIT_BASE_TREE/tests/gpu" .devpack/base/tree/tests/
fi
# KJIT_AB_TREES="NAME=REV ..." bundles each commit's kernel_sources into .devpack/trees/NAME/ for
# tests/gpu/kernel_ab.sh (the bundle's binaries then run each tree through KJIT_KERNEL_DIR).
for t in ${KJIT_AB_TREES:-}; do
  name=${t%%=*} rev=${t#*=}
  mkdir -p ".devpack/trees/$name"
  git archive "$rev" kernel_sources | tar -x -C ".devpack/trees/$name"
done
[ -d client/python ] && cp -r client/python .devpack/python
mkdir -p .devpack/python && cp "$build/proto/kjit_protos.desc" .devpack/python/  # for tests/gpu/e2e_torch.py
echo "bundled: ${bins[*]##*/}"
