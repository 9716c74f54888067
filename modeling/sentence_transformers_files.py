# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""The files that make a model folder a sentence-transformers model, written and read without importing it.

``SentenceTransformer(folder, trust_remote_code=True)`` reads ``modules.json``: module 0 is the transformer
in the folder itself (loaded through ``AutoModel`` and the folder's remote code), then ``1_Pooling`` (mean
or CLS), then ``2_Normalize`` when embeddings are unit length. ``sentence_bert_config.json`` holds the
maximum sequence length. These are the files sentence-transformers writes itself, in the layout the
original ``all-MiniLM-L6-v2`` repository uses, so old and new versions of the library read them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

POOLING_MODES = ("mean", "cls")
MODULES_FILE = "modules.json"
CONFIG_FILE = "sentence_bert_config.json"
POOLING_FOLDER = "1_Pooling"
NORMALIZE_FOLDER = "2_Normalize"


@dataclass(frozen=True)
class EmbeddingSpec:
    """How token states become one sentence embedding."""

    pooling: str = "mean"
    normalize: bool = True
    max_seq_length: int = 256

    def __post_init__(self):
        if self.pooling not in POOLING_MODES:
            raise ValueError(f"pooling {self.pooling!r} is not one of {', '.join(POOLING_MODES)}.")
        if self.max_seq_length < 1:
            raise ValueError(f"max_seq_length must be >= 1, got {self.max_seq_length}.")


def write_sentence_transformers_files(folder: str | Path, spec: EmbeddingSpec, hidden_size: int) -> None:
    folder = Path(folder)
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": POOLING_FOLDER, "type": "sentence_transformers.models.Pooling"},
    ]
    if spec.normalize:
        modules.append(
            {
                "idx": 2,
                "name": "2",
                "path": NORMALIZE_FOLDER,
                "type": "sentence_transformers.models.Normalize",
            }
        )
        (folder / NORMALIZE_FOLDER).mkdir(parents=True, exist_ok=True)
    (folder / MODULES_FILE).write_text(json.dumps(modules, indent=2))
    (folder / CONFIG_FILE).write_text(
        json.dumps({"max_seq_length": spec.max_seq_length, "do_lower_case": False}, indent=2)
    )
    (folder / POOLING_FOLDER).mkdir(parents=True, exist_ok=True)
    pooling = {
        "word_embedding_dimension": hidden_size,
        "pooling_mode_cls_token": spec.pooling == "cls",
        "pooling_mode_mean_tokens": spec.pooling == "mean",
        "pooling_mode_max_tokens": False,
        "pooling_mode_mean_sqrt_len_tokens": False,
    }
    (folder / POOLING_FOLDER / "config.json").write_text(json.dumps(pooling, indent=2))


def read_embedding_spec(folder: str | Path) -> EmbeddingSpec | None:
    """The pooling, normalisation and length a sentence-transformers folder declares; ``None`` for a folder
    without ``modules.json`` (or a Hub id: the caller then uses its own defaults)."""
    folder = Path(folder)
    if not (folder / MODULES_FILE).is_file():
        return None
    modules = json.loads((folder / MODULES_FILE).read_text())
    types = {module["type"].rsplit(".", 1)[-1]: module["path"] for module in modules}
    pooling = "mean"
    if "Pooling" in types:
        pooling_config = json.loads((folder / types["Pooling"] / "config.json").read_text())
        if pooling_config.get("pooling_mode_cls_token") or pooling_config.get("pooling_mode") == "cls":
            pooling = "cls"
    config_file = folder / CONFIG_FILE
    max_seq_length = (
        json.loads(config_file.read_text()).get("max_seq_length", 256) if config_file.is_file() else 256
    )
    return EmbeddingSpec(pooling=pooling, normalize="Normalize" in types, max_seq_length=max_seq_length)
