"""The defrag part (Tier 0 KV defragmentation): SGLang's KV slot allocators sort freed slots.

With ``need_sort=False`` (SGLang's default outside prefill/decode disaggregation) freed slots go
straight back into ``free_pages`` and are reused in whatever order they were freed. With
``need_sort=True`` they wait in ``release_pages`` until ``free_pages`` runs out, and
``merge_and_sort_free`` merges and sorts them, so slots are handed out ascending and mostly
contiguous: the verify kernel's prefix gathers then read long runs of neighbouring rows.

SGLang picks need_sort in ``ModelRunnerKVCacheMixin._init_pools`` and passes it by keyword or
position, and the mixin imports the classes by name, so the class objects themselves are patched:
their ``__init__`` sets ``need_sort = True`` after SGLang's runs (``clear()`` has created an
empty ``release_pages`` by then, and ``alloc``/``free`` read the flag on every call). The SWA
and HiSparse allocators hand out slots through inner Token/Paged allocators, which this covers;
the SWA one's own flag is set too so that it reads consistently. Allocators that already exist
when install() runs are left alone.
"""
import functools

TARGETS = (
    ("sglang.srt.mem_cache.allocator", "TokenToKVPoolAllocator", "__init__", True),
    ("sglang.srt.mem_cache.allocator", "PagedTokenToKVPoolAllocator", "__init__", True),
    ("sglang.srt.mem_cache.swa_memory_pool", "SWATokenToKVPoolAllocator", "__init__", False),
)


def wrap(sglang_init):
    """The replacement for an allocator class's __init__."""

    @functools.wraps(sglang_init)
    def __init__(self, *args, **kwargs):
        sglang_init(self, *args, **kwargs)
        self.need_sort = True

    return __init__
