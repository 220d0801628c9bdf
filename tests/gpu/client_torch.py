#!/usr/bin/env python3
"""kjit's Python package (client/python/kjit) on torch CUDA tensors, against a float64 reference.

usage: client_torch.py --target unix:///path/kjitd.sock [--cache-dir DIR] [--triton-dir DIR] [--out FILE]

One PASS / FAIL / SKIPPED line per check, a summary last; exits 1 on any FAIL.
  a. Every launch mode (in-process; ring and remote, synchronous and with events=True; embedded)
     on client_cases.MODE_CASES: o NaN-poisoned first, rel Frobenius error <= 4e-3, no NaN, exact
     zeros on rows that attend to nothing, lse where asked; o bitwise equal across the modes.
  a2. An fp8 e4m3 cache (client_fp8_cases.FP8_CASES, k_scale 0.5 / v_scale 2) in every mode with
     both numerics, against float64 on the decoded cache: "dequant" <= 4e-3, "fp8" <= 1.2e-1 and
     close to the emulated Triton numerics' own error; bitwise equal across modes and cache views.
  b. Kernel errors: a kv_indices entry >= S, v_extend differing from k_extend[..., :512]; reported
     by check_errors (in-process, embedded), by the call (ring, remote) or by the next call (events);
     the next check or call is clean.
  c. kjit.Unsupported for what kjit does not implement, INVALID_ARGUMENT for fp8 numerics a cache
     cannot take, with o untouched.
  d. CUDA graphs (in-process): replay with new inputs in the static buffers is bitwise equal to an
     eager launch; kernel errors in a replay; a capture that allocates the workspace; a graph's
     workspace outlives an eager launch that grows it; host time of 61 launches, replay vs eager.
  e. 8 processes on the GPU at once, each with its own in-process and remote clients.
  f. With --triton-dir (SGLang's extend_attention.py and prefill_attention.py): kjit's error vs
     float64 no worse than max(2 x Triton's, 4e-3), on an fp8 cache too; and the stand-in SGLang backend tree
     (tests/python/sglang_standin) with kjit.sglang.install(): a target-verify MLA call served by
     kjit against the real Triton kernel, and a logit_cap call that falls back to it.
Needs PYTORCH_CUDA_ALLOC_CONF without expandable segments (the ring and remote modes share torch's
allocations with kjitd) and $KJIT_CLIENT_LIB or a build tree for libkjit_client.so.1.
"""
import argparse
import dataclasses
import multiprocessing as mp
import os
import queue as queue_mod
import statistics
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
STANDIN = os.path.join(ROOT, "tests", "python", "sglang_standin")
sys.path[:0] = [p for p in (HERE, os.path.join(ROOT, "client", "python")) if p not in sys.path]

import numpy as np  # noqa: E402
import torch  # noqa: E402

import client_cases as cc  # noqa: E402
import client_fp8_cases as fp8  # noqa: E402
import kjit  # noqa: E402
from client_cases import (KV_SLOTS, MODE_CASES, NINE, SM_SCALE, Case, Checks, build_index, call_args,  # noqa: E402
                          call_kwargs, load_sglang_triton, make_kv_cache, make_tensors, poison, reference_of,
                          standin_backend, standin_verify_step)
from mla_reference_torch import compare, reference, reference_loops, rel_frob  # noqa: E402

MODES = (("in-process", {"modes": "in-process"}), ("ring", {"modes": "ring"}),
         ("ring-events", {"modes": "ring", "events": True}), ("remote", {"modes": "remote"}),
         ("remote-events", {"modes": "remote", "events": True}), ("embedded", {"modes": "embedded"}))
CHECKED_HERE = ("in-process", "embedded")  # kernel errors come from check_errors; the others per call


def launch(t, case, kv, vb, client, **over):
    """verify_attention on t, with positional arguments replaced by name (o, v_extend, kv_indices)."""
    a = list(call_args(t, case, kv, vb))
    for name, i in (("o", 3), ("v_extend", 2), ("kv_indices", 8)):
        if name in over:
            a[i] = over.pop(name)
    kjit.verify_attention(*a, **{**call_kwargs(t, case), **over}, client=client)


def expect_error(checks, name, fn, code, needle):
    try:
        fn()
    except kjit.Error as e:
        ok = e.code == code and needle in e.message and not isinstance(e, kjit.Unsupported)
        return checks.record(ok, name, f"kjit.Error {e.code_name}: {e.message} (want code {code}, '{needle}')")
    return checks.record(False, name, f"no error raised (want code {code}, '{needle}')")


def clean(checks, name, fn):
    try:
        fn()
        return checks.record(True, name)
    except kjit.Error as e:
        return checks.record(False, name, f"raised {e}")


def check_reference(checks, kv, kv8):
    """reference() against reference_loops() on small cases, with 2-slot chunks and a slot >= S."""
    for case in (Case("ref_noncausal", 8, (0, 5, 40), (3, 4, 6), seed=3, tree="random", is_causal=False,
                      k_scale=0.5, v_scale=2.0, empty_rows=True),
                 Case("ref_causal_uint8", 16, (7,), (9,), seed=4, tree="random", mask_dtype="uint8")):
        slots = 1024  # the loops get kv[:slots]; the entry set >= S below is >= S for both
        t = make_tensors(case, build_index(case, slots))
        t.kv_indices[2] = kv.shape[0] + 3
        args = (t.q, t.k_extend, kv, t.qo_indptr, t.kv_indptr, t.kv_indices, t.custom_mask, t.mask_indptr)
        opts = dict(sm_scale=SM_SCALE, k_scale=case.k_scale, v_scale=case.v_scale, is_causal=case.is_causal)
        o, lse, _ = reference(*args, chunk_elems=2 * case.heads * max(case.draft), **opts)  # 2-slot chunks
        host = [a.cpu().double().numpy() if a.dtype == torch.bfloat16 else a.cpu().numpy()
                for a in (t.q, t.k_extend, kv[:slots], t.qo_indptr, t.kv_indptr, t.kv_indices, t.custom_mask,
                          t.mask_indptr)]
        o2, lse2 = reference_loops(*host, **opts)
        err = float(np.abs(o.cpu().numpy() - o2).max())
        same_lse = np.allclose(lse.cpu().numpy(), lse2, rtol=0, atol=1e-9)  # -inf where both are
        checks.record(err < 1e-9 and same_lse, f"reference vs loops {case.name}", f"max |diff| {err:.1e}")
    if kv8 is not None:
        fp8.check_reference(checks, kv8)


def run_modes(checks, clients, kv, vb):
    for case in MODE_CASES:
        with checks.guard(f"{case.name} setup"):
            t = make_tensors(case, build_index(case, kv.shape[0]))
            ref = reference_of(t, case, kv)
            outs = {}
            for label, client in clients.items():
                with checks.guard(f"{case.name} [{label}]"):
                    poison(t)
                    launch(t, case, kv, vb, client)
                    if label in CHECKED_HERE:
                        kjit.check_errors(client=client)
                    torch.cuda.synchronize()
                    ok, detail = compare(t.o, ref, lse=t.lse)
                    checks.record(ok, f"{case.name} [{label}]", detail)
                    outs[label] = t.o.clone()
            first = next(iter(outs.values()), None)
            differ = [m for m, o in outs.items() if not torch.equal(o.view(torch.int16), first.view(torch.int16))]
            checks.record(not differ and len(outs) == len(clients), f"{case.name} bitwise equal across modes",
                          f"{len(outs)} modes ran; differ from {next(iter(outs), '-')}: {differ or 'none'}")
            del t, ref, outs


def run_reused_address(checks, clients, kv, vb):
    """An allocation freed and its address handed out again (torch.cuda.empty_cache, then the same
    size): the ring and remote modes register the new allocation instead of sending kjitd the
    region of the freed one, so o is written (and right)."""
    case = Case("reused_address", 8, (60,), (4,), seed=44)
    t = make_tensors(case, build_index(case, kv.shape[0]))
    ref = reference_of(t, case, kv)
    for label, client in clients.items():
        if label in CHECKED_HERE:
            continue  # no registrations
        with checks.guard(f"reused address [{label}]"):
            # 32 MB: past the caching allocator's 10 MB, a segment of its own, freed by empty_cache
            o = torch.empty(16 << 20, dtype=torch.bfloat16, device=t.o.device)
            address = o.data_ptr()
            view = o[: t.o.numel()].view_as(t.o)
            view.fill_(float("nan"))
            launch(t, case, kv, vb, client, o=view)
            torch.cuda.synchronize()
            first, _ = compare(view, ref)
            del o, view
            torch.cuda.empty_cache()
            o = torch.empty(16 << 20, dtype=torch.bfloat16, device=t.o.device)
            same = o.data_ptr() == address
            view = o[: t.o.numel()].view_as(t.o)
            view.fill_(float("nan"))
            launch(t, case, kv, vb, client, o=view)
            torch.cuda.synchronize()
            ok, detail = compare(view, ref)
            if same:
                checks.record(first and ok, f"reused address [{label}]", f"the same address; {detail}")
            else:
                checks.skip(f"reused address [{label}]", "the driver gave another address: not exercised")
            del o, view


def run_errors(checks, clients, kv, vb):
    case = Case("errors", 8, (100, 40), (4, 3), seed=40)
    t = make_tensors(case, build_index(case, kv.shape[0]))
    ref = reference_of(t, case, kv)
    bad = t.kv_indices.clone()
    bad[5], bad[120] = kv.shape[0], kv.shape[0] + 4096
    ref_bad = reference(t.q, t.k_extend, kv, t.qo_indptr, t.kv_indptr, bad, t.custom_mask, t.mask_indptr,
                        sm_scale=SM_SCALE)
    vbad = t.k_extend[..., :512].contiguous()
    vbad[2, 0, 7] += 3.0
    for label, client in clients.items():
        name = f"errors [{label}]"
        with checks.guard(name):
            if label in CHECKED_HERE:
                poison(t)
                launch(t, case, kv, vb, client, kv_indices=bad)
                expect_error(checks, f"{name} kv_indices >= S: check_errors", lambda: kjit.check_errors(client=client),
                             3, "kv_indices")
                ok, detail = compare(t.o, ref_bad)
                checks.record(ok, f"{name} kv_indices >= S: those slots masked", detail)
                clean(checks, f"{name} next check clean", lambda: kjit.check_errors(client=client))
                poison(t)
                launch(t, case, kv, vb, client, v_extend=vbad)
                expect_error(checks, f"{name} v_extend differs: check_errors", lambda: kjit.check_errors(client=client),
                             3, "v_extend")
                ok, detail = compare(t.o, ref)
                checks.record(ok, f"{name} v_extend differs: V read from k_extend", detail)
                clean(checks, f"{name} next check clean", lambda: kjit.check_errors(client=client))
            elif not label.endswith("events"):
                poison(t)
                expect_error(checks, f"{name} kv_indices >= S: the call raises",
                             lambda: launch(t, case, kv, vb, client, kv_indices=bad), 3, "kv_indices")
                if label == "ring":
                    expect_error(checks, f"{name} v_extend differs: the call raises",
                                 lambda: launch(t, case, kv, vb, client, v_extend=vbad), 3, "v_extend")
            else:
                launch(t, case, kv, vb, client, kv_indices=bad)  # queued: its errors reach a later call
                torch.cuda.synchronize()
                raised = None
                for attempt in range(1, 4):
                    time.sleep(0.05)
                    try:
                        launch(t, case, kv, vb, client)
                        torch.cuda.synchronize()
                    except kjit.Error as e:
                        raised = e
                        break
                ok = raised is not None and raised.code == 9 and "kv_indices" in raised.message
                checks.record(ok, f"{name} kv_indices >= S: reported by a later call",
                              f"attempt {attempt}: {raised}" if raised else "no later call raised")
            poison(t)
            launch(t, case, kv, vb, client)
            if label in CHECKED_HERE:
                kjit.check_errors(client=client)
            torch.cuda.synchronize()
            ok, detail = compare(t.o, ref)
            checks.record(ok, f"{name} then a clean launch", detail)


def run_unsupported(checks, client, kv, vb, kv8):
    case = Case("unsupported", 8, (50, 9), (4, 6), seed=41)
    small_slots = 4096
    t = make_tensors(case, build_index(case, small_slots))
    small = kv[:small_slots].clone()
    base = list(call_args(t, case, kv, vb))
    h12 = torch.randn(case.n, 12, 576, device=cc.DEVICE).to(torch.bfloat16)
    variants = [
        ("logit_cap=1.0", {}, {"logit_cap": 1.0}),
        ("sinks", {}, {"sinks": torch.zeros(case.heads, device=cc.DEVICE)}),
        ("skip_prefix_custom_mask=False", {}, {"skip_prefix_custom_mask": False}),
        ("H=12", {0: h12, 3: torch.empty(case.n, 12, 512, dtype=torch.bfloat16, device=cc.DEVICE)}, {}),
        ("fp16 q", {0: t.q.half()}, {}),
        ("v_buffer not a view of k_buffer", {4: small, 5: small[..., :512].clone()}, {}),
        ("sliding_window_size=16", {}, {"sliding_window_size": 16}),
        ("xai_temperature_len=8", {}, {"xai_temperature_len": 8}),
        ("window_kv_offsets", {}, {"window_kv_offsets": torch.zeros(2, dtype=torch.int32, device=cc.DEVICE)}),
        ("custom_mask=None", {9: None}, {}),
        ("max_len_extend=65", {12: 65}, {}),
        ("k_scale a tensor", {13: torch.tensor(1.0, device=cc.DEVICE)}, {}),
        ("fp16 k_buffer", {4: small.half(), 5: small.half()[..., :512]}, {}),
    ]
    for what, repl, kwargs in variants:
        name = f"unsupported {what}"
        with checks.guard(name):
            a = list(base)
            for i, v in repl.items():
                a[i] = v
            o = a[3]
            o.view(torch.int16).fill_(0x1234)
            before = o.clone()
            torch.cuda.synchronize()
            try:
                kjit.verify_attention(*a, **kwargs, client=client)
                got = "returned"
            except kjit.Unsupported as e:
                got = e
            torch.cuda.synchronize()
            untouched = torch.equal(o.view(torch.int16), before.view(torch.int16))
            ok = isinstance(got, kjit.Unsupported) and got.code == 12 and untouched
            checks.record(ok, name, f"{got!r}, o {'untouched' if untouched else 'WRITTEN'}")
    if kv8 is not None:
        fp8.run_refusals(checks, client, kv8)
    clean(checks, "unsupported: nothing reached the kernels (check_errors clean)",
          lambda: kjit.check_errors(client=client))


def host_ns(fn, reps):
    out = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter_ns()
        fn()
        out.append(time.perf_counter_ns() - t0)
    torch.cuda.synchronize()
    return statistics.median(out)


def run_graphs(checks, client, kv, vb):
    from kjit import torch_ops

    case = Case("graph", 16, (3000, 700), (16, 9), seed=50)
    t = make_tensors(case, build_index(case, kv.shape[0]))
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        launch(t, case, kv, vb, client)  # eager first: kernels loaded, this stream's workspace allocated
        launch(t, case, kv, vb, client)
    s.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        launch(t, case, kv, vb, client)
    o_eager = torch.empty_like(t.o)
    for rnd in range(3):
        name = f"graph replay, new inputs {rnd}: bitwise equal to eager"
        with checks.guard(name):
            c2 = dataclasses.replace(case, seed=51 + rnd, tree=("tree", "random", "chain")[rnd])
            new = make_tensors(c2, build_index(c2, kv.shape[0]))
            for dst, src in ((t.q, new.q), (t.k_extend, new.k_extend), (t.kv_indices, new.kv_indices),
                             (t.custom_mask, new.custom_mask)):
                dst.copy_(src)
            poison(t)
            g.replay()
            torch.cuda.synchronize()
            got = t.o.clone()
            o_eager.view(torch.int16).fill_(-1)
            launch(t, case, kv, vb, client, o=o_eager)
            kjit.check_errors(client=client)
            same = torch.equal(got.view(torch.int16), o_eager.view(torch.int16))
            ok, detail = compare(got, reference_of(t, c2, kv))
            checks.record(same and ok, name, f"bitwise {'equal' if same else 'DIFFERENT'}; {detail}")
    with checks.guard("graph replay: kernel errors reach check_errors"):
        keep = t.kv_indices[3].clone()
        t.kv_indices[3] = kv.shape[0]
        g.replay()
        expect_error(checks, "graph replay with kv_indices >= S: check_errors",
                     lambda: kjit.check_errors(client=client), 3, "kv_indices")
        t.kv_indices[3] = keep
        g.replay()
        clean(checks, "graph replay after restoring kv_indices: check_errors clean",
              lambda: kjit.check_errors(client=client))
    with checks.guard("graph captured on a stream with no workspace yet"):
        s2 = torch.cuda.Stream()
        g2 = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g2, stream=s2):
            launch(t, case, kv, vb, client)  # the workspace is allocated during the capture
        poison(t)
        g2.replay()
        torch.cuda.synchronize()
        got = t.o.clone()
        launch(t, case, kv, vb, client, o=o_eager)
        torch.cuda.synchronize()
        checks.record(torch.equal(got.view(torch.int16), o_eager.view(torch.int16)),
                      "graph captured on a stream with no workspace yet: bitwise equal to eager")
    with checks.guard("graph workspace outlives an eager growth"):
        s3 = torch.cuda.Stream()
        with torch.cuda.stream(s3):
            launch(t, case, kv, vb, client)
        s3.synchronize()
        key = (torch.cuda.current_device(), s3.cuda_stream)
        entry = torch_ops._workspaces.get(key)  # (tensor, address, bytes)
        ws = entry[0] if entry is not None else None
        del entry
        g3 = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g3, stream=s3):
            launch(t, case, kv, vb, client)
        # B x (splits + 1) x max_draft x H partial rows: >= 16 x 8192 x 1 KiB here, far above the graph's
        big = Case("graph_big", 128, (4096,) * 8, (64,) * 8, seed=55)
        tb = make_tensors(big, build_index(big, kv.shape[0]))
        with torch.cuda.stream(s3):
            launch(tb, big, kv, vb, client)  # eager, on the graph's stream, needs a larger workspace
        s3.synchronize()
        old_ptr, old_n = (ws.data_ptr(), ws.numel()) if ws is not None else (0, 1 << 20)
        grew = ws is not None and torch_ops._workspaces.get(key, (None,))[0] is not ws
        del ws  # only the graph should need that memory now
        with torch.cuda.stream(s3):
            junk = torch.full((old_n,), 0x5A, dtype=torch.uint8, device=cc.DEVICE)
        s3.synchronize()
        reused = grew and junk.data_ptr() < old_ptr + old_n and old_ptr < junk.data_ptr() + old_n
        poison(t)
        g3.replay()
        torch.cuda.synchronize()
        untouched = bool((junk == 0x5A).all())
        ok, detail = compare(t.o, reference_of(t, case, kv))
        name = "graph workspace outlives an eager growth on its stream"
        if not grew:
            checks.skip(name, "the larger launch did not replace the stream's workspace: not exercised")
        else:
            checks.record(ok and untouched and not reused, name,
                          f"the graph's old workspace ({old_n} B) overlaps a new tensor: {reused}; replay wrote "
                          f"into that tensor: {not untouched}; {detail}")
        del tb, junk
    with checks.guard("graph of 61 launches: host time"):
        g61 = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g61, stream=s):
            for _ in range(61):
                launch(t, case, kv, vb, client)
        g61.replay()
        replay = host_ns(g61.replay, 30)
        eager = host_ns(lambda: [launch(t, case, kv, vb, client) for _ in range(61)], 30)
        checks.record(replay < 0.5 * eager, "graph of 61 launches: replay host time < half of 61 eager calls",
                      f"replay {replay / 1e3:.1f} us ({replay / 61e3:.2f} us per verify), eager {eager / 1e3:.1f} us "
                      f"({eager / 61e3:.2f} us per call)")
        clean(checks, "graphs: check_errors clean", lambda: kjit.check_errors(client=client))


def worker(rank, target, barrier, results):
    """One of the concurrent client processes: its own clients, cache and cases."""
    try:
        inproc = kjit.Client(target=target, modes="in-process", client_name=f"client_torch worker {rank}")
        remote = kjit.Client(target=target, modes="remote", client_name=f"client_torch worker {rank} remote")
        slots = 20000
        kv = make_kv_cache(slots, seed=100 + rank)
        vb = kv[..., :512]
        rng = np.random.default_rng(1000 + rank)
        work = []
        for i in range(3):
            b = int(rng.integers(1, 5))
            case = Case(f"worker{rank}_case{i}", int(rng.choice((8, 16, 32, 64, 128))),
                        tuple(int(x) for x in rng.integers(0, 4000, b)), tuple(int(x) for x in rng.integers(1, 65, b)),
                        seed=200 + 10 * rank + i, tree=str(rng.choice(("tree", "random", "chain"))),
                        is_causal=bool(rng.integers(0, 2)), mask_dtype=str(rng.choice(("bool", "uint8"))),
                        v_copy=bool(rng.integers(0, 2)), k_scale=float(rng.choice((1.0, 0.5))))
            t = make_tensors(case, build_index(case, slots))
            work.append((case, t, reference_of(t, case, kv)))
        torch.cuda.synchronize()
        barrier.wait(timeout=50)
        out = []
        for case, t, ref in work:
            runs = []
            for _ in range(10):
                poison(t)
                launch(t, case, kv, vb, inproc)
                runs.append(t.o.clone())
            kjit.check_errors(client=inproc)
            ok, detail = compare(t.o, ref)
            same = all(torch.equal(r.view(torch.int16), runs[0].view(torch.int16)) for r in runs)
            out.append((f"{case.name} in-process x10 ({case.describe()})", ok and same,
                        f"{detail}; 10 runs bitwise {'equal' if same else 'DIFFERENT'}"))
            poison(t)
            launch(t, case, kv, vb, remote)
            torch.cuda.synchronize()
            ok, detail = compare(t.o, ref)
            same = torch.equal(t.o.view(torch.int16), runs[0].view(torch.int16))
            out.append((f"{case.name} remote", ok and same, f"{detail}; bitwise {'=' if same else '!='} in-process"))
        results.put((rank, out, None))
    except BaseException:  # noqa: BLE001 - reported to the parent
        barrier.abort()
        results.put((rank, [], traceback.format_exc()))


def run_processes(checks, target, count=8, limit_s=75):
    ctx = mp.get_context("spawn")
    barrier, results = ctx.Barrier(count), ctx.Queue()
    procs = [ctx.Process(target=worker, args=(r, target, barrier, results), daemon=True) for r in range(count)]
    for p in procs:
        p.start()
    got, deadline = {}, time.monotonic() + limit_s
    while len(got) < count and time.monotonic() < deadline:
        try:
            rank, out, tb = results.get(timeout=1)
            got[rank] = (out, tb)
        except queue_mod.Empty:
            if all(not p.is_alive() for p in procs) and results.empty():
                break
    for p in procs:
        p.join(timeout=10)
        if p.is_alive():
            p.terminate()
    for rank in range(count):
        if rank not in got:
            checks.record(False, f"process {rank}", f"no report (exit code {procs[rank].exitcode})")
            continue
        out, tb = got[rank]
        if tb:
            checks.record(False, f"process {rank}", tb.strip().splitlines()[-1])
            print(tb)
        for name, ok, detail in out:
            checks.record(ok, f"process {rank} {name}", detail)


def run_triton(checks, triton_dir, client, kv, vb, kv8):
    sys.path.insert(0, STANDIN)
    fn = load_sglang_triton(triton_dir)
    if fn is None:
        checks.skip("triton", f"{triton_dir} lacks extend_attention.py / prefill_attention.py")
        return

    def triton(t, case, **kw):
        o = torch.full_like(t.o, float("nan"))
        a = list(call_args(t, case, kv, vb))
        a[3] = o
        fn(*a, **kw)
        torch.cuda.synchronize()
        return o

    for case in (Case("triton_b1_h8_p4k", 8, (4097,), (16,), seed=60),
                 Case("triton_b9_h16_p70k", 16, NINE, (4, 1, 16, 8, 16, 2, 16, 3, 16), seed=61, k_scale=0.625,
                      v_scale=1.5),
                 Case("triton_b2_h128_d64", 128, (1000, 3), (64, 33), seed=62, v_copy=True),
                 Case("triton_b1_h64_p16k", 64, (16384,), (16,), seed=63)):
        with checks.guard(case.name):
            t = make_tensors(case, build_index(case, kv.shape[0]))
            ref = reference_of(t, case, kv)
            poison(t)
            launch(t, case, kv, vb, client)
            torch.cuda.synchronize()
            err_k = rel_frob(t.o, ref[0])
            err_t = rel_frob(triton(t, case), ref[0])
            bound = max(2 * err_t, 4e-3)
            checks.record(err_k <= bound, f"{case.name} kjit vs Triton against float64",
                          f"kjit {err_k:.2e}, Triton {err_t:.2e}, bound {bound:.2e}")
    if kv8 is not None:
        fp8.run_triton(checks, fn, client, kv8)
    import kjit.sglang

    calls = []

    def counted(*args, **kwargs):
        calls.append(kwargs.get("logit_cap", args[16] if len(args) > 16 else 0.0))
        return fn(*args, **kwargs)

    with checks.guard("sglang stand-in backend"), standin_backend(counted) as tb:
        installed = kjit.sglang.install()
        try:
            case = Case("sglang_b3_h16", 16, (2000, 37, 9000), (8, 8, 8), seed=70)
            t = make_tensors(case, build_index(case, kv.shape[0]))
            ref = reference_of(t, case, kv)
            before = kjit.sglang.stats()
            o = standin_verify_step(tb, t, case, kv)
            kjit.check_errors()  # the route ran on kjit.default_client() (in-process: errors are kept here)
            after = kjit.sglang.stats()
            o_t = triton(t, case)
            err_k, err_t, diff = rel_frob(o, ref[0]), rel_frob(o_t, ref[0]), rel_frob(o, o_t.double())
            ok = (installed["verify"] and after["served"] == before["served"] + 1 and not calls
                  and err_k <= max(2 * err_t, 4e-3) and diff <= max(2 * err_t, 4e-3) + err_t)
            checks.record(ok, "sglang stand-in backend: target-verify MLA served by kjit",
                          f"install {installed}, served +{after['served'] - before['served']}, Triton calls "
                          f"{len(calls)}; vs float64 kjit {err_k:.2e} Triton {err_t:.2e}; kjit vs Triton {diff:.2e}")
            o_fb = standin_verify_step(tb, t, case, kv, logit_cap=1.0)
            torch.cuda.synchronize()
            o_direct = triton(t, case, logit_cap=1.0)
            fell_back = kjit.sglang.stats()["fallbacks"] == after["fallbacks"] + 1 and calls == [1.0]
            same = torch.equal(o_fb.view(torch.int16), o_direct.view(torch.int16))
            checks.record(fell_back and same, "sglang stand-in backend: logit_cap=1.0 falls back to Triton",
                          f"Triton calls {calls}, fallbacks {kjit.sglang.stats()['fallbacks']}, "
                          f"bitwise {'equal' if same else 'DIFFERENT'} to a direct Triton call")
        finally:
            kjit.sglang.uninstall()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", required=True)
    ap.add_argument("--cache-dir", default=os.environ.get("KJIT_CACHE_DIR"))
    ap.add_argument("--triton-dir")
    ap.add_argument("--out")
    args = ap.parse_args()
    os.environ["KJIT_TARGET"] = args.target  # kjit.default_client(), used by kjit.sglang's route
    checks = Checks("client_torch")
    t0 = time.monotonic()
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, kjit at {os.path.dirname(kjit.__file__)}, "
          f"PYTORCH_CUDA_ALLOC_CONF={os.environ.get('PYTORCH_CUDA_ALLOC_CONF', '')}", flush=True)
    clients = {}
    for label, kw in MODES:
        with checks.guard(f"client {label}"):
            extra = {"cache_dir": args.cache_dir} if label == "embedded" else {"target": args.target}
            c = kjit.Client(client_name=f"client_torch {label}", **kw, **extra)
            if checks.record(c.mode == kw["modes"], f"client {label}", c.description):
                clients[label] = c
    kv = make_kv_cache(KV_SLOTS, seed=7)
    vb = kv[..., :512]
    kv8 = fp8.make_fp8_kv_cache(KV_SLOTS, seed=8) if hasattr(torch, "float8_e4m3fn") else None
    inproc = clients.get("in-process")
    sections = [("reference self-check", lambda: check_reference(checks, kv, kv8)),
                ("a. every mode vs float64", lambda: run_modes(checks, clients, kv, vb)),
                ("a2. fp8 e4m3 cache, every mode", lambda: fp8.run_modes(checks, clients, kv8, CHECKED_HERE)),
                ("a3. an address freed and reused", lambda: run_reused_address(checks, clients, kv, vb)),
                ("b. kernel errors", lambda: run_errors(checks, clients, kv, vb)),
                ("c. unsupported", lambda: run_unsupported(checks, inproc, kv, vb, kv8)),
                ("d. CUDA graphs", lambda: run_graphs(checks, inproc, kv, vb)),
                ("e. 8 processes", lambda: run_processes(checks, args.target)),
                ("f. SGLang's Triton kernel", lambda: run_triton(checks, args.triton_dir, inproc, kv, vb, kv8))]
    for title, fn in sections:
        checks.section(title)
        s0 = time.monotonic()
        if title.startswith("f.") and not args.triton_dir:
            checks.skip("triton", "no --triton-dir")
        elif title.startswith("a2.") and kv8 is None:
            checks.skip(title, f"torch {torch.__version__} has no float8_e4m3fn")
        elif inproc is None and title[0] in "cdf":
            checks.skip(title, "no in-process client")
        else:
            with checks.guard(title):
                fn()
        checks.note(f"{title}: {time.monotonic() - s0:.1f} s")
    for c in clients.values():
        c.close()
    checks.note(f"total {time.monotonic() - t0:.0f} s")
    summary = checks.summary()  # "client_torch: N passed, N failed, N skipped"
    print(summary, flush=True)
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(checks.lines + [summary]) + "\n")
    return 1 if checks.failed else 0


if __name__ == "__main__":
    sys.exit(main())
