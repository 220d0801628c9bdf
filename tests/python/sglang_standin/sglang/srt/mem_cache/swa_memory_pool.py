from sglang.srt.mem_cache.allocator import (
    BaseTokenToKVPoolAllocator,
    PagedTokenToKVPoolAllocator,
    TokenToKVPoolAllocator,
)


class SWATokenToKVPoolAllocator(BaseTokenToKVPoolAllocator):
    """Two inner allocators built with need_sort passed positionally; no super().__init__."""

    def __init__(self, size, size_swa, page_size, dtype, device, kvcache, need_sort):
        self.page_size, self.dtype, self.device = page_size, dtype, device
        if page_size == 1:
            self.full_attn_allocator = TokenToKVPoolAllocator(size, dtype, device, kvcache,
                                                              need_sort)
            self.swa_attn_allocator = TokenToKVPoolAllocator(size_swa, dtype, device, kvcache,
                                                             need_sort)
        else:
            self.full_attn_allocator = PagedTokenToKVPoolAllocator(size, page_size, dtype, device,
                                                                   kvcache, need_sort)
            self.swa_attn_allocator = PagedTokenToKVPoolAllocator(size_swa, page_size, dtype,
                                                                  device, kvcache, need_sort)
        self.need_sort = need_sort
        self._kvcache = kvcache

    def clear(self):
        self.full_attn_allocator.clear()
        self.swa_attn_allocator.clear()
