"""How much memory training a model will take, estimated before anything is allocated.

A typo such as ``num_hidden_layers=1000000`` or ``hidden_size=20000`` otherwise allocates for minutes, swaps
the machine and dies with a traceback (or the kernel's OOM killer). The parameter count is exact: the model
is built on PyTorch's ``meta`` device (shapes only, no storage) with one and with two layers, and the
difference times the number of layers is added to the rest. Training holds the fp32 weights, their gradients
and AdamW's two moments (16 bytes a parameter), plus activations, estimated per layer as
``batch * seq * (34 * hidden + 5 * heads * seq)`` 16-bit values (Korthikanti et al., 2022, "Reducing
Activation Recomputation in Large Transformer Models"), doubled for fp32.
"""

from __future__ import annotations

from dataclasses import dataclass

from briskbert.errors import UserError

GIB = 1 << 30
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
    model_class, config, batch_size: int, seq_length: int, bytes_per_activation: int = 4
) -> MemoryEstimate:
    parameters = count_parameters(model_class, config)
    per_layer = (
        batch_size * seq_length * (34 * config.hidden_size + 5 * config.num_attention_heads * seq_length)
    )
    activations = config.num_hidden_layers * per_layer * bytes_per_activation // 2
    return MemoryEstimate(parameters, parameters * TRAINING_BYTES_PER_PARAMETER, activations)


def available_memory_bytes(device: str = "cpu") -> int | None:
    """Memory a new allocation can use: free GPU memory on CUDA, ``MemAvailable`` on Linux, else None."""
    if device.startswith("cuda"):
        import torch

        return torch.cuda.mem_get_info()[0]
    try:
        with open("/proc/meminfo") as handle:
            fields = dict(line.split(":", 1) for line in handle)
        return int(fields["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        return None


def check_model_fits(estimate: MemoryEstimate, available: int | None, flag: str) -> None:
    """Refuse a model that cannot be trained here, naming ``flag`` (the option that sized it)."""
    if available is None or estimate.total_bytes <= available:
        return
    raise UserError(
        f"{flag}: this model has {estimate.parameters:,} parameters and needs about "
        f"{estimate.total_bytes / GIB:,.1f} GiB to train (weights, gradients and AdamW state "
        f"{estimate.weight_state_bytes / GIB:,.1f} GiB, activations {estimate.activation_bytes / GIB:,.1f} GiB), "
        f"but {available / GIB:,.1f} GiB are available; choose smaller sizes or a smaller batch."
    )
