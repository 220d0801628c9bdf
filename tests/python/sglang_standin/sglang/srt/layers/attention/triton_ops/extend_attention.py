"""The recorder in place of SGLang's Triton extend-attention kernel (same signature)."""

CALLS = []  # one dict of the arguments, by parameter name, per call
OUTPUT_FILL = 1.0  # what the recorder writes into o_extend


def extend_attention_fwd(
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
):
    CALLS.append(dict(locals()))
    o_extend[...] = OUTPUT_FILL
