"""The float64 reference of ../shared/design/KERNEL.md's MLA tree-verify contract for the Python GPU
checks (tests/gpu/client_torch.py, bench/client_bench/client_bench.py), and the comparisons they
report.

- reference(): torch, float64, on the inputs' device. The prefix goes in chunks, so long prefixes
  with many heads stay within memory. It follows e2e_torch.py's reference and adds is_causal=False,
  empty rows (o = 0, lse = -inf) and kv_indices entries >= S (treated as masked, as the kernels do).
- reference_loops(): plain numpy, one row and head at a time, independent of reference(). It
  checks reference() on small cases on the GPU machine; the CPU tests it too.
- compare(): rel Frobenius error against the bound, NaN, exact zeros on empty rows, lse; the
  message names the worst element.
- An fp8 e4m3 cache (KERNEL.md "FP8"; a float8_e4m3fn tensor or its uint8 bytes): reference() and
  reference_loops() decode its bytes exactly (every e4m3 value is a float64, and a bf16, value), so
  the "dequant" numerics is the float64 contract on the decoded cache. fp8_numerics="fp8"
  emulates SGLang Triton's numerics on the prefix: q rounded to e4m3 for Q.K^T, the weights
  exp(s - row max) rounded to e4m3 for P.V, the row sum of the unrounded weights; draft rows exact.
  round_e4m3() is exact (round to nearest even, saturating at +-448); e4m3_values() is every
  code's value, from the format's definition.

Only the torch functions import torch, so the module imports on a machine without it.
"""
import math

import numpy as np

QK_DIM, V_DIM = 576, 512
FROB_BOUND = 4e-3                      # KERNEL.md: relative Frobenius error against float64
LSE_ATOL, LSE_RTOL = 1e-3, 1e-5        # tests/reference/mla_reference.h's lse tolerance
E4M3_MAX = 448.0
# fp8 numerics against the float64 reference of the decoded cache, on N(0, 1) data at sm_scale
# 0.1447: the emulated Triton numerics itself is 4-8e-2 off (q rounded to e4m3 alone ~5.5e-2, the
# weights' rounding more as the prefix grows: 7.5e-2 at P = 50k), so this bound is a loose one.
FP8_FROB_BOUND = 1.2e-1
FP8_LSE_ATOL = 1e-2  # lse against the emulation, whose scores are the kernel's (q rounded alike)
# fp8 numerics on e4m3 MMAs (sm_90a): their sums are not fp32's, so a score errs relative to the sum of
# its products' magnitudes (score_abs()); lse may be off by that much more (the C++ reference's
# Tolerance::e4m3_mma_accumulation, where the measurement behind it is).
E4M3_MMA_ACCUMULATION = 1.0 / 2048


def e4m3_values():
    """float64 [256]: the value of each OCP e4m3 ("float8_e4m3fn") code; NaN for 0x7f and 0xff. Bits
    s eeee mmm: (-1)^s * 2^(e-7) * (1 + m/8), subnormal 2^-6 * m/8 for e = 0; no infinities."""
    codes = np.arange(256)
    sign = np.where(codes & 0x80, -1.0, 1.0)
    exp, man = (codes >> 3) & 0xF, (codes & 7).astype(np.float64)
    mag = np.where(exp == 0, man / 8 * 2.0 ** -6, (1 + man / 8) * np.exp2(exp - 7.0))
    mag[(exp == 15) & (man == 7)] = np.nan
    return sign * mag


def round_e4m3_np(x):
    """x rounded to e4m3 (nearest, ties to even; saturating at +-448), exactly, in float64 numpy."""
    x = np.clip(np.asarray(x, dtype=np.float64), -E4M3_MAX, E4M3_MAX)
    _, e = np.frexp(x)
    quantum = np.ldexp(1.0, np.maximum(e - 4, -9))  # 3 mantissa bits; subnormal spacing 2^-9
    return np.round(x / quantum) * quantum


def round_e4m3(x):
    """round_e4m3_np for a torch tensor: float64, exact (no float32 in between)."""
    import torch

    x = x.double().clamp(-E4M3_MAX, E4M3_MAX)
    _, e = torch.frexp(x)
    quantum = torch.ldexp(torch.ones_like(x), (e - 4).clamp_min(-9))
    return torch.round(x / quantum) * quantum


def is_fp8_cache(kv_cache):
    """Whether the cache tensor is an fp8 e4m3 one (one byte per element: float8_e4m3fn or uint8)."""
    return kv_cache.element_size() == 1


def decode_e4m3(t):
    """float64 values of e4m3 bytes (a float8_e4m3fn tensor or a uint8 one holding its bytes)."""
    import torch

    return t.view(torch.float8_e4m3fn).to(torch.float64)


def reference(q, k_extend, kv_cache, qo_indptr, kv_indptr, kv_indices, custom_mask, mask_indptr, *,
              sm_scale, k_scale=1.0, v_scale=1.0, is_causal=True, fp8_numerics=None, chunk_elems=1 << 25,
              max_chunk=1 << 16):
    """(o [N, H, 512], lse [N, H], empty [N, H] bool), float64 on q's device.

    Per request b, draft row r, head h: the logits are sm_scale * k_scale * <q, K_j> over the prefix
    slots kv_indices[kv_indptr[b]:kv_indptr[b+1]] and sm_scale * <q, k_extend[c]> over the tree
    columns c the mask allows (only the last D_b columns of each mask row are read; with is_causal
    also c <= r). o = softmax · V, V the first 512 values of the same rows, prefix values times
    v_scale. lse is the natural log-sum-exp of the logits; a row that attends to nothing has o = 0
    and lse = -inf (empty = True).

    kv_cache may be an fp8 e4m3 cache (float8_e4m3fn or its uint8 bytes): its values are decoded
    exactly. fp8_numerics "fp8" (fp8 caches only) rounds q and the prefix weights to e4m3 as
    SGLang's Triton kernel does (the module docstring); None or "dequant": exact."""
    import torch

    fp8 = is_fp8_cache(kv_cache)
    if fp8_numerics not in (None, "dequant", "fp8") or (fp8_numerics == "fp8" and not fp8):
        raise ValueError(f"fp8_numerics={fp8_numerics!r} with a {kv_cache.dtype} cache")
    round_fp8 = fp8_numerics == "fp8"
    raw = kv_cache.view(torch.uint8) if fp8 else kv_cache  # gathered as bytes, then decoded
    qo, kvp, mip = qo_indptr.tolist(), kv_indptr.tolist(), mask_indptr.tolist()
    n, h = q.shape[0], q.shape[1]
    dev = q.device
    num_slots = kv_cache.shape[0]
    o = torch.zeros(n, h, V_DIM, dtype=torch.float64, device=dev)
    lse = torch.full((n, h), float("-inf"), dtype=torch.float64, device=dev)
    empty = torch.ones(n, h, dtype=torch.bool, device=dev)
    prefix_scale = sm_scale * k_scale
    for b in range(len(qo) - 1):
        r0, r1 = qo[b], qo[b + 1]
        d, p = r1 - r0, kvp[b + 1] - kvp[b]
        if d <= 0:
            continue
        slots = kv_indices[kvp[b]:kvp[b + 1]].to(torch.int64)
        slots = slots[(slots >= 0) & (slots < num_slots)]  # an entry >= S: masked
        qb = q[r0:r1].double()
        qp = round_e4m3(qb) if round_fp8 else qb  # q as the prefix's Q.K^T sees it
        kt = k_extend[r0:r1, 0].double()
        allowed = custom_mask[mip[b]:mip[b] + d * (p + d)].view(d, p + d)[:, p:] != 0
        if is_causal:
            allowed = allowed & torch.ones(d, d, dtype=torch.bool, device=dev).tril()
        st = torch.einsum("rhk,ck->rhc", qb, kt) * sm_scale
        st = st.masked_fill(~allowed[:, None, :], float("-inf"))
        step = max(1, min(max_chunk, chunk_elems // (d * h)))
        chunks = [(j, min(j + step, slots.numel())) for j in range(0, slots.numel(), step)]

        def prefix_logits(j0, j1):
            kc = raw[slots[j0:j1], 0]
            kc = decode_e4m3(kc) if fp8 else kc.double()
            return torch.einsum("rhk,ck->rhc", qp, kc) * prefix_scale, kc

        m = st.amax(-1)
        for j0, j1 in chunks:  # pass 1: the row maxima
            m = torch.maximum(m, prefix_logits(j0, j1)[0].amax(-1))
        m0 = torch.where(torch.isinf(m), torch.zeros_like(m), m)  # -inf only where nothing is attended
        w = torch.exp(st - m0[..., None])
        total = w.sum(-1)
        acc = torch.einsum("rhc,cv->rhv", w, kt[:, :V_DIM])
        for j0, j1 in chunks:  # pass 2: the weights and P·V
            s, kc = prefix_logits(j0, j1)
            w = torch.exp(s - m0[..., None])
            total = total + w.sum(-1)  # the row sum of the unrounded weights
            if round_fp8:
                w = round_e4m3(w)  # relative to the row max: w <= 1
            acc = acc + torch.einsum("rhc,cv->rhv", w, kc[:, :V_DIM]) * v_scale
        attended = total > 0
        o[r0:r1] = torch.where(attended[..., None], acc / total.clamp_min(1e-300)[..., None], torch.zeros_like(acc))
        lse[r0:r1] = torch.where(attended, m0 + torch.log(total.clamp_min(1e-300)), torch.full_like(m0, float("-inf")))
        empty[r0:r1] = ~attended
    return o, lse, empty


def reference_loops(q, k_extend, kv_cache, qo_indptr, kv_indptr, kv_indices, custom_mask, mask_indptr, *,
                    sm_scale, k_scale=1.0, v_scale=1.0, is_causal=True, fp8_numerics=None):
    """reference() again with numpy float64 arrays and explicit loops (small cases only). An fp8
    cache comes as a uint8 array of its bytes (decoded by e4m3_values()); fp8_numerics as there."""
    if np.asarray(kv_cache).dtype == np.uint8:
        kv_cache = e4m3_values()[np.asarray(kv_cache)]
    elif fp8_numerics == "fp8":
        raise ValueError("fp8_numerics='fp8' needs the cache's e4m3 bytes (a uint8 array)")
    round_fp8 = fp8_numerics == "fp8"
    q, k_extend, kv_cache = (np.asarray(a, dtype=np.float64) for a in (q, k_extend, kv_cache))
    n, h = q.shape[0], q.shape[1]
    o = np.zeros((n, h, V_DIM))
    lse = np.full((n, h), -np.inf)
    for b in range(len(qo_indptr) - 1):
        d = int(qo_indptr[b + 1] - qo_indptr[b])
        p = int(kv_indptr[b + 1] - kv_indptr[b])
        base = int(mask_indptr[b])
        for r in range(d):
            row = int(qo_indptr[b]) + r
            keys, scales, vscales, prefix = [], [], [], []
            for j in range(p):
                slot = int(kv_indices[int(kv_indptr[b]) + j])
                if 0 <= slot < kv_cache.shape[0]:
                    keys.append(kv_cache[slot, 0])
                    scales.append(sm_scale * k_scale)
                    vscales.append(v_scale)
                    prefix.append(True)
            for c in range(d):
                if custom_mask[base + r * (p + d) + p + c] and (c <= r or not is_causal):
                    keys.append(k_extend[int(qo_indptr[b]) + c, 0])
                    scales.append(sm_scale)
                    vscales.append(1.0)
                    prefix.append(False)
            if not keys:
                continue
            for hh in range(h):
                qr = q[row, hh]
                qp = round_e4m3_np(qr) if round_fp8 else qr
                s = [sc * float(np.dot(qp if pre else qr, k)) for sc, k, pre in zip(scales, keys, prefix)]
                top = max(s)
                w = [math.exp(x - top) for x in s]
                wv = [float(round_e4m3_np(wi)) if round_fp8 and pre else wi for wi, pre in zip(w, prefix)]
                o[row, hh] = sum(wi * vs * k[:V_DIM] for wi, vs, k in zip(wv, vscales, keys)) / sum(w)
                lse[row, hh] = top + math.log(sum(w))
    return o, lse


def _index(flat, shape):
    idx = []
    for size in reversed(shape):
        idx.append(flat % size)
        flat //= size
    return tuple(reversed(idx))


def rel_frob(got, want):
    """||got - want|| / ||want|| (||got - want|| when want is all zeros); nan when got has NaN."""
    diff = float((got.double() - want).norm())
    norm = float(want.norm())
    return diff / norm if norm > 0 else diff


def worst(got, want):
    """'worst |err| E at [n, h, c]: got G, want W' (a NaN counts as the worst)."""
    import torch

    err = torch.nan_to_num((got.double() - want).abs(), nan=float("inf"))
    flat = int(err.flatten().argmax())
    idx = _index(flat, tuple(got.shape))
    return (f"worst |err| {float(err[idx]):.3g} at {list(idx)}: got {float(got[idx]):.6g}, "
            f"want {float(want[idx]):.6g}")


def score_abs(q, kv_cache, qo_indptr, kv_indptr, kv_indices, *, sm_scale, k_scale=1.0, chunk_elems=1 << 25):
    """float64 [N, H] on q's device: the largest over each row's prefix keys j of |sm_scale * k_scale| *
    sum_i |round_e4m3(q)_i K_j[i]| (0 for a row without prefix keys), for an fp8 cache: the magnitude
    that e4m3 MMAs' sums err relative to (E4M3_MMA_ACCUMULATION)."""
    import torch

    raw = kv_cache.view(torch.uint8)
    qo, kvp = qo_indptr.tolist(), kv_indptr.tolist()
    out = torch.zeros(q.shape[0], q.shape[1], dtype=torch.float64, device=q.device)
    for b in range(len(qo) - 1):
        r0, r1 = qo[b], qo[b + 1]
        slots = kv_indices[kvp[b]:kvp[b + 1]].to(torch.int64)
        slots = slots[(slots >= 0) & (slots < kv_cache.shape[0])]
        if r1 <= r0 or slots.numel() == 0:
            continue
        qa = round_e4m3(q[r0:r1].double()).abs()
        step = max(1, chunk_elems // ((r1 - r0) * q.shape[1]))
        for j0 in range(0, slots.numel(), step):
            ka = decode_e4m3(raw[slots[j0:j0 + step], 0]).abs()
            out[r0:r1] = torch.maximum(out[r0:r1], torch.einsum("rhk,ck->rhc", qa, ka).amax(-1))
    return out * abs(sm_scale * k_scale)


def compare(o, ref, *, lse=None, bound=FROB_BOUND, lse_atol=LSE_ATOL):
    """(ok, detail) of kjit's o (and lse when given) against reference()'s (o, lse, empty)."""
    import torch

    want_o, want_lse, empty = ref
    of = o.float()
    nan = torch.isnan(of)
    if bool(nan.any()):
        first = _index(int(nan.flatten().nonzero()[0]), tuple(o.shape))
        return False, f"{int(nan.sum())} NaN elements in o (first at {list(first)})"
    err = rel_frob(o, want_o)
    ok = err <= bound
    detail = f"rel_frob {err:.2e} (bound {bound:.1e}), {worst(o, want_o)}"
    if bool(empty.any()):
        nonzero = int((of[empty] != 0).sum())
        detail += f"; {int(empty.sum())} empty row-heads, {nonzero} nonzero elements there"
        ok = ok and nonzero == 0
    if lse is not None:
        lf = lse.double()
        fin = ~empty
        lse_err = (lf[fin] - want_lse[fin]).abs()
        atol = lse_atol[fin] if torch.is_tensor(lse_atol) else lse_atol  # a tensor: per row-head
        tol = atol + LSE_RTOL * want_lse[fin].abs()
        bad = int((torch.nan_to_num(lse_err, nan=float("inf")) > tol).sum())
        bad_empty = int((lf[empty] != float("-inf")).sum())
        worst_lse = float(torch.nan_to_num(lse_err, nan=float("inf")).max()) if lse_err.numel() else 0.0
        detail += f"; lse max |err| {worst_lse:.2e}, {bad} over tolerance, {bad_empty} empty rows not -inf"
        ok = ok and bad == 0 and bad_empty == 0
    return ok, detail


def self_test():
    """reference_loops on cases worked by hand (numpy only): python3 tests/gpu/mla_reference_torch.py"""
    rng = np.random.default_rng(5)
    kv = rng.standard_normal((4, 1, 576))
    ke = rng.standard_normal((2, 1, 576))
    q = rng.standard_normal((2, 1, 576))
    z = np.zeros(1, np.int64)
    # P = 0, D = 1, the row attends itself: o = its own value row, lse = its logit.
    o, lse = reference_loops(q[:1], ke[:1], kv, [0, 1], [0, 0], z[:0], np.array([1], np.uint8), [0, 1],
                             sm_scale=0.1)
    assert np.allclose(o[0, 0], ke[0, 0, :512]) and np.isclose(lse[0, 0], 0.1 * q[0, 0] @ ke[0, 0])
    # P = 1 (slot 2), D = 1, the row masks itself out: o = v_scale * the slot's value row.
    o, lse = reference_loops(q[:1], ke[:1], kv, [0, 1], [0, 1], np.array([2]), np.array([1, 0], np.uint8),
                             [0, 2], sm_scale=0.1, k_scale=0.5, v_scale=3.0)
    assert np.allclose(o[0, 0], 3.0 * kv[2, 0, :512]) and np.isclose(lse[0, 0], 0.05 * q[0, 0] @ kv[2, 0])
    # A slot >= S is masked; nothing left: o = 0, lse = -inf.
    o, lse = reference_loops(q[:1], ke[:1], kv, [0, 1], [0, 1], np.array([9]), np.array([1, 0], np.uint8),
                             [0, 2], sm_scale=0.1)
    assert (o == 0).all() and lse[0, 0] == -np.inf
    # Two equal keys: the mean of their values. Causal drops the bit above the diagonal.
    kv2 = np.stack([kv[1], kv[1]])
    o, _ = reference_loops(np.zeros((1, 1, 576)), ke[:1], kv2, [0, 1], [0, 2], np.array([0, 1]),
                           np.array([0, 0, 0], np.uint8), [0, 3], sm_scale=1.0)
    assert np.allclose(o[0, 0], kv[1, 0, :512])
    mask = np.array([1, 1, 1, 1], np.uint8)  # D = 2, both rows allow both columns
    o_c, _ = reference_loops(q, ke, kv, [0, 2], [0, 0], z[:0], mask, [0, 4], sm_scale=0.1, is_causal=True)
    o_n, _ = reference_loops(q, ke, kv, [0, 2], [0, 0], z[:0], mask, [0, 4], sm_scale=0.1, is_causal=False)
    assert np.allclose(o_c[0, 0], ke[0, 0, :512]) and not np.allclose(o_n[0, 0], ke[0, 0, :512])
    assert np.allclose(o_c[1], o_n[1])
    self_test_fp8()


def self_test_fp8():
    """The e4m3 decoding and rounding, and reference_loops' fp8 numerics, worked by hand."""
    v = e4m3_values()
    assert (v[0x00], v[0x38], v[0xb8], v[0x7e], v[0xfe]) == (0.0, 1.0, -1.0, 448.0, -448.0)
    assert (v[0x01], v[0x07], v[0x08], v[0x3c]) == (2.0 ** -9, 7 * 2.0 ** -9, 2.0 ** -6, 1.5)
    assert np.isnan(v[0x7f]) and np.isnan(v[0xff]) and np.isfinite(v).sum() == 254
    finite = v[np.isfinite(v)]
    assert len(np.unique(finite)) == 253  # +0 and -0 alike; every other code its own value
    assert np.array_equal(round_e4m3_np(finite), finite)  # every value rounds to itself
    # Ties go to the even mantissa; past 448 saturates; below half the smallest subnormal is 0.
    assert list(round_e4m3_np([1.0625, 1.1875, 0.96875, 464.0, 1e6, -500.0, 2.0 ** -10, 3 * 2.0 ** -10])) == \
        [1.0, 1.25, 1.0, 448.0, 448.0, -448.0, 0.0, 2 * 2.0 ** -9]
    pos = np.unique(finite[finite >= 0])  # 0 .. 448, 127 values
    gap = pos[1:] - pos[:-1]
    assert len(pos) == 127 and np.array_equal(round_e4m3_np(pos[:-1] + gap * 0.51), pos[1:])  # past midpoints
    assert np.array_equal(round_e4m3_np(pos[:-1] + gap * 0.49), pos[:-1])
    # Prefix slots 1 and 2 (bytes 1.0 and 0.5 everywhere), one draft row masked out: the weights of
    # the two keys, exp(0) and exp(-d), with d the logit gap; "fp8" rounds the second and q.
    kv = np.zeros((3, 1, 576), np.uint8)
    kv[1], kv[2] = 0x38, 0x30  # 1.0, 0.5
    q = np.full((1, 1, 576), 1.0625 / 576)  # not an e4m3 value: rounds to 1/576's neighbour
    ke = np.zeros((1, 1, 576))
    args = (q, ke, kv, [0, 1], [0, 2], np.array([1, 2]), np.array([1, 1, 0], np.uint8), [0, 3])
    for numerics in (None, "dequant", "fp8"):
        o, lse = reference_loops(*args, sm_scale=2.0, k_scale=0.5, v_scale=3.0, fp8_numerics=numerics)
        qd = q[0, 0] if numerics != "fp8" else round_e4m3_np(q[0, 0])
        s1, s2 = 2.0 * 0.5 * qd.sum(), 2.0 * 0.5 * 0.5 * qd.sum()
        w2 = math.exp(s2 - s1)
        w2v = float(round_e4m3_np(w2)) if numerics == "fp8" else w2
        assert np.allclose(o[0, 0], 3.0 * (1.0 + 0.5 * w2v) / (1 + w2)), numerics
        assert np.isclose(lse[0, 0], s1 + math.log(1 + w2)), numerics
        if numerics == "fp8":
            assert w2v != w2 and not np.array_equal(qd, q[0, 0])  # both roundings were exercised


if __name__ == "__main__":
    self_test()
    print("mla_reference_torch self-test: OK")
