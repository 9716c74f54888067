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
  On two GPUs: --launcher 'accelerate launch --multi_gpu --num_processes 2 -m briskbert'

Output: output_dir/<variant>/seed<k>/ (a normal pretraining output each), results.json, results.md and
curves.png. Re-running the same command skips finished runs and resumes an interrupted one.
"""

from __future__ import annotations

import sys

from briskbert.commands.arguments import new_parser
from briskbert.errors import UserError
from briskbert.training.experiments.ablation import AblationInterrupted, AblationSettings

# Pretraining flags the ablation sets itself for each run; the message says what to use instead.
OWNED_FLAGS = {
    "--seed": "use --seeds",
    "--config_name": "use --configs",
    "--model_name_or_path": "variants are trained from scratch; use --configs",
    "--resume_from_checkpoint": "re-run the same command to resume",
}


def main(argv: list[str] | None = None) -> int:
    parser = new_parser(__doc__, AblationSettings)
    settings, extra = parser.parse_args_into_dataclasses(
        argv, return_remaining_strings=True, look_for_args_file=False
    )
    for flag in (token.split("=", 1)[0] for token in extra if token.startswith("--")):
        if flag in OWNED_FLAGS:
            raise UserError(f"{flag} cannot be passed to the runs: {OWNED_FLAGS[flag]}.")
    from briskbert.commands.training_run import locked
    from briskbert.training.experiments.ablation import check_variants, run_ablation
    from briskbert.training.experiments.ablation_report import markdown_table, write_report

    check_variants(settings)
    try:
        with locked(settings.output_dir):  # one ablation per folder
            results = write_report(settings, run_ablation(settings, extra))
    except AblationInterrupted as error:
        print(f"\n{error}; run the same command again to resume.", file=sys.stderr)
        return 130
    print("\n" + markdown_table(results))
    print(f"Wrote {settings.output_dir}/results.md, results.json and curves.png.")
    return 0
