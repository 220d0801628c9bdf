"""fp8 e4m3 KV cache cases for tests/gpu/client_torch.py (SGLang's --kv-cache-dtype fp8_e4m3;
KERNEL.md "FP8"), on client_cases' Case and helpers.

- check_reference(): the fp8 reference's parts on the GPU (torch's e4m3 decoding and rounding
  against the format's, reference() against reference_loops() with both numerics).
- make_fp8_kv_cache(): k_buffer as SGLang stores it, K / k_scale rounded to e4m3 (float8_e4m3fn),
  K ~ N(0, 1): one cache for every case, whose k_scale (0.5) and v_scale (2) then scale it back.
- run_modes(): every case through every launch mode with both numerics, o NaN-poisoned first,
  against the float64 reference of the decoded cache (mla_reference_torch): "dequant" within the
  bf16 bound (4e-3) and lse tolerance; "fp8" within FP8_FROB_BOUND, no worse than 1.25 x the
  emulated Triton numerics' own error (+5e-3), lse against the emulation; o bitwise equal across
  the modes, and the cache passed as its uint8 bytes bitwise equal to the float8_e4m3fn view.
- run_refusals(): what verify_attention refuses for a cache (INVALID_ARGUMENT or Unsupported),
  with o untouched.
- run_triton(): kjit's error against SGLang's Triton kernel's on the same fp8 cache.

Imports no torch at module level: client_cases.py's CPU self-test runs self_test().
"""
import numpy as np

from client_cases import KV_SLOTS, NINE, Case, build_index, call_args, call_kwargs, make_tensors, poison
from mla_reference_torch import (E4M3_MMA_ACCUMULATION, FP8_FROB_BOUND, FP8_LSE_ATOL, FROB_BOUND, compare,
                                 decode_e4m3, e4m3_values, reference, reference_loops, rel_frob, round_e4m3,
                                 score_abs)

K_SCALE, V_SCALE = 0.5, 2.0
NUMERICS = ("dequant", "fp8")
# Against the emulation's own error: kjit rounds the weights relative to its running (per split) row
# maximum, the emulation relative to the final one, so their rounding errors differ but not in size.
FP8_VS_EMULATION = 1.25
FP8_VS_EMULATION_SLACK = 5e-3

FP8_CASES = (
    Case("fp8_b3_h8_p4k", 8, (4097, 0, 700), (16, 5, 33), seed=80, k_scale=K_SCALE, v_scale=V_SCALE),
    Case("fp8_b2_h64_p16k_random_lse", 64, (16384, 37), (16, 64), seed=81, tree="random", mask_dtype="uint8",
         qo_dtype="int64", k_scale=K_SCALE, v_scale=V_SCALE, lse=True),
    Case("fp8_b1_h8_p70k_d8", 8, (NINE[-1],), (8,), seed=82, kv_dtype="int64", k_scale=K_SCALE, v_scale=V_SCALE,
         max_prefix=True),
    Case("fp8_b4_h128_empty_rows_vcopy", 128, (0, 1, 63, 1000), (1, 64, 7, 16), seed=83, empty_rows=True,
         is_causal=False, v_copy=True, k_scale=K_SCALE, v_scale=V_SCALE, lse=True),
    Case("fp8_b2_h16_contiguous_unit_scales", 16, (5000, 3), (4, 9), seed=84, scattered=False),
)


def make_fp8_kv_cache(num_slots, seed, k_scale=K_SCALE, device="cuda"):
    """k_buffer [S, 1, 576] float8_e4m3fn: N(0, 1) / k_scale, clamped to +-448 and rounded (torch's
    conversion rounds to nearest even; beyond 448 it would give NaN, hence the clamp)."""
    import torch

    g = torch.Generator(device=device).manual_seed(seed)
    k = torch.randn(num_slots, 1, 576, generator=g, device=device) / k_scale
    return k.clamp(-448.0, 448.0).to(torch.float8_e4m3fn)


def check_reference(checks, kv8):
    """torch's float8_e4m3fn decoding against e4m3_values() for all 256 codes; round_e4m3 against
    torch's conversion of clamped float32 values; reference() against reference_loops() with both
    numerics on a small case, in 2-slot chunks, with a slot >= S."""
    import torch

    codes = torch.arange(256, dtype=torch.int32, device="cuda").to(torch.uint8)
    got, want = decode_e4m3(codes).cpu().numpy(), e4m3_values()
    nan = np.isnan(want)
    same = np.array_equal(np.isnan(got), nan) and np.array_equal(got[~nan], want[~nan])
    checks.record(same, "fp8 reference: torch's float8_e4m3fn values are the format's 256")
    g = torch.Generator(device="cuda").manual_seed(9)
    x = torch.randn(1 << 20, generator=g, device="cuda")
    x = (x * torch.exp2(torch.randint(-14, 10, x.shape, generator=g, device="cuda").float())).clamp(-448.0, 448.0)
    mine, theirs = round_e4m3(x), x.to(torch.float8_e4m3fn).double()
    checks.record(torch.equal(mine, theirs), "fp8 reference: round_e4m3 is torch's rounding (nearest even), 1M values",
                  f"{int((mine != theirs).sum())} differ")
    case = Case("fp8_ref_noncausal", 8, (0, 5, 40), (3, 4, 6), seed=87, tree="random", is_causal=False,
                k_scale=K_SCALE, v_scale=V_SCALE, empty_rows=True)
    slots = 1024  # the loops get kv8[:slots]; the entry set >= S below is >= S for both
    t = make_tensors(case, build_index(case, slots))
    t.kv_indices[2] = kv8.shape[0] + 3
    from client_cases import SM_SCALE

    opts = dict(sm_scale=SM_SCALE, k_scale=case.k_scale, v_scale=case.v_scale, is_causal=case.is_causal)
    host = [a.cpu().double().numpy() if a.dtype == torch.bfloat16 else a.cpu().numpy()
            for a in (t.q, t.k_extend, kv8[:slots].view(torch.uint8), t.qo_indptr, t.kv_indptr, t.kv_indices,
                      t.custom_mask, t.mask_indptr)]
    for numerics in NUMERICS:
        o, lse, _ = reference(t.q, t.k_extend, kv8, t.qo_indptr, t.kv_indptr, t.kv_indices, t.custom_mask,
                              t.mask_indptr, fp8_numerics=numerics, chunk_elems=2 * case.heads * max(case.draft),
                              **opts)
        o2, lse2 = reference_loops(*host, fp8_numerics=numerics, **opts)
        err = float(np.abs(o.cpu().numpy() - o2).max())
        same_lse = np.allclose(lse.cpu().numpy(), lse2, rtol=0, atol=1e-9)  # -inf where both are
        checks.record(err < 1e-9 and same_lse, f"fp8 reference vs loops, {numerics}", f"max |diff| {err:.1e}")


def fp8_reference_of(t, case, kv8, fp8_numerics=None):
    """reference() of the case on the fp8 cache: exact on the decoded values, or ("fp8") emulating
    SGLang Triton's numerics."""
    from client_cases import SM_SCALE

    return reference(t.q, t.k_extend, kv8, t.qo_indptr, t.kv_indptr, t.kv_indices, t.custom_mask, t.mask_indptr,
                     sm_scale=SM_SCALE, k_scale=case.k_scale, v_scale=case.v_scale, is_causal=case.is_causal,
                     fp8_numerics=fp8_numerics)


def launch(t, case, kv8, client, fp8_numerics, **over):
    """verify_attention on t with the fp8 cache kv8 (either view) and v_buffer its first 512 dims."""
    import kjit

    kjit.verify_attention(*call_args(t, case, kv8, kv8[..., :512]), **{**call_kwargs(t, case), **over},
                          fp8_numerics=fp8_numerics, client=client)


def fp8_lse_atol(t, case, kv8):
    """lse's tolerance against the emulation: FP8_LSE_ATOL, and on sm_90 (fp8 numerics on e4m3
    MMAs) E4M3_MMA_ACCUMULATION of each row's score_abs more."""
    import torch

    from client_cases import SM_SCALE

    if torch.cuda.get_device_capability(t.q.device)[0] != 9:
        return FP8_LSE_ATOL
    return FP8_LSE_ATOL + E4M3_MMA_ACCUMULATION * score_abs(t.q, kv8, t.qo_indptr, t.kv_indptr, t.kv_indices,
                                                            sm_scale=SM_SCALE, k_scale=case.k_scale)


def check_output(t, numerics, exact, emulated, emulation_err, fp8_lse_tol):
    """(ok, detail) of t.o (and t.lse) for one numerics; fp8_lse_tol: fp8_lse_atol()'s."""
    if numerics == "dequant":
        return compare(t.o, exact, lse=t.lse)
    ok, detail = compare(t.o, exact, bound=FP8_FROB_BOUND)
    err = rel_frob(t.o, exact[0])
    limit = FP8_VS_EMULATION * emulation_err + FP8_VS_EMULATION_SLACK
    ok = ok and err <= limit
    detail += f"; emulated Triton numerics {emulation_err:.2e}, limit {limit:.2e}"
    if t.lse is not None:  # the scores are the emulation's (q rounded alike): lse follows it
        lse_ok, lse_detail = compare(t.o, emulated, lse=t.lse, bound=FP8_FROB_BOUND, lse_atol=fp8_lse_tol)
        ok = ok and lse_ok
        detail += f"; against the emulation: {lse_detail}"
    return ok, detail


def run_modes(checks, clients, kv8, checked_here):
    """Every FP8_CASES case, both numerics, every client of `clients` (label -> kjit.Client);
    `checked_here`: the labels whose kernel errors come from kjit.check_errors."""
    import kjit
    import torch

    checks.note(f"fp8 cache: {kv8.shape[0]} slots, K / {K_SCALE} in e4m3; fp8 bound {FP8_FROB_BOUND:.2g}")
    for case in FP8_CASES:
        with checks.guard(f"{case.name} setup"):
            t = make_tensors(case, build_index(case, kv8.shape[0]))
            exact = fp8_reference_of(t, case, kv8)
            emulated = fp8_reference_of(t, case, kv8, "fp8")
            emulation_err = rel_frob(emulated[0].to(torch.bfloat16), exact[0])
            lse_atol = fp8_lse_atol(t, case, kv8)
            for numerics in NUMERICS:
                outs = {}
                for label, client in clients.items():
                    name = f"{case.name} {numerics} [{label}]"
                    with checks.guard(name):
                        poison(t)
                        launch(t, case, kv8, client, numerics)
                        if label in checked_here:
                            kjit.check_errors(client=client)
                        torch.cuda.synchronize()
                        ok, detail = check_output(t, numerics, exact, emulated, emulation_err, lse_atol)
                        checks.record(ok, name, detail)
                        outs[label] = t.o.clone()
                first = next(iter(outs.values()), None)
                differ = [m for m, o in outs.items() if not torch.equal(o.view(torch.int16), first.view(torch.int16))]
                checks.record(not differ and len(outs) == len(clients),
                              f"{case.name} {numerics} bitwise equal across modes",
                              f"{len(outs)} modes ran; differ from {next(iter(outs), '-')}: {differ or 'none'}")
                label = next((m for m in checked_here if m in outs), None)
                if label is None:
                    continue
                name = f"{case.name} {numerics} [{label}]: the cache as uint8 bytes, bitwise equal"
                with checks.guard(name):
                    poison(t)
                    launch(t, case, kv8.view(torch.uint8), clients[label], numerics)
                    kjit.check_errors(client=clients[label])
                    same = torch.equal(t.o.view(torch.int16), outs[label].view(torch.int16))
                    checks.record(same, name, "equal" if same else "DIFFERENT")
            del t, exact, emulated


def run_refusals(checks, client, kv8):
    """fp8_numerics the cache cannot take is INVALID_ARGUMENT (not a fallback); a cache kjit does
    not read is Unsupported; nothing is written either way."""
    import kjit
    import torch

    case = Case("fp8_refusals", 8, (50, 9), (4, 6), seed=85, k_scale=K_SCALE, v_scale=V_SCALE)
    t = make_tensors(case, build_index(case, 4096))
    kv8 = kv8[:4096]
    bf16 = kv8.to(torch.bfloat16)  # exact: every e4m3 value is a bf16 value
    variants = [("fp8_numerics='fp8' with a bf16 cache", bf16, "fp8", 3, "applies to an fp8 cache"),
                ("fp8_numerics='e4m3'", kv8, "e4m3", 3, "use 'dequant'")]
    if hasattr(torch, "float8_e5m2"):
        variants.append(("float8_e5m2 k_buffer", kv8.float().to(torch.float8_e5m2), "dequant", 12, "k_buffer in"))
    for what, cache, numerics, code, needle in variants:
        name = f"refused: {what}"
        with checks.guard(name):
            t.o.view(torch.int16).fill_(0x1234)
            before = t.o.clone()
            torch.cuda.synchronize()
            try:
                launch(t, case, cache, client, numerics)
                got = "returned"
            except kjit.Error as e:
                got = e
            torch.cuda.synchronize()
            untouched = torch.equal(t.o.view(torch.int16), before.view(torch.int16))
            ok = (isinstance(got, kjit.Error) and got.code == code and needle in got.message and untouched and
                  isinstance(got, kjit.Unsupported) == (code == 12))
            checks.record(ok, name, f"{got!r}, o {'untouched' if untouched else 'WRITTEN'}")


def run_triton(checks, triton_fn, client, kv8):
    """kjit (both numerics) and SGLang's Triton kernel on the same fp8 cache, against the float64
    reference of the decoded cache: KERNEL.md has each numerics no less accurate than Triton's."""
    import torch

    for case in (FP8_CASES[0], Case("fp8_triton_b1_h64_p16k", 64, (16384,), (16,), seed=86, k_scale=K_SCALE,
                                    v_scale=V_SCALE)):
        name = f"{case.name} kjit vs Triton, fp8 cache"
        with checks.guard(name):
            t = make_tensors(case, build_index(case, kv8.shape[0]))
            exact = fp8_reference_of(t, case, kv8)
            o_t = torch.full_like(t.o, float("nan"))
            args = list(call_args(t, case, kv8, kv8[..., :512]))
            args[3] = o_t
            try:
                triton_fn(*args)
                torch.cuda.synchronize()
            except Exception as e:  # noqa: BLE001 - a Triton without fp8 support is no kjit failure
                checks.skip(name, f"Triton's kernel refused the fp8 cache: {type(e).__name__}: {e}")
                continue
            err_t = rel_frob(o_t, exact[0])
            errs = {}
            for numerics in NUMERICS:
                poison(t)
                launch(t, case, kv8, client, numerics)
                torch.cuda.synchronize()
                errs[numerics] = rel_frob(t.o, exact[0])
            ok = (errs["dequant"] <= max(err_t, FROB_BOUND) and
                  errs["fp8"] <= FP8_VS_EMULATION * err_t + FP8_VS_EMULATION_SLACK)
            checks.record(ok, name, f"Triton {err_t:.2e}; kjit dequant {errs['dequant']:.2e}, fp8 {errs['fp8']:.2e}")


def self_test():
    """What the CPU can check: the cases are valid and distinct, fit the cache, cover both scales
    and the shapes the bf16 cases do; the decoded values the cache draws from are finite."""
    assert len({c.name for c in FP8_CASES}) == len(FP8_CASES)
    for case in FP8_CASES:
        ix = build_index(case, KV_SLOTS)
        assert ix["qo_indptr"][-1] == case.n and ix["kv_indptr"][-1] == sum(case.prefix), case.name
        assert ix["kv_indices"].max(initial=1) < KV_SLOTS, case.name
    assert sum(c.k_scale == K_SCALE and c.v_scale == V_SCALE for c in FP8_CASES) >= 3
    assert any(c.k_scale == 1 and c.v_scale == 1 for c in FP8_CASES)
    assert {8, 16, 64, 128} <= {c.heads for c in FP8_CASES}
    assert {1, 64} <= {d for c in FP8_CASES for d in c.draft} and max(p for c in FP8_CASES for p in c.prefix) >= 65536
    assert any(c.lse for c in FP8_CASES) and any(c.empty_rows for c in FP8_CASES)
    # N(0, 1) / k_scale stays far inside e4m3's range: the clamp at 448 is there for torch's
    # conversion (NaN past 464), never for these values.
    v = e4m3_values()
    assert np.nanmax(np.abs(v)) == 448.0 and 448.0 * K_SCALE > 100
    assert FROB_BOUND < FP8_FROB_BOUND
