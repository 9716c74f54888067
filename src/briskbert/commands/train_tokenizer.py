"""Train a tokenizer: WordPiece for BriskBertTokenizer (BERT), byte-level BPE (RoBERTa, ModernBERT) or Unigram.

Examples:
    briskbert train-tokenizer --files data/wikitext2_excerpt.txt --vocab_size 8000 --output_dir runs/tok
    briskbert train-tokenizer --model bpe --files corpus.txt --vocab_size 50265 --output_dir runs/bpe
    briskbert train-tokenizer --files big_corpus.txt --tokenizer_train_max_lines 1000000 \\
        --vocab_size 30522 --output_dir runs/tok
    briskbert train-tokenizer --dataset_path my_saved_dataset --text_column text --vocab_size 30522 \\
        --output_dir runs/tok --no-lowercase

WordPiece folders load with ``AutoTokenizer.from_pretrained(output_dir, trust_remote_code=True)``; BPE and
Unigram folders are standard tokenizers-backed transformers tokenizers and load without remote code. The
text is streamed (memory does not grow with the corpus); the same text and seed give the same WordPiece
vocabulary, byte for byte.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from briskbert.errors import UserError

MODELS = ("wordpiece", "bpe", "unigram")


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Defaults in the help, and the description's examples kept as written."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=_HelpFormatter)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--files", nargs="+", help="UTF-8 plain-text training files, one document or line per line"
    )
    source.add_argument(
        "--dataset_path",
        help="a `datasets` dataset saved with save_to_disk, or a dataset name loadable with datasets.load_dataset",
    )
    parser.add_argument("--dataset_config", default=None, help="dataset configuration name (load_dataset)")
    parser.add_argument("--dataset_split", default="train", help="split to train on")
    parser.add_argument("--text_column", default="text", help="text column of the dataset")
    parser.add_argument("--model", choices=MODELS, default="wordpiece", help="the tokenization model")
    parser.add_argument(
        "--vocab_size", type=int, required=True, help="vocabulary size, special tokens included"
    )
    parser.add_argument("--output_dir", required=True, help="where to save the tokenizer")
    parser.add_argument(
        "--lowercase",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="lower-case (WordPiece: and strip accents, as uncased BERT); ignored by bpe",
    )
    parser.add_argument(
        "--min_frequency", type=int, default=2, help="minimum pair count to merge (wordpiece, bpe)"
    )
    parser.add_argument(
        "--round_to_multiple_of",
        type=int,
        default=64,
        help="wordpiece: round the vocabulary size up to a multiple of this; 0 disables",
    )
    parser.add_argument("--model_max_length", type=int, default=512)
    parser.add_argument(
        "--tokenizer_train_max_lines",
        type=int,
        default=None,
        help="train on a seeded uniform sample of this many non-blank lines (default: all)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the line sample")
    parser.add_argument("--no_progress", action="store_true", help="hide the progress bar")
    return parser


def _load_dataset(path_or_name: str, config: str | None, split: str):
    import datasets

    path = Path(path_or_name)
    if path.is_dir() and ((path / "dataset_info.json").exists() or (path / "dataset_dict.json").exists()):
        ds = datasets.load_from_disk(str(path))
    else:
        ds = datasets.load_dataset(path_or_name, config)
    if isinstance(ds, datasets.DatasetDict):
        if split not in ds:
            raise ValueError(f"--dataset_split {split!r} is not in {path_or_name}; available: {list(ds)}.")
        ds = ds[split]
    return ds


def _trainer_arguments(args: argparse.Namespace) -> dict:
    """The keyword arguments of the chosen trainer (each model takes its own subset)."""
    common = dict(
        vocab_size=args.vocab_size,
        output_dir=args.output_dir,
        show_progress=not args.no_progress,
        model_max_length=args.model_max_length,
        max_lines=args.tokenizer_train_max_lines,
        seed=args.seed,
    )
    if args.model == "wordpiece":
        common.update(
            lowercase=args.lowercase,
            min_frequency=args.min_frequency,
            round_to_multiple_of=args.round_to_multiple_of or None,
        )
    elif args.model == "bpe":
        common.update(min_frequency=args.min_frequency)
    else:
        common.update(lowercase=args.lowercase)
    return common


#: the largest vocabularies in use are about 256k entries; beyond 2**20 the trainer's tables only waste memory
MAX_VOCAB_SIZE = 1 << 20


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not 0 < args.vocab_size <= MAX_VOCAB_SIZE:
        raise UserError(
            f"--vocab_size must be between 1 and {MAX_VOCAB_SIZE:,} (BERT uses 30,522), got {args.vocab_size:,}."
        )
    if args.tokenizer_train_max_lines is not None and args.tokenizer_train_max_lines < 1:
        raise UserError(f"--tokenizer_train_max_lines must be >= 1, got {args.tokenizer_train_max_lines}.")
    import logging

    from briskbert.tokenization import train_tokenizer

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        if args.files:
            source = dict(files=args.files)
        else:
            source = dict(
                dataset=_load_dataset(args.dataset_path, args.dataset_config, args.dataset_split),
                text_column=args.text_column,
            )
        tokenizer = train_tokenizer(args.model, **source, **_trainer_arguments(args))
    except (ValueError, FileNotFoundError) as error:
        flag = "--files" if args.files else "--dataset_path"
        raise UserError(f"{flag}: {error}") from error
    print(f"vocabulary size {len(tokenizer)}; saved to {args.output_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
