"""Train a WordPiece vocabulary for BriskBertTokenizer.

Examples:
    briskbert train-tokenizer --files data/wikitext2_excerpt.txt --vocab_size 8000 \
        --output_dir runs/tok
    briskbert train-tokenizer --dataset_path my_saved_dataset --text_column text --vocab_size 30522 \
        --output_dir runs/tok --no-lowercase

The result (tokenizer.json, tokenizer_config.json, vocab.txt and the remote-code file) loads with
``AutoTokenizer.from_pretrained(output_dir, trust_remote_code=True)``.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from briskbert.tokenization import train_wordpiece_tokenizer


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--files", nargs="+", help="plain-text training files, one document or line per line")
    source.add_argument(
        "--dataset_path",
        help="a `datasets` dataset saved with save_to_disk, or a Hub/local "
        "dataset name loadable with datasets.load_dataset",
    )
    parser.add_argument("--dataset_config", default=None, help="dataset configuration name (load_dataset)")
    parser.add_argument("--dataset_split", default="train", help="split to train on (default: train)")
    parser.add_argument("--text_column", default="text", help="text column of the dataset (default: text)")
    parser.add_argument(
        "--vocab_size", type=int, required=True, help="vocabulary size, special tokens included"
    )
    parser.add_argument("--output_dir", required=True, help="where to save the tokenizer")
    parser.add_argument(
        "--lowercase",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="lower-case and strip accents as uncased BERT (default: --lowercase)",
    )
    parser.add_argument(
        "--min_frequency", type=int, default=2, help="minimum pair count to merge (default: 2)"
    )
    parser.add_argument(
        "--round_to_multiple_of",
        type=int,
        default=64,
        help="round the vocabulary size up to a multiple of this; 0 disables (default: 64)",
    )
    parser.add_argument("--model_max_length", type=int, default=512)
    parser.add_argument("--no_progress", action="store_true", help="hide the progress bar")
    return parser


def _load_dataset(args):
    import datasets

    path = Path(args.dataset_path)
    if path.is_dir() and ((path / "dataset_info.json").exists() or (path / "dataset_dict.json").exists()):
        ds = datasets.load_from_disk(str(path))
    else:
        ds = datasets.load_dataset(args.dataset_path, args.dataset_config)
    if isinstance(ds, datasets.DatasetDict):
        if args.dataset_split not in ds:
            raise SystemExit(f"split {args.dataset_split!r} not in dataset; available: {list(ds)}")
        ds = ds[args.dataset_split]
    return ds


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    kwargs = dict(
        vocab_size=args.vocab_size,
        lowercase=args.lowercase,
        min_frequency=args.min_frequency,
        round_to_multiple_of=args.round_to_multiple_of or None,
        output_dir=args.output_dir,
        show_progress=not args.no_progress,
        model_max_length=args.model_max_length,
    )
    if args.files:
        tokenizer = train_wordpiece_tokenizer(files=args.files, **kwargs)
    else:
        tokenizer = train_wordpiece_tokenizer(
            dataset=_load_dataset(args), text_column=args.text_column, **kwargs
        )
    print(f"vocabulary size {len(tokenizer)}; saved to {args.output_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
