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
import shlex
import sys
from pathlib import Path

from briskbert.errors import CommandFailed, UserError
from briskbert.training.experiments.ablation import (
    AblationInterrupted,
    AblationPlan,
    Budget,
    Probe,
    RunFailed,
    TokenizerSource,
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


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    pass


def build_parser() -> argparse.ArgumentParser:
    # allow_abbrev=False: '--seed' must not silently mean '--seeds'.
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter, allow_abbrev=False)
    g = parser.add_argument_group("variants")
    g.add_argument("--configs", nargs="+", required=True, metavar="VARIANT", help="The variants (see above).")
    g.add_argument("--seeds", nargs="+", type=int, default=[42], help="Every variant runs once per seed.")
    g.add_argument(
        "--config_overrides",
        default=None,
        help="field=value,... applied to every variant before its own overrides, e.g. num_hidden_layers=4.",
    )
    g.add_argument("--output_dir", required=True, help="Where the runs, the table and the plot go.")
    g.add_argument(
        "--launcher",
        default=None,
        help="How each run is started (default: this Python's `-m briskbert`), e.g. 'accelerate launch "
        "--multi_gpu --num_processes 2 -m briskbert'; --max_train_tokens assumes one process.",
    )
    g = parser.add_argument_group("shared data and tokenizer (passed to every run)")
    g.add_argument("--train_file", default=None, help="Training text (pretraining's format).")
    g.add_argument(
        "--tokenizer_name",
        default=None,
        help="A tokenizer folder (default: train one into output_dir/tokenizer).",
    )
    g.add_argument("--vocab_size", type=int, default=30522, help="Size of the tokenizer trained once.")
    g.add_argument("--max_seq_length", type=int, default=128)
    g.add_argument("--per_device_train_batch_size", type=int, default=8)
    g.add_argument("--gradient_accumulation_steps", type=int, default=1)
    g = parser.add_argument_group("budget (the same for every run)")
    g.add_argument("--max_train_steps", type=int, default=None, help="Optimizer steps per run.")
    g.add_argument(
        "--max_train_tokens",
        type=int,
        default=None,
        help="Instead of steps: tokens per run, counted as batch x accumulation x max_seq_length per step "
        "(exact with --packing).",
    )
    g.add_argument(
        "--max_train_seconds",
        type=float,
        default=None,
        help="Also stop each run after this many seconds of its pretraining process (after the step in "
        "progress; one more step then ends the run with its final evaluation).",
    )
    g = parser.add_argument_group("fine-tuning probe (optional)")
    g.add_argument(
        "--finetune_probe",
        default=None,
        metavar="TRAIN_FILE",
        help="Fine-tune each pretrained variant on this classification file (briskbert finetune-classification) "
        "and report its validation accuracy.",
    )
    g.add_argument(
        "--probe_validation_file", default=None, help="The probe's validation file (required with it)."
    )
    g.add_argument("--probe_args", default=DEFAULT_PROBE_ARGS, help="Further finetune-classification flags.")
    return parser


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


def build_plan(args: argparse.Namespace, extra: list[str]) -> AblationPlan:
    """The Namespace, converted once into the plan the library runs."""
    shared = parse_overrides(args.config_overrides, "--config_overrides") if args.config_overrides else {}
    variants = parse_variants(args.configs, shared)
    budget = Budget(args.max_train_steps, args.max_train_tokens, args.max_train_seconds)
    tokens_per_step = (
        args.per_device_train_batch_size * args.gradient_accumulation_steps * args.max_seq_length
    )
    forwarded = [
        *(["--train_file", args.train_file] if args.train_file else []),
        "--max_seq_length",
        str(args.max_seq_length),
        "--per_device_train_batch_size",
        str(args.per_device_train_batch_size),
        "--gradient_accumulation_steps",
        str(args.gradient_accumulation_steps),
        *extra,
    ]
    probe = None
    if args.finetune_probe or args.probe_validation_file:
        if not (args.finetune_probe and args.probe_validation_file):
            raise UserError("--finetune_probe and --probe_validation_file go together.")
        for path in (args.finetune_probe, args.probe_validation_file):
            if not Path(path).is_file():
                raise UserError(f"{path}: no such file (fine-tuning probe).")
        probe = Probe(args.finetune_probe, args.probe_validation_file, tuple(shlex.split(args.probe_args)))
    return AblationPlan(
        output_dir=Path(args.output_dir),
        variants=variants,
        seeds=list(args.seeds),
        pretrain_args=forwarded,
        tokenizer=TokenizerSource(args.tokenizer_name, args.train_file, args.vocab_size, args.max_seq_length),
        max_train_steps=budget.steps(tokens_per_step),
        max_train_seconds=budget.max_train_seconds,
        probe=probe,
        **({"launcher": tuple(shlex.split(args.launcher))} if args.launcher else {}),
    )


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    try:
        check_passthrough(extra, parser)
        plan = build_plan(args, extra)
        if args.train_file and not Path(args.train_file).is_file():
            raise UserError(f"--train_file {args.train_file}: no such file.")
        from briskbert.training.experiments.ablation import check_variants, run_ablation, stop_on_sigterm
        from briskbert.training.experiments.ablation_report import markdown_table, write_report

        check_variants(plan.variants)
        stop_on_sigterm()
        results = write_report(plan, *run_ablation(plan))
    except RunFailed as error:  # a run stopped by a user error (exit 2) is one; a crash is a failure
        raise (UserError if error.returncode == 2 else CommandFailed)(str(error)) from error
    except AblationInterrupted as error:
        print(f"\n{error}; run the same command again to resume.", file=sys.stderr)
        return 130
    print("\n" + markdown_table(results))
    print(f"Wrote {plan.output_dir / 'results.md'}, results.json and curves.png.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
