"""Token-to-KV-pool allocators with SGLang's need_sort behaviour: with need_sort, freed slots (or
pages) wait in release_pages until free_pages runs out, then merge_and_sort_free merges them in
sorted; without it they go straight back into free_pages."""
import abc

import numpy as np

_EMPTY = np.zeros(0, dtype=np.int64)


class BaseTokenToKVPoolAllocator(abc.ABC):
    @abc.abstractmethod
    def __init__(self, size, page_size, dtype, device, kvcache, need_sort):
        self.size = size
        self.page_size = page_size
        self.dtype = dtype
        self.device = device
        self._kvcache = kvcache
        self.need_sort = need_sort
        self.free_pages = None
        self.release_pages = None

    def available_size(self):
        return (len(self.free_pages) + len(self.release_pages)) * self.page_size

    def merge_and_sort_free(self):
        if len(self.release_pages) > 0:
            self.free_pages = np.sort(np.concatenate((self.free_pages, self.release_pages)))
            self.release_pages = _EMPTY.copy()

    @abc.abstractmethod
    def clear(self):
        raise NotImplementedError()


class TokenToKVPoolAllocator(BaseTokenToKVPoolAllocator):
    def __init__(self, size, dtype, device, kvcache, need_sort):
        super().__init__(size, 1, dtype, device, kvcache, need_sort)
        self.clear()

    def clear(self):
        self.free_pages = np.arange(1, self.size + 1, dtype=np.int64)  # slot 0 pads
        self.release_pages = _EMPTY.copy()

    def alloc(self, need_size):
        if self.need_sort and need_size > len(self.free_pages):
            self.merge_and_sort_free()
        if need_size > len(self.free_pages):
            return None
        selected, self.free_pages = self.free_pages[:need_size], self.free_pages[need_size:]
        return selected

    def free(self, free_index):
        if len(free_index) == 0:
            return
        if self.need_sort:
            self.release_pages = np.concatenate((self.release_pages, free_index))
        else:
            self.free_pages = np.concatenate((self.free_pages, free_index))


class PagedTokenToKVPoolAllocator(BaseTokenToKVPoolAllocator):
    def __init__(self, size, page_size, dtype, device, kvcache, need_sort):
        super().__init__(size, page_size, dtype, device, kvcache, need_sort)
        self.num_pages = size // page_size
        self.clear()

    def clear(self):
        self.free_pages = np.arange(1, self.num_pages + 1, dtype=np.int64)
        self.release_pages = _EMPTY.copy()

    def alloc(self, need_size):
        num_pages = need_size // self.page_size
        if self.need_sort and num_pages > len(self.free_pages):
            self.merge_and_sort_free()
        if num_pages > len(self.free_pages):
            return None
        pages, self.free_pages = self.free_pages[:num_pages], self.free_pages[num_pages:]
        return (pages[:, None] * self.page_size + np.arange(self.page_size)).reshape(-1)

    def free(self, free_index):
        if len(free_index) == 0:
            return
        pages = np.unique(np.asarray(free_index) // self.page_size)
        if self.need_sort:
            self.release_pages = np.concatenate((pages, self.release_pages))
        else:
            self.free_pages = np.concatenate((pages, self.free_pages))
