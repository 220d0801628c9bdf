#!/usr/bin/env python3
"""Soak: many client processes against one kjitd for a bounded time, valid and invalid launches in
every daemon launch mode, while the daemon's resources are sampled.

usage: soak.py --target unix://SOCK --daemon-pid PID --seconds 600 [--clients 16] --out REPORT.md
               [--kjit PATH] [--daemon-log PATH] [--kill-every S] [--after S] [--no-probe]

- Client r uses mode MODES[r % 5] (in-process, ring, ring with events, remote, remote with events);
  each precomputes three random verify cases (fixed seeds) with their float64 references, then loops
  until the deadline: 1 call in 7 is invalid (an o with one row too many: INVALID_ARGUMENT from the
  launch layer's checks, in the library or the daemon as the mode has it),
  the others valid; every 25th valid call is synchronized and compared with the reference. Every
  client has a session (the library's default) and exits normally at the deadline.
- Every --kill-every seconds (60; for runs under 300 s a quarter of the run, at least 20 s) the parent
  kills one client with SIGKILL in the middle of its calls and starts a new one in its place (its
  session, regions, events and ring must be released), while more than 1.5 intervals are left.
- Every 5 s the parent samples the daemon: RSS, GPU memory (nvidia-smi), open descriptors, threads,
  memory mappings. Under load after the warm-up (the first 20%), RSS and GPU memory must stay within
  2%; once the clients have left, GPU memory and RSS back within 2% of the warm-up's within 15 s,
  and descriptors, threads and mappings no more than a small slack above it.
- p99 host time per call of each mode, first third vs last third.
- What the daemon holds around the end: `kjit status --json` (--kjit: sessions, regions, events,
  rings, launches served) once at mid-load, and once a second together with nvidia-smi (kjitd's
  used_memory, the GPUs' memory.used, other compute processes) and /proc from 5 s before the
  deadline until --after seconds (30) past the last client's exit.
- Then, unless --no-probe, after the criteria's samples: SIGUSR1 (kjitd logs the asynchronous
  launches each GPU still holds, which kjit status does not count; read from --daemon-log), one
  synchronous remote-mode call from a fresh client process (a shape the daemon has served, so none of
  its buffers grows; the daemon's next launch reaps the launches it holds), SIGUSR1 again, and 10 s
  more of samples. The report's diagnosis says what the GPU memory after the load went with.
Writes REPORT.md and exits 1 when a criterion fails.
"""
import argparse
import json
import multiprocessing as mp
import os
import queue as queue_mod
import re
import shutil
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
DAEMON_MODES = ("ring", "ring-events", "remote", "remote-events")  # the ones kjitd launches for
COUNTS = ("sessions", "system_regions", "cuda_regions", "events", "rings")  # from kjit status --json
SETTLE_S = 15  # the criterion's wait for GPU memory to come back once the clients have left
PROBE_AFTER_S = 10


def make_work(rank, generation, references=True):
    """Client rank's KV cache, its v view, and its three verify cases of this generation (fixed
    seeds) as (case, tensors, float64 reference or None)."""
    import numpy as np
    import torch

    from client_cases import Case, build_index, make_kv_cache, make_tensors, reference_of
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
        work.append((case, t, reference_of(t, case, kv) if references else None))
    torch.cuda.synchronize()
    return kv, vb, work


def worker(rank, generation, target, deadline, results, ready):
    import torch

    import kjit
    from client_cases import call_args, call_kwargs, poison
    from mla_reference_torch import compare
    label, opts = MODES[rank % len(MODES)]
    try:
        client = kjit.Client(target=target, client_name=f"soak {rank}.{generation} {label}", **opts)
        kv, vb, work = make_work(rank, generation)
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


def probe(rank, target, results):
    """One synchronous call through kjitd in the remote mode (client rank's first case of generation
    0, a shape the daemon has served), then a normal exit: its regions are unregistered and its
    session ends before the process goes."""
    try:
        import torch

        import kjit
        from client_cases import call_args, call_kwargs
        client = kjit.Client(target=target, modes="remote", client_name="soak probe")
        kv, vb, work = make_work(rank, 0, references=False)
        case, t, _ = work[0]
        kjit.verify_attention(*call_args(t, case, kv, vb), **call_kwargs(t, case), client=client)
        torch.cuda.synchronize()
        client.close()
        results.put(f"one synchronous remote call of {case.name} ({case.describe()}): OK")
    except BaseException:  # noqa: BLE001 - reported to the parent
        results.put("FAILED: " + traceback.format_exc().strip().splitlines()[-1])


def nvidia_smi(query, fields):
    out = subprocess.run(["nvidia-smi", f"--query-{query}={fields}", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, timeout=20)
    if out.returncode != 0:
        raise OSError(f"nvidia-smi rc {out.returncode}")
    return [[x.strip() for x in line.split(",")] for line in out.stdout.splitlines() if line.strip()]


def mib(text):
    try:
        return int(text)
    except ValueError:  # [N/A]
        return 0


def sample(pid, wide=False):
    """kjitd's /proc numbers and its GPU memory (MiB, every GPU; -1 when nvidia-smi fails). wide:
    also the GPUs' used memory (device_mib) and the other compute processes (others, others_mib)."""
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
    others, others_mib = 0, 0
    try:
        for row in nvidia_smi("compute-apps", "pid,used_memory"):
            if row[0] == str(pid):
                s["gpu_mib"] += int(row[1])
            elif row[0].isdigit():
                others += 1
                others_mib += mib(row[1]) if len(row) > 1 else 0
    except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
        s["gpu_mib"] = -1
    if wide:
        s["others"], s["others_mib"] = others, others_mib
        try:
            s["device_mib"] = sum(mib(row[0]) for row in nvidia_smi("gpu", "memory.used"))
        except (OSError, subprocess.TimeoutExpired):
            s["device_mib"] = -1
    return s


def daemon_status(kjit_cli, target):
    """`kjit status --json`'s counts (COUNTS) and the launches kjitd has served (successful and
    failed, every model); {"error": why} when there is no answer."""
    if not kjit_cli:
        return {"error": "no kjit binary (--kjit)"}
    try:
        out = subprocess.run([kjit_cli, "status", "--target", target, "--json", "--deadline-ms", "5000"],
                             capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as e:
        return {"error": f"{kjit_cli}: {e}"}
    if out.returncode != 0:
        lines = (out.stderr or out.stdout).strip().splitlines()
        return {"error": f"kjit status rc {out.returncode}: {lines[-1] if lines else ''}"}
    try:
        j = json.loads(out.stdout)
        s = {k: int(j[k]) for k in COUNTS}
        s["launches"] = sum(int(m.get("success", 0)) + int(m.get("fail", 0)) for m in j.get("models", []))
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        return {"error": f"kjit status --json unreadable: {e}"}
    return s


def status_text(s):
    if "error" in s:
        return f"no answer ({s['error']})"
    return (f"sessions {s['sessions']}, regions {s['system_regions']} system + {s['cuda_regions']} CUDA, "
            f"events {s['events']}, rings {s['rings']}, launches served {s['launches']}")


IN_FLIGHT = re.compile(r"GPU (\d+) \([^)]*\): (\d+) asynchronous launches in flight")


def launches_in_flight(pid, log_path):
    """SIGUSR1: kjitd logs, per GPU, the asynchronous launches it still holds (with their regions and
    events; they are reaped at the GPU's next launch). Returns (how many in all or None, the line)."""
    if not log_path:
        return None, "no daemon log given (--daemon-log)"
    try:
        start = os.path.getsize(log_path)
        os.kill(pid, signal.SIGUSR1)
    except OSError as e:
        return None, f"SIGUSR1 not sent: {e}"
    until = time.time() + 5
    while time.time() < until:
        with open(log_path, "rb") as f:
            f.seek(start)
            text = f.read().decode("utf-8", "replace")
        for line in text.splitlines():
            if "SIGUSR1: " in line:
                found = IN_FLIGHT.findall(line)
                total = sum(int(n) for _, n in found) if found else (0 if " 0 GPU(s)" in line else None)
                return total, line.strip()
        time.sleep(0.1)
    return None, "no SIGUSR1 line in the daemon's log within 5 s"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", required=True)
    ap.add_argument("--daemon-pid", type=int, required=True)
    ap.add_argument("--seconds", type=float, default=600)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--out", required=True)
    ap.add_argument("--kjit", default=shutil.which("kjit") or "", help="the kjit CLI, for kjit status --json")
    ap.add_argument("--daemon-log", default="", help="kjitd's log (its SIGUSR1 lines)")
    ap.add_argument("--kill-every", type=float, default=0,
                    help="seconds between SIGKILLs (0: 60, or a quarter of a run under 300 s, at least 20)")
    ap.add_argument("--after", type=float, default=30, help="seconds sampled once a second after the last client left")
    ap.add_argument("--no-probe", dest="probe", action="store_false", help="no SIGUSR1 and probe call after the load")
    a = ap.parse_args()
    kill_every = a.kill_every or (60.0 if a.seconds >= 300 else max(20.0, a.seconds / 4))
    ctx = mp.get_context("spawn")
    results, ready = ctx.Queue(), ctx.Queue()
    before = {**sample(a.daemon_pid, wide=True), **daemon_status(a.kjit, a.target)}  # no client yet
    t0 = time.time()
    deadline = t0 + a.seconds
    procs = {}
    for r in range(a.clients):
        procs[r] = (0, ctx.Process(target=worker, args=(r, 0, a.target, deadline, results, ready), daemon=True))
        procs[r][1].start()
    for _ in range(a.clients):
        ready.get(timeout=300)
    samples, kills, reports = [], [], []
    mid_status = None  # kjit status once under load, at half time
    next_kill, next_sample, victim = time.time() + kill_every, time.time(), a.clients - 1
    while time.time() < deadline - 5:
        now = time.time()
        if now >= next_sample:
            s = sample(a.daemon_pid)
            s["t"] = now - t0
            samples.append(s)
            next_sample = now + 5
            if mid_status is None and now - t0 >= 0.5 * a.seconds:
                mid_status = {**daemon_status(a.kjit, a.target), "t": time.time() - t0}
        if now >= next_kill and deadline - now > 1.5 * kill_every:
            gen, p = procs[victim]
            os.kill(p.pid, signal.SIGKILL)
            p.join(timeout=10)
            kills.append((round(now - t0), victim, MODES[victim % len(MODES)][0]))
            np_ = ctx.Process(target=worker, args=(victim, gen + 1, a.target, deadline, results, ready), daemon=True)
            np_.start()
            procs[victim] = (gen + 1, np_)
            victim = (victim - 1) % a.clients
            next_kill = now + kill_every
        time.sleep(0.5)
    if mid_status is None:
        mid_status = {**daemon_status(a.kjit, a.target), "t": time.time() - t0}
    load_end = len(samples)

    # From 5 s before the deadline on, once a second: the daemon as nvidia-smi, /proc and kjit status
    # see it, while the clients finish and after the last one has left. The reports are read
    # meanwhile (a child that put a report exits only once it is read).
    fine = []
    exits = {}  # rank -> (t, generation, mode) of its last process's exit
    t_left = None  # when the last client process was seen gone (t s)

    def fine_sample(phase):
        s = {**sample(a.daemon_pid, wide=True), **daemon_status(a.kjit, a.target)}
        s.update(t=time.time() - t0, phase=phase, alive=len(procs) - len(exits))
        fine.append(s)

    def phase_now():
        if t_left is not None:
            return "left"
        return "load" if time.time() < deadline else "leaving"

    give_up = time.time() + 180
    next_fine = time.time()
    while True:
        try:
            reports.append(results.get(timeout=0.05))
            continue
        except queue_mod.Empty:
            pass
        now = time.time()
        for r, (gen, p) in procs.items():
            if r not in exits and not p.is_alive():
                exits[r] = (round(now - t0, 1), gen, MODES[r % len(MODES)][0])
        if t_left is None and (len(exits) == len(procs) or now > give_up):
            t_left = now - t0  # past give_up: the clients still running are reported below
        if now >= next_fine:
            fine_sample(phase_now())
            next_fine = max(next_fine + 1.0, time.time() + 0.1)
        if t_left is not None and fine[-1]["phase"] == "left" and fine[-1]["t"] - t_left >= a.after:
            break
    hung = [r for r in procs if r not in exits]
    for _, p in procs.values():
        p.join(timeout=10)

    # The criterion's sample: the first after the clients left that is back within 2% of the
    # warm-up's GPU memory within SETTLE_S, else the first past SETTLE_S.
    base_gpu = next((s["gpu_mib"] for s in samples if s["t"] >= 0.2 * a.seconds), samples[-1]["gpu_mib"])
    left = [s for s in fine if s["phase"] == "left"]
    end = next((s for s in left if s["t"] - t_left <= SETTLE_S and 0 <= s["gpu_mib"] <= base_gpu * 1.02), None)
    if end is None:
        end = next((s for s in left if s["t"] - t_left > SETTLE_S), left[-1])
    samples.append(end)

    # The probe, after the criterion's samples: what kjitd holds in flight, one launch, again.
    probe_lines, inflight, probe_ok = [], (None, None), False
    if a.probe:
        rank = next((r for r in range(a.clients) if MODES[r % len(MODES)][0] in DAEMON_MODES), None)
        inflight_before = launches_in_flight(a.daemon_pid, a.daemon_log)
        probe_lines.append(f"- SIGUSR1 before the probe: {inflight_before[1]}")
        if rank is None:
            probe_lines.append("- probe not run: no client used a daemon launch mode")
            inflight = (inflight_before[0], None)
        else:
            pq = ctx.Queue()
            pp = ctx.Process(target=probe, args=(rank, a.target, pq), daemon=True)
            t_probe = time.time() - t0
            pp.start()
            outcome, stop = None, time.time() + 180
            next_fine = time.time()
            while pp.is_alive() and time.time() < stop:
                try:
                    outcome = pq.get(timeout=0.05)
                except queue_mod.Empty:
                    pass
                if time.time() >= next_fine:
                    fine_sample("probe")
                    next_fine = max(next_fine + 1.0, time.time() + 0.1)
            if pp.is_alive():
                pp.kill()
            pp.join(timeout=10)
            if outcome is None:
                try:
                    outcome = pq.get(timeout=1)
                except queue_mod.Empty:
                    outcome = f"FAILED: no answer (exit code {pp.exitcode})"
            t_probe_end = time.time() - t0
            probe_ok = not outcome.startswith("FAILED")
            probe_lines.append(f"- probe (client {rank}'s shapes, t {t_probe:.0f}..{t_probe_end:.0f} s): {outcome}")
            inflight_after = launches_in_flight(a.daemon_pid, a.daemon_log)
            probe_lines.append(f"- SIGUSR1 after the probe: {inflight_after[1]}")
            inflight = (inflight_before[0], inflight_after[0])
            until = time.time() + PROBE_AFTER_S
            next_fine = time.time()
            while time.time() < until:
                if time.time() >= next_fine:
                    fine_sample("after probe")
                    next_fine = max(next_fine + 1.0, time.time() + 0.1)
                time.sleep(0.05)

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
    ok = 0 <= end["gpu_mib"] <= base_gpu * 1.02 and end["VmRSS"] <= warm[0]["VmRSS"] * 1.02  # -1: unreadable
    lines.append(("PASS" if ok else "FAIL") + f" after the clients left: GPU {end['gpu_mib']} MiB (warm-up "
                 f"{base_gpu}), RSS {end['VmRSS']} KiB (warm-up {warm[0]['VmRSS']}), {end['t'] - t_left:.0f} s "
                 f"after the last client left (limit 2%, within {SETTLE_S} s)")
    ok or failed.append("after the load")
    for key, slack in (("fds", 4), ("Threads", 4), ("maps", 8)):
        start, last = warm[0][key], end[key]
        ok = last <= start + slack
        lines.append(("PASS" if ok else "FAIL") + f" {key}: {start} at warm-up, {last} at the end (slack {slack})")
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
    lines.append("Daemon samples (every 5 s; the last one is the criterion's after the clients left): "
                 "t s, RSS KiB, GPU MiB, fds, threads, mappings")
    lines.append("```")
    for s in samples:
        lines.append(f"{s['t']:6.0f} {s['VmRSS']:8d} {s['gpu_mib']:6d} {s['fds']:5d} {s['Threads']:4d} {s['maps']:6d}")
    lines.append("```")
    lines.append(f"Clients killed with SIGKILL (t s, client, mode; one every {kill_every:.0f} s): {kills}")

    # What the daemon held around the end.
    lines.append("")
    lines.append("## The daemon around the end of the load")
    lines.append("")
    lines.append(f"- before any client (t 0): kjitd GPU {before['gpu_mib']} MiB, GPUs' used memory "
                 f"{before.get('device_mib', -1)} MiB; kjit status: {status_text(before)}")
    lines.append(f"- kjit status during the load (t {mid_status['t']:.0f} s): {status_text(mid_status)}")
    first_exit = min((t for t, _, _ in exits.values()), default=float("inf"))
    last_load = [s for s in fine if s["phase"] in ("load", "leaving") and s["t"] < first_exit]
    if last_load:
        s = last_load[-1]
        lines.append(f"- kjit status right before the clients exit (t {s['t']:.0f} s, {s['alive']} clients "
                     f"running): {status_text(s)}")
    order = sorted(((t, r, gen, mode) for r, (t, gen, mode) in exits.items()))
    lines.append(f"- client exits at the end (t s, client.generation, mode): "
                 f"{[(t, f'{r}.{gen}', mode) for t, r, gen, mode in order]}")
    if hung:
        lines.append(f"- still running {180} s past the deadline (left behind): clients {hung}")
    lines.append(f"- the last client left at t {t_left:.1f} s; the criterion's sample is the one at "
                 f"t {end['t']:.1f} s")
    lines.append("")
    lines.append("Once a second from 5 s before the deadline: t s, s after the last client left, kjitd GPU MiB, "
                 "GPUs' used MiB, other compute processes (their MiB), kjitd RSS KiB, fds, threads, sessions, "
                 "regions system/CUDA, events, rings, launches served, clients running, phase")
    lines.append("```")
    for s in fine:
        if "error" in s:
            counts = f"(kjit status: {s['error'][:60]})"
        else:
            counts = (f"{s['sessions']:3d} {s['system_regions']:3d}/{s['cuda_regions']:<3d} {s['events']:3d} "
                      f"{s['rings']:3d} {s['launches']:9d}")
        lines.append(f"{s['t']:6.1f} {s['t'] - t_left:+6.1f} {s['gpu_mib']:5d} {s['device_mib']:6d} "
                     f"{s['others']:2d} ({s['others_mib']:5d}) {s['VmRSS']:7d} {s['fds']:4d} {s['Threads']:3d} "
                     f"{counts} {s['alive']:3d} {s['phase']}")
    lines.append("```")
    if probe_lines:
        lines.append("")
        lines.append("Probe after the criterion's samples:")
        lines += probe_lines
    lines.append("")
    lines.append("Diagnosis: " + diagnose(base_gpu, before, fine, t_left, inflight, a.probe, probe_ok))

    report = "\n".join([f"# soak: {a.clients} clients, {a.seconds:.0f} s, " + ("PASS" if not failed else "FAIL: " + ", ".join(failed)), ""] + lines)
    with open(a.out, "w") as f:
        f.write(report + "\n")
    print(report)
    return 1 if failed else 0


def diagnose(base_gpu, before, fine, t_left, inflight, probed, probe_ok):
    """What kjitd's GPU memory after the load went with, in words, from the once-a-second samples."""
    limit = base_gpu * 1.02
    left = [s for s in fine if s["phase"] == "left"]
    after_probe = [s for s in fine if s["phase"] == "after probe"]
    if not left or any(s["gpu_mib"] < 0 for s in left):
        return "nvidia-smi did not answer after the load: nothing to tell."
    last = left[-1]
    out = []
    high = next((s for s in fine if s["phase"] in ("leaving", "left") and s["gpu_mib"] > limit), None)
    if high is None:
        out.append(f"kjitd's GPU memory stayed within 2% of the warm-up's ({base_gpu} MiB) in every sample after "
                   f"the load: no step.")
        return " ".join(out)
    out.append(f"kjitd's GPU memory first read {high['gpu_mib']} MiB (warm-up {base_gpu}) at t {high['t']:.1f} s, "
               f"{high['t'] - t_left:+.1f} s from the last client's exit, with {high['alive']} clients still running; "
               f"kjit status then: {status_text(high)}.")
    if last["gpu_mib"] <= limit:
        back = next(s for s in left if s["t"] >= high["t"] and s["gpu_mib"] <= limit)
        out.append(f"It was back within 2% ({back['gpu_mib']} MiB) {back['t'] - t_left:.1f} s after the last client "
                   f"left, and {last['gpu_mib']} MiB at the end of the {last['t'] - t_left:.0f} s series.")
        return " ".join(out)
    out.append(f"It read {last['gpu_mib']} MiB (+{last['gpu_mib'] - base_gpu}) {last['t'] - t_left:.0f} s after the "
               f"last client left.")
    if before.get("device_mib", -1) >= 0 and last.get("device_mib", -1) >= 0 and before["gpu_mib"] >= 0:
        out.append(f"The GPUs' used memory was {before['device_mib']} MiB before any client and {last['device_mib']} "
                   f"MiB then ({last['device_mib'] - before['device_mib']:+d}), kjitd's own {before['gpu_mib']} and "
                   f"{last['gpu_mib']} MiB ({last['gpu_mib'] - before['gpu_mib']:+d}); {last['others']} other compute "
                   f"processes were listed.")
    if "error" in last:
        out.append(f"kjit status did not answer ({last['error']}): what kjitd holds is not known.")
        return " ".join(out)
    held = {k: last[k] for k in COUNTS if last[k]}
    if held:
        what = ", ".join(f"{k} {v}" for k, v in held.items())
        out.append(f"kjitd still holds registrations after every client process has exited ({what}): the step "
                   f"coincides with them.")
        if last["sessions"]:
            out.append("A session still open with no client left means a session's end was not noticed.")
        else:
            out.append("With no session open, these were registered outside any session and never unregistered: "
                       "kjitd keeps them legitimately until they are.")
        if last["cuda_regions"] or last["events"]:
            out.append("Their CUDA IPC mappings keep the exited clients' memory allocated, and nvidia-smi charges it "
                       "to kjitd. The criterion is kept, and fails on them.")
        else:
            out.append("They are system shared memory only (host memory, which nvidia-smi does not count): they do "
                       "not explain a GPU step by themselves.")
        return " ".join(out)
    served = [s["launches"] for s in left if "error" not in s]
    moved = served[-1] - served[0] if served else 0
    out.append("kjitd counts no session, region, event or ring then, and "
               + ("served no launch after the last client left." if moved == 0 else
                  f"served {moved} launches after the last client left."))
    before_n, after_n = inflight
    if not probed:
        out.append("The probe was not run (--no-probe): whether asynchronous launches still held their regions is "
                   "not known.")
        return " ".join(out)
    if before_n is None:
        out.append("The launches in flight are not known (no SIGUSR1 line).")
    elif before_n == 0:
        out.append("It held no asynchronous launch in flight either (SIGUSR1): nothing kjitd counts or holds "
                   "explains the step.")
    else:
        out.append(f"It still held {before_n} asynchronous launch(es) in flight (SIGUSR1), which keep the regions "
                   f"and events they named referenced, and so their CUDA IPC mappings open, until they are reaped; "
                   f"kjitd reaps only at the GPU's next launch (runtime/launch/launcher.cc RunOnDevice)"
                   + (", and none ran after the last client left." if moved == 0 else "."))
    if not probe_ok:
        out.append("The probe call failed (above): its effect is not known.")
        return " ".join(out)
    if not after_probe or after_probe[-1]["gpu_mib"] < 0:
        out.append("No sample after the probe.")
        return " ".join(out)
    p = after_probe[-1]
    now = (f"After the probe's one launch kjitd's GPU memory read {p['gpu_mib']} MiB (GPUs' used memory "
           f"{p['device_mib']} MiB, {p['device_mib'] - last['device_mib']:+d}; in flight then: {after_n})")
    if p["gpu_mib"] > limit:
        out.append(now + ": still above the limit, so the launches held in flight do not explain the step.")
    elif before_n:
        out.append(now + ", back within 2%: the step was memory of exited clients that kjitd still mapped "
                   "through the launches it held in flight, not a registration.")
    elif before_n == 0:
        out.append(now + ", back within 2%: something kjitd's next launch releases, other than launches held "
                   "in flight.")
    else:
        out.append(now + ", back within 2%: something kjitd's next launch releases (the launches in flight "
                   "could not be read).")
    return " ".join(out)


if __name__ == "__main__":
    sys.exit(main())
