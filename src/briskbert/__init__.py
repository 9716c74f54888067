"""briskbert: build, train, fine-tune and publish BERT-family encoders that load with plain transformers.

The model and tokenizer classes are loaded on first use, so ``import briskbert`` and the ``briskbert``
command stay fast; ``import briskbert.modeling`` registers the models with transformers' Auto classes.
"""

import importlib

__version__ = "0.2.0"

_LAZY = {
    "BriskBertTokenizer": "briskbert.tokenization",
    "train_wordpiece_tokenizer": "briskbert.tokenization",
}
_MODELING = (
    "PRESETS BriskBertConfig BriskBertPreTrainedModel BriskBertModel BriskBertForPreTraining BriskBertForMaskedLM "
    "BriskBertForNextSentencePrediction BriskBertForSequenceClassification BriskBertForTokenClassification "
    "BriskBertForQuestionAnswering BriskBertForMultipleChoice"
).split()
_LAZY.update(dict.fromkeys(_MODELING, "briskbert.modeling"))

__all__ = [*_MODELING, "BriskBertTokenizer", "train_wordpiece_tokenizer", "__version__"]


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'briskbert' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value
