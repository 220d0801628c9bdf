# Shell pieces shared by the GPU machine's daemon steps (e2e_daemon.sh, multi_gpu.sh); sourced.
# The caller sets `bin` (the bundle's binaries) and `fail=0` first.

# start_kjitd DIR [FLAGS...]: kjitd from $bin on DIR/kjitd.sock with FLAGS, log in DIR/kjitd.log
# (written afresh), up to 240 s to get ready (a cold cache compiles the catalog first). Sets daemon
# (pid), sock and target. On failure prints the log, kills the daemon and returns 1.
start_kjitd() {
  local dir=$1
  shift
  sock=$dir/kjitd.sock
  target=unix://$sock
  "$bin/kjitd" --socket "$sock" --log-level info "$@" >"$dir/kjitd.log" 2>&1 &
  daemon=$!
  for _ in $(seq 1 2400); do
    grep -q "kjitd info: ready" "$dir/kjitd.log" 2>/dev/null && return 0
    kill -0 "$daemon" 2>/dev/null || break
    sleep 0.1
  done
  echo "FAIL: kjitd did not become ready"; cat "$dir/kjitd.log"; kill -9 "$daemon" 2>/dev/null
  return 1
}

# stop_kjitd DIR: the daemon must still be alive, exit 0 on SIGTERM and remove its socket; sets
# fail=1 otherwise. Prints its log.
stop_kjitd() {
  local dir=$1 rc
  if ! kill -0 "$daemon" 2>/dev/null; then echo "FAIL: kjitd died"; fail=1; fi
  kill -TERM "$daemon"
  wait "$daemon"
  rc=$?
  [ $rc -eq 0 ] || { echo "FAIL: kjitd exited $rc after SIGTERM"; fail=1; }
  [ -e "$sock" ] && { echo "FAIL: socket left behind"; fail=1; }
  echo "== kjitd log"; cat "$dir/kjitd.log"
}

# step NAME COMMAND...: runs the command; "== NAME: ok" or "== NAME: FAIL (rc N)" (and fail=1).
step() {
  local name=$1; shift
  echo "== $name: $*"
  if "$@"; then echo "== $name: ok"; else echo "== $name: FAIL (rc $?)"; fail=1; fi
}
