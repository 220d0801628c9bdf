"""kjit.verify_attention: SGLang's extend_attention_fwd on the MLA tree-verify path, on kjit's
kernels. torch is imported on the first call only.

The call is built for a low host cost (the in-process mode queues the kernels with no RPC,
allocation or synchronization, so a CUDA-graph capture records it): the index-pointer tensors of a
step are described once and reused while they are the same objects (every layer of a forward passes
the same ones); the workspace is one torch tensor per device and stream, grown when a launch asks
for more, and a replaced one is kept (a captured graph may still replay with it)."""
import math
import threading

from kjit import _native
from kjit.client import default_client
from kjit.errors import Error, Unsupported

MLA_QK_DIM = 576
MLA_V_DIM = 512
HEADS = (8, 16, 32, 64, 128)
MAX_DRAFT = 64

_torch = None
_dtype_codes = None
_kv_codes = None  # k_buffer's dtype -> its code: bf16, or an fp8 e4m3 cache as float8_e4m3fn or its bytes
_raw_stream = None


def _init_torch():
    global _torch, _dtype_codes, _kv_codes, _raw_stream
    import torch

    _torch = torch
    _dtype_codes = {torch.bool: _native.DTYPE_BOOL, torch.uint8: _native.DTYPE_UINT8,
                    torch.int32: _native.DTYPE_INT32, torch.int64: _native.DTYPE_INT64,
                    torch.bfloat16: _native.DTYPE_BF16, torch.float32: _native.DTYPE_FP32,
                    torch.float16: _native.DTYPE_FP16}
    if hasattr(torch, "uint32"):
        _dtype_codes[torch.uint32] = _native.DTYPE_UINT32
    if hasattr(torch, "float8_e4m3fn"):
        _dtype_codes[torch.float8_e4m3fn] = _native.DTYPE_FP8_E4M3
    # SGLang's fp8_e4m3 cache is uint8 storage viewed as float8_e4m3fn: either view is the same bytes.
    _kv_codes = {torch.bfloat16: _native.DTYPE_BF16, torch.uint8: _native.DTYPE_UINT8}
    if hasattr(torch, "float8_e4m3fn"):
        _kv_codes[torch.float8_e4m3fn] = _native.DTYPE_FP8_E4M3
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    _raw_stream = raw if raw is not None else (lambda d: torch.cuda.current_stream(d).cuda_stream)


_PAD = ((0, 0, 0, 0), (0, 0, 0), (0, 0), (0,), ())


def _tensor(t):
    """A kjit_tensor's eleven words for a torch tensor."""
    shape = t.shape
    n = len(shape)
    if n > 4:
        raise Unsupported(f"a tensor of rank {n}")
    code = _dtype_codes.get(t.dtype)
    if code is None:
        raise Unsupported(f"dtype {t.dtype}")
    pad = _PAD[n]
    return (t.data_ptr(), code, n, *shape, *pad, *t.stride(), *pad)


_ABSENT = (0,) * 11


class _Calls(threading.local):
    """Per thread: the argument struct, and the index-pointer tensors it describes."""

    def __init__(self):
        import ctypes

        self.args = (ctypes.c_char * _native.VERIFY_BYTES)()
        ctypes.memmove(self.args, _native.VERIFY_BYTES.to_bytes(8, "little"), 8)  # struct_size
        self.address = ctypes.addressof(self.args)
        self.meta = None  # the index-pointer tensors described last (held, so their ids stay theirs)


_calls = None
_workspaces = {}   # (device, stream) -> (uint8 tensor, its address, its bytes)
_retired = []      # replaced workspaces: a captured graph may still replay with one
_lock = threading.Lock()


def _check_call(q, k, o, k_buffer, custom_mask, max_len_extend, logit_cap, skip_prefix_custom_mask,
                sliding_window_size, sinks, window_kv_offsets, xai_temperature_len):
    """Raises Unsupported with the reason for what kjit does not implement (the slow path: only after
    verify_attention's quick test refused the call)."""
    if logit_cap and logit_cap > 0:
        raise Unsupported("logit_cap > 0 (soft-capped logits)")
    if sliding_window_size is not None and sliding_window_size > 0:
        raise Unsupported("a sliding window")
    if sinks is not None:
        raise Unsupported("attention sinks")
    if window_kv_offsets is not None:
        raise Unsupported("window_kv_offsets")
    if xai_temperature_len is not None and xai_temperature_len > 0:
        raise Unsupported("xai temperature scaling")
    if not skip_prefix_custom_mask:
        raise Unsupported("a custom mask over the prefix (skip_prefix_custom_mask=False)")
    if custom_mask is None:
        raise Unsupported("no custom_mask (kjit verifies draft trees with a mask)")
    if not 1 <= max_len_extend <= MAX_DRAFT:
        raise Unsupported(f"max_len_extend = {max_len_extend} (kjit takes 1..{MAX_DRAFT} draft tokens)")
    qs, os_ = q.shape, o.shape
    if len(qs) != 3 or qs[2] != MLA_QK_DIM or len(os_) != 3 or os_[2] != MLA_V_DIM:
        raise Unsupported(f"q {tuple(qs)} / o {tuple(os_)}: kjit takes MLA's 576 / 512 head dims")
    if qs[1] not in HEADS:
        raise Unsupported(f"{qs[1]} heads (kjit takes {', '.join(map(str, HEADS))})")
    bf16 = _torch.bfloat16
    if q.dtype is not bf16 or k.dtype is not bf16 or o.dtype is not bf16:
        raise Unsupported(f"q {q.dtype}, k_extend {k.dtype}, o {o.dtype}: kjit takes bf16")
    if k.dim() != 3 or k_buffer.dim() != 3:
        raise Unsupported(f"k_extend {tuple(k.shape)} / k_buffer {tuple(k_buffer.shape)}: kjit takes [N, 1, 576]")
    if k_buffer.dtype not in _kv_codes:
        raise Unsupported(f"k_buffer in {k_buffer.dtype}: kjit takes a bf16 cache or an fp8 e4m3 one "
                          "(float8_e4m3fn, or its bytes as uint8)")


def _refuse_numerics(fp8_numerics, k_buffer):
    """The kjit.Error (INVALID_ARGUMENT) for an fp8_numerics that this k_buffer cannot take."""
    if isinstance(fp8_numerics, str) and fp8_numerics in _native.FP8_NUMERICS:
        return Error(3, f"fp8_numerics={fp8_numerics!r} applies to an fp8 cache, and k_buffer is {k_buffer.dtype}: "
                        "pass the cache as float8_e4m3fn (or its uint8 bytes), or leave fp8_numerics 'dequant'")
    return Error(3, f"fp8_numerics={fp8_numerics!r}: use 'dequant' (the default: the cache converted to bf16, "
                    "bf16 MMAs) or 'fp8' (SGLang Triton's numerics: q and P rounded to e4m3)")


def _check_devices(device, tensors):
    """Every tensor on the launch's GPU: kernels given another device's memory would fault."""
    for t in tensors:
        if t is not None and t.get_device() != device:
            where = "the CPU" if t.get_device() < 0 else f"cuda:{t.get_device()}"
            raise Unsupported(f"a tensor on {where} while q is on cuda:{device}")


_HEADS = frozenset(HEADS)
_OFF = _native.TENSOR_OFFSET
_OFF_Q, _OFF_K, _OFF_V, _OFF_O, _OFF_LSE, _OFF_KV = (_OFF[n] for n in ("q", "k_extend", "v_extend", "o", "lse",
                                                                      "kv_cache"))
_BF16 = _native.DTYPE_BF16
_DEFAULT_SM_SCALE = 1.0 / math.sqrt(MLA_QK_DIM)


def verify_attention(q_extend, k_extend, v_extend, o_extend, k_buffer, v_buffer, qo_indptr, kv_indptr, kv_indices,
                     custom_mask, is_causal, mask_indptr, max_len_extend, k_scale, v_scale, sm_scale=None,
                     logit_cap=0.0, skip_prefix_custom_mask=True, sliding_window_size=-1, sinks=None,
                     window_kv_offsets=None, xai_temperature_len=-1, *, lse=None, max_prefix=None,
                     fp8_numerics="dequant", client=None):
    """Writes o_extend (and lse, [N, H] fp32, when given) like SGLang's extend_attention_fwd on the MLA
    verify path (same positional order). Raises kjit.Unsupported before launching anything for
    what kjit does not implement, so the caller can run the original with the same arguments; other
    failures are kjit.Error. v_extend may be None (V is k_extend[..., :512]) or a copy, which the
    kernels check. max_prefix (a bound on every prefix length) only tunes the plan.

    k_buffer is a bf16 cache, or an fp8 e4m3 one (SGLang's --kv-cache-dtype fp8_e4m3: float8_e4m3fn,
    or the same bytes as uint8; v_buffer the same view's first 512 dims); k_scale then multiplies
    the prefix scores and v_scale the prefix values. fp8_numerics chooses how an fp8 cache is
    computed with: "dequant" (its values converted to bf16, bf16 MMAs; the default) or "fp8"
    (SGLang Triton's numerics: q and P rounded to e4m3 for the prefix). "fp8" with a bf16 cache, or
    another value, is a kjit.Error (INVALID_ARGUMENT)."""
    # This runs for every layer of every decode step: each tensor's attributes are read once, and
    # the reasons for a refusal are worked out only when the quick tests below refuse.
    global _calls
    if _torch is None:
        _init_torch()
    calls = _calls
    if calls is None:
        calls = _calls = _Calls()
    client = client or default_client()
    qs, ks, os_, bs = q_extend.shape, k_extend.shape, o_extend.shape, k_buffer.shape
    bf16 = _torch.bfloat16
    kb_dtype = k_buffer.dtype
    kv_code = _kv_codes.get(kb_dtype)
    if (logit_cap or sinks is not None or window_kv_offsets is not None or not skip_prefix_custom_mask or
            custom_mask is None or (sliding_window_size is not None and sliding_window_size > 0) or
            (xai_temperature_len is not None and xai_temperature_len > 0) or not 0 < max_len_extend <= MAX_DRAFT or
            len(qs) != 3 or qs[2] != MLA_QK_DIM or qs[1] not in _HEADS or len(os_) != 3 or os_[2] != MLA_V_DIM or
            len(ks) != 3 or len(bs) != 3 or q_extend.dtype is not bf16 or k_extend.dtype is not bf16 or
            o_extend.dtype is not bf16 or kv_code is None):
        _check_call(q_extend, k_extend, o_extend, k_buffer, custom_mask, max_len_extend, logit_cap,
                    skip_prefix_custom_mask, sliding_window_size, sinks, window_kv_offsets, xai_temperature_len)
        raise Unsupported(f"q {tuple(qs)}, k_extend {tuple(ks)}, o {tuple(os_)}, k_buffer {tuple(bs)}")
    if fp8_numerics == "dequant":
        numerics = 0
    elif fp8_numerics == "fp8" and kv_code != _BF16:
        numerics = 1
    else:
        raise _refuse_numerics(fp8_numerics, k_buffer)
    device = q_extend.get_device()
    if (device < 0 or k_extend.get_device() != device or o_extend.get_device() != device or
            k_buffer.get_device() != device):
        _check_devices(device, (k_extend, o_extend, k_buffer))
        raise Unsupported("q on the CPU: kjit runs on CUDA tensors")
    # V of the cache is read from k_buffer's first 512 dims: v_buffer must be that view (SGLang makes
    # a new one per call, so it is checked by address and layout, not identity).
    kb_ptr, kb_st = k_buffer.data_ptr(), k_buffer.stride()
    if (v_buffer.data_ptr() != kb_ptr or v_buffer.stride() != kb_st or v_buffer.shape[-1] != MLA_V_DIM or
            (v_buffer.dtype is not kb_dtype and v_buffer.element_size() != k_buffer.element_size())):
        raise Unsupported(f"v_buffer ({v_buffer.dtype}) is not a view of k_buffer[..., :512] ({kb_dtype})")
    buf = calls.args
    pack = _native.PACK_TENSOR.pack_into
    pack(buf, _OFF_KV, kb_ptr, kv_code, 3, bs[0], bs[1], bs[2], 0, kb_st[0], kb_st[1], kb_st[2], 0)

    # The step's index pointers are the same objects for every layer of a forward.
    meta = calls.meta
    if (meta is None or meta[0] is not qo_indptr or meta[1] is not kv_indptr or meta[2] is not kv_indices or
            meta[3] is not custom_mask or meta[4] is not mask_indptr):
        _check_devices(device, (qo_indptr, kv_indptr, kv_indices, custom_mask, mask_indptr))
        pack(buf, _OFF["qo_indptr"], *_tensor(qo_indptr))
        pack(buf, _OFF["kv_indptr"], *_tensor(kv_indptr))
        pack(buf, _OFF["kv_indices"], *_tensor(kv_indices))
        pack(buf, _OFF["custom_mask"], *_tensor(custom_mask))
        pack(buf, _OFF["packed_mask"], *_ABSENT)
        pack(buf, _OFF["mask_indptr"], *_tensor(mask_indptr))
        calls.meta = (qo_indptr, kv_indptr, kv_indices, custom_mask, mask_indptr)
    elif meta[3].get_device() != device:  # the same tensors, another layer's GPU
        _check_devices(device, meta)

    st = q_extend.stride()
    pack(buf, _OFF_Q, q_extend.data_ptr(), _BF16, 3, qs[0], qs[1], qs[2], 0, st[0], st[1], st[2], 0)
    k_ptr, st = k_extend.data_ptr(), k_extend.stride()
    pack(buf, _OFF_K, k_ptr, _BF16, 3, ks[0], ks[1], ks[2], 0, st[0], st[1], st[2], 0)
    if v_extend is None or (v_extend.data_ptr() == k_ptr and v_extend.stride() == st):
        pack(buf, _OFF_V, *_ABSENT)  # k_extend[..., :512] itself: nothing to check
    else:
        _check_devices(device, (v_extend,))
        pack(buf, _OFF_V, *_tensor(v_extend))
    st = o_extend.stride()
    pack(buf, _OFF_O, o_extend.data_ptr(), _BF16, 3, os_[0], os_[1], os_[2], 0, st[0], st[1], st[2], 0)
    if lse is None:
        pack(buf, _OFF_LSE, *_ABSENT)
    else:
        _check_devices(device, (lse,))
        pack(buf, _OFF_LSE, *_tensor(lse))

    # Scales must be Python numbers: a tensor's value would need a synchronization (struct would take
    # it through __float__).
    if k_scale is None:
        k_scale = 1.0
    if v_scale is None:
        v_scale = 1.0
    if sm_scale is None:
        sm_scale = _DEFAULT_SM_SCALE
    if type(k_scale) not in _NUMBERS or type(v_scale) not in _NUMBERS or type(sm_scale) not in _NUMBERS:
        for x, name in ((sm_scale, "sm_scale"), (k_scale, "k_scale"), (v_scale, "v_scale")):
            _scale(x, name)
        raise Unsupported("sm_scale, k_scale and v_scale must be Python numbers")
    if sm_scale == 0:  # as SGLang's `sm_scale or 1 / sqrt(Lq)`
        sm_scale = _DEFAULT_SM_SCALE
    stream = _raw_stream(device)
    workspace = _workspaces.get((device, stream))
    tail = (sm_scale, k_scale, v_scale, 1 if is_causal else 0, max_len_extend, -1 if max_prefix is None else max_prefix,
            device)
    _native.VERIFY_TAIL.pack_into(buf, _native.TAIL_OFFSET, *tail, *(workspace[1:] if workspace else (0, 0)), numerics)
    needed = client.mla_verify(calls.address, stream)
    if needed:
        workspace = _grow_workspace(device, stream, needed)
        _native.VERIFY_TAIL.pack_into(buf, _native.TAIL_OFFSET, *tail, *workspace[1:], numerics)
        if client.mla_verify(calls.address, stream):
            raise Error(13, f"the launch asked for a workspace again after it grew to {workspace[2]} bytes")


_NUMBERS = frozenset((float, int))


def _scale(x, name):
    if type(x) not in _NUMBERS:
        raise Unsupported(f"{name} as a {type(x).__name__} (kjit takes a Python number)")
    return x


def _grow_workspace(device, stream, needed):
    with _lock:
        old = _workspaces.get((device, stream))
        size = max(needed, 1 << 20)
        if old is not None:
            # A graph captured with it may still replay: it stays allocated. Growing at least twofold
            # bounds what is kept to about twice the largest workspace.
            _retired.append(old[0])
            size = max(size, 2 * old[2])
        size = (size + (1 << 20) - 1) & ~((1 << 20) - 1)
        ws = _torch.empty(size, dtype=_torch.uint8, device=f"cuda:{device}")
        entry = _workspaces[(device, stream)] = (ws, ws.data_ptr(), ws.numel())
        return entry


def check_errors(device=None, stream=None, client=None):
    """Raises kjit.Error for what the kernels found since the last check (a kv_indices entry >= S,
    index pointers that leave their tensors, v_extend differing from k_extend[..., :512]). Waits for
    `stream` (a torch.cuda.Stream or raw handle; None: the whole device) first: call it at a sync
    point of your own, never inside a CUDA-graph capture."""
    if _torch is None:
        _init_torch()
    if device is None:
        device = _torch.cuda.current_device()
    elif not isinstance(device, int):
        device = _torch.device(device).index
    raw = 0
    if stream is not None:
        raw = stream if isinstance(stream, int) else stream.cuda_stream
    (client or default_client()).check_errors(device, raw)
