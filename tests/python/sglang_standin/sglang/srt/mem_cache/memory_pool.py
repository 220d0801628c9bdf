import numpy as np


class MLATokenToKVPool:
    """One latent cache row (kv_lora_rank + qk_rope_head_dim) per slot and layer; slot 0 pads."""

    def __init__(self, size, page_size, dtype, kv_lora_rank, qk_rope_head_dim, layer_num):
        self.size, self.page_size, self.dtype = size, page_size, dtype
        self.kv_lora_rank = kv_lora_rank
        self.kv_buffer = [np.zeros((size + page_size, 1, kv_lora_rank + qk_rope_head_dim), dtype)
                          for _ in range(layer_num)]

    def get_key_buffer(self, layer_id):
        return self.kv_buffer[layer_id]

    def get_value_buffer(self, layer_id):
        return self.kv_buffer[layer_id][..., : self.kv_lora_rank]  # a strided view

    def set_kv_buffer(self, layer, loc, cache_k, cache_v):
        if self.dtype == np.uint8:  # an fp8 cache's bytes: only their dtype and layout matter here
            cache_k = np.clip(cache_k, 0, 255)
        self.kv_buffer[layer.layer_id][loc] = cache_k


class MHATokenToKVPool:
    def __init__(self, size, page_size, dtype, head_num, head_dim, layer_num):
        self.size, self.page_size, self.dtype = size, page_size, dtype
        shape = (size + page_size, head_num, head_dim)
        self.k_buffer = [np.zeros(shape, dtype) for _ in range(layer_num)]
        self.v_buffer = [np.zeros(shape, dtype) for _ in range(layer_num)]

    def get_key_buffer(self, layer_id):
        return self.k_buffer[layer_id]

    def get_value_buffer(self, layer_id):
        return self.v_buffer[layer_id]

    def set_kv_buffer(self, layer, loc, cache_k, cache_v):
        self.k_buffer[layer.layer_id][loc] = cache_k
        self.v_buffer[layer.layer_id][loc] = cache_v
