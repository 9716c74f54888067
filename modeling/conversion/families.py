"""The transformers families `briskbert convert` imports and `export-family` writes: config fields, weight names
and heads (by Auto class, the keys of AUTO_MAP) of each. Torch-free."""

from collections.abc import Callable
from dataclasses import dataclass, field

from briskbert.errors import UserError


class UnsupportedCheckpointError(UserError):
    """The source is not a checkpoint `briskbert convert` can import exactly; the message names the field."""


# Encoder parameter renames (regex on the name after the family's prefix) -> BriskBert names after "model.".
_BERT_ENCODER = (
    (r"embeddings\.LayerNorm\.", "embeddings.norm."),
    (r"embeddings_project\.", "embeddings.project."),
    (r"encoder\.layer\.(\d+)\.attention\.output\.dense\.", r"layers.\1.attention.out."),
    (r"encoder\.layer\.(\d+)\.attention\.output\.LayerNorm\.", r"layers.\1.attention_norm."),
    (r"encoder\.layer\.(\d+)\.intermediate\.dense\.", r"layers.\1.mlp.up."),
    (r"encoder\.layer\.(\d+)\.output\.dense\.", r"layers.\1.mlp.down."),
    (r"encoder\.layer\.(\d+)\.output\.LayerNorm\.", r"layers.\1.mlp_norm."),
)
_BERT_QKV = (
    r"encoder\.layer\.(\d+)\.attention\.self\.(query|key|value)\.(weight|bias)",
    ("query", "key", "value"),
)
_DISTILBERT_ENCODER = (
    (r"embeddings\.LayerNorm\.", "embeddings.norm."),
    (r"transformer\.layer\.(\d+)\.attention\.out_lin\.", r"layers.\1.attention.out."),
    (r"transformer\.layer\.(\d+)\.sa_layer_norm\.", r"layers.\1.attention_norm."),
    (r"transformer\.layer\.(\d+)\.ffn\.lin1\.", r"layers.\1.mlp.up."),
    (r"transformer\.layer\.(\d+)\.ffn\.lin2\.", r"layers.\1.mlp.down."),
    (r"transformer\.layer\.(\d+)\.output_layer_norm\.", r"layers.\1.mlp_norm."),
)
_DISTILBERT_QKV = (
    r"transformer\.layer\.(\d+)\.attention\.(q_lin|k_lin|v_lin)\.(weight|bias)",
    ("q_lin", "k_lin", "v_lin"),
)
_MODERNBERT_ENCODER = (
    (r"embeddings\.tok_embeddings\.", "embeddings.word_embeddings."),
    (r"layers\.(\d+)\.attn_norm\.", r"layers.\1.attention_norm."),
    (r"layers\.(\d+)\.attn\.Wqkv\.", r"layers.\1.attention.qkv."),
    (r"layers\.(\d+)\.attn\.Wo\.", r"layers.\1.attention.out."),
    (r"layers\.(\d+)\.mlp\.Wi\.", r"layers.\1.mlp.up."),
    (r"layers\.(\d+)\.mlp\.Wo\.", r"layers.\1.mlp.down."),
)

# Heads: source class suffix -> the Auto class (a key of AUTO_MAP) whose BriskBert class reproduces it.
_CLASSIC_HEADS = {
    "Model": "AutoModel",
    "ForMaskedLM": "AutoModelForMaskedLM",
    "ForSequenceClassification": "AutoModelForSequenceClassification",
    "ForTokenClassification": "AutoModelForTokenClassification",
    "ForQuestionAnswering": "AutoModelForQuestionAnswering",
    "ForMultipleChoice": "AutoModelForMultipleChoice",
}
_COMMON_HEAD_RENAMES = {"classifier.": "classifier.", "qa_outputs.": "qa_outputs."}


def _require(source: dict, field_name: str, accepted, default=None):
    value = source.get(field_name, default)
    if value not in accepted:
        raise UnsupportedCheckpointError(
            f"config.json field {field_name}={value!r} cannot be imported exactly; supported: "
            f"{', '.join(map(repr, accepted))}."
        )


def _same(names: str) -> dict[str, str]:
    """Fields of the same name on both sides, given space-separated."""
    return {name: name for name in names.split()}


_SHARED = _same(
    "vocab_size max_position_embeddings initializer_range pad_token_id bos_token_id eos_token_id id2label "
    "label2id problem_type tie_word_embeddings"
)
_SIZES = _same("hidden_size num_hidden_layers num_attention_heads intermediate_size")
_BERT_NAMES = {
    **_SHARED,
    **_SIZES,
    **_same("hidden_act hidden_dropout_prob attention_probs_dropout_prob type_vocab_size layer_norm_eps"),
    **_same("classifier_dropout"),
}


# ---------- What each direction adds ---------------------------------------------------------------------------
def bert_import(source: dict) -> dict:
    _require(source, "position_embedding_type", ("absolute",), "absolute")
    return {}


def bert_export(ours: dict) -> dict:
    if not ours["type_vocab_size"]:
        raise UnsupportedCheckpointError(
            "type_vocab_size=0 (no segment embeddings; BERT-style families have them)"
        )
    return {}


def electra_import(source: dict) -> dict:
    fields = bert_import(source)
    if source.get("embedding_size", source["hidden_size"]) != source["hidden_size"]:
        fields["embedding_size"] = source["embedding_size"]
    # ElectraClassificationHead and the generator head use gelu whatever hidden_act says.
    return dict(fields, pooler_activation="gelu", head_activation="gelu")


def electra_multiple_choice(source: dict) -> dict:
    _require(source, "summary_type", ("first",), "last")
    _require(source, "summary_use_proj", (True,), False)
    _require(source, "summary_proj_to_labels", (False, None))
    _require(source, "summary_first_dropout", (0, 0.0, None))
    return dict(pooler_activation=source.get("summary_activation") or "linear")


def modernbert_import(source: dict) -> dict:
    rope = source.get("rope_parameters") or {}
    for parameters in rope.values():
        _require(parameters, "rope_type", ("default",), "default")
    # BriskBert's rule: layers 0, n, 2n... are global, the others local.
    layer_types = source.get("layer_types") or []
    local = "sliding_attention" in layer_types
    global_layers = [i for i, kind in enumerate(layer_types) if kind == "full_attention"]
    every = None
    if local and global_layers:
        every = global_layers[1] if len(global_layers) > 1 else len(layer_types)
    activation = source.get("classifier_activation", "gelu")
    return dict(
        type_vocab_size=0,
        position_embedding_type="rope",
        rope_theta=rope.get("full_attention", {}).get("rope_theta", 160000.0),
        local_rope_theta=rope.get("sliding_attention", {}).get("rope_theta", 10000.0),
        sliding_window=source.get("local_attention", 128) // 2 if local else None,
        global_attn_every_n_layers=every,
        norm_type="layernorm",
        norm_position="pre",
        mlp_type="glu",
        first_layer_attention_norm=False,
        pooler_activation=activation,
        token_head_activation=activation,
        head_activation=activation,
        classifier_norm=True,
    )


def modernbert_export(ours: dict) -> dict:
    window, every = ours["sliding_window"], ours["global_attn_every_n_layers"]
    return dict(
        classifier_activation=ours["head_activation"] or ours["hidden_act"],
        local_attention=2 * window if window else 128,
        layer_types=[
            "sliding_attention" if window and not (every and i % every == 0) else "full_attention"
            for i in range(ours["num_hidden_layers"])
        ],
        rope_parameters={
            "full_attention": {"rope_type": "default", "rope_theta": ours["rope_theta"]},
            "sliding_attention": {
                "rope_type": "default",
                "rope_theta": ours["local_rope_theta"] or ours["rope_theta"],
            },
        },
    )


# ---------- The families ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SourceFamily:
    """How one transformers family maps onto BriskBert, both ways: `names` (BriskBert option -> config.json field),
    plus what `imported` / `exported` add; `head_renames` per head suffix ("*": every head) {source prefix: ours};
    `head_config`: options a head needs (ELECTRA's discriminator is a one-label token classifier)."""

    name: str
    prefixes: dict[str, str]  # model_type -> transformers' class prefix
    weight_prefix: str
    head_renames: dict[str, dict[str, str]]
    # BERT's unless given:
    names: dict[str, str] = field(default_factory=lambda: _BERT_NAMES)
    imported: Callable[[dict], dict] = bert_import
    exported: Callable[[dict], dict] = bert_export
    heads: dict[str, str] = field(default_factory=lambda: _CLASSIC_HEADS)
    encoder_renames: tuple[tuple[str, str], ...] = _BERT_ENCODER
    qkv: tuple[str, tuple[str, str, str]] | None = _BERT_QKV
    head_config: dict[str, Callable[[dict], dict]] = field(default_factory=dict)

    @property
    def model_types(self) -> tuple[str, ...]:
        return tuple(self.prefixes)

    def head_suffix(self, architecture: str) -> str:
        """ "RobertaForMaskedLM" -> "ForMaskedLM"; refuses classes of another family or heads without a match."""
        prefix = next((p for p in self.prefixes.values() if architecture.startswith(p)), None)
        suffix = architecture[len(prefix) :] if prefix else None
        if suffix not in self.heads:
            first = next(iter(self.prefixes.values()))
            raise UnsupportedCheckpointError(
                f"architectures={architecture!r} is not a {self.name} head briskbert can import; "
                f"supported: {', '.join(first + s for s in self.heads)} (or give the architecture setting)."
            )
        return suffix


_BERT_HEAD_RENAMES = {
    "cls.predictions.transform.dense.": "head.dense.",
    "cls.predictions.transform.LayerNorm.": "head.norm.",
    "cls.predictions.decoder.": "head.decoder.",
    "cls.predictions.bias": "head.decoder.bias",
    "cls.seq_relationship.": "seq_relationship.",
    **_COMMON_HEAD_RENAMES,
}
_POOLER_FROM_CLASSIFIER = {"classifier.dense.": "model.pooler.dense.", "classifier.out_proj.": "classifier."}

FAMILIES = (
    SourceFamily(
        name="BERT",
        prefixes={"bert": "Bert"},
        weight_prefix="bert.",
        heads={
            **_CLASSIC_HEADS,
            "ForPreTraining": "AutoModelForPreTraining",
            "ForNextSentencePrediction": "AutoModelForNextSentencePrediction",
        },
        head_renames={"*": _BERT_HEAD_RENAMES},
    ),
    SourceFamily(
        name="RoBERTa / XLM-R",
        prefixes={"roberta": "Roberta", "xlm-roberta": "XLMRoberta"},
        weight_prefix="roberta.",
        # RobertaLMHead applies gelu whatever hidden_act says.
        imported=lambda source: dict(
            bert_import(source), position_ids_type="count_non_padding", head_activation="gelu"
        ),
        head_renames={
            "ForMaskedLM": {
                "lm_head.dense.": "head.dense.",
                "lm_head.layer_norm.": "head.norm.",
                "lm_head.decoder.": "head.decoder.",
                "lm_head.bias": "head.decoder.bias",
            },
            "ForSequenceClassification": _POOLER_FROM_CLASSIFIER,
            "*": _COMMON_HEAD_RENAMES,
        },
    ),
    SourceFamily(
        name="DistilBERT",
        prefixes={"distilbert": "DistilBert"},
        weight_prefix="distilbert.",
        names={
            **_SHARED,
            "hidden_size": "dim",
            "num_hidden_layers": "n_layers",
            "num_attention_heads": "n_heads",
            "intermediate_size": "hidden_dim",
            "hidden_act": "activation",
            "hidden_dropout_prob": "dropout",
            "attention_probs_dropout_prob": "attention_dropout",
            "classifier_dropout": "seq_classif_dropout",
        },
        # DistilBERT's norms use a fixed eps; its classifiers read [CLS] through dense + ReLU.
        imported=lambda source: dict(type_vocab_size=0, layer_norm_eps=1e-12, pooler_activation="relu"),
        exported=lambda ours: dict(sinusoidal_pos_embds=False),
        encoder_renames=_DISTILBERT_ENCODER,
        qkv=_DISTILBERT_QKV,
        head_renames={
            "*": {
                "vocab_transform.": "head.dense.",
                "vocab_layer_norm.": "head.norm.",
                "vocab_projector.": "head.decoder.",
                "pre_classifier.": "model.pooler.dense.",
                **_COMMON_HEAD_RENAMES,
            }
        },
    ),
    SourceFamily(
        name="ELECTRA",
        prefixes={"electra": "Electra"},
        weight_prefix="electra.",
        imported=electra_import,
        exported=lambda ours: dict(
            bert_export(ours), embedding_size=ours["embedding_size"] or ours["hidden_size"]
        ),
        heads={**_CLASSIC_HEADS, "ForPreTraining": "AutoModelForTokenClassification"},
        head_renames={
            "ForPreTraining": {
                "discriminator_predictions.dense_prediction.": "classifier.",
                "discriminator_predictions.dense.": "transform.dense.",
            },
            "ForSequenceClassification": _POOLER_FROM_CLASSIFIER,
            "ForMultipleChoice": {"sequence_summary.summary.": "model.pooler.dense."},
            "ForMaskedLM": {
                "generator_predictions.dense.": "head.dense.",
                "generator_predictions.LayerNorm.": "head.norm.",
                "generator_lm_head.": "head.decoder.",
            },
            "*": _COMMON_HEAD_RENAMES,
        },
        head_config={
            "ForPreTraining": lambda source: dict(
                token_head_activation=source.get("hidden_act", "gelu"),
                id2label={0: "replaced"},
                label2id={"replaced": 0},
            ),
            "ForMultipleChoice": electra_multiple_choice,
        },
    ),
    SourceFamily(
        name="ModernBERT",
        prefixes={"modernbert": "ModernBert"},
        weight_prefix="model.",
        names={
            **_SHARED,
            **_SIZES,
            **_same("norm_bias attention_bias mlp_bias decoder_bias classifier_dropout"),
            "classifier_pooling": "classifier_pooling",
            "hidden_act": "hidden_activation",
            "layer_norm_eps": "norm_eps",
            "hidden_dropout_prob": "mlp_dropout",
            "attention_probs_dropout_prob": "attention_dropout",
            "head_bias": "classifier_bias",
        },
        imported=modernbert_import,
        exported=modernbert_export,
        encoder_renames=_MODERNBERT_ENCODER,
        qkv=None,
        head_renames={
            "ForMaskedLM": {"head.": "head.", "decoder.": "head.decoder."},
            "ForSequenceClassification": {"head.": "model.pooler."},
            "ForMultipleChoice": {"head.": "model.pooler."},
            "ForTokenClassification": {"head.": "transform."},
            "ForQuestionAnswering": {"head.": "transform.", "classifier.": "qa_outputs."},
            "*": {"classifier.": "classifier."},
        },
    ),
)


def family_for(source_config: dict, config_path) -> SourceFamily:
    model_type = source_config.get("model_type")
    for family in FAMILIES:
        if model_type in family.prefixes:
            return family
    supported = ", ".join(t for family in FAMILIES for t in family.prefixes)
    raise UnsupportedCheckpointError(
        f"{config_path}: model_type={model_type!r} is not an architecture briskbert can import; supported: "
        f"{supported}."
    )
