"""Sizes that cannot be trained are refused before anything is allocated; sizes that fit the device that trains
them are not."""

import logging
from types import SimpleNamespace

import pytest
import torch

from briskbert.errors import UserError
from briskbert.modeling import BriskBertConfig, BriskBertForMaskedLM, BriskBertForSequenceClassification
from briskbert.training.engine import memory
from briskbert.training.engine.memory import GIB, check_model_fits, count_parameters, estimate_training_memory
from briskbert.training.tasks.pretraining import check_new_model_fits
from briskbert.training.tasks.pretraining_settings import (
    PretrainingData,
    PretrainingModel,
    PretrainingSettings,
)


@pytest.mark.parametrize(
    ("preset", "overrides"),
    [
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


def test_absurd_sizes_are_counted_in_a_moment_and_refused_and_bert_base_fits():
    config = BriskBertConfig.from_preset("bert-base", num_hidden_layers=1_000_000)
    estimate = estimate_training_memory(BriskBertForMaskedLM, config, batch_size=8, seq_length=128)
    assert estimate.parameters > 7 * 10**12  # ~7.1M per layer
    with pytest.raises(UserError, match=r"config_overrides this model has [\d,]+ parameters"):
        check_model_fits(estimate, 24 * GIB, "config_overrides")
    config = BriskBertConfig.from_preset("bert-base")
    small = estimate_training_memory(BriskBertForMaskedLM, config, batch_size=8, seq_length=128)
    large = estimate_training_memory(BriskBertForMaskedLM, config, batch_size=32, seq_length=512)
    check_model_fits(small, 24 * GIB, "config_overrides")  # BERT-base trains in well under 24 GiB
    assert small.weight_state_bytes == large.weight_state_bytes == 16 * small.parameters
    assert large.activation_bytes > 4 * small.activation_bytes


# ------------------------------------------------------------------------- the device the run trains on
LARGE = {"hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16, "intermediate_size": 4096}


def large(attn_implementation="sdpa"):
    config = BriskBertConfig.from_preset("bert-base", vocab_size=30522, **LARGE)
    config._attn_implementation = attn_implementation
    return config


def test_a_gpu_run_is_checked_against_the_gpus_free_memory_in_its_autocast_dtype(monkeypatch, tmp_path):
    """The estimate uses the training device's free memory in bf16: BERT-large/512 at 128 fits 141 GB."""
    asked = []

    def free_memory(device_type):
        asked.append(device_type)
        return int(124.8 * GIB)

    monkeypatch.setattr(memory, "available_memory_bytes", free_memory)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("A document.\n")
    settings = PretrainingSettings(
        data=PretrainingData(train_file=str(corpus), max_seq_length=512),
        model=PretrainingModel(
            config_name="bert-base", config_overrides=",".join(f"{k}={v}" for k, v in LARGE.items())
        ),
    )
    gpu = SimpleNamespace(device=torch.device("cuda", 0), mixed_precision="bf16")
    check_new_model_fits(settings, 128, gpu)
    assert asked == ["cuda"]
    with pytest.raises(UserError, match="config_overrides"):
        check_new_model_fits(settings, 512, gpu)


def test_sdpa_stores_no_attention_scores_and_eager_attention_does():
    """At fixed tokens a batch, SDPA's activations do not grow with the sequence; eager attention's do."""

    def activations(attention, batch, seq):
        return estimate_training_memory(
            BriskBertForMaskedLM, large(attention), batch, seq, "cuda", "bf16"
        ).activation_bytes

    assert activations("sdpa", 64, 512) == activations("sdpa", 256, 128)
    assert activations("eager", 64, 512) > 1.5 * activations("eager", 256, 128)


def test_a_run_over_the_estimate_by_less_than_its_error_is_warned_about_not_refused(caplog):
    estimate = estimate_training_memory(BriskBertForMaskedLM, large(), 64, 512, "cuda", "bf16", 0.15)
    within, field = int(estimate.total_bytes * (1 - memory.ESTIMATE_ERROR / 2)), "per_device_train_batch_size"
    with caplog.at_level(logging.WARNING, logger=memory.__name__):
        check_model_fits(estimate, within, field)
    assert "within the estimate's error" in caplog.text
    with pytest.raises(UserError, match="per_device_train_batch_size this model .* choose smaller sizes"):
        check_model_fits(estimate, int(estimate.total_bytes * (1 - 2 * memory.ESTIMATE_ERROR)), field)
