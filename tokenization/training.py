"""Tokenizer training with the `tokenizers` trainers: WordPiece for `BriskBertTokenizer` (on the normaliser and
pre-tokeniser of a fresh BriskBertTokenizer, so pieces are learnt on what the tokenizer will see), byte-level BPE
(RoBERTa, ModernBERT) and Unigram (SentencePiece-style). Text is streamed (the trainer keeps word counts, not
text); `max_lines` trains on a seeded reservoir sample. WordPiece vocabularies put the special tokens first and
the learnt pieces in sorted order, so the same text gives a byte-identical `vocab.txt`.
"""

from __future__ import annotations

import codecs
import logging
import os
import random
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import islice
from pathlib import Path

from tokenizers import Tokenizer
from tokenizers.models import WordPiece
from tokenizers.trainers import WordPieceTrainer

from .tokenization_briskbert import SPECIAL_TOKENS, BriskBertTokenizer

logger = logging.getLogger(__name__)

__all__ = [
    "TOKENIZER_MODELS",
    "round_up_to_multiple",
    "sample_lines",
    "train_bpe_tokenizer",
    "train_tokenizer",
    "train_unigram_tokenizer",
    "train_wordpiece_tokenizer",
]

TOKENIZER_MODELS = ("wordpiece", "bpe", "unigram")
#: RoBERTa's special tokens, in RoBERTa's order (ids 0-4 of a trained byte-level BPE vocabulary)
BPE_SPECIAL_TOKENS = ("<s>", "<pad>", "</s>", "<unk>", "<mask>")


class EmptyCorpusError(ValueError):
    """The training text has no non-blank line."""


def round_up_to_multiple(n: int, multiple: int | None) -> int:
    """Smallest multiple of ``multiple`` that is >= ``n`` (``n`` itself when ``multiple`` is falsy)."""
    if not multiple:
        return int(n)
    return -(-int(n) // int(multiple)) * int(multiple)


def utf8_error_message(path: str | os.PathLike) -> str:
    """Where a file stops being UTF-8: 'PATH is not UTF-8 text (byte 0xNN on line L); ...'."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    line = 1
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            try:
                line += decoder.decode(chunk).count("\n")
            except UnicodeDecodeError as error:
                line += chunk[: error.start].count(b"\n")
                return f"{path} is not UTF-8 text (byte 0x{chunk[error.start]:02x} on line {line}); re-save it as UTF-8."
    return f"{path} is not UTF-8 text; re-save it as UTF-8."


def _file_lines(paths: list[str]) -> Iterator[str]:
    """Non-blank lines of UTF-8 text files; a decoding error names the file and the line."""
    for path in paths:
        with open(path, encoding="utf-8") as handle:
            try:
                for line in handle:
                    if line.strip():
                        yield line.rstrip("\n")
            except UnicodeDecodeError:
                raise ValueError(utf8_error_message(path)) from None


def _dataset_texts(dataset, text_column: str, batch_size: int) -> Iterator[str]:
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
        rows = (text for batch in dataset.iter(batch_size=batch_size) for text in batch[text_column])
    else:  # any iterable of dicts (or of strings)
        rows = (row if isinstance(row, str) else row[text_column] for row in dataset)
    return (text for text in rows if isinstance(text, str) and text.strip())


def sample_lines(lines: Iterable[str], max_lines: int | None, seed: int = 0) -> Iterable[str]:
    """All ``lines`` (streamed), or a uniform random sample of ``max_lines`` of them (reservoir sampling,
    seeded; kept in corpus order), holding at most ``max_lines`` in memory."""
    if max_lines is None:
        return lines
    if max_lines < 1:
        raise ValueError(f"max_lines must be >= 1, got {max_lines}.")
    rng, reservoir = random.Random(seed), []
    for seen, line in enumerate(lines):
        if seen < max_lines:
            reservoir.append((seen, line))
        else:
            slot = rng.randrange(seen + 1)
            if slot < max_lines:
                reservoir[slot] = (seen, line)
    return [line for _, line in sorted(reservoir)]


def _batched(texts: Iterable[str], batch_size: int, counter: list[int]) -> Iterator[list[str]]:
    iterator = iter(texts)
    while batch := list(islice(iterator, batch_size)):
        counter[0] += len(batch)
        yield batch


def _training_texts(
    files, dataset, text_column: str, batch_size: int
) -> tuple[Callable[[], Iterable[str]], str]:
    """A function giving the texts to train on (each call reads them again), and how to name their
    source in an error."""
    if (files is None) == (dataset is None):
        raise ValueError("Pass exactly one of `files` (text files) or `dataset` (with `text_column`).")
    if dataset is not None:
        _dataset_texts(dataset, text_column, batch_size)  # checks the columns now
        if iter(dataset) is dataset:  # a one-shot iterator: read it once, here
            dataset = list(dataset)
        return lambda: _dataset_texts(dataset, text_column, batch_size), "the dataset"
    paths = [str(Path(f)) for f in ([files] if isinstance(files, (str, os.PathLike)) else files)]
    if not paths:
        raise ValueError("`files` is empty.")
    missing = [p for p in paths if not os.path.isfile(p)]
    if missing:
        raise FileNotFoundError(f"Training files not found: {missing}")
    return lambda: _file_lines(paths), ", ".join(paths)


def _train_backend(backend, trainer, texts: Iterable[str], source: str, batch_size: int) -> float:
    """Train ``backend`` on ``texts``; refuse an empty corpus; return the seconds taken."""
    start, counter = time.perf_counter(), [0]
    backend.train_from_iterator(_batched(texts, batch_size, counter), trainer=trainer)
    if counter[0] == 0:
        raise EmptyCorpusError(f"{source}: no text to train a tokenizer on (empty, or only blank lines).")
    return time.perf_counter() - start


def canonical_wordpiece_vocab(vocab: dict[str, int], target_size: int) -> dict[str, int]:
    """Special tokens at their fixed ids, then the learnt pieces in sorted order, then ``[unusedN]``
    fillers up to ``target_size``: independent of the trainer's hash-map order."""
    for expected_id, token in enumerate(SPECIAL_TOKENS):
        if vocab.get(token) != expected_id:  # the trainer puts special tokens first; make sure of it
            raise RuntimeError(f"Special token {token} got id {vocab.get(token)}, expected {expected_id}.")
    tokens = [*SPECIAL_TOKENS, *sorted(set(vocab) - set(SPECIAL_TOKENS))]
    if len(tokens) < target_size:
        logger.warning(
            "The corpus yielded %d WordPiece tokens, fewer than the %d requested; filling with %d [unusedN] "
            "tokens. Use more text or a smaller vocab_size.",
            len(tokens),
            target_size,
            target_size - len(tokens),
        )
        known, i = set(tokens), 0
        while len(tokens) < target_size:
            if f"[unused{i}]" not in known:
                tokens.append(f"[unused{i}]")
            i += 1
    elif len(tokens) > target_size:
        logger.warning(
            "The trainer produced %d tokens (> %d requested): its initial alphabet alone is larger; "
            "lower `limit_alphabet`.",
            len(tokens),
            target_size,
        )
    return {token: i for i, token in enumerate(tokens)}


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
    max_lines: int | None = None,
    seed: int = 0,
) -> BriskBertTokenizer:
    """Trains a WordPiece vocabulary of exactly `vocab_size` (rounded up to `round_to_multiple_of`; None or 0
    keeps it) tokens and returns a BriskBertTokenizer over it, saved to `output_dir` when given.

    Exactly one of `files` (UTF-8 text, one document or line per line) and `dataset` (a `datasets` dataset, or
    any iterable of dicts or strings, read from `text_column`). `lowercase` as uncased BERT (`strip_accents` None
    follows it); `limit_alphabet` caps the initial characters (rarer ones become [UNK]); `max_lines` trains on a
    `seed`ed sample of that many lines. A corpus too small for the vocabulary is filled with `[unusedN]` tokens,
    with a warning; one without a non-blank line raises EmptyCorpusError.
    """
    texts, source = _training_texts(files, dataset, text_column, batch_size)
    if int(vocab_size) <= len(SPECIAL_TOKENS):
        raise ValueError(
            f"`vocab_size` must be larger than the {len(SPECIAL_TOKENS)} special tokens, got {vocab_size}."
        )
    target_size = round_up_to_multiple(vocab_size, round_to_multiple_of)
    if target_size != vocab_size:
        logger.info("Rounding the vocabulary size %d up to %d.", vocab_size, target_size)

    # The same normaliser / pre-tokeniser the tokenizer will use (transformers' BERT pipeline).
    template = BriskBertTokenizer(do_lower_case=lowercase, strip_accents=strip_accents)
    options = dict(
        vocab_size=target_size,
        min_frequency=min_frequency,
        continuing_subword_prefix="##",
        limit_alphabet=limit_alphabet,
        show_progress=show_progress,
    )

    def train_pass(pinned: list[str]):
        backend = Tokenizer(WordPiece(unk_token="[UNK]", continuing_subword_prefix="##"))
        backend.normalizer = template.backend_tokenizer.normalizer
        backend.pre_tokenizer = template.backend_tokenizer.pre_tokenizer
        trainer = WordPieceTrainer(special_tokens=[*SPECIAL_TOKENS, *pinned], **options)
        seconds = _train_backend(backend, trainer, sample_lines(texts(), max_lines, seed), source, batch_size)
        return backend.get_vocab(with_added_tokens=False), seconds

    # The trainer numbers "##c" pieces in hash-map order and breaks ties between equally frequent merges
    # by those numbers, so the learnt set itself can vary. A second pass with every "##c" of the first
    # pinned at sorted ids (as special tokens, which the trainer numbers first) is deterministic.
    first, seconds_first = train_pass([])
    vocab, seconds = train_pass(sorted(t for t in first if t.startswith("##") and len(t) == 3))
    elapsed = seconds_first + seconds
    vocab = canonical_wordpiece_vocab(vocab, target_size)
    tokenizer = BriskBertTokenizer(
        vocab=vocab,
        do_lower_case=lowercase,
        strip_accents=strip_accents,
        model_max_length=model_max_length,
    )
    _report(tokenizer, "WordPiece", elapsed, output_dir)
    return tokenizer


def _report(tokenizer, kind: str, elapsed: float, output_dir) -> None:
    """Log what was trained (the command prints its own one-line result) and save it to ``output_dir``."""
    logger.info("Trained a %s vocabulary of %d tokens in %.1f s.", kind, len(tokenizer), elapsed)
    if output_dir is not None:
        Path(output_dir).mkdir(parents=True, exist_ok=True)
        tokenizer.save_pretrained(str(output_dir))


def train_bpe_tokenizer(
    files=None,
    dataset=None,
    text_column: str = "text",
    vocab_size: int = 50265,
    min_frequency: int = 2,
    output_dir=None,
    show_progress: bool = True,
    model_max_length: int = 512,
    batch_size: int = 1000,
    max_lines: int | None = None,
    seed: int = 0,
):
    """Byte-level BPE as RoBERTa and ModernBERT use it: every byte is a base piece (no unknown token in
    practice), ``<s> A </s></s> B </s>`` templates, ``<mask>`` absorbing the space before it. Saved as a
    standard tokenizers-backed transformers tokenizer: ``AutoTokenizer.from_pretrained(folder)`` loads it
    without remote code. Arguments as in :func:`train_wordpiece_tokenizer`."""
    from tokenizers import AddedToken, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    texts, source = _training_texts(files, dataset, text_column, batch_size)
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=list(BPE_SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=show_progress,
    )
    elapsed = _train_backend(backend, trainer, sample_lines(texts(), max_lines, seed), source, batch_size)
    backend.post_processor = processors.RobertaProcessing(
        ("</s>", backend.token_to_id("</s>")), ("<s>", backend.token_to_id("<s>")), add_prefix_space=False
    )
    tokenizer = PreTrainedTokenizerFast(
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
    _report(tokenizer, "byte-level BPE", elapsed, output_dir)
    return tokenizer


def train_unigram_tokenizer(
    files=None,
    dataset=None,
    text_column: str = "text",
    vocab_size: int = 32000,
    lowercase: bool = True,
    output_dir=None,
    show_progress: bool = True,
    model_max_length: int = 512,
    batch_size: int = 1000,
    max_lines: int | None = None,
    seed: int = 0,
):
    """A Unigram language-model vocabulary over ``▁``-marked words (as ALBERT's and T5's SentencePiece),
    with BERT's special tokens and ``[CLS] A [SEP] B [SEP]`` templates. Saved as a standard
    tokenizers-backed transformers tokenizer (no remote code). Arguments as in
    :func:`train_wordpiece_tokenizer`."""
    from tokenizers import decoders, normalizers, pre_tokenizers, processors, trainers
    from tokenizers.models import Unigram
    from transformers import PreTrainedTokenizerFast

    texts, source = _training_texts(files, dataset, text_column, batch_size)
    backend = Tokenizer(Unigram())
    steps = [normalizers.NFKC(), *([normalizers.Lowercase()] if lowercase else [])]
    backend.normalizer = normalizers.Sequence(steps)
    backend.pre_tokenizer = pre_tokenizers.Metaspace()
    backend.decoder = decoders.Metaspace()
    trainer = trainers.UnigramTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        unk_token="[UNK]",
        show_progress=show_progress,
    )
    elapsed = _train_backend(backend, trainer, sample_lines(texts(), max_lines, seed), source, batch_size)
    cls, sep = backend.token_to_id("[CLS]"), backend.token_to_id("[SEP]")
    backend.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)],
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
        model_max_length=model_max_length,
    )
    _report(tokenizer, "Unigram", elapsed, output_dir)
    return tokenizer


def train_tokenizer(model: str = "wordpiece", **kwargs):
    """The trainer of kind ``model`` (``wordpiece``, ``bpe`` or ``unigram``) called with ``kwargs``."""
    trainers = {
        "wordpiece": train_wordpiece_tokenizer,
        "bpe": train_bpe_tokenizer,
        "unigram": train_unigram_tokenizer,
    }
    if model not in trainers:
        raise ValueError(f"Unknown tokenizer model {model!r}; choose one of {', '.join(TOKENIZER_MODELS)}.")
    return trainers[model](**kwargs)
