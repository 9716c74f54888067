"""Finite weights in, finite weights out: a model holding NaN or inf is refused, and a run that diverges ends
with one error line instead of a broken model."""

from __future__ import annotations

from pathlib import Path

from briskbert.errors import SettingError, UserError
from briskbert.inputs import WEIGHT_FILES
from briskbert.training.engine.checkpointing import intact_checkpoint
from briskbert.training.engine.config import TrainingSetupError


class TrainingDiverged(UserError):
    """The loss, the gradient or the weights became NaN or infinite."""


def non_finite_parameter(model) -> str | None:
    """The first parameter holding a NaN or an infinity; None when all are finite."""
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


def check_finite_weights(model, source: str, setting: str | None = None) -> None:
    """Refuse to train from ``model`` (loaded from ``source``, given as ``setting``) when a weight is not finite."""
    name = non_finite_parameter(model)
    if name is not None:
        problem = (
            f"{source}: the weight {name} holds NaN or infinite values (the run that wrote it diverged); "
            "train from an earlier checkpoint or another model."
        )
        raise SettingError(setting, problem) if setting else UserError(problem)


NO_ITEMS, LOSS, GRADIENT_NORM = 0.0, 1.0, 2.0  # what stopped the run, as the guard records it on the device


class DivergenceGuard:
    """Nothing non-finite is applied, and the host does not wait for the device at every step: :meth:`flag`
    marks a bad step on the device, the optimizer skips it and every later one (fused AdamW's ``found_inf``),
    and :meth:`raise_if_diverged` reports the first where the loop reads its counters anyway. Under fp16 loss
    scaling an inf gradient is the scaler's cue to skip, so only the loss counts there."""

    def __init__(self, accelerator, optimizer, output_dir: Path, first_step: int):
        import torch

        self.optimizer = getattr(optimizer, "optimizer", optimizer)  # inside Accelerate's wrapper
        self.scaled = accelerator.scaler is not None
        self.on_device = self.scaled or getattr(self.optimizer, "_step_supports_amp_scaling", False)
        self.output_dir = output_dir
        device = accelerator.device
        self.step = torch.full((), float(first_step), dtype=torch.float64, device=device)
        self.first = torch.zeros(3, dtype=torch.float64, device=device)  # step (0: none), what, value

    def flag(self, totals, grad_norm) -> None:
        """Check a step's ``totals`` (loss x items, items, ...) and ``grad_norm`` before it is applied."""
        import torch

        self.step += 1
        loss_sum, items = totals[0], totals[1]
        bad_loss = ~torch.isfinite(loss_sum)
        value, what = loss_sum, torch.where(bad_loss, LOSS, GRADIENT_NORM)
        bad = bad_loss | (items == 0)
        if grad_norm is not None and not self.scaled:
            grad_norm = grad_norm.to(torch.float64)
            bad = bad | ~torch.isfinite(grad_norm)
            value = torch.where(bad_loss, loss_sum, grad_norm)
        what = torch.where(items == 0, NO_ITEMS, what)
        record = torch.stack([self.step, what, value])
        self.first = torch.where(bad & (self.first[0] == 0), record, self.first)
        if not self.on_device:
            self.raise_if_diverged()
        elif not self.scaled:  # the scaler sets found_inf itself
            self.optimizer.found_inf = (self.first[0] != 0).to(torch.float32)

    def raise_if_diverged(self) -> None:
        step, what, value = self.first.tolist()
        if step == 0:
            return
        if what == NO_ITEMS:
            raise TrainingSetupError(
                "An accumulation window has no items to compute a loss on (count_items returned 0 for "
                "every batch, e.g. no masked tokens)."
            )
        name = "loss" if what == LOSS else "gradient norm"
        raise TrainingDiverged(
            f"the training {name} became {value} at step {int(step)}, so training stopped before applying it; "
            f"{_last_good(self.output_dir)}. Lower learning_rate, keep max_grad_norm above 0, and check the "
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
    """Where to resume from: the newest checkpoint that verifies."""
    checkpoint = intact_checkpoint(output_dir)
    if checkpoint is not None:
        return f"the last good checkpoint is {checkpoint}"
    return "no intact checkpoint was saved before (checkpointing_steps saves them)"
