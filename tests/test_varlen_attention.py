"""The ``torch_varlen`` backend's layout, GQA and window handling against the padded model, with a plain CPU
kernel of ``varlen_attn``'s signature standing in (the GPU run is in docs/performance.md)."""

import pytest
import torch
from torch.nn import functional as F

from briskbert.modeling import BriskBertConfig, BriskBertModel, varlen_attention
from briskbert.modeling.modeling_briskbert import VarlenLayout


def reference_varlen_attn(
    query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, *, scale=None, window_size=(-1, -1)
):
    """What ``torch.nn.attention.varlen.varlen_attn`` computes, per packed sequence: (T, H, D) in and out."""
    assert torch.equal(cu_seq_q, cu_seq_k) and max_q == int(cu_seq_q.diff().max()) == max_k
    outputs = []
    for start, end in zip(cu_seq_q[:-1].tolist(), cu_seq_q[1:].tolist()):
        q, k, v = (t[start:end].transpose(0, 1) for t in (query, key, value))
        positions = torch.arange(end - start)
        allowed = None
        if window_size != (-1, -1):
            left, right = window_size
            offset = positions[None, :] - positions[:, None]
            allowed = (offset >= -left) & (offset <= right)
        outputs.append(
            F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, scale=scale).transpose(0, 1)
        )
    return torch.cat(outputs)


@pytest.mark.parametrize("heads", [4, 2, 1], ids=["mha", "gqa", "mqa"])
@pytest.mark.parametrize("window", [None, 2])
def test_packed_batch_through_varlen_kernel_equals_padded_model(monkeypatch, heads, window):
    monkeypatch.setattr(varlen_attention, "varlen_attn", reference_varlen_attn)
    attention = dict(num_attention_heads=4, num_key_value_heads=heads, attention_probs_dropout_prob=0.0)
    local = dict(sliding_window=window, global_attn_every_n_layers=2 if window else None)
    config = BriskBertConfig.from_preset("modern-tiny", vocab_size=100, **attention, **local)
    torch.manual_seed(0)
    model = BriskBertModel(config).eval()
    lengths = torch.tensor([7, 3, 12, 1])
    attention_mask = (torch.arange(12)[None] < lengths[:, None]).long()
    input_ids = torch.randint(5, 100, (4, 12)) * attention_mask
    with torch.no_grad():
        model.set_attn_implementation("sdpa")
        expected = model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        model.set_attn_implementation(varlen_attention.ATTN_IMPLEMENTATION)
        model.gather_cost = model.fixed_cost = 0  # always unpad
        layout = model.choose_layout(attention_mask, varlen_attention.ATTN_IMPLEMENTATION)
        assert isinstance(layout, VarlenLayout)
        got = model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
    real = attention_mask.bool()
    torch.testing.assert_close(got[real], expected[real], atol=1e-5, rtol=0)


def test_attention_dropout_is_refused_rather_than_skipped(monkeypatch):
    monkeypatch.setattr(varlen_attention, "varlen_attn", reference_varlen_attn)
    q, lengths = torch.zeros(1, 2, 5, 4), torch.tensor([0, 5])
    packing = dict(cu_seq_lens_q=lengths, cu_seq_lens_k=lengths, max_length_q=5, max_length_k=5)
    with pytest.raises(ValueError, match="attention_probs_dropout_prob=0"):
        varlen_attention.torch_varlen_attention(None, q, q, q, None, dropout=0.1, **packing)
