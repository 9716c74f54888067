"""FSDP: accelerate's transformer wrap policy resolves every name a model offers, for every preset and head, the
shipped config leaves the choice to the model, and a sharded 2-process job trains like one process."""

import json
import os
import subprocess
import sys
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
        assert get_module_class_from_name(model, name), f"{preset}/{head}: {name} not in the model"

    # What `fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP` does when the config names no classes.
    plugin = FullyShardedDataParallelPlugin(fsdp_version=2, auto_wrap_policy="transformer_based_wrap")
    plugin.set_auto_wrap_policy(model)
    wrapped = {
        type(module).__name__
        for module in model.modules()
        if plugin.auto_wrap_policy(module=module, recurse=False, nonwrapped_numel=0)
    }
    # Only the layers: the embeddings stay in the root unit with the MLM decoder tied to them.
    assert wrapped == {type(model.base_model.layers[0]).__name__}


def test_the_fsdp_config_lets_each_model_name_its_layer_class():
    """Listing both layer classes broke every model (each has one); the model's `_no_split_modules` decides."""
    config = yaml.safe_load((ROOT / "configs" / "accelerate" / "fsdp.yaml").read_text())
    assert config["distributed_type"] == "FSDP"
    assert config["fsdp_config"]["fsdp_auto_wrap_policy"] == "TRANSFORMER_BASED_WRAP"
    assert "fsdp_transformer_layer_cls_to_wrap" not in config["fsdp_config"]


FSDP_WORKER = """
import json
import os
import sys
import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard
from briskbert.modeling import BriskBertConfig, BriskBertForMaskedLM
from briskbert.training.engine.checkpointing import own_class

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
config = BriskBertConfig.from_preset(
    PRESET, vocab_size=200, hidden_size=64, num_attention_heads=4, num_key_value_heads=None,
    intermediate_size=128, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
)
model = BriskBertForMaskedLM(config)
reference = BriskBertForMaskedLM(config)
reference.load_state_dict(model.state_dict())
# What accelerate's FSDP2 preparation does with TRANSFORMER_BASED_WRAP: shard each `_no_split_modules` module,
# then the root.
for module in list(model.modules()):
    if type(module).__name__ in model._no_split_modules:
        fully_shard(module)
fully_shard(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
reference_optimizer = torch.optim.AdamW(reference.parameters(), lr=1e-3)
generator = torch.Generator().manual_seed(1)
losses = []
for step in range(3):
    input_ids = torch.randint(5, 200, (2 * world, 16), generator=generator)
    own = slice(2 * rank, 2 * rank + 2)  # every token is labelled: the mean over ranks is the full-batch mean
    loss = model(input_ids=input_ids[own], labels=input_ids[own]).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    reference_loss = reference(input_ids=input_ids, labels=input_ids).loss
    reference_loss.backward()
    reference_optimizer.step()
    reference_optimizer.zero_grad()
    dist.all_reduce(loss := loss.detach().clone())
    losses.append((loss.item() / world, reference_loss.item()))
sharded = {name: param.full_tensor() for name, param in model.named_parameters()}
worst = max((sharded[name] - param).abs().max().item() for name, param in reference.named_parameters())
# Saved through FSDP2's class of torch's own, the folder must still ship modeling_briskbert.py.
state_dict = {name: tensor.full_tensor() for name, tensor in model.state_dict().items()}
if rank == 0:
    with own_class(model):
        model.save_pretrained("saved", state_dict=state_dict)
    assert type(model).__module__.startswith("torch."), type(model)  # the sharded class is back
    sharded_type = type(next(model.parameters())).__name__
    print(json.dumps({"losses": losses, "max_param_difference": worst, "sharded": sharded_type}))
dist.barrier()  # neither process tears gloo down while the other still talks to it
dist.destroy_process_group()
sys.stdout.flush()
os._exit(0)  # past this point only interpreter teardown, where gloo's threads now and then abort the process
"""


@pytest.mark.slow
def test_two_process_fsdp2_on_cpu_trains_like_one_process(tmp_path, preset="modern-tiny"):
    """A 2-process FSDP2 job trains like one process and saves its remote code (DTensor ties)."""
    script = tmp_path / "worker.py"
    script.write_text(f"PRESET = {preset!r}\n" + FSDP_WORKER)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    launch = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--standalone", script]
    proc = subprocess.run(launch, capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["sharded"] == "DTensor"
    for sharded_loss, reference_loss in result["losses"]:
        assert sharded_loss == pytest.approx(reference_loss, abs=1e-5)
    assert result["max_param_difference"] < 1e-5
    saved = sorted(path.name for path in (tmp_path / "saved").iterdir())
    assert "modeling_briskbert.py" in saved and not any(name.startswith("_fsdp") for name in saved), saved
    saved_config = json.loads((tmp_path / "saved" / "config.json").read_text())
    assert saved_config["architectures"] == ["BriskBertForMaskedLM"]
