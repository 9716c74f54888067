"""`attn_implementation="torch_varlen"`: PyTorch's varlen flash kernel (`torch.nn.attention.varlen.varlen_attn`,
2.10+) behind transformers' attention dispatch, for GPUs without `flash_attn`; it takes the varlen layout's packed
`(1, tokens)` batch, as `flash_attn_varlen_func` does. Remote code: imports only torch and transformers."""

import torch
from transformers import AttentionInterface

ATTN_IMPLEMENTATION = "torch_varlen"

try:
    from torch.nn.attention.varlen import varlen_attn
except ImportError:  # PyTorch < 2.10
    varlen_attn = None


def torch_varlen_attention(
    module, query, key, value, attention_mask, scaling=None, dropout=0.0, sliding_window=None, **kwargs
) -> tuple[torch.Tensor, None]:
    """transformers' attention signature over ``varlen_attn``: q/k/v arrive as ``(1, heads, tokens, head_dim)``
    with the varlen layout's boundaries, and leave as ``(1, tokens, heads, head_dim)``, like flash-attention's."""
    if varlen_attn is None:
        raise ImportError(f"attn_implementation={ATTN_IMPLEMENTATION!r} needs PyTorch 2.10 or newer.")
    if kwargs.get("cu_seq_lens_q") is None or dropout:
        raise ValueError(
            f"attn_implementation={ATTN_IMPLEMENTATION!r} runs packed batches (the varlen layout) without attention "
            "dropout: keep unpad_inputs='auto' or 'always' and set attention_probs_dropout_prob=0."
        )
    query, key, value = (states[0].transpose(0, 1) for states in (query, key, value))
    groups = query.shape[1] // key.shape[1]
    if groups > 1:  # the kernel wants as many key/value heads as query heads
        key, value = key.repeat_interleave(groups, dim=1), value.repeat_interleave(groups, dim=1)
    # transformers' flash convention: a window of `sliding_window` counts the token itself.
    window = (sliding_window - 1, sliding_window - 1) if sliding_window is not None else (-1, -1)
    packing = (kwargs[name] for name in ("cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k"))
    output = varlen_attn(query, key, value, *packing, scale=scaling, window_size=window)
    return output.unsqueeze(0), None


AttentionInterface.register(ATTN_IMPLEMENTATION, torch_varlen_attention)
