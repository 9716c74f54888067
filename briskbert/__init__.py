"""briskbert: build, train, fine-tune and publish BERT-family encoders that load with plain transformers."""

from modeling import *  # noqa: F401,F403  (registers the models with the Auto classes)
from modeling import __all__ as _modeling_all
from tokenization import BriskBertTokenizer, train_wordpiece_tokenizer

__all__ = [*_modeling_all, "BriskBertTokenizer", "train_wordpiece_tokenizer"]
