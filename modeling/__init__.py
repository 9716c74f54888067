"""BriskBert models. Importing this package registers them with transformers' Auto classes in-process; saved
folders carry `auto_map` and the code files, so elsewhere they load with `trust_remote_code=True`."""

from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForMaskedLM,
    AutoModelForMultipleChoice,
    AutoModelForNextSentencePrediction,
    AutoModelForPreTraining,
    AutoModelForQuestionAnswering,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
)

from .configuration_briskbert import PRESETS, BriskBertConfig
from .modeling_briskbert import (
    BriskBertForMaskedLM,
    BriskBertForMultipleChoice,
    BriskBertForNextSentencePrediction,
    BriskBertForPreTraining,
    BriskBertForQuestionAnswering,
    BriskBertForSequenceClassification,
    BriskBertForTokenClassification,
    BriskBertModel,
    BriskBertPreTrainedModel,
)

AutoConfig.register("briskbert", BriskBertConfig, exist_ok=True)
for _auto, _model in (
    (AutoModel, BriskBertModel),
    (AutoModelForPreTraining, BriskBertForPreTraining),
    (AutoModelForMaskedLM, BriskBertForMaskedLM),
    (AutoModelForNextSentencePrediction, BriskBertForNextSentencePrediction),
    (AutoModelForSequenceClassification, BriskBertForSequenceClassification),
    (AutoModelForTokenClassification, BriskBertForTokenClassification),
    (AutoModelForQuestionAnswering, BriskBertForQuestionAnswering),
    (AutoModelForMultipleChoice, BriskBertForMultipleChoice),
):
    _auto.register(BriskBertConfig, _model, exist_ok=True)

__all__ = [
    "PRESETS",
    "BriskBertConfig",
    "BriskBertPreTrainedModel",
    "BriskBertModel",
    "BriskBertForPreTraining",
    "BriskBertForMaskedLM",
    "BriskBertForNextSentencePrediction",
    "BriskBertForSequenceClassification",
    "BriskBertForTokenClassification",
    "BriskBertForQuestionAnswering",
    "BriskBertForMultipleChoice",
]
