"""briskbert: build, train, fine-tune and publish BERT-family encoders that load with plain transformers."""

from modeling import *  # noqa: F401,F403  (registers the Auto classes)
from modeling import __all__ as _modeling_all

__all__ = list(_modeling_all)
