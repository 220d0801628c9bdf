"""SGLang integration: kjit serves the MLA target-verify attention of SGLang's Triton backend.

Two parts, each switchable:

verify
    ``TritonAttnBackend.forward_extend`` is wrapped. For a ``TARGET_VERIFY`` forward of an MLA
    layer (``qk_head_dim`` 576, ``v_head_dim`` 512) the backend's ``extend_attention_fwd`` is
    served by ``kjit.verify_attention`` with the same arguments; every other call (prefill,
    draft extend, non-MLA layers, other modes) runs SGLang's own Triton kernel untouched. When
    kjit raises ``kjit.Unsupported`` the call falls back to SGLang's kernel with identical
    arguments, and the reason is logged once (logger ``kjit.sglang``); any other ``kjit.Error``
    propagates.
defrag
    Tier 0 KV defragmentation: SGLang's token-to-KV-pool allocators are built with
    ``need_sort=True``, so freed slots are parked and merged back sorted
    (``merge_and_sort_free``) and new slots come out ascending and mostly contiguous.

Environment variables (read by :func:`install` when its arguments are None; values ``1/0``,
``true/false``, ``yes/no``, ``on/off``; anything else is an error):

``KJIT_SGLANG``
    ``0`` turns both parts off (default ``1``).
``KJIT_SGLANG_VERIFY``
    ``0`` leaves verify attention on SGLang's Triton kernel (default ``1``).
``KJIT_SGLANG_DEFRAG``
    ``0`` leaves SGLang's allocators as they are (default ``1``).
``KJIT_SGLANG_FP8_NUMERICS``
    How kjit computes with an fp8 KV cache (``--kv-cache-dtype fp8_e4m3``): ``dequant`` (the
    default: the cache's values converted to bf16, bf16 MMAs) or ``fp8`` (SGLang Triton's
    numerics: q and P rounded to e4m3). Anything else is an error; a bf16 cache ignores it.

The patches must be active in SGLang's scheduler processes, which it starts with
multiprocessing's spawn method. ``python -m kjit.sglang.launch_server <sglang server
arguments>`` does that without editing SGLang: it is ``python -m sglang.launch_server`` with
a scheduler entry (:func:`kjit.sglang.scheduler.run_scheduler_process`) that calls
:func:`install` first.

Importing this package imports neither SGLang, torch nor triton; :func:`install` imports the
SGLang modules it patches, and ``kjit`` itself is imported on the first routed call.
"""
from kjit.sglang.patch import install, installed, resolve_fp8_numerics, resolve_switches, uninstall
from kjit.sglang.verify import stats

__all__ = ["install", "installed", "resolve_fp8_numerics", "resolve_switches", "stats", "uninstall"]
