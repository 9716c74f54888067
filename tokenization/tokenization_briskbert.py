# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""BriskBertTokenizer: transformers' (tokenizers-backed) `BertTokenizer`, so ids, types, masks and offsets equal
BERT's on the same vocabulary, plus what BriskBert folders need: `register_for_auto_class` (saves copy this file,
so `AutoTokenizer.from_pretrained(folder, trust_remote_code=True)` works without briskbert), a `vocab.txt` written
on every save (also for vocabularies trained in memory), and input checks that name what to pass instead of
failing inside the Rust backend (`TokenizerInputError`, both a `TypeError` and a `ValueError`).

Trained vocabularies keep the special tokens at fixed ids: [PAD]=0, [UNK]=1, [CLS]=2, [SEP]=3, [MASK]=4 (BERT's
order for an empty vocabulary); pretrained vocabularies keep their own. Remote code: copied flat, it imports only
transformers and the standard library.
"""

from __future__ import annotations

import os

from transformers.models.bert.tokenization_bert import BertTokenizer, load_vocab
from transformers.utils import logging

logger = logging.get_logger(__name__)

VOCAB_FILES_NAMES = {"vocab_file": "vocab.txt", "tokenizer_file": "tokenizer.json"}

# Fixed ids of the special tokens in vocabularies trained by this project.
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


class TokenizerInputError(TypeError, ValueError):
    """A text input of the wrong type."""


def _describe(value) -> str:
    return f"{type(value).__name__} {value!r}"[:120]


def _check_text_argument(name: str, value, allow_none: bool) -> None:
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
    """BERT's WordPiece tokenizer; `vocab` is a `vocab.txt` path or a `dict[str, int]`, the rest as `BertTokenizer`."""

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
            vocab = dict(load_vocab(vocab))
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


BriskBertTokenizer.register_for_auto_class("AutoTokenizer")

__all__ = ["BriskBertTokenizer", "SPECIAL_TOKENS", "TokenizerInputError"]
