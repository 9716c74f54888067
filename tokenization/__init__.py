"""BriskBert tokenization: the WordPiece ``BriskBertTokenizer``, and tokenizer training (WordPiece,
byte-level BPE, Unigram) from a corpus."""

# In-process, Auto classes find the tokenizer of a BriskBert folder without trust_remote_code.
from transformers import AutoTokenizer  # noqa: E402

from briskbert.modeling.configuration_briskbert import BriskBertConfig  # noqa: E402

from .tokenization_briskbert import SPECIAL_TOKENS, BriskBertTokenizer, TokenizerInputError
from .training import (
    TOKENIZER_MODELS,
    EmptyCorpusError,
    round_up_to_multiple,
    sample_lines,
    train_bpe_tokenizer,
    train_tokenizer,
    train_unigram_tokenizer,
    train_wordpiece_tokenizer,
)

AutoTokenizer.register(BriskBertConfig, tokenizer_class=BriskBertTokenizer, exist_ok=True)


__all__ = [
    "SPECIAL_TOKENS",
    "TOKENIZER_MODELS",
    "EmptyCorpusError",
    "sample_lines",
    "train_bpe_tokenizer",
    "train_tokenizer",
    "train_unigram_tokenizer",
    "BriskBertTokenizer",
    "TokenizerInputError",
    "round_up_to_multiple",
    "train_wordpiece_tokenizer",
]
