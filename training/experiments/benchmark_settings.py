"""What a benchmark run measures, as plain data: the command line builds these without importing torch."""

import os
from dataclasses import dataclass, field
from pathlib import Path

from briskbert.data import DATA_DIR

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
    weights: str = "minilm"
    architecture: str = "bert"
    size: Size = field(default_factory=Size)
    source: str = "sst2"
    batch_size: int = 32
    num_batches: int = 6
    min_len: int = 16
    max_len: int = 128
    rounds: int = 5
    tasks: tuple = ("infer", "train")
    dtypes: tuple = ("fp32", "bf16")
    models: tuple = ARCHITECTURES["bert"]
    compile: bool = False
    threads: int | None = None
    device: str = "auto"  # cuda when available
    seed: int = 0

    @property
    def reference(self) -> str:
        return ARCHITECTURES[self.architecture][0]
