#!/usr/bin/env python3
"""Soak: many client processes against one kjitd for a bounded time, valid and invalid launches in
every daemon launch mode, while the daemon's resources are sampled.

usage: soak.py --target unix://SOCK --daemon-pid PID --seconds 600 [--clients 16] --out REPORT.md

- Client r uses mode MODES[r % 5] (in-process, ring, ring with events, remote, remote with events);
  each precomputes three random verify cases (fixed seeds) with their float64 references, then loops
  until the deadline: 1 call in 7 is invalid (an o with one row too many: INVALID_ARGUMENT from the
  launch layer's checks, in the library or the daemon as the mode has it),
  the others valid; every 25th valid call is synchronized and compared with the reference.
- Every 60 s the parent kills one client with SIGKILL in the middle of its calls and starts a new
  one in its place (its session, regions, events and ring must be released).
- Every 5 s the parent samples the daemon: RSS, GPU memory (nvidia-smi), open descriptors, threads,
  memory mappings. Under load after the warm-up (the first 20%), RSS and GPU memory must stay within
  2%; once the clients have left, GPU memory and RSS back within 2% of the warm-up's, and
  descriptors, threads and mappings no more than a small slack above it.
- p99 host time per call of each mode, first third vs last third.
Writes REPORT.md and exits 1 when a criterion fails.
"""
import argparse
import multiprocessing as mp
import os
import queue as queue_mod
import signal
import subprocess
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path[:0] = [p for p in (HERE, os.path.join(ROOT, "client", "python")) if p not in sys.path]

MODES = (("in-process", {"modes": "in-process"}), ("ring", {"modes": "ring"}),
         ("ring-events", {"modes": "ring", "events": True}), ("remote", {"modes": "remote"}),
         ("remote-events", {"modes": "remote", "events": True}))


def worker(rank, generation, target, deadline, results, ready):
    import numpy as np
    import torch

    import kjit
    from client_cases import Case, build_index, make_kv_cache, make_tensors, poison, reference_of, call_args, call_kwargs
    from mla_reference_torch import compare
    label, opts = MODES[rank % len(MODES)]
    try:
        client = kjit.Client(target=target, client_name=f"soak {rank}.{generation} {label}", **opts)
        slots = 8192
        kv = make_kv_cache(slots, seed=10 + rank)
        vb = kv[..., :512]
        rng = np.random.default_rng(1000 * generation + rank)
        work = []
        for i in range(3):
            b = int(rng.integers(1, 4))
            case = Case(f"soak{rank}_{i}", int(rng.choice((8, 16, 64))),
                        tuple(int(x) for x in rng.integers(0, 3000, b)), tuple(int(x) for x in rng.integers(1, 33, b)),
                        seed=300 + 10 * rank + i, tree=str(rng.choice(("tree", "chain"))))
            t = make_tensors(case, build_index(case, slots))
            work.append((case, t, reference_of(t, case, kv)))
        torch.cuda.synchronize()
        ready.put(rank)
        stats = {"valid": 0, "invalid": 0, "unexpected": 0, "wrong": 0, "checked": 0}
        t_start = time.monotonic()
        span = max(deadline - time.time(), 1.0)
        lat = ([], [], [])  # host seconds per call, by third of the run
        first_error = ""
        i = 0
        while time.time() < deadline:
            case, t, ref = work[i % 3]
            args = list(call_args(t, case, kv, vb))
            invalid = i % 7 == 6
            if invalid:
                args[3] = torch.empty(t.o.shape[0] + 1, t.o.shape[1], 512, dtype=torch.bfloat16, device="cuda")
            check = not invalid and stats["valid"] % 25 == 0
            if check:
                poison(t)
            t0 = time.perf_counter()
            try:
                kjit.verify_attention(*args, **call_kwargs(t, case), client=client)
                dt = time.perf_counter() - t0
                if invalid:
                    stats["unexpected"] += 1
                    first_error = first_error or "an invalid call succeeded"
                else:
                    stats["valid"] += 1
            except kjit.Error as e:
                dt = time.perf_counter() - t0
                if invalid and e.code == 3:  # INVALID_ARGUMENT
                    stats["invalid"] += 1
                else:
                    stats["unexpected"] += 1
                    first_error = first_error or f"{e.code_name}: {e.message}"
            third = min(2, int(3 * (time.monotonic() - t_start) / span))
            lat[third].append(dt)
            if check:
                if label == "in-process":
                    kjit.check_errors(client=client)
                torch.cuda.synchronize()
                ok, _ = compare(t.o, ref)
                stats["checked"] += 1
                if not ok:
                    stats["wrong"] += 1
            i += 1
        kjit.check_errors(client=client)
        pct = []
        for part in lat:
            part.sort()
            pct.append((len(part), part[len(part) // 2] if part else 0.0, part[int(len(part) * 0.99)] if part else 0.0))
        results.put((rank, generation, label, stats, pct, first_error, None))
    except BaseException:  # noqa: BLE001 - reported to the parent
        results.put((rank, generation, label, None, None, "", traceback.format_exc()))


def sample(pid):
    s = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "Threads"):
                s[k] = int(v.split()[0])
    s["fds"] = len(os.listdir(f"/proc/{pid}/fd"))
    with open(f"/proc/{pid}/maps") as f:
        s["maps"] = sum(1 for _ in f)
    s["gpu_mib"] = 0
    try:
        out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=20).stdout
        for line in out.splitlines():
            p, _, m = line.partition(",")
            if p.strip() == str(pid):
                s["gpu_mib"] += int(m.strip())
    except (OSError, ValueError, subprocess.TimeoutExpired):
        s["gpu_mib"] = -1
    return s


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", required=True)
    ap.add_argument("--daemon-pid", type=int, required=True)
    ap.add_argument("--seconds", type=float, default=600)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    ctx = mp.get_context("spawn")
    results, ready = ctx.Queue(), ctx.Queue()
    t0 = time.time()
    deadline = t0 + a.seconds
    procs = {}
    for r in range(a.clients):
        procs[r] = (0, ctx.Process(target=worker, args=(r, 0, a.target, deadline, results, ready), daemon=True))
        procs[r][1].start()
    for _ in range(a.clients):
        ready.get(timeout=300)
    samples, kills, reports = [], [], []
    next_kill, next_sample, victim = time.time() + 60, time.time(), a.clients - 1
    while time.time() < deadline - 5:
        now = time.time()
        if now >= next_sample:
            s = sample(a.daemon_pid)
            s["t"] = now - t0
            samples.append(s)
            next_sample = now + 5
        if now >= next_kill and deadline - now > 90:
            gen, p = procs[victim]
            os.kill(p.pid, signal.SIGKILL)
            p.join(timeout=10)
            kills.append((round(now - t0), victim, MODES[victim % len(MODES)][0]))
            np_ = ctx.Process(target=worker, args=(victim, gen + 1, a.target, deadline, results, ready), daemon=True)
            np_.start()
            procs[victim] = (gen + 1, np_)
            victim = (victim - 1) % a.clients
            next_kill = now + 60
        time.sleep(0.5)
    # Read the reports while the clients finish (a child that put a report exits only once it is read).
    give_up = time.time() + 180
    while len(reports) < a.clients and time.time() < give_up:
        try:
            reports.append(results.get(timeout=2))
        except queue_mod.Empty:
            if all(not p.is_alive() for _, p in procs.values()):
                break
    for _, p in procs.values():
        p.join(timeout=10)
    # After the load: the clients' sessions are being released; give the daemon a few seconds, then
    # its GPU memory must be back at the warm-up's level (a mapping left open would show here).
    load_end = len(samples)
    base_gpu = next((s["gpu_mib"] for s in samples if s["t"] >= 0.2 * a.seconds), samples[-1]["gpu_mib"])
    settle = time.time() + 15
    while True:
        s = {**sample(a.daemon_pid), "t": time.time() - t0}
        if s["gpu_mib"] <= base_gpu * 1.02 or time.time() > settle:
            break
        time.sleep(1)
    samples.append(s)

    # Criteria.
    lines, failed = [], []
    warm = [s for s in samples[:load_end] if s["t"] >= 0.2 * a.seconds]  # under load, after the warm-up
    def flat(key, rel):
        vals = [s[key] for s in warm]
        lo, hi = min(vals), max(vals)
        ok = lo > 0 and hi <= lo * (1 + rel)
        return ok, f"{key}: {lo}..{hi} after warm-up ({100 * (hi - lo) / max(lo, 1):.2f}%)"
    for key, rel in (("VmRSS", 0.02), ("gpu_mib", 0.02)):
        ok, text = flat(key, rel)
        lines.append(("PASS" if ok else "FAIL") + f" {text} (limit {100 * rel:.0f}%)")
        ok or failed.append(key)
    end = samples[-1]
    ok = end["gpu_mib"] <= base_gpu * 1.02 and end["VmRSS"] <= warm[0]["VmRSS"] * 1.02
    lines.append(("PASS" if ok else "FAIL") + f" after the clients left: GPU {end['gpu_mib']} MiB (warm-up "
                 f"{base_gpu}), RSS {end['VmRSS']} KiB (warm-up {warm[0]['VmRSS']})")
    ok or failed.append("after the load")
    for key, slack in (("fds", 4), ("Threads", 4), ("maps", 8)):
        start, end = warm[0][key], samples[-1][key]
        ok = end <= start + slack
        lines.append(("PASS" if ok else "FAIL") + f" {key}: {start} at warm-up, {end} at the end (slack {slack})")
        ok or failed.append(key)
    totals = {"valid": 0, "invalid": 0, "unexpected": 0, "wrong": 0, "checked": 0}
    by_mode = {}
    finished = 0
    for rank, gen, label, stats, pct, first_error, tb in reports:
        if tb:
            lines.append(f"FAIL client {rank}.{gen} ({label}): {tb.strip().splitlines()[-1]}")
            failed.append(f"client {rank}")
            continue
        finished += 1
        for k in totals:
            totals[k] += stats[k]
        if first_error:
            lines.append(f"FAIL client {rank}.{gen} ({label}) first unexpected: {first_error}")
        m = by_mode.setdefault(label, [[0, [], []], [0, [], []], [0, [], []]])
        for third, (n, p50, p99) in enumerate(pct):
            m[third][0] += n
            if n:
                m[third][1].append(p50)
                m[third][2].append(p99)
    ok = finished == a.clients
    lines.append(("PASS" if ok else "FAIL") + f" {finished} of {a.clients} live clients reported ({len(kills)} killed)")
    ok or failed.append("reports")
    ok = totals["unexpected"] == 0 and totals["wrong"] == 0
    lines.append(("PASS" if ok else "FAIL") + f" calls: {totals['valid']} valid, {totals['invalid']} invalid answered "
                 f"INVALID_ARGUMENT, {totals['unexpected']} unexpected, {totals['wrong']} wrong of {totals['checked']} "
                 f"compared with float64")
    ok or failed.append("calls")
    lines.append("")
    lines.append("| mode | calls (first / last third) | p50 us first / last | p99 us first / last | p99 ratio |")
    lines.append("|---|---|---|---|---|")
    for label, m in sorted(by_mode.items()):
        p50 = [max(x[1]) * 1e6 if x[1] else 0 for x in m]
        p99 = [max(x[2]) * 1e6 if x[2] else 0 for x in m]
        ratio = p99[2] / p99[0] if p99[0] else float("nan")
        lines.append(f"| {label} | {m[0][0]} / {m[2][0]} | {p50[0]:.1f} / {p50[2]:.1f} | {p99[0]:.1f} / {p99[2]:.1f} "
                     f"| {ratio:.2f} |")
        if not ratio <= 1.5:
            failed.append(f"p99 {label}")
            lines.append(f"FAIL p99 of {label} grew {ratio:.2f}x (limit 1.5x)")
    lines.append("")
    lines.append("Daemon samples (every 5 s): t s, RSS KiB, GPU MiB, fds, threads, mappings")
    lines.append("```")
    for s in samples:
        lines.append(f"{s['t']:6.0f} {s['VmRSS']:8d} {s['gpu_mib']:6d} {s['fds']:5d} {s['Threads']:4d} {s['maps']:6d}")
    lines.append("```")
    lines.append(f"Clients killed with SIGKILL (t s, client, mode): {kills}")
    report = "\n".join([f"# soak: {a.clients} clients, {a.seconds:.0f} s, " + ("PASS" if not failed else "FAIL: " + ", ".join(failed)), ""] + lines)
    with open(a.out, "w") as f:
        f.write(report + "\n")
    print(report)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
