"""Finite weights in, finite weights out: a model to train from that holds NaN or inf is refused, named,
and a run whose loss or weights stop being finite ends with one error line instead of a broken model."""

from __future__ import annotations

from pathlib import Path

from briskbert.errors import UserError

# The weight files ``save_pretrained`` and ``accelerator.save_state`` write, in the order to name them.
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")


class TrainingDiverged(UserError):
    """The loss (or the gradient, or the weights) became NaN or infinite: the run stops, exit status 2."""


def non_finite_parameter(model) -> str | None:
    """The name of the first parameter that holds a NaN or an infinity; None when all are finite."""
    import torch

    for name, parameter in model.named_parameters():
        local = parameter.to_local() if hasattr(parameter, "to_local") else parameter  # an FSDP2 shard
        if not bool(torch.isfinite(local.detach()).all()):
            return name
    return None


def weights_file(folder: str | Path) -> str:
    """The weight file of a model folder, for messages (the folder itself when none is found)."""
    folder = Path(folder)
    for name in WEIGHT_FILES:
        if (folder / name).is_file():
            return str(folder / name)
    return str(folder)


def check_finite_weights(model, source: str) -> None:
    """Refuse to train from ``model`` (loaded from ``source``, e.g. ``--model_name_or_path runs/x/final``)
    when a weight holds NaN or inf: every step from it would be NaN too."""
    name = non_finite_parameter(model)
    if name is not None:
        raise UserError(
            f"{source}: the weight {name} holds NaN or infinite values (the run that wrote it diverged); "
            "train from an earlier checkpoint or another model."
        )
