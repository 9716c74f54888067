# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""BriskBertTokenizer: transformers' `BertTokenizer` (so ids, types, masks and offsets equal BERT's), plus what
BriskBert folders need: remote-code registration, a `vocab.txt` written on every save, and input checks that name
what to pass instead of failing inside the Rust backend. Remote code: imports only transformers and the stdlib.
"""

from __future__ import annotations

import os

from transformers.models.bert.tokenization_bert import BertTokenizer, load_vocab

VOCAB_FILES_NAMES = {"vocab_file": "vocab.txt", "tokenizer_file": "tokenizer.json"}

# Fixed ids (0-4) of the special tokens in vocabularies trained by this project.
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


class TokenizerInputError(TypeError, ValueError):
    """A text input of the wrong type."""


def _only_strings(value, depth: int) -> bool:
    """A string, or (down to ``depth`` levels) a list or tuple of them."""
    if isinstance(value, (list, tuple)):
        return depth > 0 and all(_only_strings(item, depth - 1) for item in value)
    return isinstance(value, str)


def _check_text_argument(name: str, value, allow_none: bool = True) -> None:
    """A text, a batch of texts, or pre-tokenized words (lists of strings, or pairs of such lists)."""
    if value is None and not allow_none:
        raise TokenizerInputError(
            f"BriskBertTokenizer: `{name}` is None. Pass a string, a list of strings (a batch), or, with "
            "`is_split_into_words=True`, a list of words or a list of lists of words."
        )
    if value is None or _only_strings(value, depth=3):
        return
    for i, item in enumerate(value if isinstance(value, (list, tuple)) else []):
        if not _only_strings(item, depth=2):
            raise TokenizerInputError(
                f"BriskBertTokenizer: `{name}[{i}]` is a {type(item).__name__} {item!r:.100}; every item must be "
                "a string (or, with `is_split_into_words=True`, a list of strings). To turn ids back into text "
                "use `decode`/`batch_decode`; to convert tokens use `convert_tokens_to_ids`."
            )
    raise TokenizerInputError(
        f"BriskBertTokenizer: `{name}` is a {type(value).__name__} {value!r:.100}. Pass a string or a list of strings."
    )


class BriskBertTokenizer(BertTokenizer):
    """BERT's WordPiece tokenizer; `vocab` is a `vocab.txt` path or a `dict[str, int]`, the rest as `BertTokenizer`."""

    vocab_files_names = VOCAB_FILES_NAMES
    model_input_names = ["input_ids", "token_type_ids", "attention_mask"]

    def __init__(self, vocab: str | dict[str, int] | None = None, **kwargs):
        # A folder holding only `vocab.txt` loads too: transformers passes it as `vocab_file`.
        vocab_file = kwargs.get("vocab_file")
        if vocab is None and isinstance(vocab_file, str) and os.path.isfile(vocab_file):
            vocab = vocab_file
        if isinstance(vocab, (str, os.PathLike)):
            vocab = dict(load_vocab(vocab))
        super().__init__(vocab=vocab, **kwargs)

    def __call__(self, text=None, text_pair=None, text_target=None, text_pair_target=None, *args, **kwargs):
        _check_text_argument("text", text, allow_none=text_target is not None)
        _check_text_argument("text_pair", text_pair)
        _check_text_argument("text_target", text_target)
        _check_text_argument("text_pair_target", text_pair_target)
        return super().__call__(text, text_pair, text_target, text_pair_target, *args, **kwargs)

    def encode(self, text, text_pair=None, *args, **kwargs):
        _check_text_argument("text", text, allow_none=False)
        _check_text_argument("text_pair", text_pair)
        return super().encode(text, text_pair, *args, **kwargs)

    def tokenize(self, text, pair=None, add_special_tokens: bool = False, **kwargs):
        _check_text_argument("text", text, allow_none=False)
        _check_text_argument("pair", pair)
        return super().tokenize(text, pair=pair, add_special_tokens=add_special_tokens, **kwargs)

    def _save_pretrained(self, save_directory, file_names, legacy_format=None, filename_prefix=None):
        file_names = super()._save_pretrained(
            save_directory, file_names, legacy_format=legacy_format, filename_prefix=filename_prefix
        )
        return tuple(file_names) + tuple(self.save_vocabulary(str(save_directory), filename_prefix))

    def save_vocabulary(self, save_directory: str, filename_prefix: str | None = None) -> tuple[str]:
        """Write ``vocab.txt``: the WordPiece vocabulary, one token per line in id order."""
        path = os.path.join(save_directory, (filename_prefix + "-" if filename_prefix else "") + "vocab.txt")
        vocab = self._tokenizer.get_vocab(with_added_tokens=False)
        with open(path, "w", encoding="utf-8") as writer:
            writer.writelines(token + "\n" for token in sorted(vocab, key=vocab.get))
        return (path,)


BriskBertTokenizer.register_for_auto_class("AutoTokenizer")
