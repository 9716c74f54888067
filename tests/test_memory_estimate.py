"""Sizes that cannot be trained are refused before anything is allocated."""

import pytest

from briskbert.errors import UserError
from briskbert.modeling import (
    BriskBertConfig,
    BriskBertForMaskedLM,
    BriskBertForSequenceClassification,
)
from briskbert.training.engine.memory import (
    GIB,
    check_model_fits,
    count_parameters,
    estimate_training_memory,
)


@pytest.mark.parametrize(
    ("preset", "overrides"),
    [
        ("bert-tiny", {}),
        ("bert-tiny", {"num_hidden_layers": 5, "embedding_size": 64}),
        ("modern-tiny", {"num_hidden_layers": 4}),  # gated MLP, local/global layers, no biases
        ("modern-tiny", {"num_key_value_heads": 1, "position_embedding_type": "absolute"}),
    ],
)
@pytest.mark.parametrize("model_class", [BriskBertForMaskedLM, BriskBertForSequenceClassification])
def test_the_parameter_count_is_exact_without_building_the_model(preset, overrides, model_class):
    config = BriskBertConfig.from_preset(preset, vocab_size=500, **overrides)
    built = sum(parameter.numel() for parameter in model_class(config).parameters())
    assert count_parameters(model_class, config) == built


def test_absurd_sizes_are_counted_in_a_moment_and_refused():
    config = BriskBertConfig.from_preset("bert-base", num_hidden_layers=1_000_000)
    estimate = estimate_training_memory(BriskBertForMaskedLM, config, batch_size=8, seq_length=128)
    assert estimate.parameters > 7 * 10**12  # ~7.1M per layer
    with pytest.raises(UserError, match=r"--config_overrides: this model has [\d,]+ parameters"):
        check_model_fits(estimate, 24 * GIB, "--config_overrides")


def test_a_model_that_fits_is_accepted_and_the_estimate_grows_with_the_batch():
    config = BriskBertConfig.from_preset("bert-base")
    small = estimate_training_memory(BriskBertForMaskedLM, config, batch_size=8, seq_length=128)
    large = estimate_training_memory(BriskBertForMaskedLM, config, batch_size=32, seq_length=512)
    check_model_fits(small, 24 * GIB, "--config_overrides")  # BERT-base trains in well under 24 GiB
    assert small.weight_state_bytes == large.weight_state_bytes == 16 * small.parameters
    assert large.activation_bytes > 4 * small.activation_bytes
    with pytest.raises(UserError, match="smaller"):
        check_model_fits(large, 4 * GIB, "--per_device_train_batch_size")
