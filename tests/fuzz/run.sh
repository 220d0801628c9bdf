#!/bin/bash
# run.sh BUILD_DIR SECONDS [HARNESS...]: runs each libFuzzer harness (default: all four) for SECONDS
# on a scratch copy of its committed corpus (tests/fuzz/corpus/NAME), two at a time, and prints one
# line per harness: runs, coverage, corpus size, crashes. Exit 1 when any harness crashed (its
# reproducer is kept under BUILD_DIR/fuzz-out/NAME/).
#   CC=clang CXX=clang++ cmake -S . -B build-fuzz -DKJIT_FUZZ=ON && cmake --build build-fuzz --target fuzz_flags ...
#   tests/fuzz/run.sh build-fuzz 600
set -u
build=$(cd "${1:?usage: run.sh BUILD_DIR SECONDS [HARNESS...]}" && pwd) || exit 1
seconds=${2:?usage: run.sh BUILD_DIR SECONDS [HARNESS...]}
shift 2
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
harnesses=("$@")
[ ${#harnesses[@]} -gt 0 ] || harnesses=(fuzz_infer_request fuzz_cache_entry fuzz_launch_ring fuzz_flags)
# Leak checks off: gRPC and protobuf keep process-lifetime allocations the checker would report.
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
run_one() {
  local name=$1 bin dir
  bin=$(find "$build" -name "$name" -type f -perm -u+x | head -1)
  [ -n "$bin" ] || { echo "$name: not built"; return 1; }
  dir=$build/fuzz-out/$name
  rm -rf "$dir" && mkdir -p "$dir/corpus" "$dir/crashes"
  cp "$here/corpus/$name"/* "$dir/corpus/" 2>/dev/null
  (cd "$dir" && "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
     -artifact_prefix="$dir/crashes/" -print_final_stats=1 corpus >"$dir/log" 2>&1)
  local rc=$? runs cov
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$dir/log" | grep -o '[0-9]*$')
  cov=$(grep -o 'cov: [0-9]*' "$dir/log" | tail -1)
  echo "$name: rc $rc, ${runs:-?} runs in ${seconds} s, ${cov:-cov: ?}, corpus $(ls "$dir/corpus" | wc -l) files," \
       "crashes $(ls "$dir/crashes" | wc -l)"
  [ $rc -eq 0 ] || tail -40 "$dir/log"
  return $rc
}
fail=0
pids=()
for h in "${harnesses[@]}"; do
  run_one "$h" >"$build/fuzz-$h.summary" 2>&1 &
  pids+=($!)
  if [ ${#pids[@]} -ge 2 ]; then
    wait "${pids[0]}" || fail=1
    pids=("${pids[@]:1}")
  fi
done
for p in "${pids[@]}"; do wait "$p" || fail=1; done
for h in "${harnesses[@]}"; do cat "$build/fuzz-$h.summary"; done
exit $fail
