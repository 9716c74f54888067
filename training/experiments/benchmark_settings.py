"""What a benchmark run measures, as plain data whose fields carry their default and help: the command line is
generated from them without importing torch."""

import os
from dataclasses import dataclass, field
from pathlib import Path

from briskbert.data import DATA_DIR
from briskbert.errors import SettingError

# The shared data sits beside a checkout (../shared/data); the bundled excerpts ship with the package.
SHARED_DATA = Path(os.environ.get("BRISKBERT_DATA", "../shared/data"))
SOURCES = {
    "sst2": (SHARED_DATA / "sst2" / "train.tsv", Path(DATA_DIR) / "sst2_train_excerpt.tsv"),
    "wikitext": (SHARED_DATA / "wikitext-2" / "valid.txt", Path(DATA_DIR) / "wikitext2_excerpt.txt"),
}
# The architecture whose transformers implementation briskbert is converted from and measured against; each
# lists the models a run times by default, the transformers reference (sdpa) first: every ratio is taken to it.
ARCHITECTURES = {
    "bert": ("bert-sdpa", "bert-eager", "modernbert", "briskbert", "briskbert-padded"),
    "roberta": ("roberta-sdpa", "roberta-eager", "briskbert", "briskbert-padded"),
    "modernbert": ("modernbert-sdpa", "modernbert-eager", "briskbert", "briskbert-padded"),
}
MODEL_NAMES = sorted({name for names in ARCHITECTURES.values() for name in names})


@dataclass
class Size:
    hidden_size: int = 384
    num_hidden_layers: int = 6
    num_attention_heads: int = 12
    intermediate_size: int = 1536
    vocab_size: int = 30522

    def flops_per_token(self, mean_attended: float) -> float:
        """Forward FLOPs per real token of the encoder: projections and MLP, plus q.k and p.v over the tokens of
        its own sequence (mean_attended = sum(len^2) / sum(len))."""
        h, i = self.hidden_size, self.intermediate_size
        return self.num_hidden_layers * (2 * (4 * h * h + 2 * h * i) + 4 * h * mean_attended)

    def decoder_flops(self) -> float:
        return 2 * (self.hidden_size * self.hidden_size + self.hidden_size * self.vocab_size)


@dataclass
class Settings:
    weights: str = field(
        default="minilm",
        metadata={
            "help": "the converted real all-MiniLM-L6-v2 (bert only), or random weights at the sizes below",
            "choices": ["minilm", "random"],
        },
    )
    architecture: str = field(
        default="bert",
        metadata={
            "help": "the transformers implementation briskbert is converted from and compared with",
            "choices": sorted(ARCHITECTURES),
        },
    )
    hidden_size: int = Size.hidden_size
    num_hidden_layers: int = Size.num_hidden_layers
    num_attention_heads: int = Size.num_attention_heads
    intermediate_size: int = Size.intermediate_size
    source: str = field(
        default="sst2",
        metadata={
            "help": "sst2: SST-2 sentences; wikitext: WikiText-2 paragraphs",
            "choices": sorted(SOURCES),
        },
    )
    batch_size: int = 32
    num_batches: int = 6
    min_len: int = 16
    max_len: int = 128
    rounds: int = 5
    seed: int = 0
    tasks: list[str] = field(
        default_factory=lambda: ["infer", "train"], metadata={"choices": ["infer", "train"]}
    )
    dtypes: list[str] = field(
        default_factory=lambda: ["fp32", "bf16"], metadata={"choices": ["fp32", "bf16"]}
    )
    models: list[str] | None = field(
        default=None,
        metadata={
            "help": "models to time (default: the architecture's list: "
            + "; ".join(f"{a}: {' '.join(m)}" for a, m in ARCHITECTURES.items())
            + ")",
            "choices": MODEL_NAMES,
        },
    )
    compile: bool = field(
        default=False, metadata={"help": "also time torch.compile(briskbert) for inference"}
    )
    device: str = "auto"  # cuda when available
    threads: int | None = field(
        default=None, metadata={"help": "torch threads for every model (default: torch's own choice)"}
    )

    def __post_init__(self):
        self.models = list(self.models or ARCHITECTURES[self.architecture])
        if self.reference not in self.models:
            raise SettingError(
                "models", f"must include {self.reference}, the reference every ratio is taken against"
            )
        if self.weights == "minilm" and self.architecture != "bert":
            raise SettingError(
                "weights",
                "minilm is a BERT checkpoint; use weights random with architecture roberta/modernbert",
            )
        if "fp32" not in self.dtypes:
            raise SettingError("dtypes", "must include fp32: ratios are taken against BertModel-sdpa in fp32")

    @property
    def size(self) -> Size:
        return Size(
            self.hidden_size, self.num_hidden_layers, self.num_attention_heads, self.intermediate_size
        )

    @property
    def reference(self) -> str:
        return ARCHITECTURES[self.architecture][0]
