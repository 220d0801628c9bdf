"""Cases and helpers shared by tests/gpu/client_torch.py and bench/client_bench/client_bench.py.

- Case: one verify call's shape and options; build_index() makes its index structures with numpy
  (fixed seeds): scattered or contiguous slots, random trees, bytes in the unread prefix columns of
  the mask, rows that attend to nothing.
- make_tensors() and call_args(): the torch tensors on the GPU (N(0,1) values rounded to bf16) and
  the positional arguments of kjit.verify_attention / SGLang's extend_attention_fwd.
- Checks: the PASS / FAIL / SKIPPED lines and the summary.
- load_sglang_triton(): SGLang's Triton extend_attention_fwd from a folder holding its
  extend_attention.py and prefill_attention.py, with stand-ins for the modules they import.
- The fp8 e4m3 cache's cases and checks are client_fp8_cases.py's, on these helpers.

Imports no torch at module level: `python3 tests/gpu/client_cases.py` tests what the CPU can.
"""
import contextlib
import dataclasses
import importlib
import importlib.util
import os
import sys
import tempfile
import traceback
import types

import numpy as np

SM_SCALE = 0.14467963  # Kimi K2.5 / K2.6
MAX_DRAFT = 64
DEVICE = "cuda"  # where the tensors go (a CPU dry run of the scripts' plumbing sets "cpu")


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    heads: int
    prefix: tuple           # P_b
    draft: tuple            # D_b, 1..64
    seed: int = 1
    tree: str = "tree"      # tree (a node and its ancestors) | chain | random (any bits) | empty
    empty_rows: bool = False  # requests with P_b = 0: every third draft row's mask is all zero
    is_causal: bool = True
    mask_dtype: str = "bool"  # or "uint8"
    qo_dtype: str = "int32"
    kv_dtype: str = "int32"
    scattered: bool = True
    k_scale: float = 1.0
    v_scale: float = 1.0
    v_copy: bool = False    # v_extend a copy of k_extend[..., :512] instead of the view
    lse: bool = False
    max_prefix: bool = False  # pass max_prefix = max P_b

    @property
    def n(self):
        return sum(self.draft)

    def describe(self):
        opts = [f"B{len(self.prefix)} H{self.heads} P{max(self.prefix)} D{max(self.draft)}", self.tree,
                self.mask_dtype, f"qo {self.qo_dtype}", f"kv {self.kv_dtype}",
                "scattered" if self.scattered else "contiguous", "causal" if self.is_causal else "non-causal"]
        if self.k_scale != 1 or self.v_scale != 1:
            opts.append(f"k_scale {self.k_scale} v_scale {self.v_scale}")
        opts += [x for x, on in (("v copy", self.v_copy), ("empty rows", self.empty_rows), ("lse", self.lse),
                                 ("max_prefix", self.max_prefix)) if on]
        return ", ".join(opts)


NINE = (0, 1, 37, 1000, 4097, 16384, 33000, 50000, 70000)

# Every launch mode runs these against the float64 reference. One k_buffer of KV_SLOTS rows holds
# every case's prefix; the long prefixes are in a few cases with few heads.
KV_SLOTS = 1 << 18
MODE_CASES = (
    Case("b9_h8_p70k", 8, NINE, (3, 1, 64, 17, 63, 8, 2, 33, 16), seed=11),
    Case("b9_h16_p70k_uint8_i64", 16, NINE, (1, 2, 4, 8, 16, 32, 63, 64, 5), seed=12, tree="random",
         mask_dtype="uint8", qo_dtype="int64", kv_dtype="int64", k_scale=0.625, v_scale=1.5),
    Case("b4_h128_p16k", 128, (0, 37, 4097, 16384), (4, 64, 1, 16), seed=13, v_copy=True),
    Case("b8_h8_p16k_each", 8, (16384,) * 8, (16,) * 8, seed=14, max_prefix=True),
    Case("b1_h8_p0_d1", 8, (0,), (1,), seed=15),
    Case("b1_h8_p1_d64", 8, (1,), (64,), seed=16, tree="chain"),
    Case("b1_h16_p0_d63_nothing", 16, (0,), (63,), seed=17, tree="empty", is_causal=False, lse=True),
    Case("b3_h64_empty_rows_noncausal", 64, (0, 0, 100), (7, 64, 3), seed=18, tree="random", empty_rows=True,
         is_causal=False, lse=True),
    Case("b2_h8_empty_rows_causal", 8, (0, 5), (40, 9), seed=19, empty_rows=True, mask_dtype="uint8"),
    Case("b1_h128_p1000_d64_uint8", 128, (1000,), (64,), seed=20, mask_dtype="uint8", v_copy=True),
    Case("b2_h8_contiguous", 8, (4097, 300), (16, 16), seed=21, scattered=False),
    Case("b2_h32_scales_vcopy", 32, (777, 2048), (9, 33), seed=22, k_scale=0.5, v_scale=2.0, v_copy=True),
    Case("b1_h64_p33000_d16_i64", 64, (33000,), (16,), seed=23, qo_dtype="int64"),
    Case("b5_h16_causal_random_bits", 16, (10, 0, 500, 63, 64), (64, 1, 31, 2, 63), seed=24, tree="random"),
    Case("b3_h8_noncausal_random", 8, (129, 1, 0), (40, 64, 12), seed=25, tree="random", is_causal=False),
    Case("b1_h8_p70000_d1_kscale", 8, (70000,), (1,), seed=26, k_scale=0.75, kv_dtype="int64"),
    Case("b2_h128_d63_uint8_i64", 128, (63, 1), (63, 63), seed=27, mask_dtype="uint8", qo_dtype="int64"),
    Case("b6_h64_small", 64, (0, 1, 2, 3, 4, 5), (1, 2, 3, 4, 5, 6), seed=28, lse=True),
    Case("b1_h16_p1_d1", 16, (1,), (1,), seed=29),
    Case("b4_h8_chain_lse", 8, (1000, 2000, 3000, 4000), (8, 16, 24, 32), seed=30, tree="chain", lse=True),
    Case("b1_h32_p50000_d64_vcopy", 32, (50000,), (64,), seed=31, v_copy=True, max_prefix=True),
    Case("b3_h16_contiguous_i64_vcopy", 16, (5, 6000, 1), (2, 16, 64), seed=32, scattered=False,
         qo_dtype="int64", kv_dtype="int64", v_copy=True, k_scale=1.25, v_scale=0.5),
)


def tree_mask(kind, d, rng):
    """The D x D tree part of one request's mask (uint8 0/1; row r, column c)."""
    if kind == "chain":
        return np.tril(np.ones((d, d), np.uint8))
    if kind == "random":
        return rng.integers(0, 2, (d, d), dtype=np.uint8)
    if kind == "empty":
        return np.zeros((d, d), np.uint8)
    if kind != "tree":
        raise ValueError(f"tree kind {kind!r}")
    m = np.zeros((d, d), np.uint8)
    parent = [-1] + [int(rng.integers(0, r)) for r in range(1, d)]
    for r in range(d):
        a = r
        while a >= 0:  # a node attends itself and its ancestors
            m[r, a] = 1
            a = parent[a]
    return m


def build_index(case, num_slots):
    """numpy qo_indptr, kv_indptr, kv_indices (slots 1..num_slots-1; slot 0 is the dummy), the flat
    custom_mask (uint8: D_b x (P_b + D_b) per request, random bytes in the prefix columns, which
    are never read) and mask_indptr, from case.seed."""
    if len(case.prefix) != len(case.draft) or not case.prefix:
        raise ValueError(f"{case.name}: prefix and draft lengths differ")
    if not all(1 <= d <= MAX_DRAFT for d in case.draft):
        raise ValueError(f"{case.name}: a draft length outside 1..{MAX_DRAFT}")
    rng = np.random.default_rng(case.seed)
    total = sum(case.prefix)
    if total > num_slots - 1:
        raise ValueError(f"{case.name}: {total} prefix slots, the cache has {num_slots - 1}")
    if case.scattered:
        kv_indices = rng.permutation(num_slots - 1)[:total].astype(np.int64) + 1
    else:
        start = int(rng.integers(1, num_slots - total + 1))
        kv_indices = np.arange(start, start + total, dtype=np.int64)
    rows = []
    for p, d in zip(case.prefix, case.draft):
        m = np.empty((d, p + d), np.uint8)
        m[:, :p] = rng.integers(0, 256 if case.mask_dtype == "uint8" else 2, (d, p), dtype=np.uint8)
        m[:, p:] = tree_mask(case.tree, d, rng)
        if case.empty_rows and p == 0:
            m[0::3, p:] = 0
        rows.append(m.ravel())
    return {
        "qo_indptr": np.concatenate([[0], np.cumsum(case.draft)]).astype(np.int64),
        "kv_indptr": np.concatenate([[0], np.cumsum(case.prefix)]).astype(np.int64),
        "kv_indices": kv_indices,
        "custom_mask": np.concatenate(rows),
        "mask_indptr": np.concatenate([[0], np.cumsum([d * (p + d) for p, d in zip(case.prefix, case.draft)])])
        .astype(np.int64),
    }


def make_kv_cache(num_slots, seed, device=None):
    """k_buffer [S, 1, 576]: N(0, 1) rounded to bf16."""
    import torch

    device = device or DEVICE
    g = torch.Generator(device=device).manual_seed(seed)
    return torch.randn(num_slots, 1, 576, generator=g, device=device).to(torch.bfloat16)


def make_tensors(case, index, device=None, seed_offset=0):
    """The case's tensors on the GPU: q, k_extend, v_extend (a view or a copy), o and lse (left
    unset: poison() them), and the index structures in the case's dtypes."""
    import torch

    device = device or DEVICE
    g = torch.Generator(device=device).manual_seed(case.seed * 7919 + seed_offset)
    n, h = case.n, case.heads
    t = types.SimpleNamespace()
    t.q = torch.randn(n, h, 576, generator=g, device=device).to(torch.bfloat16)
    t.k_extend = torch.randn(n, 1, 576, generator=g, device=device).to(torch.bfloat16)
    t.v_extend = t.k_extend[..., :512].contiguous() if case.v_copy else t.k_extend[..., :512]
    t.o = torch.empty(n, h, 512, dtype=torch.bfloat16, device=device)
    t.lse = torch.empty(n, h, dtype=torch.float32, device=device) if case.lse else None
    t.qo_indptr = torch.from_numpy(index["qo_indptr"]).to(device=device, dtype=getattr(torch, case.qo_dtype))
    t.kv_indptr = torch.from_numpy(index["kv_indptr"]).to(device=device, dtype=getattr(torch, case.kv_dtype))
    t.kv_indices = torch.from_numpy(index["kv_indices"]).to(device)
    mask = torch.from_numpy(index["custom_mask"]).to(device)
    t.custom_mask = mask.bool() if case.mask_dtype == "bool" else mask
    t.mask_indptr = torch.from_numpy(index["mask_indptr"]).to(device)
    return t


def call_args(t, case, kv_cache, v_buffer):
    """verify_attention's positional arguments (SGLang's extend_attention_fwd order)."""
    return (t.q, t.k_extend, t.v_extend, t.o, kv_cache, v_buffer, t.qo_indptr, t.kv_indptr, t.kv_indices,
            t.custom_mask, case.is_causal, t.mask_indptr, max(case.draft), case.k_scale, case.v_scale, SM_SCALE)


def call_kwargs(t, case):
    return {"lse": t.lse, "max_prefix": max(case.prefix) if case.max_prefix else None}


def poison(t):
    """o = 0xffff (a bf16 NaN) everywhere, lse NaN: whatever the kernels leave unwritten shows."""
    import torch

    t.o.view(torch.int16).fill_(-1)
    if t.lse is not None:
        t.lse.fill_(float("nan"))


def reference_of(t, case, kv_cache):
    from mla_reference_torch import reference

    return reference(t.q, t.k_extend, kv_cache, t.qo_indptr, t.kv_indptr, t.kv_indices, t.custom_mask,
                     t.mask_indptr, sm_scale=SM_SCALE, k_scale=case.k_scale, v_scale=case.v_scale,
                     is_causal=case.is_causal)


class Checks:
    """One PASS / FAIL / SKIPPED line per check, printed as it is decided; summary() at the end."""

    def __init__(self, program):
        self.program = program
        self.lines = []
        self.passed = self.failed = self.skipped = 0

    def _emit(self, line):
        print(line, flush=True)
        self.lines.append(line)

    def section(self, title):
        self._emit(f"== {title}")

    def note(self, text):
        self._emit(f"   {text}")

    def record(self, ok, name, detail=""):
        ok = bool(ok)
        self._emit(f"{'PASS' if ok else 'FAIL'} {name}" + (f": {detail}" if detail else ""))
        if ok:
            self.passed += 1
        else:
            self.failed += 1
        return ok

    def skip(self, name, why):
        self._emit(f"SKIPPED {name}: {why}")
        self.skipped += 1

    @contextlib.contextmanager
    def guard(self, name):
        """An exception inside is that check's FAIL (with its traceback), and the run goes on."""
        try:
            yield
        except Exception as e:  # noqa: BLE001 - every failure is reported, none stops the run
            traceback.print_exc()
            self.record(False, name, f"raised {type(e).__name__}: {e}")

    def summary(self):
        return f"{self.program}: {self.passed} passed, {self.failed} failed, {self.skipped} skipped"


# ---- SGLang's Triton kernel, from the bundle --------------------------------------------------------

SGLANG_PACKAGES = ("sglang", "sglang.srt", "sglang.srt.layers", "sglang.srt.layers.attention",
                   "sglang.srt.layers.attention.triton_ops")
PREFILL_NAME = "sglang.srt.layers.attention.triton_ops.prefill_attention"
EXTEND_PRIVATE_NAME = "kjit_sglang_triton_extend_attention"  # never the stand-in tree's recorder


def _is_cuda():
    import torch

    return torch.cuda.is_available() and torch.version.cuda is not None


def _is_hip():
    import torch

    return getattr(torch.version, "hip", None) is not None


def _other_platform_probe(name):
    """sglang.srt.utils' other platform probes (is_npu, is_xpu, cpu_has_amx_support...): False."""
    if name.startswith("is_") or name.endswith("_support"):
        return lambda *args, **kwargs: False
    raise AttributeError(f"module 'sglang.srt.utils' (a stand-in) has no attribute {name!r}")


def _stand_in_package(name):
    """The module `name`: the one importable (the stand-in SGLang tree when it is on sys.path),
    else an empty package registered under that name."""
    if name in sys.modules:
        return sys.modules[name]
    try:
        return importlib.import_module(name)
    except ImportError:
        mod = types.ModuleType(name)
        mod.__path__ = []
        sys.modules[name] = mod
        parent, _, leaf = name.rpartition(".")
        if parent:
            setattr(sys.modules[parent], leaf, mod)
        return mod


def _load_file(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    try:
        spec.loader.exec_module(mod)
    except BaseException:
        del sys.modules[name]
        raise
    return mod


def load_sglang_triton(triton_dir):
    """SGLang's extend_attention_fwd from triton_dir/extend_attention.py, or None when the folder
    lacks the two files. The files import sglang.srt.utils (is_cuda, is_hip) and the prefill module
    by their SGLang names: sglang.srt.utils gets the two functions where it lacks them (an empty
    module, or the stand-in tree's), prefill_attention.py is loaded under its SGLang name, and
    extend_attention.py under a private one (the stand-in tree's module of that name stays)."""
    extend_path = os.path.join(triton_dir, "extend_attention.py")
    prefill_path = os.path.join(triton_dir, "prefill_attention.py")
    if not (os.path.isfile(extend_path) and os.path.isfile(prefill_path)):
        return None
    if EXTEND_PRIVATE_NAME in sys.modules:
        return sys.modules[EXTEND_PRIVATE_NAME].extend_attention_fwd
    for name in SGLANG_PACKAGES:
        _stand_in_package(name)
    utils = sys.modules.get("sglang.srt.utils")
    if utils is None:
        try:
            utils = importlib.import_module("sglang.srt.utils")
        except ImportError:
            utils = types.ModuleType("sglang.srt.utils")
            sys.modules["sglang.srt.utils"] = utils
            sys.modules["sglang.srt"].utils = utils
    for fn_name, fn in (("is_cuda", _is_cuda), ("is_hip", _is_hip)):
        if not hasattr(utils, fn_name):
            setattr(utils, fn_name, fn)
    if "__getattr__" not in vars(utils):
        utils.__getattr__ = _other_platform_probe
    if PREFILL_NAME not in sys.modules:
        prefill = _load_file(PREFILL_NAME, prefill_path)
        sys.modules["sglang.srt.layers.attention.triton_ops"].prefill_attention = prefill
    return _load_file(EXTEND_PRIVATE_NAME, extend_path).extend_attention_fwd


class _TorchArrays:
    """What the stand-in TritonAttnBackend.forward_extend asks of numpy, on torch CUDA tensors; o
    comes NaN-poisoned."""

    def empty(self, shape, dtype=None):
        import torch

        return torch.full(tuple(shape), float("nan"), dtype=dtype, device=DEVICE)

    def ascontiguousarray(self, a):
        return a.contiguous()


@contextlib.contextmanager
def standin_backend(extend_fn, arrays=None):
    """The stand-in SGLang tree's (tests/python/sglang_standin, on sys.path) triton_backend module,
    with its triton_ops.extend_attention.extend_attention_fwd = extend_fn (what a backend built
    inside binds) and its numpy calls on `arrays` (default: torch CUDA tensors), until the end."""
    from sglang.srt.layers.attention import triton_backend
    from sglang.srt.layers.attention.triton_ops import extend_attention

    saved = triton_backend.np, extend_attention.extend_attention_fwd
    triton_backend.np, extend_attention.extend_attention_fwd = (arrays or _TorchArrays()), extend_fn
    try:
        yield triton_backend
    finally:
        triton_backend.np, extend_attention.extend_attention_fwd = saved


def standin_verify_step(triton_backend, t, case, kv_cache, logit_cap=0.0):
    """One TARGET_VERIFY forward of an MLA layer through the stand-in's RadixAttention and a new
    TritonAttnBackend (call inside standin_backend()); the forward metadata are t's tensors (every
    request has case.draft[0] draft tokens, as in SGLang's target verify). Returns o [N, H, 512]."""
    from sglang.srt.configs.model_config import AttentionArch
    from sglang.srt.layers.radix_attention import RadixAttention
    from sglang.srt.mem_cache.memory_pool import MLATokenToKVPool
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode

    d = case.draft[0]
    if any(x != d for x in case.draft):
        raise ValueError("SGLang's target verify has the same draft length in every request")
    ns = types.SimpleNamespace
    runner = ns(req_to_token_pool=ns(req_to_token=None), token_to_kv_pool_allocator=None,
                server_args=ns(speculative_num_draft_tokens=d), model_config=ns(attention_arch=AttentionArch.MLA))
    backend = triton_backend.TritonAttnBackend(runner)
    backend.forward_metadata = triton_backend.ForwardMetadata(
        None, None, d, None, t.kv_indptr, t.kv_indices, t.qo_indptr, t.custom_mask, t.mask_indptr, None, None, None,
        None)
    pool = MLATokenToKVPool(1, 1, np.float16, 512, 64, 1)
    pool.kv_buffer = [kv_cache]
    layer = RadixAttention(case.heads, 576, SM_SCALE, num_kv_heads=1, layer_id=0, v_head_dim=512,
                           logit_cap=logit_cap)
    batch = ForwardBatch(ForwardMode.TARGET_VERIFY, list(range(len(case.prefix))), list(case.prefix), None, pool,
                         attn_backend=backend)
    o = layer.forward(t.q.reshape(case.n, -1), t.k_extend, t.k_extend[..., :512], batch, save_kv_cache=False)
    return o.reshape(case.n, case.heads, 512)


# ---- what the CPU can test ---------------------------------------------------------------------------

def _self_test():
    from mla_reference_torch import self_test as self_test_reference

    for case in MODE_CASES:
        ix = build_index(case, KV_SLOTS)
        qo, kvp, mip = ix["qo_indptr"], ix["kv_indptr"], ix["mask_indptr"]
        assert qo[-1] == case.n and kvp[-1] == sum(case.prefix) == len(ix["kv_indices"]), case.name
        assert mip[-1] == len(ix["custom_mask"]), case.name
        kvi = ix["kv_indices"]
        assert kvi.min(initial=1) >= 1 and kvi.max(initial=1) < KV_SLOTS, case.name
        if case.scattered:
            assert len(np.unique(kvi)) == len(kvi), case.name
            if len(kvi) > 100:
                assert (np.diff(kvi) != 1).mean() > 0.9, case.name
        else:
            assert (np.diff(kvi) == 1).all(), case.name
        for b, (p, d) in enumerate(zip(case.prefix, case.draft)):
            m = ix["custom_mask"][mip[b]:mip[b + 1]].reshape(d, p + d)
            tree = m[:, p:]
            if case.mask_dtype == "bool":
                assert m.max(initial=0) <= 1, case.name
            if case.tree in ("tree", "chain"):
                assert (np.triu(tree, 1) == 0).all(), case.name
                rows = [r for r in range(d) if not (case.empty_rows and p == 0 and r % 3 == 0)]
                assert all(tree[r, r] == 1 for r in rows), case.name
                assert all(tree[r, 0] == 1 for r in rows), (case.name, "every node descends from the root")
            if case.empty_rows and p == 0:
                assert (tree[0::3] == 0).all(), case.name
        again = build_index(case, KV_SLOTS)
        assert all(np.array_equal(ix[k], again[k]) for k in ix), (case.name, "not reproducible")
    assert len(MODE_CASES) >= 20 and len({c.name for c in MODE_CASES}) == len(MODE_CASES)
    assert {8, 16, 64, 128} <= {c.heads for c in MODE_CASES}
    assert {1, 63, 64} <= {d for c in MODE_CASES for d in c.draft}
    assert set(NINE) <= {p for c in MODE_CASES for p in c.prefix}

    self_test_reference()
    from client_fp8_cases import self_test as self_test_fp8  # the fp8 cache's cases: their own module

    self_test_fp8()

    # Checks counts and the closing line.
    c = Checks("t")
    with open(os.devnull, "w") as null, contextlib.redirect_stdout(null), contextlib.redirect_stderr(null):
        c.record(True, "a")
        c.record(False, "b", "why")
        c.skip("c", "no")
        with c.guard("d"):
            raise RuntimeError("boom")
    assert c.lines == ["PASS a", "FAIL b: why", "SKIPPED c: no", "FAIL d: raised RuntimeError: boom"], c.lines
    assert (c.passed, c.failed, c.skipped) == (1, 2, 1) and c.summary() == "t: 1 passed, 2 failed, 1 skipped"

    _self_test_loader()
    _self_test_standin()
    print("client_cases self-test: OK")


def _self_test_loader():
    """load_sglang_triton on stand-in files that import what SGLang's do, with no sglang package
    importable; and with the stand-in SGLang tree, whose triton_ops.extend_attention stays."""
    saved_path, saved_modules = list(sys.path), dict(sys.modules)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            assert load_sglang_triton(tmp) is None
            with open(os.path.join(tmp, "prefill_attention.py"), "w") as f:
                f.write("from sglang.srt.utils import is_cuda, is_hip\n"
                        "def context_attention_fwd():\n    return 'prefill'\n")
            with open(os.path.join(tmp, "extend_attention.py"), "w") as f:
                f.write("from sglang.srt.layers.attention.triton_ops.prefill_attention import context_attention_fwd\n"
                        "from sglang.srt.utils import is_cuda, is_hip, is_npu\n"
                        "assert not is_npu()\n"
                        "def extend_attention_fwd(*args):\n    return ('extend', context_attention_fwd(), is_hip)\n")
            for name in [m for m in sys.modules if m == "sglang" or m.startswith("sglang.")]:
                del sys.modules[name]
            sys.path[:] = [p for p in sys.path if "sglang_standin" not in p]
            fn = load_sglang_triton(tmp)
            assert fn()[:2] == ("extend", "prefill"), fn()
            assert load_sglang_triton(tmp) is fn
            standin = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python", "sglang_standin")
            if os.path.isdir(standin):
                for name in [m for m in sys.modules if m == "sglang" or m.startswith("sglang.")
                             or m == EXTEND_PRIVATE_NAME]:
                    del sys.modules[name]
                sys.path.insert(0, standin)
                fn = load_sglang_triton(tmp)
                assert fn()[:2] == ("extend", "prefill")
                utils = importlib.import_module("sglang.srt.utils")
                assert hasattr(utils, "kill_process_tree") and utils.is_hip is _is_hip  # the tree's, extended
                rec = importlib.import_module("sglang.srt.layers.attention.triton_ops.extend_attention")
                assert hasattr(rec, "CALLS"), "the stand-in's recorder was replaced"
    finally:
        sys.path[:] = saved_path
        for name in [m for m in sys.modules if m not in saved_modules]:
            del sys.modules[name]
        sys.modules.update(saved_modules)


def _self_test_standin():
    """standin_verify_step with numpy arrays and a recorder as the kernel: the arguments SGLang's
    backend passes, in their places."""
    standin = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python", "sglang_standin")
    saved_path, saved_modules = list(sys.path), dict(sys.modules)
    try:
        sys.path.insert(0, standin)
        case = Case("standin", 4, (3, 0), (2, 2), seed=3)
        ix = build_index(case, 16)
        rng = np.random.default_rng(0)
        t = types.SimpleNamespace(q=rng.standard_normal((4, 4, 576)).astype(np.float16),
                                  k_extend=rng.standard_normal((4, 1, 576)).astype(np.float16), **ix)
        kv = np.zeros((16, 1, 576), np.float16)
        seen = []

        def recorder(*args, **kwargs):
            seen.append((args, kwargs))
            args[3][...] = 3.0

        with standin_backend(recorder, arrays=np) as tb:
            o = standin_verify_step(tb, t, case, kv, logit_cap=0.5)
        args, kwargs = seen[0]
        assert o.shape == (4, 4, 512) and (o == 3.0).all()
        assert args[0].shape == (4, 4, 576) and args[1].shape == (4, 1, 576) and args[2].shape == (4, 1, 512)
        assert args[4] is kv and args[5].shape == (16, 1, 512) and np.shares_memory(args[5], kv)
        assert args[6] is ix["qo_indptr"] and args[8] is ix["kv_indices"] and args[9] is ix["custom_mask"]
        assert args[10] is True and args[12] == 2 and args[15] == SM_SCALE and kwargs["logit_cap"] == 0.5
        from sglang.srt.layers.attention import triton_backend
        assert triton_backend.np is np
    finally:
        sys.path[:] = saved_path
        for name in [m for m in sys.modules if m not in saved_modules]:
            del sys.modules[name]
        sys.modules.update(saved_modules)


if __name__ == "__main__":
    sys.dont_write_bytecode = True
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    _self_test()
