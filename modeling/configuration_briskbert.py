"""BriskBert configuration: classic BERT (the defaults are BERT-base) to modern encoder options, each checked at
construction so a typo names the field and the accepted values."""

import transformers
from packaging.version import Version

MINIMUM_TRANSFORMERS = "5.23"
# Release numbers only, so a development build of the minimum (5.23.0.dev0) passes.
if Version(transformers.__version__).release < Version(MINIMUM_TRANSFORMERS).release:
    raise ImportError(
        f"briskbert models need transformers>={MINIMUM_TRANSFORMERS} (found {transformers.__version__}): "
        f"pip install -U 'transformers>={MINIMUM_TRANSFORMERS}'"
    )

from transformers.activations import ACT2FN  # noqa: E402
from transformers.configuration_utils import PreTrainedConfig  # noqa: E402

CHOICES = {
    "position_ids_type": ("index", "count_non_padding"),
    "position_embedding_type": ("absolute", "sinusoidal", "rope", "alibi"),
    "norm_type": ("layernorm", "rmsnorm"),
    "norm_position": ("post", "pre"),
    "mlp_type": ("mlp", "glu"),
    "classifier_pooling": ("cls", "mean"),
    "unpad_inputs": ("auto", "always", "never"),
}
# What turns a BERT config into a decoder's; an encoder-only model refuses them rather than ignore them.
DECODER_OPTIONS = ("is_decoder", "add_cross_attention", "use_cache")
ENCODER_ONLY = (
    "is not supported: BriskBert is an encoder-only model (bidirectional self-attention, no cross-attention, "
    "no key/value cache)."
)
POSITIVE_INTEGERS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads")
POSITIVE_INTEGERS += ("intermediate_size", "vocab_size", "max_position_embeddings", "embedding_size")
POSITIVE_INTEGERS += ("sliding_window", "global_attn_every_n_layers")
DROPOUTS = ("hidden_dropout_prob", "attention_probs_dropout_prob", "classifier_dropout")
# Options whose None means "unset" (no projection, no window, ...); None is refused for every other option.
OPTIONAL = ("embedding_size", "sliding_window", "global_attn_every_n_layers")
OPTIONAL += ("rope_theta", "local_rope_theta", "classifier_dropout")


class BriskBertConfig(PreTrainedConfig):
    r"""A BriskBert encoder's configuration; the defaults are BERT-base's, and README.md's "Architecture options"
    describes the common fields. The others serve imported encoders and heads and default to BERT:
    `type_vocab_size` (0: no segments), `embedding_size` (ELECTRA's narrower embeddings), `position_ids_type`
    ("count_non_padding": RoBERTa's), `local_rope_theta` and `first_layer_attention_norm` (ModernBERT),
    `classifier_norm` (a norm after the pooler and the token transform), `token_head_activation` (None: token heads
    read the encoder output directly), `head_activation` (None: hidden_act), and `use_crf` (a linear-chain CRF over
    the token scores, never decoding a transition `id2label`'s scheme forbids)."""

    model_type = "briskbert"

    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    num_key_value_heads: int | None = None
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    mlp_type: str = "mlp"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-12
    pad_token_id: int | None = 0
    position_embedding_type: str = "absolute"
    rope_theta: float = 10000.0
    norm_type: str = "layernorm"
    norm_position: str = "post"
    sliding_window: int | None = None
    global_attn_every_n_layers: int | None = None
    attention_bias: bool = True
    mlp_bias: bool = True
    tie_word_embeddings: bool = True
    classifier_pooling: str = "cls"
    classifier_dropout: float | None = None
    sparse_prediction: bool = False
    unpad_inputs: str = "auto"
    embedding_size: int | None = None
    position_ids_type: str = "index"
    local_rope_theta: float | None = None
    norm_bias: bool = True
    first_layer_attention_norm: bool = True
    add_pooling_layer: bool = True
    pooler_activation: str = "tanh"
    classifier_norm: bool = False
    token_head_activation: str | None = None
    head_activation: str | None = None
    head_bias: bool = True
    decoder_bias: bool = True
    use_crf: bool = False

    def __setattr__(self, name, value):
        # Every way in (keyword, config.json, from_pretrained(..., is_decoder=True), assignment) sets the attribute.
        if name in DECODER_OPTIONS and value:
            raise ValueError(f"{name}={value!r} {ENCODER_ONLY}")
        super().__setattr__(name, value)

    def __post_init__(self, **kwargs):
        if self.num_key_value_heads is None:
            self.num_key_value_heads = self.num_attention_heads
        super().__post_init__(**kwargs)
        _require(self, POSITIVE_INTEGERS, lambda v: _is_int(v) and v > 0, "a positive integer")
        _require(self, ("type_vocab_size",), lambda v: _is_int(v) and v >= 0, "a non-negative integer")
        positive = ("rope_theta", "local_rope_theta", "layer_norm_eps")
        _require(self, positive, lambda v: _is_number(v) and v > 0, "a positive number")
        _require(self, DROPOUTS, lambda v: _is_number(v) and 0 <= v < 1, "a probability in [0, 1)")
        _require(self, ("use_crf",), lambda v: isinstance(v, bool), "True or False")
        for name, allowed in CHOICES.items():
            if getattr(self, name) not in allowed:
                raise ValueError(
                    f"{name}={getattr(self, name)!r} is not supported; choose one of {', '.join(map(repr, allowed))}."
                )
        for name in ("hidden_act", "pooler_activation", "token_head_activation", "head_activation"):
            if getattr(self, name) is not None and getattr(self, name) not in ACT2FN:
                raise ValueError(
                    f"{name}={getattr(self, name)!r} is not a known activation; choose one of "
                    f"{', '.join(sorted(ACT2FN))}."
                )
        if self.position_ids_type == "count_non_padding" and self.pad_token_id is None:
            raise ValueError(
                "position_ids_type='count_non_padding' counts from pad_token_id; set pad_token_id."
            )
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"hidden_size ({self.hidden_size}) must be divisible by num_attention_heads "
                f"({self.num_attention_heads})."
            )
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"num_attention_heads ({self.num_attention_heads}) must be divisible by "
                f"num_key_value_heads ({self.num_key_value_heads}); use 1 for multi-query attention "
                f"or {self.num_attention_heads} for multi-head attention."
            )
        if self.position_embedding_type == "rope" and self.head_dim % 2:
            raise ValueError(
                f"position_embedding_type='rope' needs an even head dimension, but hidden_size / "
                f"num_attention_heads = {self.head_dim}."
            )
        if self.global_attn_every_n_layers is not None and self.sliding_window is None:
            raise ValueError(
                "global_attn_every_n_layers only applies to local/global attention: set "
                "sliding_window too, or leave global_attn_every_n_layers=None."
            )
        if self.pad_token_id is not None and not 0 <= self.pad_token_id < self.vocab_size:
            raise ValueError(
                f"pad_token_id ({self.pad_token_id}) must be None or an id below vocab_size "
                f"({self.vocab_size})."
            )

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def embedding_width(self) -> int:
        return self.embedding_size or self.hidden_size

    @property
    def layer_types(self) -> list[str]:
        """Per layer: "full_attention" or "sliding_attention", following transformers' naming."""
        if self.sliding_window is None:
            return ["full_attention"] * self.num_hidden_layers
        every = self.global_attn_every_n_layers
        return [
            "full_attention" if every and i % every == 0 else "sliding_attention"
            for i in range(self.num_hidden_layers)
        ]

    def name_pipeline(self, task: str, pipeline_class: type, auto_class: str) -> None:
        """Names `pipeline_class` (remote code in the folder) as this model's `task` pipeline: later saves write the
        entry and `pipeline(task, ...)` finds it."""
        impl = f"{pipeline_class.__module__.rsplit('.', 1)[-1]}.{pipeline_class.__name__}"
        entry = {"impl": impl, "pt": [auto_class], "tf": [], "type": "text"}
        self.custom_pipelines = {**(getattr(self, "custom_pipelines", None) or {}), task: entry}

    @classmethod
    def from_preset(cls, name: str, **overrides) -> "BriskBertConfig":
        """A named starting point (see `PRESETS`), with single fields overridden by keyword."""
        if name not in PRESETS:
            raise ValueError(f"Unknown preset {name!r}; available presets: {', '.join(sorted(PRESETS))}.")
        return cls(**{**PRESETS[name], **overrides})


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value) -> bool:
    return isinstance(value, (int, float))


def _require(config, names: tuple[str, ...], is_valid, what: str) -> None:
    for name in names:
        value = getattr(config, name)
        if not (value is None and name in OPTIONAL) and not is_valid(value):
            raise ValueError(f"{name} must be {what}, got {value!r}.")


# Modern: RoPE + RMSNorm + pre-norm + GeGLU + grouped-query attention + local/global attention.
_MODERN = dict(position_embedding_type="rope", norm_type="rmsnorm", norm_position="pre", layer_norm_eps=1e-6)
_MODERN.update(mlp_type="glu", attention_bias=False, mlp_bias=False, max_position_embeddings=8192)
_MODERN.update(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
_MODERN.update(sliding_window=64, global_attn_every_n_layers=3, num_attention_heads=12, num_key_value_heads=4)
_MODERN_TINY = dict(
    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048, sliding_window=16
)

# GeGLU's intermediate size is 2/3 of the MLP's so both cost the same.
PRESETS: dict[str, dict] = {
    "bert-base": dict(),
    "bert-small": dict(hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536),
    "bert-tiny": dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=2, intermediate_size=512),
    "modern-base": dict(_MODERN, hidden_size=768, num_hidden_layers=12, intermediate_size=2048),
    "modern-small": dict(_MODERN, hidden_size=384, num_hidden_layers=6, intermediate_size=1024),
    "modern-tiny": dict(_MODERN, **_MODERN_TINY, hidden_size=128, num_hidden_layers=3, intermediate_size=344),
}
