"""The shared training-loop flags of every training command, and the :class:`TrainingConfig` they become.

    parser = add_training_arguments(new_parser(__doc__))
    args = parser.parse_args(argv)
    config = training_config_from_args(args)  # checked: a UserError naming the flag

Flag names and defaults follow transformers' ``*_no_trainer.py`` examples. Importing this module imports
neither torch nor accelerate, so ``briskbert <job> --help`` stays instant.
"""

from __future__ import annotations

import argparse
from dataclasses import MISSING, fields

from briskbert.training.engine.config import (
    EVALUATIONS_PER_RUN,
    LOG_ENTRIES_PER_RUN,
    MAX_DEFAULT_LOGGING_STEPS,
    MIN_STEPS_FOR_PERIODIC_EVALUATION,
    MIXED_PRECISION_CHOICES,
    SCHEDULER_NAMES,
    TrainingConfig,
)


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Flag defaults in ``--help`` and the description as written (its usage example keeps its lines)."""


def new_parser(description: str) -> argparse.ArgumentParser:
    return argparse.ArgumentParser(description=description, formatter_class=HelpFormatter)


def training_config_from_args(args: argparse.Namespace) -> TrainingConfig:
    """The training flags of a parsed command line (other flags are ignored), checked."""
    names = {item.name for item in fields(TrainingConfig)} & set(vars(args))
    return TrainingConfig(**{name: getattr(args, name) for name in names})


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
    g.add_argument(
        "--logging_steps",
        type=int,
        default=_default("logging_steps"),
        help=f"Log the training loss every N steps (default: every step in short runs, about "
        f"{LOG_ENTRIES_PER_RUN} times a run, every {MAX_DEFAULT_LOGGING_STEPS} steps at most).",
    )
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
