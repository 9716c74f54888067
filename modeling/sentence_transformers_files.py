# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""The files that make a model folder a sentence-transformers model (`modules.json`: the transformer in the folder
itself, `1_Pooling`, `2_Normalize` when embeddings are unit length; `sentence_bert_config.json`: the maximum length),
in the layout of the original all-MiniLM-L6-v2 repository, written and read without importing the library."""

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from briskbert.errors import UserError
from briskbert.files import write_atomic

POOLING_MODES = ("mean", "cls")
MODULES_FILE = "modules.json"
CONFIG_FILE = "sentence_bert_config.json"
SETTINGS_FILE = "config_sentence_transformers.json"
# What briskbert computes of a sentence-transformers folder (in PyTorch and in the ONNX graph).
COMPUTED_MODULES = ("Transformer", "Pooling", "Normalize")


@dataclass(frozen=True)
class EmbeddingSpec:
    """How token states become one sentence embedding (the settings that build one check its values)."""

    pooling: str = "mean"
    normalize: bool = True
    max_seq_length: int = 256

    def pool(self, last_hidden_state, attention_mask):
        """sentence-transformers' Pooling (mean of the real tokens, or the first) and Normalize modules."""
        from torch.nn.functional import normalize

        from .modeling_briskbert import POOLINGS

        pooled = POOLINGS[self.pooling](last_hidden_state, attention_mask)
        return normalize(pooled, p=2, dim=1) if self.normalize else pooled


def write_sentence_transformers_files(folder: str | Path, spec: EmbeddingSpec, hidden_size: int) -> None:
    folder = Path(folder)
    kinds = {"": "Transformer", "1_Pooling": "Pooling"} | (
        {"2_Normalize": "Normalize"} if spec.normalize else {}
    )
    modules = [
        {"idx": index, "name": str(index), "path": path, "type": f"sentence_transformers.models.{kind}"}
        for index, (path, kind) in enumerate(kinds.items())
    ]
    pooling = {
        "word_embedding_dimension": hidden_size,
        "pooling_mode_cls_token": spec.pooling == "cls",
        "pooling_mode_mean_tokens": spec.pooling == "mean",
    }
    files = {
        MODULES_FILE: modules,
        CONFIG_FILE: {"max_seq_length": spec.max_seq_length, "do_lower_case": False},
        "1_Pooling/config.json": pooling,
    }
    for path in list(kinds)[1:]:
        (folder / path).mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        write_atomic(folder / name, json.dumps(content, indent=2))


def read_embedding_spec(folder: str | Path) -> EmbeddingSpec | None:
    """The pooling, normalisation and length a sentence-transformers folder declares; None without `modules.json`
    (or for a Hub id). A folder asking for what briskbert does not compute (a Dense module, max pooling) is
    refused."""
    folder = Path(folder)
    path = folder / MODULES_FILE
    if not path.is_file():
        return None
    try:
        types = {module["type"].rsplit(".", 1)[-1]: module["path"] for module in read_json(path)}
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise UserError(f"{path} is not a sentence-transformers module list ({error}).") from error
    pooling = read_json(folder / types["Pooling"] / "config.json") if "Pooling" in types else {}
    names = {"pooling_mode_cls_token": "cls", "pooling_mode_mean_tokens": "mean"}
    modes = {
        names.get(key, key) for key, on in pooling.items() if key.startswith("pooling_mode_") and on is True
    }
    if isinstance(pooling.get("pooling_mode"), str):  # how sentence-transformers >= 5 writes it
        modes.add(pooling["pooling_mode"])
    unknown = sorted(set(types) - set(COMPUTED_MODULES)) + sorted(modes - set(POOLING_MODES))
    if unknown or len(modes) > 1:
        raise UserError(
            f"{folder} asks for {', '.join(unknown or sorted(modes))}, which briskbert does not compute (only "
            f"{', '.join(COMPUTED_MODULES)}, with one of {', '.join(POOLING_MODES)} pooling); move {MODULES_FILE} "
            "aside to use the bare encoder."
        )
    # sentence-transformers >= 5 keeps the length as the tokenizer's model_max_length, older ones in CONFIG_FILE
    lengths = [(CONFIG_FILE, "max_seq_length"), ("tokenizer_config.json", "model_max_length")]
    found = [read_json(folder / name).get(key) for name, key in lengths if (folder / name).is_file()]
    return EmbeddingSpec(
        pooling=next(iter(modes), "mean"),
        normalize="Normalize" in types,
        max_seq_length=next((n for n in found if isinstance(n, int) and 0 < n < 1_000_000), 256),
    )


def read_json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def copy_sentence_transformers_files(source: str | Path, target: str | Path) -> None:
    """A sentence-transformers folder's own files and the module folders `modules.json` names (1_Pooling/, ...)."""
    source, target = Path(source), Path(target)
    for name in (MODULES_FILE, CONFIG_FILE, SETTINGS_FILE):
        if (source / name).is_file():
            shutil.copy2(source / name, target / name)
    modules = read_json(source / MODULES_FILE) if (source / MODULES_FILE).is_file() else []
    for path in (module.get("path", "") for module in modules):
        if path and (source / path).is_dir():
            shutil.copytree(source / path, target / path, dirs_exist_ok=True)
