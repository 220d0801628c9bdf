"""A model runner with one attention layer's worth of state: request-to-token map, KV pool, slot
allocator and attention backend, built in SGLang's order."""
import numpy as np

from sglang.srt.configs.model_config import AttentionArch
from sglang.srt.mem_cache.allocator import PagedTokenToKVPoolAllocator, TokenToKVPoolAllocator
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, MLATokenToKVPool

KV_LORA_RANK, QK_ROPE_HEAD_DIM = 512, 64


class ModelConfig:
    def __init__(self, attention_arch, num_attention_heads, head_dim):
        self.attention_arch = attention_arch
        self.num_attention_heads = num_attention_heads
        self.head_dim = head_dim


class ReqToTokenPool:
    def __init__(self, size, max_context_len):
        self.size = size
        self.req_to_token = np.zeros((size, max_context_len), dtype=np.int32)


class ModelRunner:
    def __init__(self, server_args, gpu_id=0, mla=True, num_heads=4, head_dim=128,
                 pool_size=64, max_reqs=4, max_context_len=64):
        self.server_args = server_args
        self.gpu_id = gpu_id
        self.device = "cpu"
        self.page_size = server_args.page_size
        self.max_total_num_tokens = pool_size
        # --kv-cache-dtype fp8_e4m3: SGLang keeps uint8 storage viewed as float8_e4m3fn; numpy has
        # no fp8, so the stand-in's cache is the uint8 storage itself (one byte per element).
        self.kv_cache_dtype = np.uint8 if server_args.kv_cache_dtype == "fp8_e4m3" else np.float16
        arch = AttentionArch.MLA if mla else AttentionArch.MHA
        self.model_config = ModelConfig(arch, num_heads, head_dim)
        self.req_to_token_pool = ReqToTokenPool(max_reqs, max_context_len)
        if mla:
            self.token_to_kv_pool = MLATokenToKVPool(pool_size, self.page_size, self.kv_cache_dtype,
                                                     KV_LORA_RANK, QK_ROPE_HEAD_DIM, 1)
        else:
            self.token_to_kv_pool = MHATokenToKVPool(pool_size, self.page_size, self.kv_cache_dtype,
                                                     1, head_dim, 1)
        self.token_to_kv_pool_allocator = None
        self._init_pools()
        from sglang.srt.layers.attention.triton_backend import TritonAttnBackend

        self.attn_backend = TritonAttnBackend(self)

    def _init_pools(self):
        need_sort = self.server_args.disaggregation_mode in ("decode", "prefill")
        if self.page_size == 1:
            self.token_to_kv_pool_allocator = TokenToKVPoolAllocator(
                self.max_total_num_tokens, dtype=self.kv_cache_dtype, device=self.device,
                kvcache=self.token_to_kv_pool, need_sort=need_sort)
        else:
            self.token_to_kv_pool_allocator = PagedTokenToKVPoolAllocator(
                self.max_total_num_tokens, page_size=self.page_size, dtype=self.kv_cache_dtype,
                device=self.device, kvcache=self.token_to_kv_pool, need_sort=need_sort)
