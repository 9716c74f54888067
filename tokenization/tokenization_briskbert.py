# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""BriskBertTokenizer: BERT's WordPiece tokenizer, registered for ``AutoTokenizer``.

This file is also shipped to the Hub as remote code. It is copied flat next to the checkpoint, so it
imports only from ``transformers``, ``tokenizers`` and the standard library (never from other project
packages).

The tokenizer is a thin subclass of transformers' own (tokenizers-backed) ``BertTokenizer``: the
normaliser (``BertNormalizer``: control characters removed, CJK characters split, optional lower-casing
and accent stripping), the ``BertPreTokenizer``, the ``WordPiece`` model and decoder, and the
``[CLS] A [SEP]`` / ``[CLS] A [SEP] B [SEP]`` templates are all built by transformers, so ids, token
type ids, attention masks and offsets are identical to ``BertTokenizer`` on the same vocabulary.

What this class adds:

* ``register_for_auto_class("AutoTokenizer")``: ``save_pretrained`` writes ``auto_map`` and copies this
  file, so ``AutoTokenizer.from_pretrained(folder, trust_remote_code=True)`` returns this class even where
  the project is not installed;
* ``save_pretrained`` always writes ``vocab.txt`` (one token per line, in id order), also for vocabularies
  that were trained in memory and never had a file;
* input validation that names what to pass (``None`` or non-string items raise a ``TypeError`` up front
  rather than failing deep inside the Rust backend; the error, ``TokenizerInputError``, is both a
  ``TypeError`` and a ``ValueError``).

Special tokens keep BERT-family fixed ids in trained vocabularies: ``[PAD]=0, [UNK]=1, [CLS]=2,
[SEP]=3, [MASK]=4`` (the order ``BertTokenizer`` uses for an empty vocabulary). Pretrained BERT
vocabularies (e.g. ``bert-base-uncased``: ``[PAD]=0, [UNK]=100, [CLS]=101, [SEP]=102, [MASK]=103``)
are kept exactly as they are.
"""

from __future__ import annotations

import os

from transformers.models.bert.tokenization_bert import BertTokenizer
from transformers.utils import logging

logger = logging.get_logger(__name__)

VOCAB_FILES_NAMES = {"vocab_file": "vocab.txt", "tokenizer_file": "tokenizer.json"}

# Fixed ids of the special tokens in vocabularies trained by this project.
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


class TokenizerInputError(TypeError, ValueError):
    """Raised for text inputs of the wrong type (catchable as ``TypeError`` or as ``ValueError``)."""


def _describe(value) -> str:
    return f"{type(value).__name__} {value!r}"[:120]


def _check_text_argument(name: str, value, allow_none: bool) -> None:
    """Raise a clear ``TypeError`` for inputs the backend would reject with an obscure message."""
    if value is None:
        if allow_none:
            return
        raise TokenizerInputError(
            f"BriskBertTokenizer: `{name}` is None. Pass a string, a list of strings (a batch), or, with "
            "`is_split_into_words=True`, a list of words or a list of lists of words."
        )
    if isinstance(value, str):
        return
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            if isinstance(item, str):
                continue
            if _only_strings(item, depth=2):
                continue  # pre-tokenized words, a (text, text_pair) tuple, or a pair of word lists
            raise TokenizerInputError(
                f"BriskBertTokenizer: `{name}[{i}]` is a {_describe(item)}; every item must be a string "
                "(or, with `is_split_into_words=True`, a list of strings). To turn ids back into text use "
                "`decode`/`batch_decode`; to convert tokens use `convert_tokens_to_ids`."
            )
        return
    raise TokenizerInputError(
        f"BriskBertTokenizer: `{name}` is a {_describe(value)}. Pass a string or a list of strings."
    )


def _only_strings(value, depth: int) -> bool:
    if isinstance(value, str):
        return True
    if depth > 0 and isinstance(value, (list, tuple)):
        return all(_only_strings(v, depth - 1) for v in value)
    return False


class BriskBertTokenizer(BertTokenizer):
    r"""
    BERT WordPiece tokenizer of the briskbert project (backed by the 🤗 tokenizers library).

    Behaves exactly like [`BertTokenizer`] on the same vocabulary. Arguments are those of
    [`BertTokenizer`]: `vocab` (a path to `vocab.txt` or a `dict[str, int]`), `do_lower_case`,
    `unk_token`, `sep_token`, `pad_token`, `cls_token`, `mask_token`, `tokenize_chinese_chars`,
    `strip_accents` (defaults to the value of `do_lower_case`, as in the original BERT).
    """

    vocab_files_names = VOCAB_FILES_NAMES
    model_input_names = ["input_ids", "token_type_ids", "attention_mask"]

    def __init__(
        self,
        vocab: str | dict[str, int] | None = None,
        do_lower_case: bool = True,
        unk_token: str = "[UNK]",
        sep_token: str = "[SEP]",
        pad_token: str = "[PAD]",
        cls_token: str = "[CLS]",
        mask_token: str = "[MASK]",
        tokenize_chinese_chars: bool = True,
        strip_accents: bool | None = None,
        **kwargs,
    ):
        # A `vocab.txt` path given as `vocab_file` (the BERT-folder convention) is read here, so that a
        # folder holding only `vocab.txt` loads too.
        vocab_file = kwargs.get("vocab_file")
        if vocab is None and isinstance(vocab_file, str) and os.path.isfile(vocab_file):
            vocab = vocab_file
        if isinstance(vocab, (str, os.PathLike)):
            vocab = _load_vocab(vocab)
        super().__init__(
            vocab=vocab,
            do_lower_case=do_lower_case,
            unk_token=unk_token,
            sep_token=sep_token,
            pad_token=pad_token,
            cls_token=cls_token,
            mask_token=mask_token,
            tokenize_chinese_chars=tokenize_chinese_chars,
            strip_accents=strip_accents,
            **kwargs,
        )

    # ------------------------------------------------------------------ input validation
    def __call__(self, text=None, text_pair=None, text_target=None, text_pair_target=None, *args, **kwargs):
        if text is None and text_target is None:
            _check_text_argument("text", None, allow_none=False)
        _check_text_argument("text", text, allow_none=True)
        _check_text_argument("text_pair", text_pair, allow_none=True)
        _check_text_argument("text_target", text_target, allow_none=True)
        _check_text_argument("text_pair_target", text_pair_target, allow_none=True)
        return super().__call__(text, text_pair, text_target, text_pair_target, *args, **kwargs)

    def encode(self, text, text_pair=None, *args, **kwargs):
        _check_text_argument("text", text, allow_none=False)
        _check_text_argument("text_pair", text_pair, allow_none=True)
        return super().encode(text, text_pair, *args, **kwargs)

    def tokenize(self, text, pair=None, add_special_tokens: bool = False, **kwargs):
        _check_text_argument("text", text, allow_none=False)
        _check_text_argument("pair", pair, allow_none=True)
        return super().tokenize(text, pair=pair, add_special_tokens=add_special_tokens, **kwargs)

    # ------------------------------------------------------------------ saving
    def _save_pretrained(self, save_directory, file_names, legacy_format=None, filename_prefix=None):
        file_names = super()._save_pretrained(
            save_directory, file_names, legacy_format=legacy_format, filename_prefix=filename_prefix
        )
        return tuple(file_names) + tuple(self.save_vocabulary(str(save_directory), filename_prefix))

    def save_vocabulary(self, save_directory: str, filename_prefix: str | None = None) -> tuple[str]:
        """Write ``vocab.txt``: the WordPiece vocabulary, one token per line, line number = id."""
        if not os.path.isdir(save_directory):
            raise ValueError(f"Vocabulary path ({save_directory}) should be a directory")
        out_vocab_file = os.path.join(
            save_directory,
            (filename_prefix + "-" if filename_prefix else "") + VOCAB_FILES_NAMES["vocab_file"],
        )
        vocab = self._tokenizer.get_vocab(with_added_tokens=False)
        ordered = sorted(vocab.items(), key=lambda kv: kv[1])
        with open(out_vocab_file, "w", encoding="utf-8") as writer:
            expected = 0
            for token, index in ordered:
                if index != expected:
                    logger.warning(
                        f"Saving vocabulary to {out_vocab_file}: ids are not consecutive at {index}; "
                        "`vocab.txt` line numbers will not match ids (tokenizer.json is authoritative)."
                    )
                    expected = index
                writer.write(token + "\n")
                expected += 1
        return (out_vocab_file,)


def _load_vocab(vocab_file) -> dict[str, int]:
    vocab: dict[str, int] = {}
    with open(vocab_file, encoding="utf-8") as reader:
        for index, line in enumerate(reader):
            vocab[line.rstrip("\n")] = index
    return vocab


BriskBertTokenizer.register_for_auto_class("AutoTokenizer")

__all__ = ["BriskBertTokenizer", "SPECIAL_TOKENS", "TokenizerInputError"]
