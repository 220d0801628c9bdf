#!/usr/bin/env python3
"""call_profile: where a kjit.verify_attention call's host time goes, piece by piece, on launch_bench's
tiny shape (B1 H8 P64 D1) in each launch mode: the whole call, its Python part alone (the library
call replaced by a no-op), the library call alone on a pre-filled argument struct, the library's
checks and plan alone (a call that stops at the workspace test), and a bare ctypes call.

usage: call_profile.py --target unix:///path/kjitd.sock [--iters N]
"""
import argparse
import ctypes
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path[:0] = [os.path.join(ROOT, "tests", "gpu"), os.path.join(ROOT, "client", "python")]

import torch  # noqa: E402

import kjit  # noqa: E402
from kjit import _native, torch_ops  # noqa: E402


def p50(fn, iters, sync_every=32):
    for _ in range(200):
        fn()
    torch.cuda.synchronize()
    ns = []
    for i in range(iters):
        if i % sync_every == 0:
            torch.cuda.synchronize()
        t0 = time.perf_counter_ns()
        fn()
        ns.append(time.perf_counter_ns() - t0)
    torch.cuda.synchronize()
    return statistics.median(ns) / 1e3


def tiny_args(device):
    g = torch.Generator(device="cpu").manual_seed(7)
    h, p, d = 8, 64, 1
    q = torch.randn(d, h, 576, generator=g).to(torch.bfloat16).to(device)
    k = torch.randn(d, 1, 576, generator=g).to(torch.bfloat16).to(device)
    kb = torch.randn(p + 1, 1, 576, generator=g).to(torch.bfloat16).to(device)
    o = torch.empty(d, h, 512, dtype=torch.bfloat16, device=device)
    qo = torch.tensor([0, d], dtype=torch.int32, device=device)
    kvp = torch.tensor([0, p], dtype=torch.int32, device=device)
    kvi = torch.arange(1, p + 1, dtype=torch.int64, device=device)
    mask = torch.ones(d * (p + d), dtype=torch.bool, device=device)
    mip = torch.tensor([0, d * (p + d)], dtype=torch.int64, device=device)
    return (q, k, k[..., :512], o, kb, kb[..., :512], qo, kvp, kvi, mask, True, mip, d, 1.0, 1.0, 0.14467963)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", required=True)
    ap.add_argument("--iters", type=int, default=3000)
    a = ap.parse_args()
    device = torch.device("cuda:0")
    args = tiny_args(device)
    lib = _native.lib()
    print(f"bare ctypes call (kjit_abi_version): {p50(lib.kjit_abi_version, a.iters):.2f} us")
    for label, kw in (("in-process", dict(modes="in-process")), ("ring sync", dict(modes="ring")),
                      ("ring events", dict(modes="ring", events=True)), ("remote sync", dict(modes="remote"))):
        c = kjit.Client(target=a.target, client_name=f"call_profile {label}", **kw)
        whole = p50(lambda: kjit.verify_attention(*args, client=c), a.iters)
        calls = torch_ops._calls
        stream = torch_ops._raw_stream(0)
        needed = ctypes.c_uint64(0)
        lib_call = p50(lambda: lib.kjit_mla_verify(c._handle, calls.address, stream, ctypes.byref(needed)), a.iters)
        real = c.mla_verify
        c.mla_verify = lambda address, stream: 0
        python_only = p50(lambda: kjit.verify_attention(*args, client=c), a.iters)
        c.mla_verify = real
        line = (f"{label}: whole call {whole:.2f} us; Python part alone {python_only:.2f} us; "
                f"library call alone {lib_call:.2f} us")
        if label == "in-process":
            # The same struct with no workspace: the library checks and plans, then stops (nothing queued).
            ctypes.memset(calls.address + _native.WORKSPACE_OFFSET, 0, 16)
            checks = p50(lambda: lib.kjit_mla_verify(c._handle, calls.address, stream, ctypes.byref(needed)), a.iters)
            line += f"; checks and plan alone {checks:.2f} us (needed {needed.value} B)"
            kjit.verify_attention(*args, client=c)  # the workspace back in the struct
        print(line, flush=True)
        torch.cuda.synchronize()
        c.close()


if __name__ == "__main__":
    main()
