"""The verify part: MLA target-verify attention of TritonAttnBackend served by kjit.

SGLang binds ``self.extend_attention_fwd`` per instance in ``TritonAttnBackend.__init__``
(a lazy import from ``triton_ops.extend_attention``), and ``forward_extend`` calls it for every
extend-like mode without saying which. The mode is known one level up, so the class's
``forward_extend`` is wrapped: for a TARGET_VERIFY forward of an MLA layer it points the
instance's ``extend_attention_fwd`` at a kjit-first function (made once per backend) for the
duration of that one call and puts SGLang's function back afterwards. Backends built before
install() are covered too, and SGLang's function stays reachable as the fallback.

An fp8 KV cache (``--kv-cache-dtype fp8_e4m3``: ``k_buffer`` a float8_e4m3fn view, the layer's
``k_scale_float`` / ``v_scale_float`` as k_scale / v_scale) is served by kjit as well; how kjit
computes with it is install()'s ``fp8_numerics`` (``KJIT_SGLANG_FP8_NUMERICS``), passed only for a
one-byte cache, so a bf16 model is unaffected by the setting. SGLang's fallback gets its own
arguments, never kjit's keyword.
"""
import functools
import logging
import sys

logger = logging.getLogger("kjit.sglang")

# DeepSeek-style MLA through the Triton backend's absorbed path: q/k carry the 512 latent plus
# 64 rope dimensions, v is the 512-dimension latent.
MLA_QK_HEAD_DIM = 576
MLA_V_HEAD_DIM = 512

TARGETS = (("sglang.srt.layers.attention.triton_backend", "TritonAttnBackend", "forward_extend",
            True),)

_ROUTE_ATTR = "_kjit_verify_route"  # instance cache: (SGLang's function, the kjit callable)
_MAX_LOGGED_REASONS = 32
_K_BUFFER_ARG = 4  # extend_attention_fwd's positional index of k_buffer

FP8_NUMERICS = ("dequant", "fp8")  # kjit.verify_attention's fp8_numerics values; the first is the default
_fp8_numerics = FP8_NUMERICS[0]

_kjit = None
_served = 0
_fallbacks = 0
_reasons = set()
_reasons_capped = False


def _kjit_module():
    global _kjit
    if _kjit is None:
        import kjit

        _kjit = kjit
    return _kjit


def _note_fallback(error):
    global _fallbacks, _reasons_capped
    _fallbacks += 1
    reason = getattr(error, "message", None) or str(error) or type(error).__name__
    if reason in _reasons:
        return
    if len(_reasons) >= _MAX_LOGGED_REASONS:
        if not _reasons_capped:
            _reasons_capped = True
            logger.warning("kjit.sglang: more distinct fallback reasons; no longer logged")
        return
    _reasons.add(reason)
    logger.warning("kjit.sglang: verify attention falls back to SGLang's Triton kernel: %s",
                   reason)


def set_fp8_numerics(value):
    """How kjit computes with an fp8 cache from now on: "dequant" or "fp8" (install() calls this)."""
    global _fp8_numerics
    if value not in FP8_NUMERICS:
        raise ValueError(f"fp8_numerics={value!r}: expected one of {', '.join(FP8_NUMERICS)}")
    _fp8_numerics = value


def _one_byte_cache(args, kwargs):
    """Whether the call's k_buffer has one-byte elements (SGLang's fp8 cache: a float8_e4m3fn view)."""
    k_buffer = args[_K_BUFFER_ARG] if len(args) > _K_BUFFER_ARG else kwargs.get("k_buffer")
    return getattr(getattr(k_buffer, "dtype", None), "itemsize", 0) == 1


def _kjit_then_sglang(sglang_fn):
    """An extend_attention_fwd that tries kjit first and runs sglang_fn on kjit.Unsupported."""

    def kjit_verify_attention(*args, **kwargs):
        global _served
        kjit = _kjit_module()
        numerics = _fp8_numerics
        try:
            if numerics != FP8_NUMERICS[0] and _one_byte_cache(args, kwargs):
                kjit.verify_attention(*args, fp8_numerics=numerics, **kwargs)
            else:
                kjit.verify_attention(*args, **kwargs)
        except kjit.Unsupported as error:
            _note_fallback(error)
            return sglang_fn(*args, **kwargs)
        if _served == 0:
            logger.info("kjit.sglang: MLA target-verify attention served by kjit")
        _served += 1
        return None

    # SGLang keeps torch.compile out of the kernel launcher it binds; do the same for this one.
    torch = sys.modules.get("torch")
    disable = getattr(getattr(torch, "compiler", None), "disable", None)
    return disable(kjit_verify_attention) if disable is not None else kjit_verify_attention


def _route_for(backend_attrs, sglang_fn):
    route = backend_attrs.get(_ROUTE_ATTR)
    if route is None or route[0] is not sglang_fn:
        route = (sglang_fn, _kjit_then_sglang(sglang_fn))
        backend_attrs[_ROUTE_ATTR] = route
    return route[1]


def is_mla_target_verify(layer, forward_batch):
    try:
        if not forward_batch.forward_mode.is_target_verify():
            return False
    except AttributeError:
        return False
    return (getattr(layer, "qk_head_dim", None) == MLA_QK_HEAD_DIM
            and getattr(layer, "v_head_dim", None) == MLA_V_HEAD_DIM)


def wrap(sglang_forward_extend):
    """The replacement for TritonAttnBackend.forward_extend."""

    @functools.wraps(sglang_forward_extend)
    def forward_extend(self, q, k, v, layer, forward_batch, *args, **kwargs):
        attrs = getattr(self, "__dict__", None)
        if attrs is None or not is_mla_target_verify(layer, forward_batch):
            return sglang_forward_extend(self, q, k, v, layer, forward_batch, *args, **kwargs)
        sglang_fn = attrs.get("extend_attention_fwd")
        route = attrs.get(_ROUTE_ATTR)
        if sglang_fn is None or (route is not None and sglang_fn is route[1]):
            return sglang_forward_extend(self, q, k, v, layer, forward_batch, *args, **kwargs)
        attrs["extend_attention_fwd"] = _route_for(attrs, sglang_fn)
        try:
            return sglang_forward_extend(self, q, k, v, layer, forward_batch, *args, **kwargs)
        finally:
            attrs["extend_attention_fwd"] = sglang_fn

    return forward_extend


def stats():
    """Calls kjit served, calls that fell back and the distinct reasons, since uninstall()."""
    return {"served": _served, "fallbacks": _fallbacks, "fallback_reasons": sorted(_reasons)}


def reset():
    global _kjit, _served, _fallbacks, _reasons_capped, _fp8_numerics
    _kjit = None
    _served = _fallbacks = 0
    _fp8_numerics = FP8_NUMERICS[0]
    _reasons.clear()
    _reasons_capped = False
