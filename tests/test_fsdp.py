"""FSDP: accelerate's transformer wrap policy resolves every name a model offers, for every preset and head, and
the shipped config leaves the choice to the model."""

from pathlib import Path

import pytest
import torch
import yaml
from accelerate.utils import FullyShardedDataParallelPlugin
from accelerate.utils.dataclasses import get_module_class_from_name

from briskbert import modeling
from briskbert.modeling import PRESETS, BriskBertConfig

ROOT = Path(__file__).resolve().parents[1]
HEADS = ["BriskBertForPreTraining", "BriskBertForMaskedLM", "BriskBertForSequenceClassification"]


@pytest.mark.parametrize("preset", sorted(PRESETS))
@pytest.mark.parametrize("head", HEADS)
def test_every_no_split_module_resolves_and_wraps_every_layer(preset, head):
    with torch.device("meta"):  # full-size presets, no memory: only the module tree matters
        model = getattr(modeling, head)(BriskBertConfig.from_preset(preset))
    for name in model._no_split_modules:
        assert get_module_class_from_name(model, name) is not None, (
            f"{preset}/{head}: {name} not in the model"
        )

    # What `fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP` does when the config names no classes.
    plugin = FullyShardedDataParallelPlugin(fsdp_version=2, auto_wrap_policy="transformer_based_wrap")
    plugin.set_auto_wrap_policy(model)
    wrapped = {
        type(module).__name__
        for module in model.modules()
        if plugin.auto_wrap_policy(module=module, recurse=False, nonwrapped_numel=0)
    }
    layer_class = type(model.base_model.layers[0]).__name__
    assert wrapped == {"BriskBertEmbeddings", layer_class}


def test_the_fsdp_config_lets_each_model_name_its_layer_class():
    """Listing both layer classes broke every model (each has one); the model's `_no_split_modules` decides."""
    config = yaml.safe_load((ROOT / "configs" / "accelerate" / "fsdp.yaml").read_text())
    assert config["distributed_type"] == "FSDP"
    assert config["fsdp_config"]["fsdp_auto_wrap_policy"] == "TRANSFORMER_BASED_WRAP"
    assert "fsdp_transformer_layer_cls_to_wrap" not in config["fsdp_config"]
