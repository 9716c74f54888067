"""Import a transformers checkpoint folder of the BERT family into a BriskBert folder that gives the same outputs.

Sources (detected from config.json's model_type, the head from its architectures):
  BERT, RoBERTa, XLM-R, DistilBERT, ELECTRA (discriminator; its replaced-token head becomes a one-label token
  classifier), ModernBERT; the bare model or any of its heads (masked LM, sequence / token classification, QA,
  multiple choice, BERT's pretraining and next-sentence heads). The source tokenizer and, for
  sentence-transformers checkpoints, modules.json with its pooling / normalisation folders are carried over.

    briskbert convert --src path/to/checkpoint --out path/to/briskbert [--architecture RobertaForMaskedLM]
"""

import argparse
import shutil
from pathlib import Path

from briskbert.errors import UserError


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    pass


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="briskbert convert", description=__doc__, formatter_class=HelpFormatter
    )
    parser.add_argument("--src", required=True, help="checkpoint folder (config.json + safetensors or .bin)")
    parser.add_argument("--out", required=True, help="new folder for the BriskBert model and tokenizer")
    parser.add_argument(
        "--architecture",
        default=None,
        help="source head to import, e.g. RobertaForSequenceClassification (default: config.json's architectures)",
    )
    parser.add_argument("--no_tokenizer", action="store_true", help="do not carry the tokenizer over")
    parser.add_argument(
        "--overwrite_output_dir",
        action="store_true",
        help="replace an existing --out folder (only once the new conversion has succeeded)",
    )
    parser.add_argument(
        "--source_repo_id",
        default=None,
        help="the checkpoint's Hub id (e.g. FacebookAI/roberta-base), named as base model on the cards of models "
        "trained from the converted folder",
    )
    return parser


def main(argv: list[str] | None = None):
    args = build_parser().parse_args(argv)
    from briskbert.inputs import check_model_folder

    check_model_folder(Path(args.src).expanduser(), "--src", need_tokenizer=False)  # before torch: fails fast
    from briskbert.modeling.conversion import (
        CheckpointMismatchError,
        UnsupportedCheckpointError,
        convert_checkpoint,
    )

    out = Path(args.out)
    # With --overwrite_output_dir the conversion goes to a sibling folder first, so a failure keeps the old one.
    target = out.with_name(out.name + ".converting") if args.overwrite_output_dir and out.exists() else out
    if target != out:
        shutil.rmtree(target, ignore_errors=True)  # a leftover of an interrupted run
    try:
        model = convert_checkpoint(
            args.src,
            target,
            args.architecture,
            save_tokenizer=not args.no_tokenizer,
            source_repo_id=args.source_repo_id,
        )
    except (CheckpointMismatchError, UnsupportedCheckpointError, FileNotFoundError, FileExistsError) as error:
        raise UserError(str(error)) from error
    if target != out:
        shutil.rmtree(out)
        target.rename(out)
    print(
        f"Converted {args.src} -> {args.out} as {type(model).__name__} "
        f"({sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters)."
    )


if __name__ == "__main__":
    main()
