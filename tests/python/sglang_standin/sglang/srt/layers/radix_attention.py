class RadixAttention:
    def __init__(self, num_heads, head_dim, scaling, num_kv_heads, layer_id, v_head_dim=-1,
                 logit_cap=0.0, sliding_window_size=-1):
        self.tp_q_head_num = num_heads
        self.tp_k_head_num = self.tp_v_head_num = num_kv_heads
        self.qk_head_dim = head_dim
        self.v_head_dim = v_head_dim if v_head_dim != -1 else head_dim
        self.scaling = scaling
        self.layer_id = layer_id
        self.logit_cap = logit_cap
        self.sliding_window_size = sliding_window_size
        self.xai_temperature_len = -1
        # Set from the checkpoint for an fp8 KV cache (k_scale_float / v_scale_float their values).
        self.k_scale = self.v_scale = None
        self.k_scale_float = self.v_scale_float = None

    def forward(self, q, k, v, forward_batch, save_kv_cache=True, **kwargs):
        k = k.reshape(-1, self.tp_k_head_num, self.qk_head_dim)
        v = v.reshape(-1, self.tp_v_head_num, self.v_head_dim)
        return forward_batch.attn_backend.forward(q, k, v, self, forward_batch, save_kv_cache,
                                                  **kwargs)
