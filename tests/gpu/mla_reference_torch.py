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

Only the torch functions import torch, so the module imports on a machine without it.
"""
import math

import numpy as np

QK_DIM, V_DIM = 576, 512
FROB_BOUND = 4e-3                      # KERNEL.md: relative Frobenius error against float64
LSE_ATOL, LSE_RTOL = 1e-3, 1e-5        # tests/reference/mla_reference.h's lse tolerance


def reference(q, k_extend, kv_cache, qo_indptr, kv_indptr, kv_indices, custom_mask, mask_indptr, *,
              sm_scale, k_scale=1.0, v_scale=1.0, is_causal=True, chunk_elems=1 << 25, max_chunk=1 << 16):
    """(o [N, H, 512], lse [N, H], empty [N, H] bool), float64 on q's device.

    Per request b, draft row r, head h: the logits are sm_scale * k_scale * <q, K_j> over the prefix
    slots kv_indices[kv_indptr[b]:kv_indptr[b+1]] and sm_scale * <q, k_extend[c]> over the tree
    columns c the mask allows (only the last D_b columns of each mask row are read; with is_causal
    also c <= r). o = softmax · V, V the first 512 values of the same rows, prefix values times
    v_scale. lse is the natural log-sum-exp of the logits; a row that attends to nothing has o = 0
    and lse = -inf (empty = True)."""
    import torch

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
        kt = k_extend[r0:r1, 0].double()
        allowed = custom_mask[mip[b]:mip[b] + d * (p + d)].view(d, p + d)[:, p:] != 0
        if is_causal:
            allowed = allowed & torch.ones(d, d, dtype=torch.bool, device=dev).tril()
        st = torch.einsum("rhk,ck->rhc", qb, kt) * sm_scale
        st = st.masked_fill(~allowed[:, None, :], float("-inf"))
        step = max(1, min(max_chunk, chunk_elems // (d * h)))
        chunks = [(j, min(j + step, slots.numel())) for j in range(0, slots.numel(), step)]

        def prefix_logits(j0, j1):
            kc = kv_cache[slots[j0:j1], 0].double()
            return torch.einsum("rhk,ck->rhc", qb, kc) * prefix_scale, kc

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
            total = total + w.sum(-1)
            acc = acc + torch.einsum("rhc,cv->rhv", w, kc[:, :V_DIM]) * v_scale
        attended = total > 0
        o[r0:r1] = torch.where(attended[..., None], acc / total.clamp_min(1e-300)[..., None], torch.zeros_like(acc))
        lse[r0:r1] = torch.where(attended, m0 + torch.log(total.clamp_min(1e-300)), torch.full_like(m0, float("-inf")))
        empty[r0:r1] = ~attended
    return o, lse, empty


def reference_loops(q, k_extend, kv_cache, qo_indptr, kv_indptr, kv_indices, custom_mask, mask_indptr, *,
                    sm_scale, k_scale=1.0, v_scale=1.0, is_causal=True):
    """reference() again with numpy float64 arrays and explicit loops (small cases only)."""
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
            keys, scales, vscales = [], [], []
            for j in range(p):
                slot = int(kv_indices[int(kv_indptr[b]) + j])
                if 0 <= slot < kv_cache.shape[0]:
                    keys.append(kv_cache[slot, 0])
                    scales.append(sm_scale * k_scale)
                    vscales.append(v_scale)
            for c in range(d):
                if custom_mask[base + r * (p + d) + p + c] and (c <= r or not is_causal):
                    keys.append(k_extend[int(qo_indptr[b]) + c, 0])
                    scales.append(sm_scale)
                    vscales.append(1.0)
            if not keys:
                continue
            for hh in range(h):
                s = [sc * float(np.dot(q[row, hh], k)) for sc, k in zip(scales, keys)]
                top = max(s)
                w = [math.exp(x - top) for x in s]
                o[row, hh] = sum(wi * vs * k[:V_DIM] for wi, vs, k in zip(w, vscales, keys)) / sum(w)
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


def compare(o, ref, *, lse=None, bound=FROB_BOUND):
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
    detail = f"rel_frob {err:.2e} (bound {bound:.0e}), {worst(o, want_o)}"
    if bool(empty.any()):
        nonzero = int((of[empty] != 0).sum())
        detail += f"; {int(empty.sum())} empty row-heads, {nonzero} nonzero elements there"
        ok = ok and nonzero == 0
    if lse is not None:
        lf = lse.double()
        fin = ~empty
        lse_err = (lf[fin] - want_lse[fin]).abs()
        tol = LSE_ATOL + LSE_RTOL * want_lse[fin].abs()
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


if __name__ == "__main__":
    self_test()
    print("mla_reference_torch self-test: OK")
