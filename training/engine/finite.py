"""Finite weights in, finite weights out: a model to train from that holds NaN or inf is refused, named,
and a run whose loss or weights stop being finite ends with one error line instead of a broken model."""

from __future__ import annotations

import math
from pathlib import Path

from briskbert.errors import UserError
from briskbert.training.engine.checkpointing import intact_checkpoint

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


def refuse_divergence(accelerator, loss_sum, grad_norm, step: int, output_dir: Path) -> None:
    """Stop before the optimizer applies a NaN/inf loss or gradient norm (the same verdict on every process:
    both are reduced). Under fp16 loss scaling an inf gradient is the scaler's cue to skip the step, so only
    the loss counts there."""
    what, value = "loss", float(loss_sum)
    if math.isfinite(value) and grad_norm is not None and accelerator.scaler is None:
        what, value = "gradient norm", float(grad_norm)
    if not math.isfinite(value):
        raise TrainingDiverged(
            f"the training {what} became {value} at step {step}, so training stopped before applying it; "
            f"{_last_good(output_dir)}. Lower learning_rate, keep max_grad_norm above 0, and check the "
            "data for extreme values."
        )


def refuse_non_finite_weights(accelerator, model, what: str, output_dir: Path) -> None:
    """Never save NaN/inf weights as ``what`` (a checkpoint, best/ or final/); all processes agree."""
    import torch

    local = torch.tensor(float(non_finite_parameter(model) is not None), device=accelerator.device)
    if accelerator.reduce(local, "max").item():
        raise TrainingDiverged(
            f"the weights became NaN or infinite, so {what} was not saved; {_last_good(output_dir)}. "
            "Lower learning_rate and keep max_grad_norm above 0."
        )


def _last_good(output_dir: Path) -> str:
    """Where to resume from: the newest checkpoint that verifies (never one with corrupt files)."""
    checkpoint = intact_checkpoint(output_dir)
    if checkpoint is not None:
        return f"the last good checkpoint is {checkpoint}"
    return "no intact checkpoint was saved before (checkpointing_steps saves them)"
