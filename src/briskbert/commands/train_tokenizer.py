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

from briskbert.commands.arguments import parse
from briskbert.errors import SettingError
from briskbert.training.tasks.pretraining_settings import MAX_VOCAB_SIZE
from briskbert.training.tasks.settings import check_at_least, helped

MODELS = ("wordpiece", "bpe", "unigram")


@dataclass(frozen=True, kw_only=True)
class TokenizerArguments:
    files: list[str] | None = helped("UTF-8 plain-text training files, one document or line per line")
    dataset_path: str | None = helped(
        "a `datasets` dataset saved with save_to_disk, or a dataset name loadable with datasets.load_dataset "
        "(instead of --files)"
    )
    dataset_config: str | None = helped("dataset configuration name (load_dataset)")
    dataset_split: str = helped("split to train on", "train")
    text_column: str = helped("text column of the dataset", "text")
    model: str = helped("the tokenization model", "wordpiece", choices=MODELS)
    vocab_size: int = field(metadata={"help": "vocabulary size, special tokens included"})
    output_dir: str = field(metadata={"help": "where to save the tokenizer"})
    lowercase: bool = helped(
        "lower-case (WordPiece: and strip accents, as uncased BERT); ignored by bpe", True
    )
    min_frequency: int = helped("minimum pair count to merge (wordpiece, bpe)", 2)
    round_to_multiple_of: int = helped(
        "wordpiece: round the vocabulary size up to a multiple of this; 0 disables", 64
    )
    model_max_length: int = 512
    tokenizer_train_max_lines: int | None = helped(
        "train on a seeded uniform sample of this many non-blank lines (default: all)"
    )
    seed: int = helped("seed of the line sample", 0)
    no_progress: bool = helped(
        "hide the progress bar (hidden anyway when the output is not a terminal)", False
    )

    def __post_init__(self):
        if (self.files is None) == (self.dataset_path is None):
            raise SettingError("files", "or --dataset_path: give exactly one of the two.")
        if not 5 < self.vocab_size <= MAX_VOCAB_SIZE:
            raise SettingError(
                "vocab_size",
                f"must be above the 5 special tokens and at most {MAX_VOCAB_SIZE:,} (BERT uses 30,522), "
                f"got {self.vocab_size:,}.",
            )
        check_at_least(self, 1, "tokenizer_train_max_lines")


def main(argv: list[str] | None = None) -> int:
    (args,) = parse(__doc__, TokenizerArguments, argv=argv)
    from briskbert import tokenization

    if args.files:
        source = dict(files=args.files)
    else:
        from briskbert.training.data.task_data import load_named_dataset, pick_split

        splits = load_named_dataset(args.dataset_path, args.dataset_config, setting="dataset_path")
        dataset = pick_split(splits, args.dataset_split, args.dataset_path)
        source = dict(dataset=dataset, text_column=args.text_column)
    started = time.perf_counter()
    try:
        tokenizer = tokenization.train_tokenizer(
            args.model,
            **source,
            vocab_size=args.vocab_size,
            lowercase=args.lowercase,
            min_frequency=args.min_frequency,
            round_to_multiple_of=args.round_to_multiple_of,
            output_dir=args.output_dir,
            show_progress=not args.no_progress and sys.stderr.isatty(),  # a file or a pipe gets no bar
            model_max_length=args.model_max_length,
            max_lines=args.tokenizer_train_max_lines,
            seed=args.seed,
        )
    except ValueError as error:  # an empty corpus, a missing text column
        raise SettingError("files" if args.files else "dataset_path", str(error)) from error
    seconds = time.perf_counter() - started
    print(
        f"Trained a {args.model} tokenizer in {seconds:.1f} s: vocabulary size {len(tokenizer)}; saved to {args.output_dir}"
    )
    return 0
