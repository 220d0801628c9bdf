#!/usr/bin/env python3
"""kjit clients (torch CUDA tensors) across a kjitd restart, every launch mode through the daemon:
a launch against the float64 reference, then kjitd is killed (SIGKILL): each client's next launch
raises kjit.Error UNAVAILABLE (or DEADLINE_EXCEEDED) within the deadline, never hangs; then kjitd
starts again on the same socket: the same clients, not new ones, launch correctly again (the ring
and remote modes open a new session, register their memory again and the ring mode opens a new
ring). The in-process client keeps launching throughout (no RPC per call). Ring and remote clients
without a session are there too: nothing tells them of the restart, so the ring client finds it
by its first unanswered call (kjitd no longer knows the ring) and the remote one by NOT_FOUND.

usage: client_restart.py --kjitd PATH   (needs torch with CUDA, $KJIT_CLIENT_LIB or a build tree)
"""
import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "..", "client", "python")]

import torch  # noqa: E402

import kjit  # noqa: E402
from client_cases import Case, build_index, call_args, call_kwargs, make_kv_cache, make_tensors, poison  # noqa: E402
from client_cases import reference_of  # noqa: E402
from mla_reference_torch import compare  # noqa: E402

# (mode, events, session)
MODES = (("ring", False, True), ("ring", True, True), ("remote", False, True), ("remote", True, True),
         ("in-process", False, True), ("ring", False, False), ("remote", False, False))
DEADLINE_MS = 5000
UNAVAILABLE, DEADLINE_EXCEEDED = 14, 4
CASE = Case("restart_b2_h16", 16, (37, 300), (5, 17), seed=21)
SLOTS = 4096


class Daemon:
    def __init__(self, kjitd):
        self.dir = tempfile.mkdtemp(prefix="kjit-restart-")
        self.socket = os.path.join(self.dir, "kjitd.sock")
        self.args = [kjitd, "--socket", self.socket, "--log-level", "info"]
        self.target = "unix://" + self.socket
        self.start()

    def start(self):
        self.log = open(os.path.join(self.dir, "kjitd.log"), "w+")
        self.proc = subprocess.Popen(self.args, stdout=self.log, stderr=subprocess.STDOUT)
        until = time.time() + 240
        while time.time() < until:
            self.log.seek(0)
            if "kjitd info: ready" in self.log.read():
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        self.log.seek(0)
        raise SystemExit(f"kjitd did not become ready:\n{self.log.read()}")

    def kill(self):
        self.proc.kill()
        self.proc.wait()

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(timeout=60)
        shutil.rmtree(self.dir, ignore_errors=True)
        return rc


def launch(client, t, kv):
    poison(t)
    kjit.verify_attention(*call_args(t, CASE, kv, kv[..., :512]), **call_kwargs(t, CASE), client=client)
    torch.cuda.synchronize()


def name_of(mode, events, session=True):
    return mode + ("-events" if events else "") + ("" if session else "-no-session")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kjitd", required=True)
    args = ap.parse_args()
    kv = make_kv_cache(SLOTS, 5)
    t = make_tensors(CASE, build_index(CASE, SLOTS))
    ref = reference_of(t, CASE, kv)
    d = Daemon(args.kjitd)
    failed = []
    clients = {}
    for mode, events, session in MODES:
        name = name_of(mode, events, session)
        c = kjit.Client(target=d.target, modes=mode, events=events, deadline_ms=DEADLINE_MS, client_name="restart",
                        session=session)
        clients[name] = c
        launch(c, t, kv)
        ok, detail = compare(t.o, ref)
        print(f"{'PASS' if ok else 'FAIL'} {name} before the restart: {detail}", flush=True)
        ok or failed.append(name + " before")

    d.kill()
    for name, c in clients.items():
        t0 = time.time()
        try:
            launch(c, t, kv)
            ok = name == "in-process"  # its launches need no daemon
            detail = "launched" + ("" if ok else " with kjitd dead")
        except kjit.Error as e:
            ok = e.code in (UNAVAILABLE, DEADLINE_EXCEEDED) and name != "in-process"
            detail = f"{e.code_name}: {e.message}"
        took = time.time() - t0
        ok = ok and took < DEADLINE_MS / 1000 * 2 + 2
        print(f"{'PASS' if ok else 'FAIL'} {name} while kjitd is dead ({took:.2f} s): {detail}", flush=True)
        ok or failed.append(name + " dead")

    d.start()
    for name, c in clients.items():
        until, detail, ok = time.time() + 30, "", False
        while time.time() < until:
            try:
                launch(c, t, kv)
                ok, detail = compare(t.o, ref)
                break
            except kjit.Error as e:
                detail = f"{e.code_name}: {e.message}"
                if e.code != UNAVAILABLE:
                    break
                time.sleep(0.2)
        print(f"{'PASS' if ok else 'FAIL'} {name} after the restart: {detail}", flush=True)
        ok or failed.append(name + " after")
        try:  # and again: everything is registered once
            launch(c, t, kv)
            ok, detail = compare(t.o, ref)
        except kjit.Error as e:
            ok, detail = False, f"{e.code_name}: {e.message}"
        print(f"{'PASS' if ok else 'FAIL'} {name} second launch after the restart: {detail}", flush=True)
        ok or failed.append(name + " again")
    for c in clients.values():
        c.close()
    rc = d.stop()
    if rc != 0:
        failed.append(f"kjitd exited {rc} on SIGTERM")
    print("client_restart: " + ("OK" if not failed else "FAIL: " + ", ".join(failed)))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
