"""Tokenizer training with the `tokenizers` trainers: WordPiece for `BriskBertTokenizer` (on its normaliser and
pre-tokeniser), byte-level BPE (RoBERTa, ModernBERT) and Unigram (SentencePiece-style). Text is streamed;
`max_lines` trains on a seeded reservoir sample. The same text gives a byte-identical WordPiece `vocab.txt`.
"""

from __future__ import annotations

import logging
import os
import random
from collections.abc import Iterable, Iterator
from itertools import chain, islice
from pathlib import Path

from tokenizers import AddedToken, Tokenizer, decoders, normalizers, pre_tokenizers, processors, trainers
from tokenizers.models import BPE, Unigram, WordPiece
from transformers import PreTrainedTokenizerFast

from briskbert.inputs import check_text_file

from .tokenization_briskbert import SPECIAL_TOKENS, BriskBertTokenizer

logger = logging.getLogger(__name__)

#: RoBERTa's special tokens, in RoBERTa's order (ids 0-4 of a trained byte-level BPE vocabulary)
BPE_SPECIAL_TOKENS = ("<s>", "<pad>", "</s>", "<unk>", "<mask>")
_BATCH = 1000  # texts handed to the trainer at a time


class EmptyCorpusError(ValueError):
    """The training text has no non-blank line."""


def sample_lines(lines: Iterable[str], max_lines: int | None, seed: int = 0) -> Iterable[str]:
    """All ``lines`` (streamed), or a seeded uniform sample of ``max_lines`` of them in corpus order
    (reservoir sampling: at most ``max_lines`` in memory)."""
    if max_lines is None:
        return lines
    rng, reservoir = random.Random(seed), []
    for seen, line in enumerate(lines):
        if seen < max_lines:
            reservoir.append((seen, line))
        else:
            slot = rng.randrange(seen + 1)
            if slot < max_lines:
                reservoir[slot] = (seen, line)
    return [line for _, line in sorted(reservoir)]


def _reader(files, dataset, text_column: str, max_lines: int | None, seed: int):
    """A function giving the (sampled) non-blank texts to train on at every call; ``files`` are checked to be
    UTF-8 text here, so that a bad byte is named before training starts, and an empty corpus is named."""
    if (files is None) == (dataset is None):
        raise ValueError("Pass exactly one of `files` (text files) or `dataset` (with `text_column`).")
    if dataset is None:
        paths = [str(f) for f in ([files] if isinstance(files, (str, os.PathLike)) else files)]
        for path in paths:
            check_text_file(path, "files", allow_empty=True)
        source = ", ".join(paths)

        def rows():
            for path in paths:
                with open(path, encoding="utf-8") as handle:
                    yield from (line.rstrip("\n") for line in handle)

    else:
        if text_column not in getattr(dataset, "column_names", [text_column]):
            raise ValueError(
                f"`text_column={text_column!r}` is not a column of the dataset; columns: {dataset.column_names}."
            )
        source = "the dataset"

        def rows():
            if hasattr(dataset, "iter"):  # a `datasets` dataset: columnar batches
                return (text for batch in dataset.iter(batch_size=_BATCH) for text in batch[text_column])
            return iter(dataset)  # an iterable of texts, read again at every call

    def read() -> Iterator[str]:
        texts = iter(sample_lines((t for t in rows() if isinstance(t, str) and t.strip()), max_lines, seed))
        first = next(texts, None)
        if first is None:
            raise EmptyCorpusError(f"{source}: no text to train a tokenizer on (empty, or only blank lines).")
        return chain([first], texts)

    return read


def _train(backend, trainer, texts: Iterator[str]) -> None:
    backend.train_from_iterator(iter(lambda: list(islice(texts, _BATCH)), []), trainer=trainer)


def canonical_wordpiece_vocab(vocab: dict[str, int], target_size: int) -> dict[str, int]:
    """Special tokens at their fixed ids, then the learnt pieces in sorted order, then ``[unusedN]``
    fillers up to ``target_size``: independent of the trainer's hash-map order."""
    tokens = [*SPECIAL_TOKENS, *sorted(set(vocab) - set(SPECIAL_TOKENS))]
    if len(tokens) < target_size:
        logger.warning(
            "The corpus yielded %d WordPiece tokens, fewer than the %d requested; filling with [unusedN] "
            "tokens. Use more text or a smaller vocab_size.",
            len(tokens),
            target_size,
        )
        known = set(tokens)
        fillers = (f"[unused{i}]" for i in range(2 * target_size) if f"[unused{i}]" not in known)
        tokens += list(islice(fillers, target_size - len(tokens)))
    return {token: i for i, token in enumerate(tokens)}


def train_tokenizer(
    model: str = "wordpiece",
    files=None,
    dataset=None,
    text_column: str = "text",
    vocab_size: int = 30522,
    lowercase: bool = True,
    min_frequency: int = 2,
    round_to_multiple_of: int | None = 64,
    output_dir=None,
    show_progress: bool = True,
    model_max_length: int = 512,
    max_lines: int | None = None,
    seed: int = 0,
):
    """A tokenizer of ``model`` (``wordpiece``, ``bpe`` or ``unigram``) trained on exactly one of `files` (UTF-8
    text, one document or line per line) and `dataset` (a `datasets` dataset read from `text_column`, or an
    iterable of texts that can be read twice), saved to `output_dir` when given. `lowercase` as uncased BERT
    (wordpiece: accents stripped too; bpe ignores it); `min_frequency` for wordpiece and bpe; `max_lines` trains
    on a `seed`ed sample of that many lines."""
    read = _reader(files, dataset, text_column, max_lines, seed)
    shared = dict(vocab_size=vocab_size, show_progress=show_progress, model_max_length=model_max_length)
    if model == "wordpiece":
        tokenizer = _wordpiece(read, lowercase, min_frequency, round_to_multiple_of, **shared)
    elif model == "bpe":
        tokenizer = _bpe(read, min_frequency, **shared)
    else:
        tokenizer = _unigram(read, lowercase, **shared)
    logger.info("Trained a %s vocabulary of %d tokens.", model, len(tokenizer))
    if output_dir is not None:
        Path(output_dir).mkdir(parents=True, exist_ok=True)
        tokenizer.save_pretrained(str(output_dir))
    return tokenizer


def train_wordpiece_tokenizer(files=None, **options) -> BriskBertTokenizer:
    """A BriskBertTokenizer over a WordPiece vocabulary of exactly `vocab_size` tokens (rounded up to a multiple
    of `round_to_multiple_of` when given; a corpus too small is filled with `[unusedN]`); see train_tokenizer."""
    return train_tokenizer("wordpiece", files, **options)


def _wordpiece(
    read, lowercase, min_frequency, round_to_multiple_of, vocab_size, show_progress, model_max_length
):
    multiple = round_to_multiple_of or 1
    target_size = -(-int(vocab_size) // multiple) * multiple
    template = BriskBertTokenizer(do_lower_case=lowercase)

    def train_pass(pinned: list[str]):
        backend = Tokenizer(WordPiece(unk_token="[UNK]", continuing_subword_prefix="##"))
        backend.normalizer = template.backend_tokenizer.normalizer
        backend.pre_tokenizer = template.backend_tokenizer.pre_tokenizer
        trainer = trainers.WordPieceTrainer(
            vocab_size=target_size,
            min_frequency=min_frequency,
            special_tokens=[*SPECIAL_TOKENS, *pinned],
            continuing_subword_prefix="##",
            limit_alphabet=1000,  # rarer characters become [UNK]
            show_progress=show_progress,
        )
        _train(backend, trainer, read())
        return backend.get_vocab(with_added_tokens=False)

    # The trainer numbers "##c" pieces in hash-map order and breaks ties between equally frequent merges
    # by those numbers, so the learnt set itself can vary. A second pass with every "##c" of the first
    # pinned at sorted ids (as special tokens, which the trainer numbers first) is deterministic.
    first = train_pass([])
    vocab = train_pass(sorted(t for t in first if t.startswith("##") and len(t) == 3))
    return BriskBertTokenizer(
        vocab=canonical_wordpiece_vocab(vocab, target_size),
        do_lower_case=lowercase,
        model_max_length=model_max_length,
    )


def _bpe(read, min_frequency, vocab_size, show_progress, model_max_length):
    """Byte-level BPE as RoBERTa and ModernBERT use it (every byte a base piece, RoBERTa's templates, ``<mask>``
    absorbing the space before it), a standard transformers tokenizer that loads without remote code."""
    backend = Tokenizer(BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=list(BPE_SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=show_progress,
    )
    _train(backend, trainer, read())
    backend.post_processor = processors.RobertaProcessing(
        ("</s>", backend.token_to_id("</s>")), ("<s>", backend.token_to_id("<s>")), add_prefix_space=False
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token="<s>",
        eos_token="</s>",
        sep_token="</s>",
        cls_token="<s>",
        unk_token="<unk>",
        pad_token="<pad>",
        mask_token=AddedToken("<mask>", lstrip=True, normalized=False),
        model_max_length=model_max_length,
    )


def _unigram(read, lowercase, vocab_size, show_progress, model_max_length):
    """A Unigram vocabulary over ``▁``-marked words (as ALBERT's and T5's SentencePiece) with BERT's special
    tokens and templates, a standard transformers tokenizer that loads without remote code."""
    backend = Tokenizer(Unigram())
    backend.normalizer = normalizers.Sequence(
        [normalizers.NFKC(), *([normalizers.Lowercase()] if lowercase else [])]
    )
    backend.pre_tokenizer = pre_tokenizers.Metaspace()
    backend.decoder = decoders.Metaspace()
    trainer = trainers.UnigramTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        unk_token="[UNK]",
        show_progress=show_progress,
    )
    _train(backend, trainer, read())
    backend.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[(token, backend.token_to_id(token)) for token in ("[CLS]", "[SEP]")],
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
        model_max_length=model_max_length,
    )
