"""How much memory training a model will take on the device that trains it, estimated before anything is
allocated.

A typo such as ``num_hidden_layers=1000000`` or ``hidden_size=20000`` otherwise allocates for minutes, swaps
the machine and dies with a traceback (or the kernel's OOM killer). The parameter count is exact: the model
is built on PyTorch's ``meta`` device (shapes only, no storage) with one and with two layers, and the
difference times the number of layers is added to the rest. Training holds the fp32 weights, their gradients
and AdamW's two moments (16 bytes a parameter; 2 more for autocast's 16-bit copies), plus activations:

* per layer and token ``20 * hidden`` values in the activation dtype (2 bytes under CUDA's bf16/fp16 autocast;
  4 in fp32, and on CPU, whose autocast keeps most of them fp32), Korthikanti et al.'s ``34 * hidden`` 16-bit
  values ("Reducing Activation Recomputation in Large Transformer Models", 2022) plus what PyTorch also keeps;
* the attention scores (``heads * seq`` per token and layer: softmax input, output, dropout mask) only where
  they are stored: eager attention, and SDPA on CPU with attention dropout (its math kernel). Flash and
  memory-efficient kernels never store them;
* the MLM decoder's logits (activation dtype, their fp32 copy and gradient) at the predicted positions.

Measured against peak memory, estimate / peak: 0.88-1.05 on CPU in fp32 and 1.19-1.30 in bf16 (peak RSS of two
AdamW steps of 4 layers of hidden 256 and 512 at 4k tokens a batch, SDPA and eager, attention dropout 0 and 0.1),
1.04 on CUDA (BERT-large / 512 at batch 64 in bf16: 37.0 GiB estimated, 35.5 GiB ``max_memory_allocated``). A
run estimated above what is available by less than :data:`ESTIMATE_ERROR` is warned about, not refused.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from briskbert.errors import SettingError

logger = logging.getLogger(__name__)

GIB = 1 << 30
#: how far the estimate may be from the measured peak, either way (see the module docstring)
ESTIMATE_ERROR = 0.3
#: weights, gradients and AdamW's two moments, all fp32
TRAINING_BYTES_PER_PARAMETER = 16


@dataclass(frozen=True)
class MemoryEstimate:
    parameters: int
    weight_state_bytes: int  # weights, gradients and optimizer state
    activation_bytes: int

    @property
    def total_bytes(self) -> int:
        return self.weight_state_bytes + self.activation_bytes


def count_parameters(model_class, config) -> int:
    """The exact parameter count of ``model_class(config)``, computed without allocating its weights."""
    import torch

    def built_with(layers: int) -> int:
        with torch.device("meta"):
            model = model_class(replace_layers(config, layers))
        return sum(parameter.numel() for parameter in model.parameters())

    one, two = built_with(1), built_with(2)
    return one + (config.num_hidden_layers - 1) * (two - one)


def replace_layers(config, layers: int):
    """A copy of ``config`` with ``layers`` layers (the layer pattern of local/global attention is kept)."""
    return config.__class__(**{**config.to_dict(), "num_hidden_layers": layers})


def estimate_training_memory(
    model_class,
    config,
    batch_size: int,
    seq_length: int,
    device_type: str = "cpu",
    mixed_precision: str = "no",
    predicted_fraction: float = 1.0,
) -> MemoryEstimate:
    """Training memory of ``model_class(config)`` at ``batch_size`` x ``seq_length`` tokens on ``device_type``
    (``cuda`` or ``cpu``) under ``mixed_precision`` (``no``, ``bf16``, ``fp16``); the MLM decoder runs at
    ``predicted_fraction`` of the tokens (the masking rate with a sparse decoder)."""
    parameters = count_parameters(model_class, config)
    autocast = mixed_precision in ("bf16", "fp16")
    width = 2 if autocast and device_type == "cuda" else 4  # bytes of one activation
    per_token = 20 * config.hidden_size * width
    attention = getattr(config, "_attn_implementation", None) or "sdpa"
    dropout = getattr(config, "attention_probs_dropout_prob", 0) > 0
    if attention == "eager" or (
        attention == "sdpa" and device_type == "cpu" and dropout
    ):  # SDPA's math kernel
        # softmax input and output and a 1-byte mask; with dropout also its output and its fp32 mask
        per_token += config.num_attention_heads * seq_length * ((4 if dropout else 2) * width + 1)
    tokens = batch_size * seq_length
    logits = round(tokens * predicted_fraction) * config.vocab_size * (width + 8)
    activations = config.num_hidden_layers * tokens * per_token + logits
    weight_state = parameters * (TRAINING_BYTES_PER_PARAMETER + (2 if autocast else 0))
    return MemoryEstimate(parameters, weight_state, activations)


def available_memory_bytes(device_type: str) -> int | None:
    """Memory a new allocation can use on ``device_type``: free GPU memory on CUDA, ``MemAvailable`` on Linux,
    else None."""
    if device_type == "cuda":
        import torch

        return torch.cuda.mem_get_info()[0]
    if device_type != "cpu":
        return None
    try:
        with open("/proc/meminfo") as handle:
            fields = dict(line.split(":", 1) for line in handle)
        return int(fields["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        return None


def check_model_fits(estimate: MemoryEstimate, available: int | None, setting: str) -> None:
    """Refuse a model that cannot be trained here, naming ``setting`` (the one that sized it); only warn when it
    might fit, the estimate exceeding ``available`` by less than its error."""
    if available is None or estimate.total_bytes <= available:
        return
    needs = (
        f"this model has {estimate.parameters:,} parameters and needs about "
        f"{estimate.total_bytes / GIB:,.1f} GiB to train (weights, gradients and AdamW state "
        f"{estimate.weight_state_bytes / GIB:,.1f} GiB, activations {estimate.activation_bytes / GIB:,.1f} GiB), "
        f"but {available / GIB:,.1f} GiB are available"
    )
    if estimate.total_bytes * (1 - ESTIMATE_ERROR) <= available:
        logger.warning(
            f"{setting} {needs}; within the estimate's error ({ESTIMATE_ERROR:.0%}), so training starts."
        )
        return
    raise SettingError(setting, f"{needs}; choose smaller sizes or a smaller batch.")
