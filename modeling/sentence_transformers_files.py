# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""The files that make a model folder a sentence-transformers model (`modules.json`: the transformer in the folder
itself, `1_Pooling`, `2_Normalize` when embeddings are unit length; `sentence_bert_config.json`: the maximum length),
in the layout of the original all-MiniLM-L6-v2 repository, written and read without importing the library.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from briskbert.files import write_atomic

POOLING_MODES = ("mean", "cls")
MODULES_FILE = "modules.json"
CONFIG_FILE = "sentence_bert_config.json"
SETTINGS_FILE = "config_sentence_transformers.json"
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
    write_atomic(folder / MODULES_FILE, json.dumps(modules, indent=2))
    write_atomic(
        folder / CONFIG_FILE,
        json.dumps({"max_seq_length": spec.max_seq_length, "do_lower_case": False}, indent=2),
    )
    (folder / POOLING_FOLDER).mkdir(parents=True, exist_ok=True)
    pooling = {
        "word_embedding_dimension": hidden_size,
        "pooling_mode_cls_token": spec.pooling == "cls",
        "pooling_mode_mean_tokens": spec.pooling == "mean",
        "pooling_mode_max_tokens": False,
        "pooling_mode_mean_sqrt_len_tokens": False,
    }
    write_atomic(folder / POOLING_FOLDER / "config.json", json.dumps(pooling, indent=2))


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


def copy_sentence_transformers_files(source: str | Path, target: str | Path) -> None:
    """A sentence-transformers folder's own files and the module folders `modules.json` names (1_Pooling/, ...)."""
    source, target = Path(source), Path(target)
    for name in (MODULES_FILE, CONFIG_FILE, SETTINGS_FILE):
        if (source / name).is_file():
            shutil.copy2(source / name, target / name)
    if (source / MODULES_FILE).is_file():
        for module in json.loads((source / MODULES_FILE).read_text(encoding="utf-8")):
            path = module.get("path", "")
            if path and (source / path).is_dir():
                shutil.copytree(source / path, target / path, dirs_exist_ok=True)
