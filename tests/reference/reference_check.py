#!/usr/bin/env python3
"""Independent numpy implementation of the MLA verify contract (shared/design KERNEL.md).

Reads every golden bundle (*.kjg) in a directory, checks its SHA-256, recomputes o and lse from the
inputs with numpy (float64, vectorized differently from the C++ reference), and requires agreement
with the stored C++ output to 1e-12. Exits non-zero on any disagreement.

Version 2 bundles may hold an fp8 e4m3 cache (kv_cache_fp8) and the fp8 numerics; the e4m3 values
here come from walking the codes in order (the step doubles at every power of two from 2^-6 up), and
rounding is a nearest-neighbour search among them, not the C++ side's exponent/mantissa arithmetic.
"""
import hashlib
import pathlib
import struct
import sys

import numpy as np

DTYPES = {"H": "<u2", "i": "<i4", "q": "<i8", "B": "u1", "I": "<u4", "d": "<f8"}
KDIM, VDIM = 576, 512


def e4m3_positive_values():
    """The values of codes 0x00..0x7e in order: 0, then steps of 2^-9, the step doubling each time
    the value reaches 16 steps (2^-5, 2^-4, ...), up to 448."""
    values, v, step = [], 0.0, 2.0 ** -9
    for _ in range(127):
        values.append(v)
        v += step
        if v >= 16 * step:
            step *= 2
    return np.array(values)


E4M3_POS = e4m3_positive_values()
assert E4M3_POS[0x38] == 1.0 and E4M3_POS[0x7e] == 448.0 and E4M3_POS[0x08] == 2.0 ** -6


def e4m3_decode(codes):
    mag = E4M3_POS[np.minimum(codes & 0x7F, 0x7E)]
    mag = np.where((codes & 0x7F) == 0x7F, np.nan, mag)
    return np.where(codes & 0x80, -mag, mag)


def e4m3_round(x):
    """Nearest e4m3 value, ties to the even code (even mantissa), saturating at +-448."""
    a = np.minimum(np.abs(x), 448.0)
    hi = np.minimum(np.searchsorted(E4M3_POS, a, side="left"), len(E4M3_POS) - 1)
    lo = np.maximum(hi - 1, 0)
    d_lo, d_hi = a - E4M3_POS[lo], E4M3_POS[hi] - a
    take_hi = (d_hi < d_lo) | ((d_hi == d_lo) & (hi % 2 == 0))
    return np.copysign(np.where(take_hi, E4M3_POS[hi], E4M3_POS[lo]), x)


def read_bundle(path):
    data = path.read_bytes()
    body, digest = data[:-32], data[-32:]
    if hashlib.sha256(body).digest() != digest:
        raise ValueError(f"{path}: SHA-256 mismatch")
    if body[:8] != b"KJITGOLD":
        raise ValueError(f"{path}: bad magic")
    version, header_len = struct.unpack_from("<II", body, 8)
    if version not in (1, 2):
        raise ValueError(f"{path}: version {version}")
    pos = 16
    header = {}
    for line in body[pos:pos + header_len].decode().splitlines():
        key, _, value = line.partition("=")
        header[key] = value
    pos += header_len
    (count,) = struct.unpack_from("<I", body, pos)
    pos += 4
    arrays = {}
    for _ in range(count):
        (name_len,) = struct.unpack_from("<H", body, pos)
        pos += 2
        name = body[pos:pos + name_len].decode()
        pos += name_len
        dtype = np.dtype(DTYPES[chr(body[pos])])
        (n,) = struct.unpack_from("<Q", body, pos + 1)
        pos += 9
        arrays[name] = np.frombuffer(body, dtype=dtype, count=n, offset=pos)
        pos += n * dtype.itemsize
    if pos != len(body):
        raise ValueError(f"{path}: trailing bytes")
    return header, arrays


def bf16(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def tree_mask(header, a, b, p, d):
    """[d, d] bool: tree column c allowed for draft row r (before the causal rule)."""
    if int(header["mask_kind"]) == 0:
        start = int(a["mask_indptr"][b])
        rows = a["mask_bool"][start:start + d * (p + d)].reshape(d, p + d)
        return rows[:, p:] != 0
    qo = a["qo_indptr"]
    word0 = sum(int(qo[i + 1] - qo[i]) * ((int(qo[i + 1] - qo[i]) + 31) // 32) for i in range(b))
    words = (d + 31) // 32
    w = a["mask_packed"][word0:word0 + d * words].reshape(d, words).astype(np.uint64)
    cols = np.arange(d)
    return ((w[:, cols // 32] >> (cols % 32).astype(np.uint64)) & 1) != 0


def reference(header, a):
    h = int(header["num_heads"])
    n = int(header["num_q"])
    slots = int(header["num_slots"])
    sm = float.fromhex(header["sm_scale"])
    ks = float.fromhex(header["k_scale"])
    vs = float.fromhex(header["v_scale"])
    causal = header["is_causal"] == "1"
    fp8_cache = header.get("kv_dtype", "0") == "1"
    fp8_math = fp8_cache and header.get("fp8_numerics", "0") == "1"
    q = bf16(a["q"]).reshape(n, h, KDIM)
    kext = bf16(a["k_extend"]).reshape(n, KDIM)
    if fp8_cache:
        cache = e4m3_decode(a["kv_cache_fp8"]).reshape(slots, KDIM)
    else:
        cache = bf16(a["kv_cache"]).reshape(slots, KDIM)
    qo, kvp = a["qo_indptr"], a["kv_indptr"]
    o = np.zeros((n, h, VDIM))
    lse = np.full((n, h), -np.inf)
    for b in range(int(header["batch"])):
        r0, d = int(qo[b]), int(qo[b + 1] - qo[b])
        p = int(kvp[b + 1] - kvp[b])
        idx = a["kv_indices"][kvp[b]:kvp[b + 1]]
        pk = cache[idx[(idx >= 0) & (idx < slots)]]                      # [P', 576]
        allowed = tree_mask(header, a, b, p, d)
        if causal:
            allowed &= np.tril(np.ones((d, d), dtype=bool))
        qb = q[r0:r0 + d]                                                # [d, h, 576]
        q_pre = e4m3_round(qb) if fp8_math else qb                       # fp8 numerics: q in e4m3
        s_pre = sm * ks * np.einsum("rhk,jk->rhj", q_pre, pk)            # [d, h, P']
        s_tree = sm * np.einsum("rhk,ck->rhc", qb, kext[r0:r0 + d])      # [d, h, d]
        s_tree = np.where(allowed[:, None, :], s_tree, -np.inf)
        s = np.concatenate([s_pre, s_tree], axis=2)
        v = np.concatenate([vs * pk[:, :VDIM], kext[r0:r0 + d, :VDIM]], axis=0)
        m = s.max(axis=2, initial=-np.inf, keepdims=True)
        empty = np.isneginf(m)
        w = np.exp(s - np.where(empty, 0.0, m))
        denom = w.sum(axis=2, keepdims=True)                             # unrounded weights
        if fp8_math:                                                     # prefix weights in e4m3
            w = np.concatenate([e4m3_round(w[..., :len(pk)]), w[..., len(pk):]], axis=2)
        out = np.einsum("rhj,jv->rhv", w, v) / np.where(empty, 1.0, denom)
        o[r0:r0 + d] = np.where(empty, 0.0, out)
        with np.errstate(divide="ignore"):
            lse[r0:r0 + d] = np.where(empty[..., 0], -np.inf, (m + np.log(denom))[..., 0])
    return o, lse


def main():
    directory = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).parent / "golden")
    bundles = sorted(directory.glob("*.kjg"))
    if not bundles:
        print(f"no golden bundles in {directory}")
        return 1
    failures = 0
    for path in bundles:
        header, a = read_bundle(path)
        o, lse = reference(header, a)
        want_o = a["o"].reshape(o.shape)
        want_lse = a["lse"].reshape(lse.shape)
        err_o = np.max(np.abs(o - want_o) / np.maximum(1.0, np.abs(want_o)), initial=0.0)
        same_inf = np.array_equal(np.isneginf(lse), np.isneginf(want_lse))
        fin = np.isfinite(want_lse)
        err_lse = np.max(np.abs(lse[fin] - want_lse[fin]) / np.maximum(1.0, np.abs(want_lse[fin])), initial=0.0)
        ok = err_o <= 1e-12 and err_lse <= 1e-12 and same_inf and np.all(np.isfinite(o))
        failures += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {path.name}: max rel err o {err_o:.3e}, lse {err_lse:.3e}, "
              f"empty rows agree {same_inf}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
