"""Training memory estimated before anything is allocated, so that ``num_hidden_layers=1000000`` is one error
line rather than an OOM kill (activations after Korthikanti et al. 2022; measured peaks 0.88-1.30x on CPU)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from briskbert.errors import SettingError

logger = logging.getLogger(__name__)

GIB = 1 << 30
ESTIMATE_ERROR = 0.3  # how far the estimate may be from the measured peak, either way


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
        with torch.device("meta"):  # shapes only, no storage
            model = model_class(config.__class__(**{**config.to_dict(), "num_hidden_layers": layers}))
        return sum(parameter.numel() for parameter in model.parameters())

    one, two = built_with(1), built_with(2)
    return one + (config.num_hidden_layers - 1) * (two - one)


def estimate_training_memory(
    model_class,
    config,
    batch_size: int,
    seq_length: int,
    device_type: str = "cpu",
    mixed_precision: str = "no",
    predicted_fraction: float = 1.0,
) -> MemoryEstimate:
    """Training memory of ``model_class(config)`` at ``batch_size`` x ``seq_length`` tokens, the MLM decoder on
    ``predicted_fraction`` of them."""
    parameters = count_parameters(model_class, config)
    autocast = mixed_precision in ("bf16", "fp16")
    width = 2 if autocast and device_type == "cuda" else 4  # bytes of one activation
    per_token = 20 * config.hidden_size * width
    attention = getattr(config, "_attn_implementation", None) or "sdpa"
    dropout = getattr(config, "attention_probs_dropout_prob", 0) > 0
    math_kernel = attention == "sdpa" and device_type == "cpu" and dropout  # SDPA's math kernel stores scores
    if attention == "eager" or math_kernel:
        # softmax input and output and a 1-byte mask; with dropout also its output and its fp32 mask
        per_token += config.num_attention_heads * seq_length * ((4 if dropout else 2) * width + 1)
    tokens = batch_size * seq_length
    logits = round(tokens * predicted_fraction) * config.vocab_size * (width + 8)
    activations = config.num_hidden_layers * tokens * per_token + logits
    # fp32 weights, gradients and AdamW's two moments (16 bytes), and an autocast copy of the weights
    weight_state = parameters * (16 + (2 if autocast else 0))
    return MemoryEstimate(parameters, weight_state, activations)


def available_memory_bytes(device_type: str) -> int | None:
    """Free GPU memory on CUDA, the memory available to a new process on CPU, else None."""
    if device_type == "cuda":
        import torch

        return torch.cuda.mem_get_info()[0]
    if device_type == "cpu":
        import psutil

        return psutil.virtual_memory().available  # Linux's MemAvailable
    return None


def check_model_fits(estimate: MemoryEstimate, available: int | None, setting: str) -> None:
    """Refuse a model that cannot be trained here, naming ``setting``; only warn when it is within the error."""
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
