#!/bin/bash
# profile.sh OUTDIR LABEL [SKIP]: ncu profile of one split and one combine launch of a kernel_bench
# shape (LABEL, a --only filter such as "K1 "), skipping the first SKIP matching launches (the sanity
# checks and warm-up; default 8). Clocks and caches as found. Writes OUTDIR/details.txt (speed of
# light, compute workload, warp states, scheduler, launch, memory) and OUTDIR/sass.csv
# (per-instruction stall samples).
# KJIT_BENCH_ARGS adds kernel_bench arguments (e.g. "--proxy sm_120"). On the GPU test machine,
# after `source .devpack/env.sh`; not part of run-suite.sh.
set -u
out=${1:?usage: profile.sh OUTDIR LABEL [SKIP]}
label=${2:?usage: profile.sh OUTDIR LABEL [SKIP]}
skip=${3:-8}
mkdir -p "$out"
bin=${KJIT_DEVPACK:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/.devpack}/bin
rep=/tmp/kjit-profile
ncu --clock-control none --cache-control none -k regex:MlaVerify --launch-skip "$skip" --launch-count 2 \
  --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
  --section LaunchStats --section SourceCounters --section InstructionStats --section MemoryWorkloadAnalysis \
  --force-overwrite -o "$rep" "$bin/kernel_bench" --only "$label" --reps 5 ${KJIT_BENCH_ARGS:-} >"$out/run.txt" 2>&1
echo "ncu: rc $?"
ncu --import "$rep.ncu-rep" --page details >"$out/details.txt" 2>&1
ncu --import "$rep.ncu-rep" --page source --csv --print-source sass >"$out/sass.csv" 2>&1
echo "export: rc $? ($(wc -l <"$out/sass.csv") lines)"
