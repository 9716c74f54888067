"""BriskBert tokenization: the WordPiece ``BriskBertTokenizer``, and tokenizer training (WordPiece,
byte-level BPE, Unigram) from a corpus."""

# In-process, Auto classes find the tokenizer of a BriskBert folder without trust_remote_code.
from transformers import AutoTokenizer

from briskbert.modeling.configuration_briskbert import BriskBertConfig

from .tokenization_briskbert import SPECIAL_TOKENS, BriskBertTokenizer, TokenizerInputError
from .training import EmptyCorpusError, train_tokenizer, train_wordpiece_tokenizer

AutoTokenizer.register(BriskBertConfig, tokenizer_class=BriskBertTokenizer, exist_ok=True)

__all__ = [
    "SPECIAL_TOKENS",
    "BriskBertTokenizer",
    "EmptyCorpusError",
    "TokenizerInputError",
    "train_tokenizer",
    "train_wordpiece_tokenizer",
]
