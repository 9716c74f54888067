"""Import of transformers BERT checkpoints (BertModel or any BertFor* head) into BriskBert folders."""

import json
import re
import shutil
import tempfile
from pathlib import Path

import torch

from .configuration_briskbert import BriskBertConfig
from .modeling_briskbert import (
    BriskBertForMaskedLM,
    BriskBertForMultipleChoice,
    BriskBertForNextSentencePrediction,
    BriskBertForPreTraining,
    BriskBertForQuestionAnswering,
    BriskBertForSequenceClassification,
    BriskBertForTokenClassification,
    BriskBertModel,
)

BRISKBERT_CLASS_FOR_BERT = {
    "BertModel": BriskBertModel,
    "BertForPreTraining": BriskBertForPreTraining,
    "BertForMaskedLM": BriskBertForMaskedLM,
    "BertForNextSentencePrediction": BriskBertForNextSentencePrediction,
    "BertForSequenceClassification": BriskBertForSequenceClassification,
    "BertForTokenClassification": BriskBertForTokenClassification,
    "BertForQuestionAnswering": BriskBertForQuestionAnswering,
    "BertForMultipleChoice": BriskBertForMultipleChoice,
}

# BERT parameter name (after the optional "bert." prefix) -> BriskBert name (after the "model." prefix).
_ENCODER_RENAMES = [
    (r"embeddings\.LayerNorm\.", "embeddings.norm."),
    (r"encoder\.layer\.(\d+)\.attention\.output\.dense\.", r"layers.\1.attention.out."),
    (r"encoder\.layer\.(\d+)\.attention\.output\.LayerNorm\.", r"layers.\1.attention_norm."),
    (r"encoder\.layer\.(\d+)\.intermediate\.dense\.", r"layers.\1.mlp.up."),
    (r"encoder\.layer\.(\d+)\.output\.dense\.", r"layers.\1.mlp.down."),
    (r"encoder\.layer\.(\d+)\.output\.LayerNorm\.", r"layers.\1.mlp_norm."),
]
_HEAD_RENAMES = {
    "cls.predictions.transform.dense.weight": "head.dense.weight",
    "cls.predictions.transform.dense.bias": "head.dense.bias",
    "cls.predictions.transform.LayerNorm.weight": "head.norm.weight",
    "cls.predictions.transform.LayerNorm.bias": "head.norm.bias",
    "cls.predictions.decoder.weight": "head.decoder.weight",
    "cls.predictions.decoder.bias": "head.decoder.bias",
    "cls.predictions.bias": "head.decoder.bias",
    "cls.seq_relationship.weight": "seq_relationship.weight",
    "cls.seq_relationship.bias": "seq_relationship.bias",
    "classifier.weight": "classifier.weight",
    "classifier.bias": "classifier.bias",
    "qa_outputs.weight": "qa_outputs.weight",
    "qa_outputs.bias": "qa_outputs.bias",
}
_QKV = re.compile(r"encoder\.layer\.(\d+)\.attention\.self\.(query|key|value)\.(weight|bias)")
# Buffers some BERT versions saved; they carry no learned values.
_IGNORED = re.compile(r"(.*\.)?embeddings\.(position_ids|token_type_ids)$")


class CheckpointMismatchError(ValueError):
    """The source checkpoint's weights do not match the target architecture."""


def briskbert_config_from_bert(bert_config: dict) -> BriskBertConfig:
    """BriskBert options that reproduce a BERT config exactly."""
    if bert_config.get("position_embedding_type", "absolute") != "absolute":
        raise ValueError(
            "Only BERT checkpoints with absolute position embeddings can be converted, got "
            f"position_embedding_type={bert_config['position_embedding_type']!r}."
        )
    keep = (
        "vocab_size",
        "hidden_size",
        "num_hidden_layers",
        "num_attention_heads",
        "intermediate_size",
        "hidden_act",
        "hidden_dropout_prob",
        "attention_probs_dropout_prob",
        "max_position_embeddings",
        "type_vocab_size",
        "initializer_range",
        "layer_norm_eps",
        "pad_token_id",
        "classifier_dropout",
        "id2label",
        "label2id",
        "problem_type",
    )
    fields = {key: bert_config[key] for key in keep if key in bert_config}
    return BriskBertConfig(
        position_embedding_type="absolute",
        norm_type="layernorm",
        norm_position="post",
        mlp_type="mlp",
        **fields,
    )


def convert_bert_state_dict(bert_state: dict[str, torch.Tensor]) -> dict[str, tuple[str, torch.Tensor]]:
    """Renames BERT weights to BriskBert's and fuses query/key/value into one projection.

    Returns {briskbert_name: (bert_name, tensor)} so that mismatches can be reported by their original names.
    """
    converted, qkv_parts = {}, {}
    for name, tensor in bert_state.items():
        if _IGNORED.match(name):
            continue
        if name in _HEAD_RENAMES:
            converted[_HEAD_RENAMES[name]] = (name, tensor)
            continue
        inner = name.removeprefix("bert.")
        qkv = _QKV.fullmatch(inner)
        if qkv:
            layer, part, kind = qkv.groups()
            qkv_parts.setdefault((layer, kind), {})[part] = tensor
            continue
        for pattern, replacement in _ENCODER_RENAMES:
            inner = re.sub(f"^{pattern}", replacement, inner)
        converted[f"model.{inner}"] = (name, tensor)
    for (layer, kind), parts in qkv_parts.items():
        missing = {"query", "key", "value"} - parts.keys()
        if missing:
            raise CheckpointMismatchError(
                f"Layer {layer} lacks attention {kind} weights for: {sorted(missing)}."
            )
        fused = torch.cat([parts["query"], parts["key"], parts["value"]], dim=0)
        converted[f"model.layers.{layer}.attention.qkv.{kind}"] = (
            f"encoder.layer.{layer}.attention.self.*",
            fused,
        )
    return converted


def load_bert_state_dict(src: Path) -> dict[str, torch.Tensor]:
    if (src / "model.safetensors").exists():
        from safetensors.torch import load_file

        return load_file(str(src / "model.safetensors"))
    if (src / "pytorch_model.bin").exists():
        return torch.load(src / "pytorch_model.bin", map_location="cpu", weights_only=True)
    sharded = sorted(src.glob("model-*.safetensors"))
    if sharded:
        from safetensors.torch import load_file

        return {name: tensor for shard in sharded for name, tensor in load_file(str(shard)).items()}
    raise FileNotFoundError(
        f"No weights in {src}: expected model.safetensors, model-*.safetensors shards or pytorch_model.bin."
    )


def convert_bert_checkpoint(
    src_dir,
    out_dir,
    architecture: str | None = None,
    save_tokenizer: bool = True,
    source_repo_id: str | None = None,
):
    """Converts the BERT folder `src_dir` into a BriskBert folder `out_dir` (config, safetensors, code, tokenizer).

    The head is taken from the checkpoint's `architectures` (or `architecture`, e.g. "BertForMaskedLM").
    `source_repo_id` (the checkpoint's Hub id) is recorded in `training_facts.json` as the base model that
    model cards of anything trained from this folder name. Raises `CheckpointMismatchError` listing every
    missing or unexpected weight. Returns the converted model.
    """
    src, out = Path(src_dir), Path(out_dir)
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"{out} already exists and is not empty; choose a new output folder.")
    config_path = src / "config.json"
    if not config_path.exists():
        raise FileNotFoundError(f"{src} has no config.json; pass a transformers BERT checkpoint folder.")
    bert_config = json.loads(config_path.read_text())
    if bert_config.get("model_type") != "bert":
        raise ValueError(
            f"{src} holds a {bert_config.get('model_type')!r} checkpoint; only 'bert' is supported."
        )
    architecture = architecture or (bert_config.get("architectures") or ["BertModel"])[0]
    if architecture not in BRISKBERT_CLASS_FOR_BERT:
        raise ValueError(
            f"Unsupported architecture {architecture!r}; choose one of {', '.join(BRISKBERT_CLASS_FOR_BERT)}."
        )

    config = briskbert_config_from_bert(bert_config)
    model_class = BRISKBERT_CLASS_FOR_BERT[architecture]
    model = model_class(config)
    converted = convert_bert_state_dict(load_bert_state_dict(src))
    if model_class is BriskBertModel:
        converted = {name.removeprefix("model."): value for name, value in converted.items()}

    expected = set(model.state_dict())
    unexpected = sorted(converted[name][0] for name in converted.keys() - expected)
    missing = sorted(expected - converted.keys() - set(model._tied_weights_keys or {}))
    if missing or unexpected:
        raise CheckpointMismatchError(
            f"Cannot convert {src} as {architecture}:\n"
            f"  missing weights ({len(missing)}): {missing}\n  unexpected weights ({len(unexpected)}): {unexpected}"
        )
    model.load_state_dict({name: tensor for name, (_, tensor) in converted.items()}, strict=False)
    model.tie_weights()
    model.eval()

    # Write next to the destination and move into place at the end, so a failure leaves no half-written folder.
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        model.save_pretrained(staging)
        if save_tokenizer:
            from briskbert.tokenization import BriskBertTokenizer

            BriskBertTokenizer.from_pretrained(str(src)).save_pretrained(staging)
        if source_repo_id:
            (staging / "training_facts.json").write_text(json.dumps({"base_model": source_repo_id}, indent=2))
        staging.replace(out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return model
