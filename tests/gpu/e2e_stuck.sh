#!/bin/bash
# e2e_stuck.sh: a kjit_wait_event that does not complete (run by run-suite.sh; prints to stdout).
# A kjitd of its own with a short --launch-timeout-ms (tests/e2e/e2e_stuck_wait.h's kStuckTimeoutMs),
# then e2e_ipc_client --mode stuck: every call answers within the timeout, the GPU refuses launches
# only while its stream waits for the event, and serves correctly once it has completed.
set -u
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
pack=${KJIT_DEVPACK:-$root/.devpack}
bin=$pack/bin
dir=$(mktemp -d /tmp/kjit-stuck-XXXXXX)
fail=0
source "$root/tests/gpu/lib.sh"
start_kjitd "$dir" --launch-timeout-ms 1500 || exit 1
step stuck "$bin/e2e_ipc_client" --target "$target" --mode stuck --prefix stuck
grep -E "warn|refus|drained" "$dir/kjitd.log" | head -20
stop_kjitd "$dir" >/dev/null
rm -rf "$dir"
[ $fail -eq 0 ] && echo "e2e_stuck: OK" || echo "e2e_stuck: FAIL"
exit $fail
