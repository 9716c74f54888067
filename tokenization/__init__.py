"""BriskBert tokenization: the WordPiece ``BriskBertTokenizer`` and WordPiece training from a corpus."""

from .tokenization_briskbert import SPECIAL_TOKENS, BriskBertTokenizer, TokenizerInputError
from .training import round_up_to_multiple, train_wordpiece_tokenizer


__all__ = [
    "SPECIAL_TOKENS",
    "BriskBertTokenizer",
    "TokenizerInputError",
    "round_up_to_multiple",
    "train_wordpiece_tokenizer",
]
