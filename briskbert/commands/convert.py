"""Convert a transformers BERT checkpoint folder (BertModel or any BertFor* head) into a BriskBert folder.

briskbert convert --src path/to/bert --out path/to/briskbert [--architecture BertForMaskedLM]
"""

import argparse
import sys

from briskbert.modeling.conversion import (
    BRISKBERT_CLASS_FOR_BERT,
    CheckpointMismatchError,
    convert_bert_checkpoint,
)


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--src", required=True, help="BERT checkpoint folder (config.json + safetensors or .bin)."
    )
    parser.add_argument("--out", required=True, help="Folder to write the BriskBert model and tokenizer to.")
    parser.add_argument(
        "--architecture",
        choices=sorted(BRISKBERT_CLASS_FOR_BERT),
        help="Head to convert; defaults to the checkpoint's own `architectures` entry.",
    )
    parser.add_argument("--no_tokenizer", action="store_true", help="Do not convert the tokenizer.")
    parser.add_argument(
        "--source_repo_id",
        help="The checkpoint's Hub id (e.g. google-bert/bert-base-uncased), "
        "named as base model on the cards of models trained from the converted folder.",
    )
    args = parser.parse_args(argv)
    try:
        model = convert_bert_checkpoint(
            args.src,
            args.out,
            args.architecture,
            save_tokenizer=not args.no_tokenizer,
            source_repo_id=args.source_repo_id,
        )
    except (CheckpointMismatchError, FileNotFoundError, FileExistsError, ValueError) as error:
        sys.exit(f"error: {error}")
    print(
        f"Converted {args.src} -> {args.out} as {type(model).__name__} "
        f"({sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters)."
    )


if __name__ == "__main__":
    main()
