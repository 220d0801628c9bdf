"""TritonAttnBackend as far as kjit.sglang relies on it: __init__ binds the kernel launcher per
instance from a lazy import, and forward_extend calls it with 16 positional and 5 keyword
arguments for every extend-like mode (k_scale and v_scale: the layer's float scales when it has
them, as for an fp8 KV cache, else 1.0)."""
from dataclasses import dataclass
from typing import Optional

import numpy as np

from sglang.srt.configs.model_config import AttentionArch
from sglang.srt.layers.attention.base_attn_backend import AttentionBackend


def _compiler_disable(fn):
    # Like torch.compiler.disable: the bound launcher is a wrapper, not the module's function.
    def disabled(*args, **kwargs):
        return fn(*args, **kwargs)

    disabled.__wrapped__ = fn
    return disabled


@dataclass
class ForwardMetadata:
    attn_logits: object
    attn_lse: object
    max_extend_len: int
    num_kv_splits: object
    kv_indptr: object
    kv_indices: object
    qo_indptr: object
    custom_mask: object
    mask_indptr: object
    window_kv_indptr: object
    window_kv_indices: object
    window_num_kv_splits: object
    window_kv_offsets: object
    swa_attn_logits: Optional[object] = None


class TritonAttnBackend(AttentionBackend):
    def __init__(self, model_runner, skip_prefill=False, kv_indptr_buf=None):
        from sglang.srt.layers.attention.triton_ops.extend_attention import extend_attention_fwd

        super().__init__()
        self.extend_attention_fwd = _compiler_disable(extend_attention_fwd)
        self.skip_prefill = skip_prefill
        self.req_to_token = model_runner.req_to_token_pool.req_to_token
        self.token_to_kv_pool_allocator = model_runner.token_to_kv_pool_allocator
        self.num_draft_tokens = model_runner.server_args.speculative_num_draft_tokens
        self.use_mla = model_runner.model_config.attention_arch == AttentionArch.MLA
        self.forward_metadata = None

    def init_forward_metadata(self, forward_batch):
        bs = forward_batch.batch_size
        seq_lens = np.asarray(forward_batch.seq_lens, dtype=np.int64)
        kv_indptr = np.zeros(bs + 1, dtype=np.int32)
        kv_indptr[1:] = np.cumsum(seq_lens)
        kv_indices = np.concatenate(
            [self.req_to_token[r, :n] for r, n in zip(forward_batch.req_pool_indices, seq_lens)]
            + [np.zeros(0, dtype=np.int32)]).astype(np.int64)
        if forward_batch.forward_mode.is_target_verify():
            draft = self.num_draft_tokens
            qo_indptr = np.arange(0, (bs + 1) * draft, draft, dtype=np.int32)
            custom_mask = forward_batch.spec_info.custom_mask
            mask_indptr = np.zeros(bs + 1, dtype=np.int64)
            mask_indptr[1:] = np.cumsum(draft * (seq_lens + draft))
            max_extend_len = draft
        else:
            extend = np.asarray(forward_batch.extend_seq_lens, dtype=np.int64)
            qo_indptr = np.zeros(bs + 1, dtype=np.int32)
            qo_indptr[1:] = np.cumsum(extend)
            custom_mask, mask_indptr = None, None
            max_extend_len = int(extend.max())
        self.forward_metadata = ForwardMetadata(None, None, max_extend_len, None, kv_indptr,
                                                kv_indices, qo_indptr, custom_mask, mask_indptr,
                                                None, None, None, None)

    def forward_extend(self, q, k, v, layer, forward_batch, save_kv_cache=True, sinks=None):
        o = np.empty((q.shape[0], layer.tp_q_head_num * layer.v_head_dim), dtype=q.dtype)
        pool = forward_batch.token_to_kv_pool
        if save_kv_cache:
            # MLA stores k / k_scale (MLATokenToKVPool takes no scales).
            cache_k = k if layer.k_scale is None else k / layer.k_scale_float
            pool.set_kv_buffer(layer, forward_batch.out_cache_loc, cache_k, v)
        if layer.k_scale is not None and layer.v_scale is not None:
            k_descale, v_descale = layer.k_scale_float, layer.v_scale_float
        else:
            k_descale = v_descale = 1.0
        meta = self.forward_metadata
        self.extend_attention_fwd(
            q.reshape(-1, layer.tp_q_head_num, layer.qk_head_dim),
            np.ascontiguousarray(k),
            np.ascontiguousarray(v),
            o.reshape(-1, layer.tp_q_head_num, layer.v_head_dim),
            pool.get_key_buffer(layer.layer_id),
            pool.get_value_buffer(layer.layer_id),
            meta.qo_indptr,
            meta.kv_indptr,
            meta.kv_indices,
            meta.custom_mask,
            True,
            meta.mask_indptr,
            meta.max_extend_len,
            k_descale,
            v_descale,
            layer.scaling,
            logit_cap=layer.logit_cap,
            sliding_window_size=-1,
            sinks=sinks,
            window_kv_offsets=None,
            xai_temperature_len=layer.xai_temperature_len,
        )
        return o
