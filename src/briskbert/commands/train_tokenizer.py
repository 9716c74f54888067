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

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from briskbert.commands.arguments import parse
from briskbert.errors import SettingError, UserError

MODELS = ("wordpiece", "bpe", "unigram")
#: the largest vocabularies in use are about 256k entries; beyond 2**20 the trainer's tables only waste memory
MAX_VOCAB_SIZE = 1 << 20


@dataclass(frozen=True, kw_only=True)
class TokenizerArguments:
    files: list[str] | None = field(
        default=None, metadata={"help": "UTF-8 plain-text training files, one document or line per line"}
    )
    dataset_path: str | None = field(
        default=None,
        metadata={
            "help": "a `datasets` dataset saved with save_to_disk, or a dataset name loadable with "
            "datasets.load_dataset (instead of --files)"
        },
    )
    dataset_config: str | None = field(
        default=None, metadata={"help": "dataset configuration name (load_dataset)"}
    )
    dataset_split: str = field(default="train", metadata={"help": "split to train on"})
    text_column: str = field(default="text", metadata={"help": "text column of the dataset"})
    model: str = field(default="wordpiece", metadata={"help": "the tokenization model", "choices": MODELS})
    vocab_size: int = field(metadata={"help": "vocabulary size, special tokens included"})
    output_dir: str = field(metadata={"help": "where to save the tokenizer"})
    lowercase: bool = field(
        default=True,
        metadata={"help": "lower-case (WordPiece: and strip accents, as uncased BERT); ignored by bpe"},
    )
    min_frequency: int = field(default=2, metadata={"help": "minimum pair count to merge (wordpiece, bpe)"})
    round_to_multiple_of: int = field(
        default=64,
        metadata={"help": "wordpiece: round the vocabulary size up to a multiple of this; 0 disables"},
    )
    model_max_length: int = 512
    tokenizer_train_max_lines: int | None = field(
        default=None,
        metadata={"help": "train on a seeded uniform sample of this many non-blank lines (default: all)"},
    )
    seed: int = field(default=0, metadata={"help": "seed of the line sample"})
    no_progress: bool = field(
        default=False,
        metadata={"help": "hide the progress bar (hidden anyway when the output is not a terminal)"},
    )

    def __post_init__(self):
        if (self.files is None) == (self.dataset_path is None):
            raise SettingError("files", "or --dataset_path: give exactly one of the two.")
        if not 0 < self.vocab_size <= MAX_VOCAB_SIZE:
            raise SettingError(
                "vocab_size",
                f"must be between 1 and {MAX_VOCAB_SIZE:,} (BERT uses 30,522), got {self.vocab_size:,}.",
            )
        if self.tokenizer_train_max_lines is not None and self.tokenizer_train_max_lines < 1:
            raise SettingError(
                "tokenizer_train_max_lines", f"must be >= 1, got {self.tokenizer_train_max_lines}."
            )


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


def _trainer_arguments(args: TokenizerArguments) -> dict:
    """The keyword arguments of the chosen trainer (each model takes its own subset)."""
    common = dict(
        vocab_size=args.vocab_size,
        output_dir=args.output_dir,
        show_progress=not args.no_progress
        and sys.stderr.isatty(),  # a file or a pipe gets no bar (blank lines)
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


def main(argv: list[str] | None = None) -> int:
    (args,) = parse(__doc__, TokenizerArguments, argv=argv)
    from briskbert.tokenization import train_tokenizer

    started = time.perf_counter()
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
    seconds = time.perf_counter() - started
    print(
        f"Trained a {args.model} tokenizer in {seconds:.1f} s: vocabulary size {len(tokenizer)}; saved to {args.output_dir}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
