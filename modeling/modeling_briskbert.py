"""BriskBert: BERT-family encoders, from classic BERT to RoPE / ALiBi / RMSNorm / pre-norm / GeGLU / GQA and
local-global attention. Each option is a small component `__init__` picks once from the config; attention goes
through transformers' dispatch (eager, sdpa, flash-attention, flex)."""

import logging
import math
from dataclasses import dataclass
from functools import partial

import torch
from torch import nn
from torch.nn import functional as F

# transformers imports torchao when installed, which logs a warning per CUDA kernel library it cannot load:
# nothing about this model, so that import runs once here with only errors shown.
_NOISY_IMPORT = {name: logging.getLogger(name).level for name in ("torchao", "torch.utils._pytree")}
for _name in _NOISY_IMPORT:
    logging.getLogger(_name).setLevel(logging.ERROR)
try:
    import transformers.modeling_utils  # noqa: F401
finally:
    for _name, _level in _NOISY_IMPORT.items():
        logging.getLogger(_name).setLevel(_level)

# ruff: noqa: E402  (the imports below come after the quiet one above)
from transformers import initialization as init
from transformers.activations import ACT2FN
from transformers.loss.loss_utils import ForMaskedLMLoss
from transformers.masking_utils import create_bidirectional_mask, create_bidirectional_sliding_window_mask
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import (
    BaseModelOutputWithPooling,
    MaskedLMOutput,
    MultipleChoiceModelOutput,
    NextSentencePredictorOutput,
    QuestionAnsweringModelOutput,
    SequenceClassifierOutput,
    TokenClassifierOutput,
)
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS, PreTrainedModel
from transformers.models.bert.modeling_bert import BertForPreTrainingOutput
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb, eager_attention_forward
from transformers.processing_utils import Unpack
from transformers.utils import TransformersKwargs
from transformers.utils.generic import can_return_tuple, merge_with_config_defaults
from transformers.utils.output_capturing import capture_outputs

from .configuration_briskbert import ENCODER_ONLY, BriskBertConfig
from .crf import IGNORE_INDEX, LinearChainCRF

# Imported so that every save (save_pretrained, Trainer, push_to_hub) copies the pipelines' files beside this
# one: transformers ships a remote-code file together with the files it imports relatively.
from .pipeline_question_answering import BriskBertQuestionAnsweringPipeline  # noqa: F401
from .pipeline_token_classification import BriskBertTokenClassificationPipeline
from .varlen_attention import ATTN_IMPLEMENTATION as TORCH_VARLEN  # registers it with the attention dispatch

NORMS = {
    "layernorm": lambda size, eps, bias: nn.LayerNorm(size, eps=eps, bias=bias),
    "rmsnorm": lambda size, eps, bias: nn.RMSNorm(size, eps=eps),
}


def build_norm(config: BriskBertConfig, size: int | None = None) -> nn.Module:
    return NORMS[config.norm_type](size or config.hidden_size, config.layer_norm_eps, config.norm_bias)


def varlen_kernel(attn_implementation) -> bool:
    return "flash" in str(attn_implementation) or attn_implementation == TORCH_VARLEN


# ---------- Batch layout: which positions of a padded (batch, seq) batch the token-wise work runs on -----------
class PaddedLayout:
    """Every position of the (batch, seq) grid, padding included (classic BERT): every step is the identity."""

    attention_kwargs: dict = {}

    def pack(self, tensor):
        return tensor

    unpack = to_attention = from_attention = attention_positions = attention_mask = pack


PADDED = PaddedLayout()


class UnpaddedLayout(PaddedLayout):
    """Only the real tokens, packed into one (tokens, ...) tensor for the token-wise work (nearly all the FLOPs);
    q/k/v are re-padded for attention, so every kernel and mask applies unchanged (one gather each way)."""

    def __init__(self, attention_mask: torch.Tensor):
        self.batch_size, self.seq_len = attention_mask.shape
        real = attention_mask.flatten().bool()
        self.indices = real.nonzero().squeeze(-1)
        # For each grid position, its row among the packed tokens; padding points one past the last token, at the
        # zero row `unpack` appends, so re-padding is a single gather (faster than zero-filling and scattering).
        self.grid_rows = torch.where(real, real.cumsum(0) - 1, self.indices.numel())

    def pack(self, tensor):
        """(batch or 1, seq, ...) -> (tokens, ...); None and numbers pass through."""
        if not isinstance(tensor, torch.Tensor):
            return tensor
        grid = tensor.expand(self.batch_size, self.seq_len, *tensor.shape[2:])
        return grid.reshape(self.batch_size * self.seq_len, *tensor.shape[2:]).index_select(0, self.indices)

    def unpack(self, tensor: torch.Tensor) -> torch.Tensor:
        """(tokens, features) -> (batch, seq, features), zeros at padding."""
        with_zero_row = F.pad(tensor, (0, 0, 0, 1))
        return with_zero_row.index_select(0, self.grid_rows).view(self.batch_size, self.seq_len, -1)

    to_attention = unpack
    from_attention = pack


class VarlenLayout(UnpaddedLayout):
    """Real tokens packed through attention too: varlen kernels read the batch as one (1, tokens) sequence with
    its boundaries (`cu_seq_lens`)."""

    def __init__(self, attention_mask: torch.Tensor):
        super().__init__(attention_mask)
        lengths = attention_mask.sum(dim=-1, dtype=torch.int32)
        boundaries = F.pad(lengths.cumsum(0, dtype=torch.int32), (1, 0))
        longest = int(lengths.max())
        self.attention_kwargs = dict(
            cu_seq_lens_q=boundaries, cu_seq_lens_k=boundaries, max_length_q=longest, max_length_k=longest
        )

    def to_attention(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor.unsqueeze(0)

    def from_attention(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor.squeeze(0)

    def attention_positions(self, position_ids: torch.Tensor) -> torch.Tensor:
        return self.pack(position_ids).unsqueeze(0)

    def attention_mask(self, attention_mask: torch.Tensor | None) -> None:
        return None


# Unpadding's cost per hidden number and grid position (in multiply-adds), and its fixed cost (docs/performance.md).
UNPADDING_COSTS = {"auto": (32, 2**20), "always": (0, 0), "never": (math.inf, 0)}


# ---------- Embeddings -----------------------------------------------------------------------------------------
class LearnedPositionEmbedding(nn.Embedding):
    def __init__(self, config: BriskBertConfig):
        super().__init__(config.max_position_embeddings, config.embedding_width)

    def forward(self, position_ids: torch.Tensor) -> torch.Tensor:
        if position_ids.shape[-1] > self.num_embeddings:
            raise ValueError(
                f"Sequence length {position_ids.shape[-1]} exceeds max_position_embeddings={self.num_embeddings} of "
                f"this model's learned positions: truncate the inputs (tokenizer(..., truncation=True, max_length="
                f"{self.num_embeddings})) or use position_embedding_type 'rope', 'alibi' or 'sinusoidal' (no limit)."
            )
        return super().forward(position_ids)


class SinusoidalPositionEmbedding(nn.Module):
    """Fixed sin/cos position vectors (Vaswani et al. 2017): no length limit."""

    def __init__(self, config: BriskBertConfig):
        super().__init__()
        self.hidden_size = config.embedding_width

    def forward(self, position_ids: torch.Tensor) -> torch.Tensor:
        half = (self.hidden_size + 1) // 2
        inv_freq = 10000.0 ** (-torch.arange(half, device=position_ids.device, dtype=torch.float32) / half)
        angles = position_ids[..., None].float() * inv_freq
        return torch.cat((angles.sin(), angles.cos()), dim=-1)[..., : self.hidden_size]


class TokenTypeEmbedding(nn.Embedding):
    """BERT's segment embeddings; no `token_type_ids` means segment 0 everywhere."""

    def __init__(self, config: BriskBertConfig):
        super().__init__(config.type_vocab_size, config.embedding_width)

    def forward(self, token_type_ids: torch.Tensor | None) -> torch.Tensor:
        return self.weight[0] if token_type_ids is None else super().forward(token_type_ids)


def add_nothing(ids) -> int:  # RoPE/ALiBi positions, segments with `type_vocab_size=0`
    return 0


# RoPE and ALiBi act inside attention: they add nothing here.
POSITION_EMBEDDINGS = {"absolute": LearnedPositionEmbedding, "sinusoidal": SinusoidalPositionEmbedding}


def index_positions(input_ids, seq_len: int, device, pad_token_id) -> torch.Tensor:
    """BERT: position i is i, whatever the padding."""
    return torch.arange(seq_len, device=device).unsqueeze(0)


def non_padding_positions(input_ids, seq_len: int, device, pad_token_id: int) -> torch.Tensor:
    """RoBERTa: positions count the non-padding tokens from pad_token_id + 1; padding sits at pad_token_id."""
    if input_ids is None:
        return torch.arange(pad_token_id + 1, seq_len + pad_token_id + 1, device=device).unsqueeze(0)
    real = input_ids.ne(pad_token_id).long()
    return real.cumsum(dim=1) * real + pad_token_id


POSITION_IDS = {"index": index_positions, "count_non_padding": non_padding_positions}


class BriskBertEmbeddings(nn.Module):
    """Word + segment (+ additive position) embeddings, then norm and dropout, as in BERT."""

    def __init__(self, config: BriskBertConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(
            config.vocab_size, config.embedding_width, padding_idx=config.pad_token_id
        )
        self.token_type_embeddings = TokenTypeEmbedding(config) if config.type_vocab_size else add_nothing
        additive_positions = POSITION_EMBEDDINGS.get(config.position_embedding_type)
        self.position_embeddings = additive_positions(config) if additive_positions else add_nothing
        self.norm = build_norm(config, config.embedding_width)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        narrower = config.embedding_width != config.hidden_size  # ELECTRA's, projected to the encoder's width
        self.project = nn.Linear(config.embedding_width, config.hidden_size) if narrower else nn.Identity()

    def forward(self, input_ids, token_type_ids, position_ids, inputs_embeds, layout: PaddedLayout):
        if inputs_embeds is None:  # only the real tokens are looked up
            embeddings = self.word_embeddings(layout.pack(input_ids))
        else:
            embeddings = layout.pack(inputs_embeds)
        embeddings = embeddings + self.token_type_embeddings(layout.pack(token_type_ids))
        # Positions are looked up on the grid (usually a single (1, seq) row) and then gathered like the tokens.
        embeddings = embeddings + layout.pack(self.position_embeddings(position_ids))
        return self.project(self.dropout(self.norm(embeddings)))


# ---------- Position schemes applied inside attention (computed once per forward, shared by every layer) -------
class RotaryEmbedding(nn.Module):
    """RoPE (Su et al. 2021): cos/sin tables per attention type (ModernBERT's local layers use another base)."""

    def __init__(self, config: BriskBertConfig):
        super().__init__()
        self.head_dim = config.head_dim
        bases = {"full_attention": config.rope_theta, "sliding_attention": config.local_rope_theta}
        self.thetas = {kind: bases[kind] or config.rope_theta for kind in set(config.layer_types)}

    @torch.no_grad()
    def forward(self, position_ids: torch.Tensor, dtype: torch.dtype) -> dict[str, tuple[torch.Tensor, ...]]:
        # Computed on the fly rather than kept in a buffer: nothing to re-initialise after a meta-device build.
        dims = torch.arange(0, self.head_dim, 2, device=position_ids.device, dtype=torch.float32)
        tables = {}
        for layer_type, theta in self.thetas.items():
            angles = position_ids[..., None].float() * (1.0 / theta ** (dims / self.head_dim))
            angles = torch.cat((angles, angles), dim=-1)
            tables[layer_type] = angles.cos().to(dtype), angles.sin().to(dtype)
        return tables


def no_rotary_tables(position_ids: torch.Tensor, dtype: torch.dtype) -> dict:
    return {}


class AlibiBias(nn.Module):
    """ALiBi (Press et al. 2022): a per-head penalty proportional to token distance; symmetric, since an encoder
    looks both ways."""

    def __init__(self, config: BriskBertConfig):
        super().__init__()
        # Geometric head slopes, with ALiBi's rule for head counts that are not a power of two.
        power, heads = 2 ** math.floor(math.log2(config.num_attention_heads)), config.num_attention_heads
        self.slopes = [2 ** (-8 * (i + 1) / power) for i in range(power)]
        self.slopes += [2 ** (-4 * (2 * i + 1) / power) for i in range(heads - power)]

    @torch.no_grad()
    def forward(self, position_ids: torch.Tensor, batch_size: int, dtype: torch.dtype) -> torch.Tensor:
        slopes = torch.tensor(self.slopes, device=position_ids.device)
        distance = (position_ids[:, None, :, None] - position_ids[:, None, None, :]).abs().float()
        bias = -slopes[None, :, None, None] * distance
        # Kernels index the bias per batch row (flex), so give it the full batch dimension as a view.
        return bias.to(dtype).expand(batch_size, -1, -1, -1)


def no_attention_bias(position_ids: torch.Tensor, batch_size: int, dtype: torch.dtype) -> None:
    return None


# ---------- Attention ------------------------------------------------------------------------------------------
class BriskBertAttention(nn.Module):
    """Bidirectional self-attention with grouped key/value heads through transformers' attention dispatch."""

    def __init__(self, config: BriskBertConfig, layer_idx: int):
        super().__init__()
        self.config = config
        self.head_dim = config.head_dim
        self.num_key_value_groups = config.num_attention_heads // config.num_key_value_heads
        self.scaling = self.head_dim**-0.5
        self.is_causal = False
        self.attention_dropout = config.attention_probs_dropout_prob
        # The masks enforce |i - j| <= sliding_window; flash-attention counts one more token (as ModernBERT's).
        is_local = config.layer_types[layer_idx] == "sliding_attention"
        self.sliding_window = config.sliding_window + 1 if is_local else None

        self.qkv_sizes = [config.hidden_size] + [config.num_key_value_heads * self.head_dim] * 2
        self.qkv = nn.Linear(config.hidden_size, sum(self.qkv_sizes), bias=config.attention_bias)
        self.out = nn.Linear(config.hidden_size, config.hidden_size, bias=config.attention_bias)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, hidden_states, attention_mask, position_embeddings, position_bias, layout, **kwargs):
        """`position_embeddings`: this layer type's rotary (cos, sin) tables or None; `position_bias`: ALiBi's."""
        # The projections run in the batch's layout; the layout hands attention the (batch, seq) shape it works on.
        qkv = layout.to_attention(self.qkv(hidden_states))
        attention_shape = qkv.shape[:-1]
        query, key, value = (
            states.view(*attention_shape, -1, self.head_dim).transpose(1, 2)
            for states in qkv.split(self.qkv_sizes, dim=-1)
        )
        if position_embeddings is not None:  # RoPE's (cos, sin) tables
            query, key = apply_rotary_pos_emb(query, key, *position_embeddings)
        attention_interface = ALL_ATTENTION_FUNCTIONS.get_interface(
            self.config._attn_implementation, eager_attention_forward
        )
        attn_output, attn_weights = attention_interface(
            self,
            query,
            key,
            value,
            attention_mask,
            dropout=self.attention_dropout if self.training else 0.0,
            scaling=self.scaling,
            sliding_window=self.sliding_window,
            position_bias=position_bias,
            **layout.attention_kwargs,
            **kwargs,
        )
        attn_output = layout.from_attention(attn_output.reshape(*attention_shape, -1))
        return self.dropout(self.out(attn_output)), attn_weights


# ---------- MLP ------------------------------------------------------------------------------------------------
class BriskBertMLP(nn.Module):
    """BERT's feed-forward block: up-projection, activation, down-projection."""

    gates = 1

    def __init__(self, config: BriskBertConfig):
        super().__init__()
        self.up = nn.Linear(config.hidden_size, self.gates * config.intermediate_size, bias=config.mlp_bias)
        self.act = ACT2FN[config.hidden_act]
        self.down = nn.Linear(config.intermediate_size, config.hidden_size, bias=config.mlp_bias)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.down(self.act(self.up(hidden_states))))


class BriskBertGatedMLP(BriskBertMLP):
    """Gated feed-forward block (Shazeer 2020): GeGLU with gelu, SwiGLU with silu."""

    gates = 2

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        projected, gate = self.up(hidden_states).chunk(2, dim=-1)
        return self.dropout(self.down(self.act(projected) * gate))


MLPS = {"mlp": BriskBertMLP, "glu": BriskBertGatedMLP}


# ---------- Layer ----------------------------------------------------------------------------------------------
class BriskBertLayer(GradientCheckpointingLayer):
    """Attention then MLP, each added to the residual stream: post-norm (BERT) normalises each sum, pre-norm
    (`norm_position="pre"`) each sub-block's input."""

    def __init__(self, config: BriskBertConfig, layer_idx: int):
        super().__init__()
        self.pre_norm = config.norm_position == "pre"
        self.attention_type = config.layer_types[layer_idx]
        self.attention = BriskBertAttention(config, layer_idx)
        # ModernBERT's first layer reads the just-normalised embeddings without another norm.
        skip_norm = layer_idx == 0 and not config.first_layer_attention_norm
        self.attention_norm = nn.Identity() if skip_norm else build_norm(config)
        self.mlp = MLPS[config.mlp_type](config)
        self.mlp_norm = build_norm(config)

    def forward(self, hidden_states: torch.Tensor, **attention_inputs) -> torch.Tensor:
        if self.pre_norm:
            attn_output, _ = self.attention(self.attention_norm(hidden_states), **attention_inputs)
            hidden_states = hidden_states + attn_output
            return hidden_states + self.mlp(self.mlp_norm(hidden_states))
        attn_output, _ = self.attention(hidden_states, **attention_inputs)
        hidden_states = self.attention_norm(hidden_states + attn_output)
        return self.mlp_norm(hidden_states + self.mlp(hidden_states))


ATTENTION_MASKS = {
    "full_attention": create_bidirectional_mask,
    "sliding_attention": create_bidirectional_sliding_window_mask,
}


# ---------- Pooling and token transforms -----------------------------------------------------------------------
def first_token(hidden_states: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
    return hidden_states[:, 0]


def mean_of_tokens(hidden_states: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
    if attention_mask is None:
        return hidden_states.mean(dim=1)
    weights = attention_mask.to(hidden_states.dtype).unsqueeze(-1)
    return (hidden_states * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1)


POOLINGS = {"cls": first_token, "mean": mean_of_tokens}


class TokenTransform(nn.Module):
    """Dense + activation (+ norm with `classifier_norm`): ModernBERT's head, ELECTRA's discriminator."""

    def __init__(self, config: BriskBertConfig, activation: str):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size, bias=config.head_bias)
        self.activation = ACT2FN[activation]
        self.norm = build_norm(config) if config.classifier_norm else nn.Identity()

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.norm(self.activation(self.dense(hidden_states)))


def build_token_transform(config: BriskBertConfig) -> nn.Module:
    activation = config.token_head_activation
    return nn.Identity() if activation is None else TokenTransform(config, activation)


class BriskBertPooler(TokenTransform):
    """BERT's pooler (dense + `pooler_activation`) over [CLS] or the mean of the real tokens."""

    def __init__(self, config: BriskBertConfig):
        super().__init__(config, config.pooler_activation)
        self.summarize = POOLINGS[config.classifier_pooling]

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        return super().forward(self.summarize(hidden_states, attention_mask))


# ---------- Pretrained base ------------------------------------------------------------------------------------
AUTO_MAP = {
    "AutoConfig": "configuration_briskbert.BriskBertConfig",
    "AutoModel": "modeling_briskbert.BriskBertModel",
    "AutoModelForPreTraining": "modeling_briskbert.BriskBertForPreTraining",
    "AutoModelForMaskedLM": "modeling_briskbert.BriskBertForMaskedLM",
    "AutoModelForNextSentencePrediction": "modeling_briskbert.BriskBertForNextSentencePrediction",
    "AutoModelForSequenceClassification": "modeling_briskbert.BriskBertForSequenceClassification",
    "AutoModelForTokenClassification": "modeling_briskbert.BriskBertForTokenClassification",
    "AutoModelForQuestionAnswering": "modeling_briskbert.BriskBertForQuestionAnswering",
    "AutoModelForMultipleChoice": "modeling_briskbert.BriskBertForMultipleChoice",
}


class BriskBertPreTrainedModel(PreTrainedModel):
    config: BriskBertConfig
    base_model_prefix = "model"
    _input_embed_layer = "word_embeddings"  # found by transformers in `embeddings` of the bare model
    supports_gradient_checkpointing = True
    # The embeddings stay out: as their own FSDP unit they would split the word embeddings from the MLM decoder
    # tied to them, which FSDP2 refuses.
    _no_split_modules = ["BriskBertLayer"]
    _supports_flash_attn = True
    _supports_sdpa = True
    _supports_flex_attn = True
    _supports_attention_backend = True
    _can_record_outputs = {"hidden_states": BriskBertLayer, "attentions": BriskBertAttention}

    def _init_weights(self, module):
        """transformers' default is BERT's scheme and skips loaded weights; the CRF's transitions need a rule."""
        super()._init_weights(module)
        if isinstance(module, LinearChainCRF):
            for transitions in module.parameters():  # training starts from the per-token scores alone
                init.zeros_(transitions)

    def _check_and_adjust_attn_implementation(self, attn_implementation, is_init_check=False, **kwargs):
        if self.config.position_embedding_type == "alibi" and varlen_kernel(attn_implementation):
            raise ValueError(
                f"attn_implementation={attn_implementation!r} cannot add ALiBi's position bias. Use 'sdpa', 'eager' "
                "or 'flex_attention' with position_embedding_type='alibi', or choose 'rope' to use flash-attention."
            )
        return super()._check_and_adjust_attn_implementation(attn_implementation, is_init_check, **kwargs)

    def save_pretrained(self, save_directory, *args, **kwargs):
        # List every Auto class, so one saved folder serves AutoModel, pipelines and every head.
        self.config.auto_map = dict(AUTO_MAP)
        return super().save_pretrained(save_directory, *args, **kwargs)

    @can_return_tuple
    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        token_type_ids=None,
        position_ids=None,
        inputs_embeds=None,
        labels=None,
        **kwargs: Unpack[TransformersKwargs],
    ):
        """A head without other label arguments: the encoder, then the head's `predict`."""
        outputs = self.model(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, **kwargs)
        return self.predict(outputs, labels, **kwargs)


# ---------- The bare encoder -----------------------------------------------------------------------------------
DECODER_INPUTS = ("encoder_hidden_states", "encoder_attention_mask", "past_key_values", "use_cache")


class BriskBertModel(BriskBertPreTrainedModel):
    def __init__(self, config: BriskBertConfig, add_pooling_layer: bool | None = None):
        """`add_pooling_layer`: None follows `config.add_pooling_layer` (the bare model); heads say what they need."""
        super().__init__(config)
        if add_pooling_layer is None:
            add_pooling_layer = config.add_pooling_layer
        self.embeddings = BriskBertEmbeddings(config)
        self.make_position_ids = partial(
            POSITION_IDS[config.position_ids_type], pad_token_id=config.pad_token_id
        )
        rope, alibi = (config.position_embedding_type == kind for kind in ("rope", "alibi"))
        self.rotary_emb = RotaryEmbedding(config) if rope else no_rotary_tables
        self.alibi = AlibiBias(config) if alibi else no_attention_bias
        self.layers = nn.ModuleList(BriskBertLayer(config, i) for i in range(config.num_hidden_layers))
        # Pre-norm leaves the residual stream un-normalised after the last layer; post-norm already normalised it.
        self.final_norm = build_norm(config) if config.norm_position == "pre" else nn.Identity()
        self.pooler = BriskBertPooler(config) if add_pooling_layer else None
        # Multiply-adds per token that unpadding skips at a padding position: q, k, v, output and MLP projections.
        projections = config.head_dim * (2 * config.num_attention_heads + 2 * config.num_key_value_heads)
        mlp = (MLPS[config.mlp_type].gates + 1) * config.intermediate_size
        self.work_per_token = config.hidden_size * (projections + mlp)
        self.gather_cost, self.fixed_cost = UNPADDING_COSTS[config.unpad_inputs]
        self.post_init()

    def choose_layout(self, attention_mask, attn_implementation, keep_grid=False) -> PaddedLayout:
        """Unpads a batch with a 2-D padding mask when the work it skips exceeds the cost of moving its tokens;
        per-layer hidden states and traced graphs (which serve every batch) stay on the grid."""
        tracing = torch.compiler.is_exporting() or torch.compiler.is_compiling() or torch.jit.is_tracing()
        if attention_mask is None or attention_mask.dim() != 2 or keep_grid or tracing:
            return PADDED
        padding_tokens = attention_mask.numel() - int(attention_mask.count_nonzero())
        moving_cost = self.gather_cost * self.config.hidden_size * attention_mask.numel() + self.fixed_cost
        if padding_tokens == 0 or padding_tokens * self.work_per_token <= moving_cost:
            return PADDED
        return (VarlenLayout if varlen_kernel(attn_implementation) else UnpaddedLayout)(attention_mask)

    @merge_with_config_defaults
    @capture_outputs
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> BaseModelOutputWithPooling:
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("Pass exactly one of input_ids or inputs_embeds.")
        # Refused, or they would pass through `kwargs` unused, and the outputs not show it.
        for name in DECODER_INPUTS:
            if kwargs.get(name) is not None and kwargs[name] is not False:
                raise ValueError(f"{name} {ENCODER_ONLY}")
        reference = input_ids if input_ids is not None else inputs_embeds
        batch_size, seq_len = reference.shape[:2]
        if position_ids is None:
            position_ids = self.make_position_ids(input_ids, seq_len, reference.device)

        per_layer_states = kwargs.get("output_hidden_states", self.config.output_hidden_states)
        layout = self.choose_layout(
            attention_mask, self.config._attn_implementation, keep_grid=bool(per_layer_states)
        )
        hidden_states = self.embeddings(input_ids, token_type_ids, position_ids, inputs_embeds, layout)
        # The mask builders read batch size, length, dtype and device from a (batch, seq) tensor: a free view.
        grid = hidden_states.new_zeros(1, 1, 1).expand(batch_size, seq_len, -1)
        masks = {
            layer_type: ATTENTION_MASKS[layer_type](
                config=self.config, inputs_embeds=grid, attention_mask=layout.attention_mask(attention_mask)
            )
            for layer_type in set(self.config.layer_types)
        }
        attention_positions = layout.attention_positions(position_ids)
        rotary_tables = self.rotary_emb(attention_positions, hidden_states.dtype)
        position_bias = self.alibi(attention_positions, batch_size, hidden_states.dtype)
        if position_bias is not None and self.config._attn_implementation == "eager":
            # transformers' eager attention adds the mask alone (sdpa and flex add `position_bias` themselves).
            masks = {
                kind: position_bias if mask is None else mask + position_bias for kind, mask in masks.items()
            }
        for layer in self.layers:
            hidden_states = layer(
                hidden_states,
                attention_mask=masks[layer.attention_type],
                position_embeddings=rotary_tables.get(layer.attention_type),
                position_bias=position_bias,
                layout=layout,
                **kwargs,
            )
        hidden_states = layout.unpack(self.final_norm(hidden_states))
        pooled_output = self.pooler(hidden_states, attention_mask) if self.pooler is not None else None
        return BaseModelOutputWithPooling(last_hidden_state=hidden_states, pooler_output=pooled_output)


# ---------- Heads ----------------------------------------------------------------------------------------------
class BriskBertLMPredictionHead(nn.Module):
    """BERT's MLM head: transform (dense, activation, norm), then a decoder tied to the word embeddings. With
    `sparse_prediction`, labelled calls decode only the labelled positions (~15%) and return their labels too."""

    def __init__(self, config: BriskBertConfig):
        super().__init__()
        self.sparse_prediction = config.sparse_prediction
        # The transform ends at the embeddings' width, where the tied decoder reads (ELECTRA's is narrower).
        self.dense = nn.Linear(config.hidden_size, config.embedding_width, bias=config.head_bias)
        self.act = ACT2FN[config.head_activation or config.hidden_act]
        self.norm = build_norm(config, config.embedding_width)
        self.decoder = nn.Linear(config.embedding_width, config.vocab_size, bias=config.decoder_bias)

    def forward(self, hidden_states: torch.Tensor, labels: torch.Tensor | None = None):
        if self.sparse_prediction and labels is not None:
            predicted = labels != IGNORE_INDEX
            hidden_states, labels = hidden_states[predicted], labels[predicted]
        return self.decoder(self.norm(self.act(self.dense(hidden_states)))), labels


class BriskBertForMaskedLM(BriskBertPreTrainedModel):
    """With `labels` and `config.sparse_prediction`, `logits` holds one row per labelled position."""

    _tied_weights_keys = {"head.decoder.weight": "model.embeddings.word_embeddings.weight"}
    next_sentence_head = False  # BriskBertForPreTraining adds BERT's pooler and next-sentence classifier

    def __init__(self, config: BriskBertConfig):
        super().__init__(config)
        self.model = BriskBertModel(config, add_pooling_layer=self.next_sentence_head)
        self.head = BriskBertLMPredictionHead(config)
        if self.next_sentence_head:
            self.seq_relationship = nn.Linear(config.hidden_size, 2)
        self.post_init()

    def get_output_embeddings(self):
        return self.head.decoder

    def set_output_embeddings(self, new_embeddings):
        self.head.decoder = new_embeddings

    def predict(self, outputs, labels, num_items_in_batch=None, **kwargs) -> MaskedLMOutput:
        logits, labels = self.head(outputs.last_hidden_state, labels)
        loss = None
        if labels is not None:
            loss = ForMaskedLMLoss(logits, labels, self.config.vocab_size, num_items_in_batch)
        return MaskedLMOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )


class BriskBertForPreTraining(BriskBertForMaskedLM):
    """BERT's pretraining objective: masked language modelling plus next sentence prediction."""

    next_sentence_head = True

    @can_return_tuple
    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        token_type_ids=None,
        position_ids=None,
        inputs_embeds=None,
        labels=None,
        next_sentence_label=None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> BertForPreTrainingOutput:
        outputs = self.model(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, **kwargs)
        mlm = self.predict(outputs, labels, **kwargs)
        seq_relationship_logits = self.seq_relationship(outputs.pooler_output)
        losses = [] if mlm.loss is None else [mlm.loss]
        if next_sentence_label is not None:
            losses.append(F.cross_entropy(seq_relationship_logits.float(), next_sentence_label.view(-1)))
        return BertForPreTrainingOutput(
            loss=sum(losses) if losses else None,
            prediction_logits=mlm.logits,
            seq_relationship_logits=seq_relationship_logits,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )


class BriskBertForNextSentencePrediction(BriskBertPreTrainedModel):
    def __init__(self, config: BriskBertConfig):
        super().__init__(config)
        self.model = BriskBertModel(config, add_pooling_layer=True)
        self.seq_relationship = nn.Linear(config.hidden_size, 2)
        self.post_init()

    def predict(self, outputs, labels, **kwargs) -> NextSentencePredictorOutput:
        logits = self.seq_relationship(outputs.pooler_output)
        loss = F.cross_entropy(logits.float(), labels.view(-1)) if labels is not None else None
        return NextSentencePredictorOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )


def classifier_dropout(config: BriskBertConfig) -> nn.Dropout:
    dropout = config.classifier_dropout
    return nn.Dropout(config.hidden_dropout_prob if dropout is None else dropout)


class BriskBertForSequenceClassification(BriskBertPreTrainedModel):
    """Pooled output -> classifier. Single-label, regression (`num_labels == 1`) or multi-label (`problem_type`)."""

    def __init__(self, config: BriskBertConfig):
        super().__init__(config)
        self.model = BriskBertModel(config, add_pooling_layer=True)
        self.dropout = classifier_dropout(config)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    def predict(self, outputs, labels, **kwargs) -> SequenceClassifierOutput:
        logits = self.classifier(self.dropout(outputs.pooler_output))
        loss = self.loss_function(labels, logits, self.config) if labels is not None else None
        return SequenceClassifierOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )


@dataclass
class BriskBertTokenClassifierOutput(TokenClassifierOutput):
    r"""`tags` (`(batch, seq)`): the tag decoded at each tagged position (Viterbi with a CRF head, the arg-max
    otherwise), -100 elsewhere; returned when the tagged positions are known (`tag_mask`, or `labels` != -100)."""

    tags: torch.LongTensor | None = None


class IndependentTagger(nn.Module):
    """One softmax per token: cross-entropy over the labelled tokens, arg-max decoding."""

    def loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        labels = labels.reshape(-1).to(logits.device)
        return F.cross_entropy(logits.flatten(0, -2).float(), labels, ignore_index=IGNORE_INDEX)

    def decode(self, logits: torch.Tensor, tag_mask: torch.Tensor) -> torch.Tensor:
        return logits.argmax(-1).masked_fill(~tag_mask.bool(), IGNORE_INDEX)


class BriskBertForTokenClassification(BriskBertPreTrainedModel):
    """Per-token scores (`logits`); with `config.use_crf`, a linear-chain CRF over them constrained by the tag
    scheme of `config.id2label`. Tags are decoded at each word's first sub-word (`tag_mask`, or `labels` != -100)."""

    def __init__(self, config: BriskBertConfig):
        super().__init__(config)
        self.model = BriskBertModel(config, add_pooling_layer=False)
        self.transform = build_token_transform(config)
        self.dropout = classifier_dropout(config)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        if config.use_crf:
            self.tagger = LinearChainCRF([config.id2label[i] for i in range(config.num_labels)])
            # transformers' token-classification pipeline would take per-token arg-maxes: name the CRF's own.
            pipeline = BriskBertTokenClassificationPipeline
            config.name_pipeline("token-classification", pipeline, "AutoModelForTokenClassification")
        else:
            self.tagger = IndependentTagger()
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        token_type_ids=None,
        position_ids=None,
        inputs_embeds=None,
        labels=None,
        tag_mask=None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> BriskBertTokenClassifierOutput:
        r"""`tag_mask` (bool, `(batch, seq)`): the positions to decode into `tags`; default: where `labels` != -100.
        Without either, only `logits` (and `loss`) are returned, as in an exported graph."""
        outputs = self.model(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, **kwargs)
        logits = self.classifier(self.dropout(self.transform(outputs.last_hidden_state)))
        loss = self.tagger.loss(logits, labels) if labels is not None else None
        if tag_mask is None and labels is not None:
            tag_mask = labels != IGNORE_INDEX
        return BriskBertTokenClassifierOutput(
            loss=loss,
            logits=logits,
            tags=None if tag_mask is None else self.decode(logits, tag_mask),
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )

    def decode(self, logits: torch.Tensor, tag_mask: torch.Tensor) -> torch.Tensor:
        """`(batch, seq)`: the best tags where `tag_mask` is set (Viterbi with a CRF, else arg-max), -100 elsewhere."""
        return self.tagger.decode(logits.detach(), tag_mask.to(logits.device))


class BriskBertForQuestionAnswering(BriskBertPreTrainedModel):
    """Extractive QA: a start and an end logit per token."""

    def __init__(self, config: BriskBertConfig):
        super().__init__(config)
        self.model = BriskBertModel(config, add_pooling_layer=False)
        self.transform = build_token_transform(config)
        self.qa_outputs = nn.Linear(config.hidden_size, 2)
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        token_type_ids=None,
        position_ids=None,
        inputs_embeds=None,
        start_positions=None,
        end_positions=None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> QuestionAnsweringModelOutput:
        outputs = self.model(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, **kwargs)
        start_logits, end_logits = self.qa_outputs(self.transform(outputs.last_hidden_state)).unbind(dim=-1)
        loss = None
        if start_positions is not None and end_positions is not None:
            loss = self.loss_function(start_logits, end_logits, start_positions, end_positions)
        return QuestionAnsweringModelOutput(
            loss=loss,
            start_logits=start_logits.contiguous(),
            end_logits=end_logits.contiguous(),
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )


class BriskBertForMultipleChoice(BriskBertPreTrainedModel):
    """Scores each (batch, choice) sequence from its pooled output; softmax across the choices."""

    def __init__(self, config: BriskBertConfig):
        super().__init__(config)
        self.model = BriskBertModel(config, add_pooling_layer=True)
        self.dropout = classifier_dropout(config)
        self.classifier = nn.Linear(config.hidden_size, 1)
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        token_type_ids=None,
        position_ids=None,
        inputs_embeds=None,
        labels=None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> MultipleChoiceModelOutput:
        num_choices = (input_ids if input_ids is not None else inputs_embeds).shape[1]
        inputs = (input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds)
        outputs = self.model(*(t.flatten(0, 1) if t is not None else None for t in inputs), **kwargs)
        logits = self.classifier(self.dropout(outputs.pooler_output)).view(-1, num_choices)
        loss = F.cross_entropy(logits.float(), labels.view(-1)) if labels is not None else None
        return MultipleChoiceModelOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )


# AUTO_MAP, the one list of heads, drives registration, `auto_map`, `__all__`, conversion and model cards.
MODEL_CLASSES = {
    auto: globals()[name.split(".")[1]] for auto, name in AUTO_MAP.items() if auto != "AutoConfig"
}
BriskBertConfig.register_for_auto_class()
for _auto_class, _model_class in MODEL_CLASSES.items():
    _model_class.register_for_auto_class(_auto_class)
__all__ = ["BriskBertPreTrainedModel", *(model_class.__name__ for model_class in MODEL_CLASSES.values())]
