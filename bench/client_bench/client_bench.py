#!/usr/bin/env python3
"""client_bench: a verify call's cost from Python, per kjit launch mode, next to SGLang's Triton kernel.

usage: client_bench.py --target unix:///path/kjitd.sock [--triton-dir DIR] [--out FILE.md] [--iters N]

For launch_bench's tiny shape (B1 H8 P64 D1) and two realistic ones (B1 H8 D16, P 16k and 64k):
- host time per call (perf_counter_ns from the call to its return, the launch queued; p50, p99 and
  mean over --iters calls after a warm-up) for in-process, ring and remote (synchronous and with
  events=True) and SGLang's Triton extend_attention_fwd on the same inputs (with --triton-dir).
  Nothing synchronizes inside the timed region of an asynchronous mode: every 32 calls the stream
  is synchronized outside it, so queues stay short. The calls go round 61 layers, each with its own
  k_buffer, q, k_extend and o and the step's index tensors shared, as in a decode step; v_buffer and
  v_extend are new views for every call (SGLang's get_value_buffer makes one per call), made
  outside the timed region. One more in-process row passes the very same objects every call.
- GPU time per call: CUDA events around one call, L2 flushed (a 256 MiB memset) before, median.
- CUDA-graph replay (in-process): a graph of the 61 layers' launches; host time of a replay and
  GPU time per verify call in it.
- A decode-step projection: 61 x max(host p50, GPU time) per eager mode, 61 x GPU time for graph
  replay (kjit's measured, Triton's from its eager GPU time).
Targets (tiny shape): in-process host p50 <= 8 us and <= 0.25 x Triton's; ring synchronous <= 25 us.
Also checks that in-process o matches the float64 reference and every mode's o is bitwise equal to
it: exits 1 when not (a missed target is reported, not an error).
"""
import argparse
import datetime
import os
import platform
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path[:0] = [os.path.join(ROOT, "tests", "gpu"), os.path.join(ROOT, "client", "python")]

import torch  # noqa: E402

import client_cases as cc  # noqa: E402
import kjit  # noqa: E402
from client_cases import SM_SCALE, Case, build_index, load_sglang_triton  # noqa: E402
from mla_reference_torch import reference, rel_frob  # noqa: E402

LAYERS = 61
SHAPES = (Case("tiny B1 H8 P64 D1", 8, (64,), (1,), seed=81),
          Case("B1 H8 D16 P16k", 8, (16384,), (16,), seed=82),
          Case("B1 H8 D16 P64k", 8, (65536,), (16,), seed=83))
MODES = (("in-process", {"modes": "in-process"}), ("ring sync", {"modes": "ring"}),
         ("ring events", {"modes": "ring", "events": True}), ("remote sync", {"modes": "remote"}),
         ("remote events", {"modes": "remote", "events": True}))
SYNC_EVERY = 32


class Step:
    """One decode step's verify inputs for LAYERS layers: per layer its own cache (S = P + 1 rows,
    scattered slots), q, k_extend and o; the index tensors shared by every layer."""

    def __init__(self, case):
        self.case = case
        p, d, h = case.prefix[0], case.draft[0], case.heads
        ix = build_index(case, p + 1)
        dev = cc.DEVICE
        self.qo = torch.from_numpy(ix["qo_indptr"]).to(dev, torch.int32)
        self.kvp = torch.from_numpy(ix["kv_indptr"]).to(dev, torch.int32)
        self.kvi = torch.from_numpy(ix["kv_indices"]).to(dev)
        self.mask = torch.from_numpy(ix["custom_mask"]).to(dev).bool()
        self.mip = torch.from_numpy(ix["mask_indptr"]).to(dev)
        g = torch.Generator(device=dev).manual_seed(case.seed)
        bf = torch.bfloat16
        self.kb = [torch.randn(p + 1, 1, 576, generator=g, device=dev).to(bf) for _ in range(LAYERS)]
        self.q = [torch.randn(d, h, 576, generator=g, device=dev).to(bf) for _ in range(LAYERS)]
        self.k = [torch.randn(d, 1, 576, generator=g, device=dev).to(bf) for _ in range(LAYERS)]
        self.o = [torch.full((d, h, 512), float("nan"), dtype=bf, device=dev) for _ in range(LAYERS)]
        self.same = [self.args(layer) for layer in range(LAYERS)]

    def args(self, layer, o=None):
        """extend_attention_fwd's positional arguments for one layer, with new views (as SGLang passes)."""
        kb, k = self.kb[layer], self.k[layer]
        return (self.q[layer], k, k[..., :512], self.o[layer] if o is None else o, kb, kb[..., :512], self.qo,
                self.kvp, self.kvi, self.mask, True, self.mip, self.case.draft[0], 1.0, 1.0, SM_SCALE)


def summarize(ns):
    us = sorted(x / 1e3 for x in ns)
    return {"p50": us[len(us) // 2], "p99": us[min(len(us) - 1, len(us) * 99 // 100)], "mean": sum(us) / len(us),
            "calls": len(us)}


def host_times(step, call, iters, warmup, same=False):
    """Host ns of `iters` calls of call(*args), round the layers; a sync every SYNC_EVERY calls outside."""
    for i in range(warmup):
        call(*step.args(i % LAYERS))
        if i % SYNC_EVERY == SYNC_EVERY - 1:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    ns = []
    for i in range(iters):
        if i % SYNC_EVERY == 0:
            torch.cuda.synchronize()
        args = step.same[i % LAYERS] if same else step.args(i % LAYERS)
        t0 = time.perf_counter_ns()
        call(*args)
        ns.append(time.perf_counter_ns() - t0)
    torch.cuda.synchronize()
    return summarize(ns)


def gpu_us(fn, flush, reps=30):
    """Median CUDA-event time of fn() with L2 flushed before (the memset also keeps the GPU busy while
    the host queues fn, so its launch latency stays out)."""
    out = []
    for _ in range(reps):
        flush.zero_()
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        fn()
        e1.record()
        e1.synchronize()
        out.append(e0.elapsed_time(e1) * 1e3)
    return statistics.median(out)


def graph_replay(step, client, flush):
    """(host p50/p99 per verify call of a replay, GPU us per verify call) for a graph of LAYERS launches."""
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        for layer in range(LAYERS):
            kjit.verify_attention(*step.args(layer), client=client)
    s.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        for layer in range(LAYERS):
            kjit.verify_attention(*step.args(layer), client=client)
    for _ in range(5):
        g.replay()
    torch.cuda.synchronize()
    ns = []
    for i in range(200):
        if i % 8 == 0:
            torch.cuda.synchronize()
        t0 = time.perf_counter_ns()
        g.replay()
        ns.append(time.perf_counter_ns() - t0)
    torch.cuda.synchronize()
    host = summarize([x / LAYERS for x in ns])
    return host, gpu_us(g.replay, flush, reps=15) / LAYERS


def sanity(step, clients):
    """Layer 0: in-process against float64, every mode bitwise equal to in-process. (ok, text)"""
    c = step.case
    ref, _, _ = reference(step.q[0], step.k[0], step.kb[0], step.qo, step.kvp, step.kvi, step.mask, step.mip,
                          sm_scale=SM_SCALE)
    outs = {}
    for label, client in clients.items():
        o = torch.full_like(step.o[0], float("nan"))
        kjit.verify_attention(*step.args(0, o=o), client=client)
        if label == "in-process":
            kjit.check_errors(client=client)
        torch.cuda.synchronize()
        outs[label] = o
    base = outs["in-process"]
    err = rel_frob(base, ref)
    differ = [m for m, o in outs.items() if not torch.equal(o.view(torch.int16), base.view(torch.int16))]
    ok = err <= 4e-3 and not differ
    return ok, f"{c.name}: in-process rel_frob {err:.2e} (bound 4e-3); modes differing from it: {differ or 'none'}"


def write(path, lines):
    if path:
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", required=True)
    ap.add_argument("--triton-dir")
    ap.add_argument("--out")
    ap.add_argument("--iters", type=int, default=2000)
    ap.add_argument("--warmup", type=int, default=200)
    args = ap.parse_args()
    t_start = time.monotonic()
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    triton_fn = load_sglang_triton(args.triton_dir) if args.triton_dir else None
    try:
        import triton
        triton_version = triton.__version__
    except ImportError:
        triton_version = "not installed"
    clients = {label: kjit.Client(target=args.target, client_name=f"client_bench {label}", **kw) for label, kw in MODES}
    for label, kw in MODES:
        if clients[label].mode != kw["modes"]:
            raise SystemExit(f"{label}: got mode {clients[label].mode} ({clients[label].description})")
    flush = torch.empty(256 << 20, dtype=torch.uint8, device=cc.DEVICE)
    lines = [f"# client_bench: kjit's Python call per launch mode vs SGLang's Triton kernel — "
             f"{datetime.date.today().isoformat()}", "",
             f"- GPU: {props.name} ({props.multi_processor_count} SMs); torch {torch.__version__}, triton "
             f"{triton_version}, Python {platform.python_version()}",
             f"- command: `{' '.join([os.path.relpath(sys.argv[0], ROOT)] + sys.argv[1:])}` (PYTORCH_CUDA_ALLOC_CONF="
             f"{os.environ.get('PYTORCH_CUDA_ALLOC_CONF', '')})",
             "- SGLang Triton: " + (f"extend_attention_fwd from {args.triton_dir}" if triton_fn
                                     else "not measured (no --triton-dir)"),
             f"- {LAYERS} layers per step, each with its own k_buffer (S = P + 1, scattered slots), q, k_extend and o; "
             f"host times over calls round the layers, a stream sync every {SYNC_EVERY} calls outside the timed "
             "region; GPU time: CUDA events around one call after a 256 MiB L2 flush, median of 30 (Triton: 10)",
             "- clients: " + "; ".join(f"{k}: {c.description}" for k, c in clients.items()), ""]
    failures, targets, projection = [], [], []
    for case in SHAPES:
        step = Step(case)
        ok, text = sanity(step, clients)
        print(("OK " if ok else "FAIL ") + text, flush=True)
        if not ok:
            failures.append(text)
        inproc = clients["in-process"]
        gpu_kjit = gpu_us(lambda: kjit.verify_attention(*step.args(0), client=inproc), flush)
        rows = []
        for label, client in clients.items():
            def call(*a, c=client):
                kjit.verify_attention(*a, client=c)
            r = host_times(step, call, args.iters, args.warmup)
            rows.append((label, r, gpu_kjit))
            if label == "in-process":
                rows.append(("in-process, the same objects every call",
                             host_times(step, call, args.iters, args.warmup, same=True), gpu_kjit))
            print(f"{case.name} {label}: p50 {r['p50']:.2f} us", flush=True)
        g_host, g_gpu = graph_replay(step, inproc, flush)
        tri = None
        if triton_fn is not None:
            triton_fn(*step.args(0))  # compiled before anything is timed
            torch.cuda.synchronize()
            gpu_tri = gpu_us(lambda: triton_fn(*step.args(0)), flush, reps=10)
            n = int(min(args.iters, max(200, 2.0e6 / max(gpu_tri, 1.0))))  # at most ~2 s of its GPU time
            tri = (host_times(step, triton_fn, n, min(args.warmup, 20)), gpu_tri)
            ref = reference(step.q[0], step.k[0], step.kb[0], step.qo, step.kvp, step.kvi, step.mask, step.mip,
                            sm_scale=SM_SCALE)[0]
            o = torch.full_like(step.o[0], float("nan"))
            triton_fn(*step.args(0, o=o))
            torch.cuda.synchronize()
            print(f"{case.name} Triton: p50 {tri[0]['p50']:.2f} us, GPU {gpu_tri:.1f} us, rel_frob "
                  f"{rel_frob(o, ref):.2e}", flush=True)
        lines += [f"## {case.name}", "", "| path | host p50 us | host p99 us | host mean us | calls | GPU us per call |",
                  "|---|---|---|---|---|---|"]
        for label, r, gpu in rows:
            lines.append(f"| {label} | {r['p50']:.2f} | {r['p99']:.2f} | {r['mean']:.2f} | {r['calls']} | "
                         f"{gpu:.1f} |")
        lines.append(f"| in-process, CUDA-graph replay of {LAYERS} launches (per verify call) | {g_host['p50']:.2f} | "
                     f"{g_host['p99']:.2f} | {g_host['mean']:.2f} | {g_host['calls']} replays | {g_gpu:.1f} |")
        if tri:
            r, gpu = tri
            lines.append(f"| SGLang Triton extend_attention_fwd | {r['p50']:.2f} | {r['p99']:.2f} | {r['mean']:.2f} | "
                         f"{r['calls']} | {gpu:.1f} |")
        lines.append("")
        tri_eager = LAYERS * max(tri[0]["p50"], tri[1]) / 1e3 if tri else None
        tri_graph = LAYERS * tri[1] / 1e3 if tri else None
        for label, r, gpu in rows:
            step_ms = LAYERS * max(r["p50"], gpu) / 1e3
            projection.append((case.name, label + " (eager)", max(r["p50"], gpu), step_ms, tri_eager))
        projection.append((case.name, "in-process, CUDA-graph replay", g_gpu, LAYERS * g_gpu / 1e3, tri_graph))
        if tri:
            projection.append((case.name, "SGLang Triton (eager)", max(tri[0]["p50"], tri[1]), tri_eager, tri_eager))
            projection.append((case.name, "SGLang Triton (graph replay)", tri[1], tri_graph, tri_graph))
        if case is SHAPES[0]:
            by = {label: r for label, r, _ in rows}
            for label in ("in-process", "in-process, the same objects every call"):
                p50 = by[label]["p50"]
                targets.append(f"{label}: host p50 {p50:.2f} us <= 8 us: {'met' if p50 <= 8 else 'MISSED'}")
                if tri:
                    ratio = p50 / tri[0]["p50"]
                    targets.append(f"{label}: {ratio:.3f} x Triton's host p50 ({tri[0]['p50']:.2f} us) <= 0.25: "
                                   f"{'met' if ratio <= 0.25 else 'MISSED'}")
                else:
                    targets.append(f"{label}: <= 0.25 x Triton's host p50: not measured (no --triton-dir)")
            p50 = by["ring sync"]["p50"]
            targets.append(f"ring sync: host p50 {p50:.2f} us <= 25 us: {'met' if p50 <= 25 else 'MISSED'}")
        step = None  # its blocks stay in torch's cache (kjitd may still map them): no empty_cache here
        write(args.out, lines + [f"(partial: stopped after {case.name})"])
    lines += [f"## Decode-step projection ({LAYERS} layers)", "",
              "Eager: per layer max(host p50, GPU time); graph replay: GPU time per verify call in the replay "
              "(Triton's: its eager GPU time). The asynchronous modes' GPU time is the kernels' (the daemon's "
              "event wait is not in it); the synchronous modes' host time already holds the kernels.", "",
              "| shape | path | per layer us | step ms | Triton step ms / this |", "|---|---|---|---|---|"]
    for shape, label, per, step_ms, tri_ms in projection:
        vs = f"{tri_ms / step_ms:.1f}x" if tri_ms else "-"
        lines.append(f"| {shape} | {label} | {per:.1f} | {step_ms:.3f} | {vs} |")
    lines += ["", "## Targets (tiny shape)", ""] + [f"- {t}" for t in targets]
    lines += ["", "## Checks", ""]
    if failures:
        lines += [f"- FAIL: {f}" for f in failures]
    else:
        lines.append("- every shape: in-process o within 4e-3 of float64 (layer 0), every mode's o bitwise equal to it")
    lines += ["", f"Total {time.monotonic() - t_start:.0f} s."]
    print("\n".join(lines), flush=True)
    write(args.out, lines)
    for c in clients.values():
        c.close()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
