"""What a quantization is asked to do and what it found: torch-free dataclasses."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from briskbert.errors import UserError

BACKENDS = ("onnx", "torch")
TORCH_SCHEMES = ("int8-weight-only", "int8-dynamic")


class QuantizationRefused(UserError):
    """The int8 model disagrees with the fp32 one beyond the thresholds; nothing was written."""


@dataclass(frozen=True)
class LabelledData:
    """A labelled table (CSV, TSV, JSON lines) on which the fp32 and int8 classifiers are both scored."""

    path: Path
    text_column: str = "sentence"
    text_pair_column: str | None = None
    label_column: str = "label"
    dataset_name: str | None = None  # its public name on the card (e.g. glue/sst2); default: the file name
    batch_size: int = 32


@dataclass(frozen=True)
class QuantizeRequest:
    model_dir: Path
    output_dir: Path
    backend: str = "onnx"
    architecture: str | None = None  # None: the folder's own `architectures` entry
    torch_scheme: str = "int8-weight-only"
    per_channel: bool = True  # onnx: one weight scale per output channel rather than per matrix
    reduce_range: bool = False  # onnx: 7-bit weights, for CPUs without VNNI whose int8 kernels can saturate
    keep_fp32: tuple[str, ...] = ()  # module names (e.g. "classifier", "mlp.down") left in fp32
    text_file: Path | None = None  # None: the bundled WikiText-2 excerpt
    max_length: int = 128
    min_agreement: float = 0.9  # argmax agreement of every logits output
    min_cosine: float = 0.95  # mean cosine similarity of every hidden-state / embedding output
    evaluation: LabelledData | None = None  # a labelled file both models are scored on (sequence classifiers)
    overwrite_output_dir: bool = False

    def __post_init__(self):
        if self.backend not in BACKENDS:
            raise UserError(f"--backend {self.backend!r} is not one of {', '.join(BACKENDS)}.")
        if self.torch_scheme not in TORCH_SCHEMES:
            raise UserError(f"--torch_scheme {self.torch_scheme!r} is not one of {', '.join(TORCH_SCHEMES)}.")
        for flag, value in (("--min_agreement", self.min_agreement), ("--min_cosine", self.min_cosine)):
            if not 0 <= value <= 1:
                raise UserError(f"{flag} must lie in [0, 1], got {value}.")
        if self.max_length < 8:
            raise UserError(f"--max_length must be at least 8 tokens, got {self.max_length}.")


@dataclass(frozen=True)
class Agreement:
    """How closely one output of the int8 model follows the fp32 model over the check examples."""

    output: str
    metric: str  # "argmax agreement" or "cosine similarity"
    mean: float  # the share of matching argmaxes, or the mean cosine
    worst: float  # the lowest per-example value (for argmax agreement: the mean again)
    count: int
    unit: (
        str  # what was counted: "examples" (per-sequence outputs) or "tokens" (per-token outputs, real ones)
    )
    max_abs_difference: float
    threshold: float

    @property
    def passed(self) -> bool:
        return self.mean >= self.threshold

    def describe(self) -> str:
        worst = f", worst {self.worst:.4f}" if self.metric == "cosine similarity" else ""
        return (
            f"{self.output}: {self.metric} {self.mean:.4f}{worst} over {self.count} {self.unit}, "
            f"max abs difference {self.max_abs_difference:.3g} (threshold {self.threshold:g})"
        )


@dataclass
class QuantizationResult:
    output_dir: Path
    backend: str
    architecture: str
    model_file: str
    precision: str
    fp32_bytes: int
    int8_bytes: int
    agreements: list[Agreement] = field(default_factory=list)
    evaluation: list[dict] = field(default_factory=list)  # {"dataset", "metric", "fp32", "int8", "examples"}

    @property
    def size_ratio(self) -> float:
        return self.fp32_bytes / self.int8_bytes
