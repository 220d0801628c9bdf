#!/usr/bin/env python3
"""kjitd driven the way an SGLang worker would drive it: a Python process with torch CUDA tensors.

- The tensors come from torch's caching allocator and are registered as CUDA IPC regions, using the
  handle and offset that torch.multiprocessing uses.
- mla_verify runs through ModelInfer on random inputs:
  - scattered slots;
  - a random draft tree whose mask has random bytes in the (unread) prefix columns;
  - k_scale and v_scale other than 1.
- Output o is poisoned first, then checked against a float64 torch reference (relative Frobenius
  error <= 4e-3, KERNEL.md's bound, and no NaN).
- o must be bitwise equal across three requests: the small inputs inline instead of in the region,
  and a repeat.
- Registering more bytes than torch's allocation holds is INVALID_ARGUMENT.
- An fp8 e4m3 cache (K / k_scale in float8_e4m3fn) travels as PROTOCOL.md has it: kv_cache UINT8
  (its bytes) with kjit_kv_dtype "fp8_e4m3", each kjit_fp8_numerics: against the float64 reference
  of the decoded cache (tests/gpu/mla_reference_torch.py), "dequant" within 4e-3, "fp8" within its
  loose bound and near the emulated Triton numerics' own error; a repeat bitwise equal; UINT8
  without the parameter INVALID_ARGUMENT.
- Unregistering leaves no region behind.

Message classes are built from a descriptor set (protoc --descriptor_set_out, from proto/) by
client/python's kjit.descriptors, not from generated modules, so the check runs whatever protobuf
runtime the machine's Python has.

usage: e2e_torch.py --target unix:///path/kjitd.sock --descriptors kjit_protos.desc
"""
import argparse
import itertools
import os
import sys

import grpc
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..", "..", "client", "python"), HERE]
from kjit.descriptors import Messages  # noqa: E402
from mla_reference_torch import FP8_FROB_BOUND, reference as reference_fp8, rel_frob  # noqa: E402

H, PREFIX, DRAFT = 8, (4097, 0, 700), (16, 5, 33)
SM_SCALE, K_SCALE, V_SCALE = 0.14467963, 0.625, 1.5
ALIGN = 256


class Api:
    """ModelInfer and the CUDA shared-memory methods over one channel."""

    def __init__(self, target, descriptors):
        self.messages = Messages(descriptors)
        self.msg = lambda name: self.messages["inference." + name]
        self.channel = grpc.insecure_channel(
            target, options=[("grpc.max_send_message_length", 1 << 30), ("grpc.max_receive_message_length", 1 << 30)])

    def call(self, method, request):
        name = type(request).DESCRIPTOR.name
        assert name == method + "Request", name
        return self.messages.method(self.channel, "inference.GRPCInferenceService", method)(request, timeout=60)


def make_case(seed):
    """Inputs of KERNEL.md's contract for three requests, on the GPU."""
    g = torch.Generator().manual_seed(seed)
    n = sum(DRAFT)
    slots = sum(PREFIX) + 1000
    q = torch.randn(n, H, 576, generator=g).to(torch.bfloat16)
    k_extend = torch.randn(n, 1, 576, generator=g).to(torch.bfloat16)
    kv_cache = torch.randn(slots, 1, 576, generator=g).to(torch.bfloat16)
    qo = torch.tensor([0, *itertools.accumulate(DRAFT)], dtype=torch.int32)
    kvp = torch.tensor([0, *itertools.accumulate(PREFIX)], dtype=torch.int32)
    kv_indices = (torch.randperm(slots - 1, generator=g)[: sum(PREFIX)] + 1).to(torch.int64)  # slot 0: dummy
    rows = []
    for p, d in zip(PREFIX, DRAFT):
        m = torch.randint(0, 2, (d, p + d), generator=g, dtype=torch.uint8)  # prefix columns: never read
        tree = torch.zeros(d, d, dtype=torch.uint8)
        parent = [-1] + [int(torch.randint(0, r, (1,), generator=g)) for r in range(1, d)]
        for r in range(d):
            a = r
            while a >= 0:  # a node attends itself and its ancestors
                tree[r, a] = 1
                a = parent[a]
        m[:, p:] = tree
        rows.append(m.flatten())
    mask = torch.cat(rows)
    mask_indptr = torch.tensor([0, *itertools.accumulate(d * (p + d) for p, d in zip(PREFIX, DRAFT))], dtype=torch.int64)
    host = dict(q=q, k_extend=k_extend, kv_cache=kv_cache, qo_indptr=qo, kv_indptr=kvp, kv_indices=kv_indices,
                custom_mask=mask, mask_indptr=mask_indptr)
    return {k: v.cuda() for k, v in host.items()}


def reference(c):
    """float64 o of KERNEL.md's contract (is_causal; k_scale on prefix logits, v_scale on prefix values)."""
    qo, kvp, mip = c["qo_indptr"].tolist(), c["kv_indptr"].tolist(), c["mask_indptr"].tolist()
    o = torch.zeros(qo[-1], H, 512, dtype=torch.float64, device="cuda")
    for b in range(len(qo) - 1):
        d, p = qo[b + 1] - qo[b], kvp[b + 1] - kvp[b]
        qb = c["q"][qo[b]:qo[b + 1]].double()
        kp = c["kv_cache"][c["kv_indices"][kvp[b]:kvp[b + 1]], 0].double()
        kt = c["k_extend"][qo[b]:qo[b + 1], 0].double()
        sp = torch.einsum("rhd,jd->rhj", qb, kp) * (SM_SCALE * K_SCALE)
        st = torch.einsum("rhd,jd->rhj", qb, kt) * SM_SCALE
        allowed = c["custom_mask"][mip[b]:mip[b] + d * (p + d)].view(d, p + d)[:, p:].bool()
        allowed &= torch.ones(d, d, dtype=torch.bool, device="cuda").tril()
        st = st.masked_fill(~allowed[:, None, :], float("-inf"))
        w = torch.softmax(torch.cat([sp, st], -1), -1).nan_to_num(0.0)
        o[qo[b]:qo[b + 1]] = w[..., :p] @ kp[:, :512] * V_SCALE + w[..., p:] @ kt[:, :512]
    return o


def cuda_ipc_handle(torch_handle):
    """The 64-byte cudaIpcMemHandle_t in a torch storage handle: bare (older torch), or
    [version][type][payload] with type 'c' (a cudaMalloc block, payload the 64 bytes) from
    c10's shareIpcHandle. An expandable segment ('e') has no CUDA IPC memory handle."""
    h = bytes(torch_handle)
    if len(h) == 64:
        return h
    if len(h) == 66 and h[1] == ord("c"):
        return h[2:]
    raise SystemExit(f"torch shared the storage as a {len(h)}-byte handle of type {h[1:2]!r}, not a cudaMalloc "
                     "block: CUDA IPC regions need PYTORCH_CUDA_ALLOC_CONF without expandable_segments")


class Arena:
    """One torch allocation holding several tensors at 256-byte offsets, registered as a CUDA IPC
    region: the handle is of torch's underlying cudaMalloc block, so each tensor's offset in the
    region is the arena's offset in that block plus its own."""

    def __init__(self, sizes):
        self.offsets, total = [], 0
        for s in sizes:
            self.offsets.append(total)
            total += (s + ALIGN - 1) // ALIGN * ALIGN
        self.buf = torch.empty(total, dtype=torch.uint8, device="cuda")
        # What torch.multiprocessing sends a consumer. torch warns at exit that shared tensors were
        # never released: it counts consumers that are torch processes, and kjitd is not one.
        share = self.buf.untyped_storage()._share_cuda_()
        self.device, self.handle, size, self.base = share[0], cuda_ipc_handle(share[1]), share[2], share[3]
        assert size >= total, (size, total)
        self.byte_size = self.base + total

    def view(self, i, like):
        nbytes = like.numel() * like.element_size()
        return self.buf[self.offsets[i]:self.offsets[i] + nbytes].view(like.dtype).view(like.shape)


def set_region(params, region, offset, nbytes):
    params["shared_memory_region"].string_param = region
    params["shared_memory_offset"].int64_param = offset
    params["shared_memory_byte_size"].int64_param = nbytes


DTYPES = {torch.bfloat16: "BF16", torch.int32: "INT32", torch.int64: "INT64", torch.uint8: "BOOL"}
NAMES = ["q", "k_extend", "kv_cache", "qo_indptr", "kv_indptr", "kv_indices", "custom_mask", "mask_indptr"]


def infer_request(api, c, arena_in, arena_out, o, inline_small, region="torch-in", strings=()):
    """ModelInfer of case c: its tensors in arena_in (registered as `region`), o in arena_out;
    strings: (name, value) string parameters. A uint8 kv_cache is an fp8 cache's bytes (UINT8)."""
    r = api.msg("ModelInferRequest")()
    r.model_name = "mla_verify"
    r.parameters["sm_scale"].double_param = SM_SCALE
    r.parameters["k_scale"].double_param = K_SCALE
    r.parameters["v_scale"].double_param = V_SCALE
    r.parameters["is_causal"].bool_param = True
    r.parameters["kjit_device"].int64_param = arena_in.device
    for key, value in strings:
        r.parameters[key].string_param = value
    for i, name in enumerate(NAMES):
        t = c[name]
        inp = r.inputs.add()
        inp.name = name
        inp.datatype = "UINT8" if name == "kv_cache" and t.dtype == torch.uint8 else DTYPES[t.dtype]
        inp.shape.extend(t.shape)
        if inline_small and i >= 3:
            r.raw_input_contents.append(t.cpu().numpy().tobytes())
        else:
            set_region(inp.parameters, region, arena_in.base + arena_in.offsets[i], t.numel() * t.element_size())
    out = r.outputs.add()
    out.name = "o"
    set_region(out.parameters, "torch-out", arena_out.base, o.numel() * o.element_size())
    return r


def expect_code(fn, code, what):
    try:
        fn()
    except grpc.RpcError as e:
        if e.code() != code:
            raise AssertionError(f"{what}: {e.code()} ({e.details()}), expected {code}")
        print(f"{what}: {code.name} ({e.details()})")
        return
    raise AssertionError(f"{what}: succeeded, expected {code}")


def check_fp8(api, c, arena_out, o, reg):
    """The case with an fp8 e4m3 cache of the same values (K / k_scale rounded to e4m3, as SGLang
    stores it) through ModelInfer, both numerics, against the float64 reference of the decoded cache."""
    kv8 = (c["kv_cache"].float() / K_SCALE).clamp(-448.0, 448.0).to(torch.float8_e4m3fn).view(torch.uint8)
    c8 = dict(c, kv_cache=kv8)
    arena8 = Arena([c8[n].numel() * c8[n].element_size() for n in NAMES])
    for i, n in enumerate(NAMES):
        arena8.view(i, c8[n]).copy_(c8[n])
    torch.cuda.synchronize()
    api.call("CudaSharedMemoryRegister", reg(name="torch-in8", raw_handle=arena8.handle, device_id=arena8.device,
                                              byte_size=arena8.byte_size))
    refs = {}
    for numerics in ("dequant", "fp8"):
        refs[numerics] = reference_fp8(c8["q"], c8["k_extend"], kv8, c8["qo_indptr"], c8["kv_indptr"], c8["kv_indices"],
                                       c8["custom_mask"], c8["mask_indptr"], sm_scale=SM_SCALE, k_scale=K_SCALE,
                                       v_scale=V_SCALE, fp8_numerics=numerics)[0]
    emulation = rel_frob(refs["fp8"].to(torch.bfloat16), refs["dequant"])
    fp8 = [("kjit_kv_dtype", "fp8_e4m3")]
    for numerics in ("dequant", "fp8"):
        runs = []
        for _ in range(2):
            o.view(torch.int16).fill_(-1)
            torch.cuda.synchronize()
            api.call("ModelInfer", infer_request(api, c8, arena8, arena_out, o, False, region="torch-in8",
                                                 strings=fp8 + [("kjit_fp8_numerics", numerics)]))
            torch.cuda.synchronize()
            runs.append(o.clone())
        got = runs[0]
        assert not torch.isnan(got.float()).any(), f"fp8 {numerics}: o has NaN"
        err = rel_frob(got, refs["dequant"])
        bound = 4e-3 if numerics == "dequant" else min(FP8_FROB_BOUND, 1.25 * emulation + 5e-3)
        print(f"fp8 cache, {numerics}: relative Frobenius error vs float64 of the decoded cache {err:.2e} "
              f"(bound {bound:.2e}; the emulated Triton numerics' own {emulation:.2e})")
        assert err <= bound, (numerics, err, bound)
        assert torch.equal(runs[0].view(torch.int16), runs[1].view(torch.int16)), f"fp8 {numerics}: a repeat changed o"
    expect_code(lambda: api.call("ModelInfer", infer_request(api, c8, arena8, arena_out, o, False, region="torch-in8")),
                grpc.StatusCode.INVALID_ARGUMENT, "UINT8 kv_cache without kjit_kv_dtype")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", required=True)
    ap.add_argument("--descriptors", required=True)
    args = ap.parse_args()
    print(f"torch {torch.__version__}, grpcio {grpc.__version__}, protobuf {sys.modules['google.protobuf'].__version__}")
    api = Api(args.target, args.descriptors)

    c = make_case(20261129)
    arena_in = Arena([c[n].numel() * c[n].element_size() for n in NAMES])
    for i, n in enumerate(NAMES):
        arena_in.view(i, c[n]).copy_(c[n])
    o_like = torch.empty(c["q"].shape[0], H, 512, dtype=torch.bfloat16, device="cuda")
    arena_out = Arena([o_like.numel() * 2])
    o = arena_out.view(0, o_like)
    torch.cuda.synchronize()

    reg = api.msg("CudaSharedMemoryRegisterRequest")
    too_big = reg(name="torch-big", raw_handle=arena_in.handle, device_id=arena_in.device,
                  byte_size=arena_in.byte_size + (64 << 20))
    expect_code(lambda: api.call("CudaSharedMemoryRegister", too_big), grpc.StatusCode.INVALID_ARGUMENT,
                "register past torch's allocation")
    for name, a in (("torch-in", arena_in), ("torch-out", arena_out)):
        api.call("CudaSharedMemoryRegister", reg(name=name, raw_handle=a.handle, device_id=a.device,
                                                  byte_size=a.byte_size))

    ref = reference(c)
    results = []
    for inline_small in (False, True, False):
        o.view(torch.int16).fill_(-1)  # 0xffff: a NaN in bf16
        torch.cuda.synchronize()
        api.call("ModelInfer", infer_request(api, c, arena_in, arena_out, o, inline_small))
        torch.cuda.synchronize()
        results.append(o.clone())
    got = results[0]
    assert not torch.isnan(got.float()).any(), "o has NaN (unwritten elements keep the poison)"
    err = ((got.double() - ref).norm() / ref.norm()).item()
    print(f"relative Frobenius error vs float64: {err:.2e} (bound 4e-3)")
    assert err <= 4e-3, err
    assert torch.equal(results[0].view(torch.int16), results[1].view(torch.int16)), "inline small inputs changed o"
    assert torch.equal(results[0].view(torch.int16), results[2].view(torch.int16)), "a repeat changed o"
    print("o bitwise equal: regions, small inputs inline, repeat")

    check_fp8(api, c, arena_out, o, reg)

    for name in ("torch-in", "torch-out", "torch-in8"):
        api.call("CudaSharedMemoryUnregister", api.msg("CudaSharedMemoryUnregisterRequest")(name=name))
    status = api.call("CudaSharedMemoryStatus", api.msg("CudaSharedMemoryStatusRequest")())
    left = [k for k in status.regions if k.startswith("torch-")]
    assert not left, left
    print("e2e_torch: OK")


if __name__ == "__main__":
    main()
