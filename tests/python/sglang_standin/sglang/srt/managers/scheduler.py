"""A scheduler process that builds a model runner and runs one forward of one attention layer,
then reports what happened through pipe_writer (SGLang's sends its init result there)."""
import types

import numpy as np

from sglang.srt.layers.attention.triton_ops import extend_attention
from sglang.srt.layers.radix_attention import RadixAttention
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
from sglang.srt.model_executor.model_runner import KV_LORA_RANK, QK_ROPE_HEAD_DIM, ModelRunner

CALLS = []  # the arguments of every run_scheduler_process call in this process


def build_batch(runner, mode, prefix_lens=(3, 5), extend_len=None, seed=0, kv_scales=None):
    """(layer, q, k, v, forward_batch) for one layer of `runner` in forward mode `mode`: prefix
    slots allocated and mapped, then extend_len new tokens per sequence (the draft tokens in
    TARGET_VERIFY, where extend_len defaults to speculative_num_draft_tokens). kv_scales: the
    layer's (k_scale, v_scale), as a checkpoint with an fp8 KV cache gives them."""
    rng = np.random.default_rng(seed)
    mla = runner.attn_backend.use_mla
    heads = runner.model_config.num_attention_heads
    if mla:
        qk_dim, v_dim = KV_LORA_RANK + QK_ROPE_HEAD_DIM, KV_LORA_RANK
    else:
        qk_dim = v_dim = runner.model_config.head_dim
    layer = RadixAttention(heads, qk_dim, qk_dim ** -0.5, num_kv_heads=1, layer_id=0,
                           v_head_dim=v_dim)
    if kv_scales is not None:
        layer.k_scale_float, layer.v_scale_float = kv_scales
        layer.k_scale, layer.v_scale = (np.float32(x) for x in kv_scales)
    if extend_len is None:
        extend_len = runner.server_args.speculative_num_draft_tokens
    allocator = runner.token_to_kv_pool_allocator
    bs = len(prefix_lens)
    for req, n in enumerate(prefix_lens):
        runner.req_to_token_pool.req_to_token[req, :n] = allocator.alloc(n)
    out_cache_loc = allocator.alloc(bs * extend_len)
    tokens = bs * extend_len
    q = rng.standard_normal((tokens, heads, qk_dim)).astype(np.float16)
    k = rng.standard_normal((tokens, 1, qk_dim)).astype(np.float16)
    v = np.ascontiguousarray(k[..., :v_dim])
    spec_info = None
    if mode.is_target_verify():
        mask_len = sum(extend_len * (n + extend_len) for n in prefix_lens)
        spec_info = types.SimpleNamespace(custom_mask=np.ones(mask_len, dtype=bool))
    batch = ForwardBatch(mode, np.arange(bs), np.array(prefix_lens), out_cache_loc,
                         runner.token_to_kv_pool, extend_seq_lens=[extend_len] * bs,
                         spec_info=spec_info, attn_backend=runner.attn_backend)
    runner.attn_backend.init_forward_metadata(batch)
    return layer, q, k, v, batch


def run_scheduler_process(server_args, port_args, gpu_id, tp_rank, attn_cp_rank, moe_dp_rank,
                          moe_ep_rank, pp_rank, dp_rank, pipe_writer):
    CALLS.append((server_args, port_args, gpu_id, tp_rank, attn_cp_rank, moe_dp_rank,
                  moe_ep_rank, pp_rank, dp_rank, pipe_writer))
    runner = ModelRunner(server_args, gpu_id=gpu_id)
    layer, q, k, v, batch = build_batch(runner, ForwardMode.TARGET_VERIFY)
    triton_calls = len(extend_attention.CALLS)
    o = layer.forward(q, k, v, batch)
    report = {
        "tp_rank": tp_rank,
        "need_sort": bool(runner.token_to_kv_pool_allocator.need_sort),
        "verify_output": float(o.flat[0]),
        "triton_calls": len(extend_attention.CALLS) - triton_calls,
    }
    if pipe_writer is not None:
        pipe_writer.send(report)
    return report
