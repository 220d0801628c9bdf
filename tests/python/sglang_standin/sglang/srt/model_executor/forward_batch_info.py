from enum import IntEnum, auto


class ForwardMode(IntEnum):
    EXTEND = auto()
    DECODE = auto()
    MIXED = auto()
    IDLE = auto()
    TARGET_VERIFY = auto()
    DRAFT_EXTEND = auto()
    DRAFT_EXTEND_V2 = auto()

    def is_extend(self):
        return self in (ForwardMode.EXTEND, ForwardMode.MIXED, ForwardMode.DRAFT_EXTEND,
                        ForwardMode.TARGET_VERIFY)

    def is_decode(self):
        return self == ForwardMode.DECODE

    def is_idle(self):
        return self == ForwardMode.IDLE

    def is_target_verify(self):
        return self == ForwardMode.TARGET_VERIFY

    def is_draft_extend(self, include_v2=False):
        return self == ForwardMode.DRAFT_EXTEND or (
            include_v2 and self == ForwardMode.DRAFT_EXTEND_V2)


class ForwardBatch:
    """The fields the Triton backend reads. seq_lens are prefix lengths; in TARGET_VERIFY they
    exclude the draft tokens, whose masks come in spec_info.custom_mask."""

    def __init__(self, forward_mode, req_pool_indices, seq_lens, out_cache_loc, token_to_kv_pool,
                 extend_seq_lens=None, spec_info=None, attn_backend=None):
        self.forward_mode = forward_mode
        self.batch_size = len(req_pool_indices)
        self.req_pool_indices = req_pool_indices
        self.seq_lens = seq_lens
        self.out_cache_loc = out_cache_loc
        self.token_to_kv_pool = token_to_kv_pool
        self.extend_seq_lens = extend_seq_lens
        self.spec_info = spec_info
        self.attn_backend = attn_backend
