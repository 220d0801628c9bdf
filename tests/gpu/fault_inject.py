#!/usr/bin/env python3
"""A GPU fault on purpose (kjitd --enable-fault-injection, model kjit_fault_inject): the faulting
call answers UNAVAILABLE within its deadline, health turns NOT_SERVING (or the daemon is gone),
and a client launching mla_verify at the same time gets answers (OK before the fault, UNAVAILABLE
after it), never a hang. e2e_fault.sh then checks that kjitd exits 1 for its supervisor.

usage: fault_inject.py --target unix:///path/kjitd.sock --descriptors kjit_protos.desc
"""
import argparse
import os
import struct
import sys
import threading
import time

import grpc

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "client", "python"))
from kjit.descriptors import Messages  # noqa: E402

DEADLINE_S = 30  # of every call: a call that runs into it is a hang


def normal_request(m):
    """A small valid mla_verify call with every tensor inline (B = 1, N = 2, H = 8, P = 3)."""
    r = m["inference.ModelInferRequest"](model_name="mla_verify")
    r.parameters["sm_scale"].double_param = 0.14467963
    r.parameters["kjit_device"].int64_param = 0
    tensors = [("q", "BF16", [2, 8, 576], bytes(2 * 8 * 576 * 2)),
               ("k_extend", "BF16", [2, 1, 576], bytes(2 * 576 * 2)),
               ("kv_cache", "BF16", [4, 1, 576], bytes(4 * 576 * 2)),
               ("qo_indptr", "INT32", [2], struct.pack("<2i", 0, 2)),
               ("kv_indptr", "INT32", [2], struct.pack("<2i", 0, 3)),
               ("kv_indices", "INT64", [3], struct.pack("<3q", 1, 2, 3)),
               ("custom_mask", "BOOL", [10], bytes([1] * 10)),
               ("mask_indptr", "INT64", [2], struct.pack("<2q", 0, 10))]
    for name, dtype, shape, data in tensors:
        t = r.inputs.add(name=name, datatype=dtype)
        t.shape.extend(shape)
        r.raw_input_contents.append(data)
    r.outputs.add(name="o")
    return r


def code_of(fn, req):
    t0 = time.time()
    try:
        fn(req, timeout=DEADLINE_S)
        return grpc.StatusCode.OK, "", time.time() - t0
    except grpc.RpcError as e:
        return e.code(), e.details(), time.time() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", required=True)
    ap.add_argument("--descriptors", required=True)
    args = ap.parse_args()
    m = Messages(args.descriptors)
    channel = grpc.insecure_channel(args.target)
    infer = m.method(channel, "inference.GRPCInferenceService", "ModelInfer")
    ready = m.method(channel, "inference.GRPCInferenceService", "ServerReady")
    health = m.method(channel, "grpc.health.v1.Health", "Check")
    serving = m["grpc.health.v1.HealthCheckResponse"].SERVING

    assert ready(m["inference.ServerReadyRequest"](), timeout=DEADLINE_S).ready, "kjitd is not ready"
    req = normal_request(m)
    code, msg, _ = code_of(infer, req)
    assert code == grpc.StatusCode.OK, f"a normal launch before the fault: {code} {msg}"

    # A second client (its own channel) launching all along.
    other = m.method(grpc.insecure_channel(args.target), "inference.GRPCInferenceService", "ModelInfer")
    seen, stop = [], threading.Event()

    def launch_loop():
        while not stop.is_set():
            c, d, s = code_of(other, req)
            seen.append((c, d, s))
            if c != grpc.StatusCode.OK:
                return
    t = threading.Thread(target=launch_loop, daemon=True)
    t.start()
    time.sleep(0.5)

    fault = m["inference.ModelInferRequest"](model_name="kjit_fault_inject")
    fault.parameters["kjit_device"].int64_param = 0
    code, msg, took = code_of(infer, fault)
    print(f"kjit_fault_inject: {code.name} in {took:.2f} s: {msg}")
    assert code == grpc.StatusCode.UNAVAILABLE, f"the faulting call answered {code} ({msg}), not UNAVAILABLE"
    assert "unusable" in msg, msg

    # Health: NOT_SERVING, or the daemon already gone (UNAVAILABLE), within 10 s.
    until, status = time.time() + 10, None
    while time.time() < until:
        try:
            status = health(m["grpc.health.v1.HealthCheckRequest"](), timeout=2).status
        except grpc.RpcError as e:
            status = e.code()
        if status != serving:
            break
        time.sleep(0.05)
    print(f"health after the fault: {status}")
    assert status != serving, "health still SERVING 10 s after the fault"

    t.join(timeout=DEADLINE_S + 5)
    stop.set()
    assert not t.is_alive(), "the concurrent client is still waiting on its launch"
    codes = [c for c, _, _ in seen]
    print(f"concurrent client: {len(seen)} calls, {codes.count(grpc.StatusCode.OK)} OK, last {seen[-1][0].name} "
          f"({seen[-1][1]}), slowest {max(s for _, _, s in seen):.2f} s")
    assert codes.count(grpc.StatusCode.OK) >= 1, "the concurrent client never launched before the fault"
    # Every call OK or UNAVAILABLE, except that the one in flight while kjitd shuts down may end
    # CANCELLED: gRPC's server cancels a call its shutdown catches before a handler took it (a stock
    # client sees that; libkjit_client reports it as UNAVAILABLE).
    allowed = (grpc.StatusCode.OK, grpc.StatusCode.UNAVAILABLE)
    bad = [(c, d) for i, (c, d, _) in enumerate(seen)
           if c not in allowed and not (i == len(seen) - 1 and c == grpc.StatusCode.CANCELLED)]
    assert not bad, f"the concurrent client got {bad}"
    print("fault_inject: OK")


if __name__ == "__main__":
    main()
