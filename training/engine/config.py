"""The :class:`TrainingConfig` the training loop takes (names and defaults as in transformers' ``*_no_trainer.py``
examples), checked once in ``__post_init__``; torch-free."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields

from briskbert.errors import SettingError, UserError


class TrainingSetupError(UserError):
    """A dataset or training state the run cannot use (one ``error:`` line from the command line)."""


# transformers' SchedulerType names stepped once per optimizer step, as strings: parsing imports no transformers.
SCHEDULER_NAMES = tuple(
    "linear cosine cosine_with_restarts polynomial constant constant_with_warmup inverse_sqrt cosine_with_min_lr "
    "cosine_warmup_with_min_lr warmup_stable_decay".split()
)

# Counts a run needs at least one of (when given).
COUNTS = tuple(
    "per_device_train_batch_size per_device_eval_batch_size gradient_accumulation_steps logging_steps "
    "max_train_steps eval_steps".split()
)


@dataclass
class TrainingConfig:
    """Everything the shared training loop needs to know about a run: one field per training option."""

    _argument_group_name = "training (shared loop)"

    output_dir: str = field(
        metadata={"help": "Where checkpoints, logs, curves and the final model folder go."}
    )
    per_device_train_batch_size: int = 8
    per_device_eval_batch_size: int = 8
    learning_rate: float = field(
        default=1e-4, metadata={"help": "Peak learning rate (small models: 1e-4; base size: 2e-5 to 5e-5)."}
    )
    weight_decay: float = 0.0
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_epsilon: float = 1e-8
    num_train_epochs: float = 3.0
    max_train_steps: int | None = field(
        default=None, metadata={"help": "Total optimizer steps; overrides num_train_epochs."}
    )
    gradient_accumulation_steps: int = 1
    lr_scheduler_type: str = field(default="linear", metadata={"choices": SCHEDULER_NAMES})
    num_warmup_steps: int | None = field(
        default=None, metadata={"help": "Warm-up steps; overrides warmup_ratio."}
    )
    warmup_ratio: float = field(default=0.1, metadata={"help": "Warm-up as a fraction of the total steps."})
    decay_ratio: float = field(
        default=0.2, metadata={"help": "warmup_stable_decay: the final decay's share of steps."}
    )
    max_grad_norm: float = field(default=1.0, metadata={"help": "0 disables clipping."})
    seed: int = 42
    mixed_precision: str | None = field(
        default=None,
        metadata={
            "help": "Default: what `accelerate config`/launch says, else no.",
            "choices": ("no", "fp16", "bf16", "fp8"),
        },
    )
    checkpointing_steps: int | str | None = field(
        default=None, metadata={"help": "Save a checkpoint every N optimizer steps, or 'epoch'."}
    )
    checkpoints_total_limit: int | None = field(
        default=None, metadata={"help": "Keep only the last K checkpoints."}
    )
    resume_from_checkpoint: str | None = field(
        default=None,
        metadata={"help": "A checkpoint folder or 'latest'; same arguments and data as its run."},
    )
    overwrite_output_dir: bool = field(
        default=False,
        metadata={"help": "Start anew in an output_dir holding an earlier run (which is deleted)."},
    )
    report_to: str = field(
        default="none",
        metadata={
            "help": "Experiment trackers, a comma list of accelerate's: tensorboard, wandb, trackio, comet_ml, "
            "mlflow, aim, clearml, dvclive, swanlab; 'all' (every installed one) or 'none'."
        },
    )
    gradient_checkpointing: bool = False
    torch_compile: bool = False
    eval_steps: int | None = field(
        default=None,
        metadata={"help": "Evaluate every N steps and at the end (default: 10 times in 20+ steps)."},
    )
    metric_for_best_model: str | None = field(
        default=None,
        metadata={"help": "e.g. eval_loss or eval_accuracy: keep the best model in output_dir/best."},
    )
    greater_is_better: bool | None = field(
        default=None, metadata={"help": "Default: false for *loss / *perplexity."}
    )
    logging_steps: int | None = field(
        default=None,
        metadata={"help": "Log the loss every N steps (default: ~50 times a run, every 1 to 10 steps)."},
    )
    dataloader_num_workers: int | None = field(
        default=None, metadata={"help": "Processes preparing batches (default: 4 on a GPU, 0 on CPU)."}
    )

    # Fields that may change between the launches of one run (bookkeeping, and the run's length); every other
    # field must match the checkpoint's for a resume.
    RESUMABLE_CHANGES = tuple(
        "max_train_steps num_train_epochs output_dir resume_from_checkpoint overwrite_output_dir report_to "
        "logging_steps eval_steps per_device_eval_batch_size checkpointing_steps checkpoints_total_limit "
        "dataloader_num_workers gradient_checkpointing torch_compile metric_for_best_model greater_is_better".split()
    )

    def __post_init__(self):
        steps = self.checkpointing_steps  # a command line gives a string: "epoch" or a number
        if isinstance(steps, str) and steps.isdigit():
            self.checkpointing_steps = steps = int(steps)
        self.report_to = ",".join(parse_report_to(self.report_to)) or "none"
        for item in fields(self):
            value = getattr(self, item.name)
            if isinstance(value, float) and not math.isfinite(value):
                raise SettingError(item.name, f"must be a finite number, got {value}.")
        minimums = dict.fromkeys(COUNTS, 1) | {"dataloader_num_workers": 0, "num_warmup_steps": 0}
        for name, low in minimums.items():
            if getattr(self, name) is not None and getattr(self, name) < low:
                raise SettingError(name, f"must be >= {low}, got {getattr(self, name)}.")
        if self.learning_rate <= 0:
            raise SettingError("learning_rate", f"must be > 0, got {self.learning_rate}.")
        if self.max_train_steps is None and self.num_train_epochs <= 0:
            raise SettingError(
                "num_train_epochs", f"must be > 0 (or give max_train_steps), got {self.num_train_epochs}."
            )
        if not 0 <= self.warmup_ratio < 1:
            raise SettingError("warmup_ratio", f"must be in [0, 1), got {self.warmup_ratio}.")
        if not 0 < self.decay_ratio <= 1:
            raise SettingError("decay_ratio", f"must be in (0, 1], got {self.decay_ratio}.")
        if steps is not None and steps != "epoch" and not (isinstance(steps, int) and steps >= 1):
            raise SettingError(
                "checkpointing_steps", f"must be a positive integer or 'epoch', got {steps!r}."
            )
        if self.greater_is_better is not None and self.metric_for_best_model is None:
            raise SettingError("greater_is_better", "needs metric_for_best_model.")

    @property
    def metric_name(self) -> str | None:
        """``metric_for_best_model`` as it appears among the evaluation metrics (``eval_`` prefixed)."""
        name = self.metric_for_best_model
        return name if name is None or name.startswith("eval_") else f"eval_{name}"

    @property
    def higher_metric_is_better(self) -> bool:
        if self.greater_is_better is not None:
            return self.greater_is_better
        return not (self.metric_name or "").endswith(("loss", "perplexity"))

    def run_defining_arguments(self) -> dict:
        """The fields a resumed launch must share with the checkpoint (see ``RESUMABLE_CHANGES``)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in self.RESUMABLE_CHANGES}

    def eval_interval(self, max_train_steps: int) -> int | None:
        """Evaluate every this many steps: ``eval_steps``, else ten times in a run of 20+ steps (None: at the end)."""
        if self.eval_steps is not None:
            return self.eval_steps
        return max_train_steps // 10 if max_train_steps >= 20 else None

    def log_interval(self, max_train_steps: int) -> int:
        """``logging_steps``, else about 50 times a run and at least every 10 steps."""
        if self.logging_steps is not None:
            return self.logging_steps
        return max(1, min(10, max_train_steps // 50))

    def num_warmup_steps_for(self, max_train_steps: int) -> int:
        if self.num_warmup_steps is not None:
            return self.num_warmup_steps
        return round(self.warmup_ratio * max_train_steps)


def parse_report_to(report_to: str | None) -> list[str]:
    """``report_to`` ("none", "all", or a comma list of accelerate's trackers) -> installed tracker names."""
    names = [name.strip() for name in (report_to or "none").split(",") if name.strip()]
    if names in ([], ["none"]):
        return []
    from briskbert.extras import MissingExtraError, is_installed, require_extra

    # the trackers with an extra of ours, named before accelerate (and torch) load; tensorboardX also serves
    for name in set(names) & {"tensorboard", "trackio"}:
        if not (name == "tensorboard" and is_installed("tensorboardX")):
            try:
                require_extra(name, name)
            except MissingExtraError as error:
                raise SettingError("report_to", str(error)) from None
    from accelerate.tracking import get_available_trackers
    from accelerate.utils import LoggerType

    supported = [kind.value for kind in LoggerType if kind.value != "all"]
    installed = [str(getattr(kind, "value", kind)) for kind in get_available_trackers()]
    if names == ["all"]:
        return installed
    for name in names:
        if name not in supported:
            raise SettingError(
                "report_to",
                f"{name!r} is not a tracker accelerate supports; use none, all, or a comma list of "
                f"{', '.join(supported)}.",
            )
        if name not in installed:
            raise SettingError("report_to", f"{name} needs the {name} package: pip install {name}.")
    return list(dict.fromkeys(names))
