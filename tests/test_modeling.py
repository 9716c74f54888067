"""BriskBert model core: every architecture option, the heads, and the transformers contract."""

import pytest
import torch
from torch.nn import functional as F
from transformers import BertConfig, DynamicCache, ModernBertConfig
from transformers.loss.loss_utils import ForMaskedLMLoss

from briskbert.modeling import (
    BriskBertConfig,
    BriskBertForMaskedLM,
    BriskBertForMultipleChoice,
    BriskBertForNextSentencePrediction,
    BriskBertForPreTraining,
    BriskBertForQuestionAnswering,
    BriskBertForSequenceClassification,
    BriskBertForTokenClassification,
    BriskBertModel,
)

KV_HEADS = {"mha": 4, "gqa": 2, "mqa": 1}
# (position, norm, norm position, key/value heads, MLP, window): every pair of option values appears in some
# row (a pairwise covering of the 192 combinations), so any two options are checked together.
COMBOS = [
    ("absolute", "layernorm", "post", "mha", "mlp", None),  # BERT
    ("absolute", "rmsnorm", "pre", "mha", "glu", 3),
    ("absolute", "rmsnorm", "post", "gqa", "mlp", 3),
    ("absolute", "layernorm", "pre", "mqa", "mlp", None),
    ("sinusoidal", "rmsnorm", "post", "mha", "mlp", None),
    ("sinusoidal", "layernorm", "pre", "gqa", "glu", 3),
    ("sinusoidal", "layernorm", "pre", "mqa", "mlp", 3),
    ("rope", "layernorm", "post", "mha", "mlp", None),
    ("rope", "layernorm", "pre", "gqa", "glu", 3),
    ("rope", "rmsnorm", "post", "mqa", "glu", None),
    ("alibi", "layernorm", "pre", "mha", "glu", 3),
    ("alibi", "layernorm", "post", "gqa", "mlp", None),
    ("alibi", "rmsnorm", "post", "mqa", "glu", 3),
]
TINY = dict(vocab_size=97, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48)
TINY.update(max_position_embeddings=64, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
LENGTHS = [20, 13, 7]
ATOL = 1e-5


def tiny_config(
    position="absolute",
    norm="layernorm",
    norm_position="post",
    heads="mha",
    mlp="mlp",
    window=None,
    **overrides,
):
    options = dict(
        position_embedding_type=position, norm_type=norm, norm_position=norm_position, mlp_type=mlp
    )
    options.update(hidden_act="gelu" if mlp == "mlp" else "silu", num_key_value_heads=KV_HEADS[heads])
    options.update(sliding_window=window, global_attn_every_n_layers=2 if window else None)
    return BriskBertConfig(**{**TINY, **options, **overrides})


def build(model_class, config, attn_implementation="eager", seed=0):
    torch.manual_seed(seed)
    config._attn_implementation = attn_implementation
    model = model_class(config).eval()
    # Non-trivial norm parameters, so a swapped or skipped norm cannot hide behind ones and zeros.
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name:
                param.add_(0.1 * torch.randn_like(param))
    return model


def padded_batch(lengths=LENGTHS, vocab_size=97, seed=1):
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(5, vocab_size, (len(lengths), max(lengths)), generator=generator)
    attention_mask = (torch.arange(max(lengths))[None] < torch.tensor(lengths)[:, None]).long()
    return input_ids * attention_mask, attention_mask


# ------------------------------------------------------------------------------------------ option matrix
@pytest.mark.parametrize("combo", COMBOS, ids=lambda combo: "-".join(map(str, combo)))
def test_every_option_combination(combo, tmp_path):
    """Eager and SDPA agree, padding changes nothing, every parameter trains, a saved model reloads exactly."""
    model = build(BriskBertModel, tiny_config(*combo))
    input_ids, attention_mask = padded_batch()
    real = attention_mask.bool()
    with torch.no_grad():
        eager = model(input_ids, attention_mask=attention_mask)
        model.set_attn_implementation("sdpa")
        sdpa = model(input_ids, attention_mask=attention_mask)
        torch.testing.assert_close(
            sdpa.last_hidden_state[real], eager.last_hidden_state[real], atol=ATOL, rtol=0
        )
        torch.testing.assert_close(sdpa.pooler_output, eager.pooler_output, atol=ATOL, rtol=0)
        for row, length in enumerate(LENGTHS):
            alone = model(input_ids[row : row + 1, :length]).last_hidden_state[0]
            torch.testing.assert_close(sdpa.last_hidden_state[row, :length], alone, atol=ATOL, rtol=0)

    model.train()
    token_type_ids = (torch.arange(input_ids.shape[1]) >= 4).long().expand_as(input_ids)
    outputs = model(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
    (outputs.last_hidden_state.pow(2).mean() + outputs.pooler_output.pow(2).mean()).backward()
    missing = [name for name, param in model.named_parameters() if param.grad is None or not param.grad.any()]
    assert not missing, f"no gradient for {missing}"

    mlm = build(BriskBertForMaskedLM, tiny_config(*combo), "sdpa")
    mlm.save_pretrained(tmp_path)
    reloaded = BriskBertForMaskedLM.from_pretrained(tmp_path, attn_implementation="sdpa").eval()
    with torch.no_grad():
        expected = mlm(input_ids, attention_mask=attention_mask).logits
        got = reloaded(input_ids, attention_mask=attention_mask).logits
    torch.testing.assert_close(got, expected, atol=0, rtol=0)

    ignored = {"_name_or_path": None, "auto_map": None}
    assert reloaded.config.to_dict() | ignored == mlm.config.to_dict() | ignored


# ------------------------------------------------------------------------------------------ position schemes
@pytest.mark.parametrize("position", ["sinusoidal", "rope", "alibi"])
def test_unbounded_positions_run_past_max_position_embeddings(position):
    model = build(BriskBertModel, tiny_config(position, max_position_embeddings=16), "sdpa")
    with torch.no_grad():
        output = model(torch.randint(5, 97, (2, 40))).last_hidden_state
    assert output.shape == (2, 40, 32) and torch.isfinite(output).all()


def test_learned_positions_refuse_sequences_past_the_limit():
    model = build(BriskBertModel, tiny_config("absolute", max_position_embeddings=16))
    with pytest.raises(ValueError, match="exceeds max_position_embeddings=16.*truncation=True"):
        model(torch.randint(5, 97, (1, 17)))


@pytest.mark.parametrize("position", ["rope", "alibi"])
def test_relative_schemes_ignore_a_shift_of_all_positions(position):
    model = build(BriskBertModel, tiny_config(position, norm_position="pre"), "sdpa")
    input_ids, attention_mask = padded_batch()
    positions = torch.arange(input_ids.shape[1])[None]
    with torch.no_grad():
        base = model(input_ids, attention_mask=attention_mask, position_ids=positions).last_hidden_state
        shifted = model(
            input_ids, attention_mask=attention_mask, position_ids=positions + 7
        ).last_hidden_state
    real = attention_mask.bool()
    torch.testing.assert_close(shifted[real], base[real], atol=1e-4, rtol=0)


@pytest.mark.parametrize("position", ["absolute", "alibi"])
def test_sliding_window_limits_what_a_token_sees(position):
    window = 3
    config = tiny_config(position, window=window, num_hidden_layers=1, global_attn_every_n_layers=None)
    model = build(BriskBertModel, config, "sdpa")
    input_ids = torch.randint(5, 97, (1, 16), generator=torch.Generator().manual_seed(3))
    query_position = 8
    with torch.no_grad():
        base = model(input_ids).last_hidden_state[0, query_position]
        for position_changed in range(16):
            changed = input_ids.clone()
            changed[0, position_changed] = (changed[0, position_changed] + 1 - 5) % 92 + 5
            moved = not torch.allclose(model(changed).last_hidden_state[0, query_position], base, atol=1e-6)
            assert moved == (abs(position_changed - query_position) <= window), position_changed


def test_global_layers_follow_global_attn_every_n_layers():
    config = tiny_config(window=3, num_hidden_layers=6, global_attn_every_n_layers=3)
    assert config.layer_types == ["full_attention", "sliding_attention", "sliding_attention"] * 2
    model = BriskBertModel(config)
    assert [layer.attention.sliding_window for layer in model.layers] == [None, 4, 4, None, 4, 4]


# ------------------------------------------------------------------------------------------ attention variants
# Grouped-query attention: eager (key/value heads repeated here) agrees with transformers' SDPA in every combination.
def test_attentions_and_hidden_states_are_returned():
    model = build(BriskBertModel, tiny_config("alibi", heads="gqa", window=3))
    input_ids, attention_mask = padded_batch()
    outputs = model(
        input_ids, attention_mask=attention_mask, output_attentions=True, output_hidden_states=True
    )
    assert len(outputs.hidden_states) == 3 and len(outputs.attentions) == 2
    assert outputs.attentions[0].shape == (3, 4, 20, 20)
    torch.testing.assert_close(outputs.hidden_states[-1], outputs.last_hidden_state)
    assert outputs.attentions[1][0, :, 0, 5:].abs().max() == 0  # local layer: position 0 sees 0..3 only
    tuple_output = model(input_ids, attention_mask=attention_mask, return_dict=False)
    torch.testing.assert_close(tuple_output[0], outputs.last_hidden_state)


DECODER_MESSAGE = "is not supported: BriskBert is an encoder-only model"


@pytest.mark.parametrize("option", ["is_decoder", "add_cross_attention"])
def test_decoder_options_are_refused_in_one_line(option, tmp_path):
    # BERT's own config.json says False for both: such a config still loads; True is refused however it is set.
    bert_fields = {**BertConfig(**{option: False}).to_dict(), "vocab_size": 97, "model_type": "briskbert"}
    assert getattr(BriskBertConfig.from_dict(bert_fields), option) is False
    build(BriskBertModel, tiny_config(**{option: False})).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match=f"^{option}=True {DECODER_MESSAGE}"):
        BriskBertModel.from_pretrained(tmp_path, **{option: True})


@pytest.mark.parametrize(
    "name, value", [("encoder_hidden_states", torch.zeros(3, 20, 32)), ("past_key_values", DynamicCache())]
)
def test_decoder_inputs_are_refused_instead_of_ignored(name, value):
    model = build(BriskBertForMaskedLM, tiny_config())
    input_ids, attention_mask = padded_batch()
    with pytest.raises(ValueError, match=f"^{name} {DECODER_MESSAGE}"):
        model(input_ids, attention_mask=attention_mask, **{name: value})
    # What generic callers pass to any model is accepted.
    model(input_ids, attention_mask=attention_mask, use_cache=False, past_key_values=None)


def test_alibi_with_flash_attention_is_refused_at_load(tmp_path):
    BriskBertModel(tiny_config("alibi")).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="cannot add ALiBi's position bias"):
        BriskBertModel.from_pretrained(tmp_path, attn_implementation="flash_attention_2")


@pytest.mark.slow
def test_flex_attention_matches_eager():
    """flex_attention compiles its kernel (~10 s on CPU): one run covers ALiBi bias + sliding window masks."""
    model = build(BriskBertModel, tiny_config("alibi", heads="gqa", window=3, norm_position="pre"))
    input_ids, attention_mask = padded_batch()
    with torch.no_grad():
        eager = model(input_ids, attention_mask=attention_mask).last_hidden_state
        model.set_attn_implementation("flex_attention")
        flex = model(input_ids, attention_mask=attention_mask).last_hidden_state
    real = attention_mask.bool()
    torch.testing.assert_close(flex[real], eager[real], atol=ATOL, rtol=0)


# ------------------------------------------------------------------------------------------ training features
def test_gradient_checkpointing_gives_the_same_gradients():
    config = tiny_config("rope", "rmsnorm", "pre", "gqa", "glu", 3)
    input_ids, attention_mask = padded_batch()
    grads = []
    for checkpointing in (False, True):
        model = build(BriskBertForMaskedLM, config, "sdpa").train()
        if checkpointing:
            model.activation_checkpointing_enable()
        labels = input_ids.masked_fill(attention_mask == 0, -100)
        model(input_ids, attention_mask=attention_mask, labels=labels).loss.backward()
        grads.append({name: param.grad.clone() for name, param in model.named_parameters()})
    for name in grads[0]:
        torch.testing.assert_close(grads[1][name], grads[0][name], atol=1e-6, rtol=1e-5)


# ------------------------------------------------------------------------------------------ heads
def labelled_mlm_batch():
    input_ids, attention_mask = padded_batch()
    labels = torch.full_like(input_ids, -100)
    labels[:, 1:6:2] = input_ids[:, 1:6:2]
    return input_ids, attention_mask, labels


def test_mlm_logits_cover_every_position_and_the_loss_is_transformers():
    """Logits cover every position by default, as ModernBERT's; the loss can be over a window's items."""
    assert BriskBertConfig().sparse_prediction is ModernBertConfig().sparse_prediction is False
    input_ids, attention_mask, labels = labelled_mlm_batch()
    model = build(BriskBertForMaskedLM, tiny_config())
    outputs = model(input_ids, attention_mask=attention_mask, labels=labels)
    assert outputs.logits.shape == (3, 20, 97)
    torch.testing.assert_close(outputs.loss, ForMaskedLMLoss(outputs.logits, labels, 97))
    window = model(input_ids, attention_mask=attention_mask, labels=labels, num_items_in_batch=18).loss
    torch.testing.assert_close(window, outputs.loss / 2)  # 9 labelled positions of a window's 18


def test_decoder_is_tied_to_the_word_embeddings(tmp_path):
    model = build(BriskBertForMaskedLM, tiny_config())
    assert model.head.decoder.weight is model.model.embeddings.word_embeddings.weight
    model.save_pretrained(tmp_path)
    reloaded = BriskBertForMaskedLM.from_pretrained(tmp_path)
    assert reloaded.head.decoder.weight is reloaded.model.embeddings.word_embeddings.weight


def test_pretraining_head_adds_mlm_and_nsp_losses():
    input_ids, attention_mask, labels = labelled_mlm_batch()
    nsp_labels = torch.tensor([0, 1, 0])
    model = build(BriskBertForPreTraining, tiny_config("rope", "rmsnorm", "pre"))
    both = model(input_ids, attention_mask=attention_mask, labels=labels, next_sentence_label=nsp_labels)
    mlm = model(input_ids, attention_mask=attention_mask, labels=labels).loss
    nsp = BriskBertForNextSentencePrediction(model.config).eval()
    nsp.load_state_dict(model.state_dict(), strict=False)
    nsp_out = nsp(input_ids, attention_mask=attention_mask, labels=nsp_labels)
    torch.testing.assert_close(both.seq_relationship_logits, nsp_out.logits)
    torch.testing.assert_close(both.loss, mlm + nsp_out.loss)


SEQUENCE_LOSSES = [
    ("single_label_classification", [0, 2, 1], F.cross_entropy),
    ("regression", [0.5, -1.0, 2.0], lambda logits, labels: F.mse_loss(logits.squeeze(-1), labels)),
    ("multi_label_classification", [[1.0, 0, 1], [0, 0, 0], [0, 1, 1]], F.binary_cross_entropy_with_logits),
]


@pytest.mark.parametrize("problem, labels, loss", SEQUENCE_LOSSES)
def test_sequence_classification_losses(problem, labels, loss):
    labels, num_labels = torch.tensor(labels), 1 if problem == "regression" else 3
    config = tiny_config(num_labels=num_labels, problem_type=problem, classifier_pooling="mean")
    input_ids, attention_mask = padded_batch()
    model = build(BriskBertForSequenceClassification, config)
    out = model(input_ids, attention_mask=attention_mask, labels=labels)
    assert out.logits.shape == (3, num_labels)
    torch.testing.assert_close(out.loss, loss(out.logits, labels))


def test_question_answering_head():
    model = build(BriskBertForQuestionAnswering, tiny_config("alibi"))
    input_ids, attention_mask = padded_batch()
    starts, ends = torch.tensor([1, 2, 3]), torch.tensor([4, 5, 6])
    out = model(input_ids, attention_mask=attention_mask, start_positions=starts, end_positions=ends)
    assert out.start_logits.shape == out.end_logits.shape == (3, 20)
    expected = (F.cross_entropy(out.start_logits, starts) + F.cross_entropy(out.end_logits, ends)) / 2
    torch.testing.assert_close(out.loss, expected)


def test_multiple_choice_scores_each_choice_like_a_single_sequence():
    model = build(BriskBertForMultipleChoice, tiny_config("rope"))
    input_ids, attention_mask = padded_batch()
    out = model(input_ids[None], attention_mask=attention_mask[None], labels=torch.tensor([1]))
    assert out.logits.shape == (1, 3)
    single = model.classifier(model.model(input_ids[1:2, :13]).pooler_output)
    torch.testing.assert_close(out.logits[0, 1], single[0, 0], atol=ATOL, rtol=0)


HEADS = [BriskBertForPreTraining, BriskBertForSequenceClassification, BriskBertForTokenClassification]
HEADS += [BriskBertForQuestionAnswering, BriskBertForMultipleChoice]


@pytest.mark.parametrize("head", HEADS)
def test_heads_train_every_parameter(head):
    model = build(head, tiny_config("rope", "rmsnorm", "pre", "gqa", "glu", 3)).train()
    input_ids, attention_mask = padded_batch()
    inputs = dict(input_ids=input_ids, attention_mask=attention_mask)
    if head is BriskBertForMultipleChoice:
        inputs = {key: value[None] for key, value in inputs.items()}
    outputs = model(**inputs)
    sum(
        value.float().pow(2).mean() for value in outputs.values() if isinstance(value, torch.Tensor)
    ).backward()
    missing = [name for name, param in model.named_parameters() if param.grad is None or not param.grad.any()]
    assert not missing, f"no gradient for {missing}"


# ------------------------------------------------------------------------------------------ configuration
# One case per kind of check: an arithmetic rule between options, a choice, an activation, a number's range, a
# dependent option.
@pytest.mark.parametrize(
    "fields, message",
    [
        (dict(hidden_size=100, num_attention_heads=12), "hidden_size \\(100\\) must be divisible by"),
        (dict(num_key_value_heads=5), "divisible by num_key_value_heads \\(5\\)"),
        (dict(norm_type="batchnorm"), "norm_type='batchnorm'.*'layernorm', 'rmsnorm'"),
        (dict(hidden_act="swishy"), "hidden_act='swishy' is not a known activation"),
        (dict(num_hidden_layers=0), "num_hidden_layers must be a positive integer, got 0"),
        (dict(hidden_dropout_prob=1.5), "hidden_dropout_prob must be a probability"),
        (dict(global_attn_every_n_layers=3), "set sliding_window too"),
        (dict(position_embedding_type="rope", hidden_size=36, num_attention_heads=4), "even head dimension"),
        (dict(pad_token_id=40000), "pad_token_id \\(40000\\) must be None or an id below vocab_size"),
    ],
)
def test_invalid_configs_name_the_problem(fields, message):
    with pytest.raises(ValueError, match=message):
        BriskBertConfig(**fields)


def test_defaults_are_bert_base_and_presets_override_single_fields():
    ours, bert = BriskBertConfig().to_dict(), BertConfig().to_dict()
    shared = set(ours) & set(bert) - {"model_type"}
    assert {name: ours[name] for name in shared} == {name: bert[name] for name in shared}
    small = BriskBertConfig.from_preset("bert-small", vocab_size=1000)
    assert (small.hidden_size, small.num_hidden_layers, small.vocab_size) == (384, 6, 1000)
