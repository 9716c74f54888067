"""BriskBert models. Importing this package registers them with transformers' Auto classes in-process; saved
folders carry `auto_map` and the code files, so elsewhere they load with `trust_remote_code=True`."""

import transformers

from . import modeling_briskbert
from .configuration_briskbert import PRESETS, BriskBertConfig
from .modeling_briskbert import *  # noqa: F403  (the classes AUTO_MAP names, and the pretrained base)
from .modeling_briskbert import MODEL_CLASSES

# The same Auto class -> model class table that saved folders write into `auto_map`.
transformers.AutoConfig.register("briskbert", BriskBertConfig, exist_ok=True)
for _auto_name, _model_class in MODEL_CLASSES.items():
    getattr(transformers, _auto_name).register(BriskBertConfig, _model_class, exist_ok=True)

__all__ = ["PRESETS", "BriskBertConfig", *modeling_briskbert.__all__]
