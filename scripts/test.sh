#!/bin/bash
# test.sh: install the dependencies, build every target, run every CPU test (what CI runs).
#   KJIT_BUILD_DIR (default build/), KJIT_BUILD_TYPE (default RelWithDebInfo), KJIT_JOBS (default nproc)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${KJIT_BUILD_DIR:-$root/build}
jobs=${KJIT_JOBS:-$(nproc)}

"$root/scripts/install-deps.sh"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE="${KJIT_BUILD_TYPE:-RelWithDebInfo}"
cmake --build "$build" -j"$jobs"
ctest --test-dir "$build" --output-on-failure -j"$jobs"
