"""The shared training flags and the :class:`TrainingConfig` the training loop takes.

A command adds the flags to its parser, parses, and converts the namespace once; library code only ever
sees the dataclass::

    parser = add_training_arguments(argparse.ArgumentParser())
    args = parser.parse_args(argv)
    config = TrainingConfig.from_namespace(args)  # validates: ValueError naming the flag

Flag names and defaults follow transformers' ``*_no_trainer.py`` examples and ``TrainingArguments`` where
they overlap. Importing this module imports neither torch nor accelerate, so ``--help`` stays instant;
checking ``--report_to`` against accelerate's trackers happens when the config is built.
"""

from __future__ import annotations

import argparse
from dataclasses import MISSING, dataclass, fields

from briskbert.errors import UserError


class TrainingSetupError(UserError, ValueError):
    """A training flag, output folder, checkpoint or dataset the run cannot use: an expected user mistake
    (one ``error:`` line from the command line), and a ``ValueError`` for code that catches those."""


# transformers' SchedulerType names, minus the two that are not stepped once per optimizer step; kept here
# as plain strings so that parsing does not import transformers (a test checks the two lists agree).
SCHEDULER_NAMES = (
    "linear",
    "cosine",
    "cosine_with_restarts",
    "polynomial",
    "constant",
    "constant_with_warmup",
    "inverse_sqrt",
    "cosine_with_min_lr",
    "cosine_warmup_with_min_lr",
    "warmup_stable_decay",
)
MIXED_PRECISION_CHOICES = ("no", "fp16", "bf16", "fp8")

# Without --eval_steps, runs of at least this many optimizer steps evaluate about ten times (shorter runs
# evaluate once, at the end): enough points to draw validation curves, few enough to cost little.
EVALUATIONS_PER_RUN = 10
MIN_STEPS_FOR_PERIODIC_EVALUATION = 2 * EVALUATIONS_PER_RUN


@dataclass
class TrainingConfig:
    """Everything the shared training loop needs to know about a run: one field per training flag."""

    output_dir: str
    per_device_train_batch_size: int = 8
    per_device_eval_batch_size: int = 8
    learning_rate: float = 5e-5
    weight_decay: float = 0.0
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_epsilon: float = 1e-8
    num_train_epochs: float = 3.0
    max_train_steps: int | None = None
    gradient_accumulation_steps: int = 1
    lr_scheduler_type: str = "linear"
    num_warmup_steps: int | None = None
    warmup_ratio: float | None = None
    decay_ratio: float = 0.2
    max_grad_norm: float = 1.0
    seed: int = 42
    mixed_precision: str | None = None
    checkpointing_steps: int | str | None = None  # a number of optimizer steps, or "epoch"
    checkpoints_total_limit: int | None = None
    resume_from_checkpoint: str | None = None
    overwrite_output_dir: bool = False
    report_to: str = "none"
    gradient_checkpointing: bool = False
    torch_compile: bool = False
    eval_steps: int | None = None
    metric_for_best_model: str | None = None
    greater_is_better: bool | None = None
    logging_steps: int = 10
    dataloader_num_workers: int = 0

    # Fields that may change between the launches of one run: bookkeeping that does not change what it
    # computes, and its length (to extend a run, or to stop it at a checkpoint). Every other field must
    # match the checkpoint's for a resume to continue the same run.
    RESUMABLE_CHANGES = (
        "max_train_steps",
        "num_train_epochs",
        "output_dir",
        "resume_from_checkpoint",
        "overwrite_output_dir",
        "report_to",
        "logging_steps",
        "eval_steps",
        "per_device_eval_batch_size",
        "checkpointing_steps",
        "checkpoints_total_limit",
        "dataloader_num_workers",
        "gradient_checkpointing",
        "torch_compile",
        "metric_for_best_model",
        "greater_is_better",
    )

    def __post_init__(self):
        if isinstance(self.checkpointing_steps, str) and self.checkpointing_steps.isdigit():
            self.checkpointing_steps = int(self.checkpointing_steps)
        self.report_to = ",".join(parse_report_to(self.report_to)) or "none"
        _check_ranges(self)

    @classmethod
    def from_namespace(cls, args: argparse.Namespace) -> TrainingConfig:
        """The training flags of a parsed command line (other flags are ignored); validated."""
        names = {f.name for f in fields(cls)} & set(vars(args))
        return cls(**{name: getattr(args, name) for name in names})

    @property
    def trackers(self) -> list[str]:
        return [] if self.report_to == "none" else self.report_to.split(",")

    @property
    def metric_name(self) -> str | None:
        """``--metric_for_best_model`` as it appears among the evaluation metrics (``eval_`` prefixed)."""
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
        """Evaluate every this many steps: ``--eval_steps``, else about ten times in a long enough run."""
        if self.eval_steps is not None:
            return self.eval_steps
        if max_train_steps >= MIN_STEPS_FOR_PERIODIC_EVALUATION:
            return max_train_steps // EVALUATIONS_PER_RUN
        return None

    def num_warmup_steps_for(self, max_train_steps: int) -> int:
        if self.num_warmup_steps is not None:
            return self.num_warmup_steps
        return round((self.warmup_ratio or 0.0) * max_train_steps)


def _default(name: str):
    value = TrainingConfig.__dataclass_fields__[name].default
    return None if value is MISSING else value


def _parse_bool(text: str) -> bool:
    return text.lower() in ("1", "true", "yes")


def add_training_arguments(parser: argparse.ArgumentParser, **defaults) -> argparse.ArgumentParser:
    """Add the shared optimisation / checkpoint / logging flags; ``defaults`` overrides any default."""
    g = parser.add_argument_group("training (shared loop)")
    g.add_argument(
        "--output_dir",
        type=str,
        required="output_dir" not in defaults,
        help="Where checkpoints, logs, curves and the final model folder go.",
    )
    for name, kind in (
        ("per_device_train_batch_size", int),
        ("per_device_eval_batch_size", int),
        ("learning_rate", float),
        ("weight_decay", float),
        ("adam_beta1", float),
        ("adam_beta2", float),
        ("adam_epsilon", float),
        ("num_train_epochs", float),
    ):
        g.add_argument(f"--{name}", type=kind, default=_default(name))
    g.add_argument("--max_train_steps", type=int, help="Total optimizer steps; overrides --num_train_epochs.")
    g.add_argument("--gradient_accumulation_steps", type=int, default=_default("gradient_accumulation_steps"))
    g.add_argument(
        "--lr_scheduler_type", type=str, default=_default("lr_scheduler_type"), choices=SCHEDULER_NAMES
    )
    g.add_argument("--num_warmup_steps", type=int)
    g.add_argument(
        "--warmup_ratio",
        type=float,
        help="Warm-up as a fraction of total steps (instead of --num_warmup_steps).",
    )
    g.add_argument(
        "--decay_ratio",
        type=float,
        default=_default("decay_ratio"),
        help="warmup_stable_decay only: fraction of steps spent in the final decay.",
    )
    g.add_argument(
        "--max_grad_norm", type=float, default=_default("max_grad_norm"), help="0 disables clipping."
    )
    g.add_argument("--seed", type=int, default=_default("seed"))
    g.add_argument(
        "--mixed_precision",
        type=str,
        choices=MIXED_PRECISION_CHOICES,
        help="Default: what `accelerate config`/launch says, else no.",
    )
    _add_checkpoint_arguments(g)
    g.add_argument(
        "--report_to",
        type=str,
        default=_default("report_to"),
        help="Experiment trackers, a comma list of accelerate's: tensorboard, wandb, trackio, comet_ml, "
        "mlflow, aim, clearml, dvclive, swanlab; 'all' (every installed one) or 'none'.",
    )
    g.add_argument("--gradient_checkpointing", action="store_true")
    g.add_argument("--torch_compile", action="store_true")
    _add_evaluation_arguments(g)
    g.add_argument("--logging_steps", type=int, default=_default("logging_steps"))
    g.add_argument("--dataloader_num_workers", type=int, default=_default("dataloader_num_workers"))
    parser.set_defaults(**defaults)
    return parser


def _add_checkpoint_arguments(group) -> None:
    group.add_argument(
        "--checkpointing_steps", type=str, help="Save a checkpoint every N optimizer steps, or 'epoch'."
    )
    group.add_argument("--checkpoints_total_limit", type=int, help="Keep only the last K checkpoints.")
    group.add_argument(
        "--resume_from_checkpoint",
        type=str,
        help="A checkpoint folder or 'latest'; the arguments and data must be the checkpoint's run's.",
    )
    group.add_argument(
        "--overwrite_output_dir",
        action="store_true",
        help="Start a new run in an --output_dir that holds an earlier run's checkpoints or final model "
        "(they are deleted); without it such a run is refused.",
    )


def _add_evaluation_arguments(group) -> None:
    group.add_argument(
        "--eval_steps",
        type=int,
        help=f"Evaluate every N steps and at the end (default: about {EVALUATIONS_PER_RUN} times in runs of "
        f"{MIN_STEPS_FOR_PERIODIC_EVALUATION}+ steps, else at the end only).",
    )
    group.add_argument(
        "--metric_for_best_model",
        type=str,
        help="e.g. eval_loss or eval_accuracy: keep the best model in output_dir/best.",
    )
    group.add_argument(
        "--greater_is_better",
        type=_parse_bool,
        help="Default: false for *loss / *perplexity metrics, true otherwise.",
    )


def validate_training_arguments(args: argparse.Namespace) -> TrainingConfig:
    """Contradictory or impossible training flags -> ``ValueError`` naming the flag; else the config."""
    return TrainingConfig.from_namespace(args)


def _check_ranges(config: TrainingConfig) -> None:
    for name in (
        "per_device_train_batch_size",
        "per_device_eval_batch_size",
        "gradient_accumulation_steps",
        "logging_steps",
    ):
        if getattr(config, name) < 1:
            raise TrainingSetupError(f"--{name} must be >= 1, got {getattr(config, name)}.")
    if config.learning_rate <= 0:
        raise TrainingSetupError(f"--learning_rate must be > 0, got {config.learning_rate}.")
    if config.max_train_steps is not None and config.max_train_steps < 1:
        raise TrainingSetupError(f"--max_train_steps must be >= 1, got {config.max_train_steps}.")
    if config.max_train_steps is None and config.num_train_epochs <= 0:
        raise TrainingSetupError(
            f"--num_train_epochs must be > 0 (or give --max_train_steps), got {config.num_train_epochs}."
        )
    if config.num_warmup_steps is not None and config.warmup_ratio is not None:
        raise TrainingSetupError("Give either --num_warmup_steps or --warmup_ratio, not both.")
    if config.warmup_ratio is not None and not 0 <= config.warmup_ratio < 1:
        raise TrainingSetupError(f"--warmup_ratio must be in [0, 1), got {config.warmup_ratio}.")
    if config.num_warmup_steps is not None and config.num_warmup_steps < 0:
        raise TrainingSetupError(f"--num_warmup_steps must be >= 0, got {config.num_warmup_steps}.")
    if config.lr_scheduler_type not in SCHEDULER_NAMES:
        raise TrainingSetupError(
            f"--lr_scheduler_type {config.lr_scheduler_type!r} is not known; "
            f"choose one of {', '.join(SCHEDULER_NAMES)}."
        )
    steps = config.checkpointing_steps
    if steps is not None and steps != "epoch" and not (isinstance(steps, int) and steps >= 1):
        raise TrainingSetupError(
            f"--checkpointing_steps must be a positive integer or 'epoch', got {steps!r}."
        )
    if config.eval_steps is not None and config.eval_steps < 1:
        raise TrainingSetupError(f"--eval_steps must be >= 1, got {config.eval_steps}.")
    if config.greater_is_better is not None and config.metric_for_best_model is None:
        raise TrainingSetupError("--greater_is_better needs --metric_for_best_model.")
    if not 0 < config.decay_ratio <= 1:
        raise TrainingSetupError(f"--decay_ratio must be in (0, 1], got {config.decay_ratio}.")


def parse_report_to(report_to: str | None) -> list[str]:
    """``--report_to`` ("none", "all", or a comma list of accelerate's trackers) -> tracker names.

    Checked against accelerate's own list (``accelerate.utils.LoggerType``), so every tracker accelerate
    supports is accepted; a tracker whose package is missing is an error that names the package.
    """
    names = [name.strip() for name in (report_to or "none").split(",") if name.strip()]
    if names in ([], ["none"]):
        return []
    from accelerate.tracking import get_available_trackers
    from accelerate.utils import LoggerType

    supported = [kind.value for kind in LoggerType if kind.value != "all"]
    installed = [str(kind.value if hasattr(kind, "value") else kind) for kind in get_available_trackers()]
    if names == ["all"]:
        return installed
    for name in names:
        if name not in supported:
            raise TrainingSetupError(
                f"--report_to {name!r} is not a tracker accelerate supports; use none, all, or a comma list "
                f"of {', '.join(supported)}."
            )
        if name not in installed:
            raise TrainingSetupError(f"--report_to {name} needs the {name} package: pip install {name}.")
    return list(dict.fromkeys(names))
