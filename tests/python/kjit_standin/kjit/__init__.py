"""A stand-in for the kjit core API in kjit.sglang's CPU tests: Error, Unsupported,
verify_attention (a recorder with the real signature) and default_client.

Its package path also holds the real client/python/kjit, so kjit.sglang is the code under test.
Tests set `error` to make the next calls raise it.
"""
import os

__path__.append(os.path.normpath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "..",
                                              "client", "python", "kjit")))

OUTPUT_FILL = 2.0  # what verify_attention writes into o_extend
calls = []  # one dict of the arguments, by parameter name, per call
error = None  # raised by verify_attention when set


class Error(Exception):
    def __init__(self, code, message):
        super().__init__(message)
        self.code = code
        self.message = message


class Unsupported(Error):
    def __init__(self, message):
        super().__init__(12, message)  # UNIMPLEMENTED


def verify_attention(
    q_extend,
    k_extend,
    v_extend,
    o_extend,
    k_buffer,
    v_buffer,
    qo_indptr,
    kv_indptr,
    kv_indices,
    custom_mask,
    is_causal,
    mask_indptr,
    max_len_extend,
    k_scale,
    v_scale,
    sm_scale=None,
    logit_cap=0.0,
    skip_prefix_custom_mask=True,
    sliding_window_size=-1,
    sinks=None,
    window_kv_offsets=None,
    xai_temperature_len=-1,
    *,
    lse=None,
    max_prefix=None,
    fp8_numerics="dequant",
    client=None,
):
    calls.append(dict(locals()))
    if error is not None:
        raise error
    o_extend[...] = OUTPUT_FILL


def default_client():
    return None


def reset():
    global error
    calls.clear()
    error = None
