#!/bin/bash
# client_ab.sh OUTDIR BASEDIR [ROUNDS]: the user's path, this tree against a base, in one machine
# lease: bench/client_bench/client_bench.py against a fresh kjitd, alternately with the base's kjitd,
# libkjit_client and Python package (BASEDIR: bin/kjitd, lib/libkjit_client.so.1 and tree/ holding
# the base's bench/client_bench, client/python and tests/gpu; tests/gpu/make-devpack.sh bundles one
# into .devpack/base with KJIT_BASE_BUILD and KJIT_BASE_TREE) and with this bundle's. ROUNDS pairs
# (default 2); reports OUTDIR/client_ab_{base,new}_N.md. On the GPU machine after
# `source .devpack/env.sh`; not part of run-suite.sh.
set -u
out=${1:?usage: client_ab.sh OUTDIR BASEDIR [ROUNDS]}
base=${2:?usage: client_ab.sh OUTDIR BASEDIR [ROUNDS]}
rounds=${3:-2}
mkdir -p "$out"
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
pack=${KJIT_DEVPACK:-$root/.devpack}
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:False PYTHONDONTWRITEBYTECODE=1
fail=0
source "$root/tests/gpu/lib.sh"
one() {  # one NAME BIN LIB TREE
  local name=$1 lib=$3 tree=$4 dir
  bin=$2
  dir=$(mktemp -d /tmp/kjit-ab-XXXXXX)
  if start_kjitd "$dir"; then
    step "$name" env KJIT_CLIENT_LIB="$lib" timeout --kill-after=5 120 python3 "$tree/bench/client_bench/client_bench.py" \
      --target "$target" --out "$out/client_ab_$name.md"
    kill -TERM "$daemon"; wait "$daemon"
  else
    fail=1
  fi
  rm -rf "$dir"
}
for r in $(seq 1 "$rounds"); do
  one "base_$r" "$base/bin" "$base/lib/libkjit_client.so.1" "$base/tree"
  one "new_$r" "$pack/bin" "$pack/lib/libkjit_client.so.1" "$root"
done
exit $fail
