"""Train a WordPiece vocabulary for :class:`BriskBertTokenizer` with the ``tokenizers`` library's trainer.

The normaliser and pre-tokeniser used for training are taken from a freshly built ``BriskBertTokenizer``
(i.e. transformers' BERT pipeline), so the vocabulary is learnt on exactly the pieces the tokenizer will
see. Special tokens are placed first, at fixed ids: ``[PAD]=0, [UNK]=1, [CLS]=2, [SEP]=3, [MASK]=4``.

Kept out of ``tokenization_briskbert.py`` on purpose: that file is shipped as Hub remote code and stays
minimal.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from tokenizers import Tokenizer
from tokenizers.models import WordPiece
from tokenizers.trainers import WordPieceTrainer

from .tokenization_briskbert import SPECIAL_TOKENS, BriskBertTokenizer

logger = logging.getLogger(__name__)

__all__ = ["round_up_to_multiple", "train_wordpiece_tokenizer"]


def round_up_to_multiple(n: int, multiple: int | None) -> int:
    """Smallest multiple of ``multiple`` that is >= ``n`` (``n`` itself when ``multiple`` is falsy)."""
    if not multiple:
        return int(n)
    return -(-int(n) // int(multiple)) * int(multiple)


def _dataset_batches(dataset, text_column: str, batch_size: int) -> Iterator[list[str]]:
    column_names = getattr(dataset, "column_names", None)
    if isinstance(column_names, dict):  # a DatasetDict: refuse clearly rather than train on split names
        raise TypeError(
            f"`dataset` is a DatasetDict with splits {sorted(column_names)}; "
            "pass one split, e.g. dataset['train']."
        )
    if column_names is not None and text_column not in column_names:
        raise ValueError(
            f"`text_column={text_column!r}` is not a column of the dataset; columns: {column_names}."
        )
    if hasattr(dataset, "iter"):  # datasets.Dataset / IterableDataset: fast columnar batches
        batches = (batch[text_column] for batch in dataset.iter(batch_size=batch_size))
    else:  # any iterable of dicts (or of strings)

        def _generic():
            batch = []
            for row in dataset:
                batch.append(row if isinstance(row, str) else row[text_column])
                if len(batch) == batch_size:
                    yield batch
                    batch = []
            if batch:
                yield batch

        batches = _generic()
    for batch in batches:
        yield [text for text in batch if isinstance(text, str) and text]


def train_wordpiece_tokenizer(
    files: str | os.PathLike | Sequence[str | os.PathLike] | None = None,
    dataset: Iterable | None = None,
    text_column: str = "text",
    vocab_size: int = 30522,
    lowercase: bool = True,
    min_frequency: int = 2,
    round_to_multiple_of: int | None = 64,
    output_dir: str | os.PathLike | None = None,
    show_progress: bool = True,
    strip_accents: bool | None = None,
    model_max_length: int = 512,
    limit_alphabet: int | None = 1000,
    batch_size: int = 1000,
) -> BriskBertTokenizer:
    """Train a WordPiece vocabulary and return a :class:`BriskBertTokenizer` using it.

    Args:
        files: text file(s), one document (or line) per line. Exactly one of ``files`` and ``dataset``.
        dataset: a ``datasets.Dataset`` / ``IterableDataset`` (or any iterable of dicts) with a text column.
        text_column: the column of ``dataset`` that holds the text.
        vocab_size: requested size, special tokens included.
        lowercase: lower-case (and, unless ``strip_accents`` says otherwise, strip accents) as uncased BERT.
        min_frequency: minimum count of a pair to be merged.
        round_to_multiple_of: round ``vocab_size`` up to a multiple of this (64 suits tensor cores);
            ``None`` or 0 keeps it as given.
        output_dir: when given, ``save_pretrained`` there (``tokenizer.json``, ``tokenizer_config.json``,
            ``vocab.txt`` and the remote-code file).
        show_progress: show the trainer's progress bar.
        strip_accents: as in BERT; ``None`` follows ``lowercase``.
        model_max_length: maximum sequence length recorded in the tokenizer config.
        limit_alphabet: at most this many distinct characters are kept as initial pieces (rare characters
            become ``[UNK]``), so a few exotic characters cannot eat the vocabulary; ``None`` keeps all.
        batch_size: rows per batch read from ``dataset``.

    The result has exactly the (rounded) vocabulary size: if the corpus is too small for the trainer to
    learn that many pieces, the remainder is filled with never-produced ``[unusedN]`` tokens (as in the
    original BERT vocabularies) and a warning says how many.
    """
    if (files is None) == (dataset is None):
        raise ValueError("Pass exactly one of `files` (text files) or `dataset` (with `text_column`).")
    if int(vocab_size) <= len(SPECIAL_TOKENS):
        raise ValueError(
            f"`vocab_size` must be larger than the {len(SPECIAL_TOKENS)} special tokens, got {vocab_size}."
        )
    target_size = round_up_to_multiple(vocab_size, round_to_multiple_of)
    if target_size != vocab_size:
        logger.info(
            "Rounding the vocabulary size %d up to %d (a multiple of %d).",
            vocab_size,
            target_size,
            round_to_multiple_of,
        )

    # The same normaliser / pre-tokeniser the tokenizer will use (transformers' BERT pipeline).
    template = BriskBertTokenizer(do_lower_case=lowercase, strip_accents=strip_accents)
    backend = Tokenizer(WordPiece(unk_token="[UNK]", continuing_subword_prefix="##"))
    backend.normalizer = template.backend_tokenizer.normalizer
    backend.pre_tokenizer = template.backend_tokenizer.pre_tokenizer

    trainer = WordPieceTrainer(
        vocab_size=target_size,
        min_frequency=min_frequency,
        special_tokens=list(SPECIAL_TOKENS),
        continuing_subword_prefix="##",
        limit_alphabet=limit_alphabet,
        show_progress=show_progress,
    )

    start = time.perf_counter()
    if files is not None:
        if isinstance(files, (str, os.PathLike)):
            files = [files]
        paths = [str(Path(f)) for f in files]
        missing = [p for p in paths if not os.path.isfile(p)]
        if missing:
            raise FileNotFoundError(f"Training files not found: {missing}")
        if not paths:
            raise ValueError("`files` is empty.")
        backend.train(paths, trainer=trainer)
    else:
        length = None
        try:
            length = -(-len(dataset) // batch_size)
        except TypeError:
            pass
        backend.train_from_iterator(
            _dataset_batches(dataset, text_column, batch_size), trainer=trainer, length=length
        )
    elapsed = time.perf_counter() - start

    vocab = backend.get_vocab(with_added_tokens=False)
    for expected_id, token in enumerate(SPECIAL_TOKENS):
        if vocab.get(token) != expected_id:  # the trainer puts special tokens first; make sure of it
            raise RuntimeError(f"Special token {token} got id {vocab.get(token)}, expected {expected_id}.")
    if len(vocab) < target_size:
        missing = target_size - len(vocab)
        logger.warning(
            "The corpus yielded %d WordPiece tokens, fewer than the %d requested; filling with %d [unusedN] "
            "tokens. Use more text or a smaller vocab_size.",
            len(vocab),
            target_size,
            missing,
        )
        next_id, i = len(vocab), 0
        while len(vocab) < target_size:
            token = f"[unused{i}]"
            if token not in vocab:
                vocab[token] = next_id
                next_id += 1
            i += 1
    elif len(vocab) > target_size:
        logger.warning(
            "The trainer produced %d tokens (> %d requested): its initial alphabet alone is larger; "
            "lower `limit_alphabet`.",
            len(vocab),
            target_size,
        )

    tokenizer = BriskBertTokenizer(
        vocab=vocab,
        do_lower_case=lowercase,
        strip_accents=strip_accents,
        model_max_length=model_max_length,
    )
    logger.info("Trained a WordPiece vocabulary of %d tokens in %.1f s.", len(vocab), elapsed)
    if show_progress:
        print(f"Trained a WordPiece vocabulary of {len(vocab)} tokens in {elapsed:.1f} s.", flush=True)
    if output_dir is not None:
        Path(output_dir).mkdir(parents=True, exist_ok=True)
        tokenizer.save_pretrained(str(output_dir))
        if show_progress:
            print(f"Saved the tokenizer to {output_dir}", flush=True)
    return tokenizer
