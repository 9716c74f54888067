"""Pretrain several architecture variants at equal budget and compare them in one table and one plot.

Every variant is pretrained by `briskbert pretrain` with the same tokenizer (trained once), the same
prepared data, the same sequence order, the same masks and the same number of steps; only the config
(and the seed, from --seeds) changes. Flags this command does not define are passed to every pretraining
run unchanged (e.g. --packing, --learning_rate, --eval_steps).

--configs takes one or more variants:
  bert-tiny                                    a preset (the variant is named after it)
  my_config.json                               a config JSON file (named after the file)
  bert:bert-tiny                               NAME:PRESET
  rope:bert-tiny:position_embedding_type=rope  NAME:PRESET:field=value,field=value (values as JSON
                                               where they parse: 4, 0.1, true, null; otherwise strings)

Example:
  briskbert ablate --train_file corpus.txt --vocab_size 8192 --packing --max_train_steps 500 \\
      --configs bert:bert-tiny rope:bert-tiny:position_embedding_type=rope \\
                glu:bert-tiny:mlp_type=glu,hidden_act=gelu --seeds 1 2 --output_dir runs/ablation

Output: output_dir/<variant>/seed<k>/ (a normal pretraining output each), results.json, results.md and
curves.png. Re-running the same command skips finished runs and resumes an interrupted one.
"""

from __future__ import annotations

import argparse
import math
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path

from briskbert.commands.arguments import new_parser
from briskbert.errors import SettingError, UserError
from briskbert.processes import to_argv
from briskbert.training.experiments.ablation import (
    AblationInterrupted,
    AblationPlan,
    Probe,
    parse_overrides,
    parse_variants,
)

# Pretraining flags the ablation sets itself for each run; the message says what to use instead.
OWNED_FLAGS = {
    "--seed": "use --seeds",
    "--config_name": "use --configs",
    "--model_name_or_path": "variants are trained from scratch; use --configs",
    "--resume_from_checkpoint": "re-run the same command to resume",
}
DEFAULT_PROBE_ARGS = (
    "--max_train_samples 2000 --max_eval_samples 500 --num_train_epochs 1 --max_seq_length 64 "
    "--per_device_train_batch_size 32 --learning_rate 1e-4"
)
TEXT_SUFFIXES = (".txt", ".text", ".raw")  # what `briskbert train-tokenizer --files` reads


@dataclass(frozen=True)
class VariantSettings:
    _argument_group_name = "variants"

    configs: list[str] = field(metadata={"help": "The variants (see above).", "metavar": "VARIANT"})
    output_dir: str = field(metadata={"help": "Where the runs, the table and the plot go."})
    seeds: list[int] = field(
        default_factory=lambda: [42], metadata={"help": "Every variant runs once per seed."}
    )
    config_overrides: str | None = field(
        default=None,
        metadata={
            "help": "field=value,... applied to every variant before its own overrides, e.g. num_hidden_layers=4."
        },
    )
    launcher: str | None = field(
        default=None,
        metadata={
            "help": "How each run is started (default: this Python's `-m briskbert`), e.g. 'accelerate launch "
            "--multi_gpu --num_processes 2 -m briskbert'; --max_train_tokens assumes one process."
        },
    )

    def __post_init__(self):
        if len(set(self.seeds)) != len(self.seeds):
            raise SettingError("seeds", f"must be distinct, got {self.seeds}.")


@dataclass(frozen=True)
class SharedRunSettings:
    _argument_group_name = "shared data and tokenizer (passed to every run)"

    train_file: str | None = field(default=None, metadata={"help": "Training text (pretraining's format)."})
    tokenizer_name: str | None = field(
        default=None, metadata={"help": "A tokenizer folder (default: train one into output_dir/tokenizer)."}
    )
    vocab_size: int = field(default=30522, metadata={"help": "Size of the tokenizer trained once."})
    max_seq_length: int = 128
    per_device_train_batch_size: int = 8
    gradient_accumulation_steps: int = 1

    def __post_init__(self):
        if self.train_file and not Path(self.train_file).is_file():
            raise SettingError("train_file", f"{self.train_file}: no such file.")
        if self.tokenizer_name is None and self.train_file is None:
            raise SettingError(
                "train_file", "(a tokenizer is trained on it once) or tokenizer_name: give one."
            )
        if self.tokenizer_name is None and Path(self.train_file).suffix.lower() not in TEXT_SUFFIXES:
            raise SettingError(
                "train_file",
                f"{self.train_file}: the shared tokenizer can only be trained on a text file; "
                "train one with `briskbert train-tokenizer` and give it as tokenizer_name.",
            )


@dataclass(frozen=True)
class BudgetSettings:
    _argument_group_name = "budget (the same for every run)"

    max_train_steps: int | None = field(default=None, metadata={"help": "Optimizer steps per run."})
    max_train_tokens: int | None = field(
        default=None,
        metadata={
            "help": "Instead of steps: tokens per run, counted as batch x accumulation x max_seq_length per "
            "step (exact with --packing)."
        },
    )
    max_train_seconds: float | None = field(
        default=None,
        metadata={
            "help": "Also stop each run after this many seconds of its pretraining process (after the step in "
            "progress; one more step then ends the run with its final evaluation)."
        },
    )

    def __post_init__(self):
        if self.max_train_steps is not None and self.max_train_tokens is not None:
            raise SettingError("max_train_steps", "or max_train_tokens: give one, not both.")
        for name in ("max_train_steps", "max_train_tokens", "max_train_seconds"):
            if getattr(self, name) is not None and getattr(self, name) <= 0:
                raise SettingError(name, f"must be positive, got {getattr(self, name)}.")


@dataclass(frozen=True)
class ProbeSettings:
    _argument_group_name = "fine-tuning probe (optional)"

    finetune_probe: str | None = field(
        default=None,
        metadata={
            "help": "Fine-tune each pretrained variant on this classification file (briskbert "
            "finetune-classification) and report its validation accuracy.",
            "metavar": "TRAIN_FILE",
        },
    )
    probe_validation_file: str | None = field(
        default=None, metadata={"help": "The probe's validation file (required with it)."}
    )
    probe_args: str = field(
        default=DEFAULT_PROBE_ARGS, metadata={"help": "Further finetune-classification flags."}
    )

    def __post_init__(self):
        if bool(self.finetune_probe) != bool(self.probe_validation_file):
            raise SettingError("finetune_probe", "and --probe_validation_file go together.")
        for name in ("finetune_probe", "probe_validation_file"):
            if getattr(self, name) and not Path(getattr(self, name)).is_file():
                raise SettingError(name, f"{getattr(self, name)}: no such file (fine-tuning probe).")


SETTINGS = (VariantSettings, SharedRunSettings, BudgetSettings, ProbeSettings)


def check_passthrough(extra: list[str], parser: argparse.ArgumentParser) -> None:
    """Refuse pretraining flags the ablation sets per run, including abbreviations of them."""
    own = [option for action in parser._actions for option in action.option_strings]
    for token in extra:
        flag = token.split("=", 1)[0]
        if not flag.startswith("--"):
            continue
        for name in (*OWNED_FLAGS, *own):
            if name.startswith(flag) and flag not in ("--", "--help"):
                reason = OWNED_FLAGS.get(name, f"use {name} (an ablation flag) in full")
                raise UserError(f"{flag} cannot be passed to the runs: {reason}.")


def build_plan(
    variants: VariantSettings, shared: SharedRunSettings, budget: BudgetSettings, probe: ProbeSettings, extra
) -> AblationPlan:
    common = (
        parse_overrides(variants.config_overrides, "--config_overrides") if variants.config_overrides else {}
    )
    steps = budget.max_train_steps
    if budget.max_train_tokens is not None:  # sequence slots per step: exact with --packing
        batch = shared.per_device_train_batch_size * shared.gradient_accumulation_steps
        steps = math.ceil(budget.max_train_tokens / (batch * shared.max_seq_length))
    forwarded = [
        *(to_argv(train_file=shared.train_file) if shared.train_file else []),
        *to_argv(
            max_seq_length=shared.max_seq_length,
            per_device_train_batch_size=shared.per_device_train_batch_size,
            gradient_accumulation_steps=shared.gradient_accumulation_steps,
        ),
        *extra,
    ]
    return AblationPlan(
        output_dir=Path(variants.output_dir),
        variants=parse_variants(variants.configs, common),
        seeds=list(variants.seeds),
        pretrain_args=forwarded,
        tokenizer_name=shared.tokenizer_name,
        train_file=shared.train_file,
        vocab_size=shared.vocab_size,
        max_seq_length=shared.max_seq_length,
        max_train_steps=steps,
        max_train_seconds=budget.max_train_seconds,
        probe=Probe(probe.finetune_probe, probe.probe_validation_file, tuple(shlex.split(probe.probe_args)))
        if probe.finetune_probe
        else None,
        **({"launcher": tuple(shlex.split(variants.launcher))} if variants.launcher else {}),
    )


def main(argv: list[str] | None = None) -> int:
    parser = new_parser(__doc__, *SETTINGS)
    *settings, extra = parser.parse_args_into_dataclasses(
        argv, return_remaining_strings=True, look_for_args_file=False
    )
    check_passthrough(extra, parser)
    plan = build_plan(*settings, extra)
    from briskbert.commands.training_run import locked
    from briskbert.training.experiments.ablation import check_variants, run_ablation
    from briskbert.training.experiments.ablation_report import markdown_table, write_report

    check_variants(plan.variants)
    try:
        with locked(plan.output_dir):  # one ablation per folder
            results = write_report(plan, *run_ablation(plan))
    except AblationInterrupted as error:
        print(f"\n{error}; run the same command again to resume.", file=sys.stderr)
        return 130
    print("\n" + markdown_table(results))
    print(f"Wrote {plan.output_dir / 'results.md'}, results.json and curves.png.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
