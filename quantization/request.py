"""The torch-free settings ``briskbert quantize``'s command line is made from."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from briskbert.errors import SettingError

BACKENDS = ("auto", "fp32", "onnx-fp32", "onnx", "torch")
TORCH_SCHEMES = ("int8-weight-only", "int8-dynamic")


@dataclass(frozen=True)
class QuantizeRequest:
    model_dir: Path = field(metadata={"help": "Saved briskbert model folder (fp32)."})
    output_dir: Path = field(metadata={"help": "New folder for the int8 model."})
    backend: str = field(
        default="auto",
        metadata={
            "help": "auto: time every backend on the sample text (text_file) on this machine and keep the fastest "
            "within the agreement thresholds; or one of: the fp32 model as it is, ONNX Runtime fp32, ONNX Runtime "
            "int8, torchao int8.",
            "choices": BACKENDS,
        },
    )
    torch_scheme: str = field(
        default="int8-weight-only",
        metadata={
            "help": "backend torch: int8 weights with fp32 arithmetic, or int8 weights and activations.",
            "choices": TORCH_SCHEMES,
        },
    )
    per_channel: bool = field(
        default=True,
        metadata={
            "help": "backend onnx: one weight scale per output channel (much closer to fp32) or per matrix."
        },
    )
    reduce_range: bool = field(
        default=False,  # measured: as fast on a VNNI CPU, and 7-bit weights agree less with fp32
        metadata={
            "help": "backend onnx: 7-bit weights, for CPUs without VNNI whose int8 kernels can saturate."
        },
    )
    keep_fp32: list[str] = field(
        default_factory=list,
        metadata={
            "help": "Modules left in fp32, by name or dotted part of it (classifier, mlp.down, layers.0).",
            "metavar": "MODULE",
        },
    )
    architecture: str | None = field(
        default=None, metadata={"help": "Head to load; default: the folder's own `architectures` entry."}
    )
    min_agreement: float = field(
        default=0.9,
        metadata={
            "help": "Lowest argmax agreement with fp32 (share of examples or tokens) accepted for logits."
        },
    )
    min_cosine: float = field(
        default=0.95,
        metadata={
            "help": "Lowest mean cosine similarity with fp32 accepted for hidden states and embeddings."
        },
    )
    text_file: Path | None = field(
        default=None,
        metadata={
            "help": "UTF-8 text whose sentences make the check batches; default: the bundled WikiText-2 excerpt."
        },
    )
    max_length: int = field(
        default=128, metadata={"help": "Longest text pair (tokens) in the check batches."}
    )
    validation_file: Path | None = field(
        default=None,
        metadata={
            "help": "Labelled CSV / TSV / JSON lines file on which a sequence classifier's fp32 and int8 "
            "accuracy are measured."
        },
    )
    text_column: str = field(default="sentence", metadata={"help": "validation_file: the text column."})
    text_pair_column: str | None = field(
        default=None, metadata={"help": "validation_file: the second text of pairs, if any."}
    )
    label_column: str = field(default="label", metadata={"help": "validation_file: the label column."})
    dataset_card_name: str | None = field(
        default=None,
        metadata={
            "help": "validation_file's public name for the card (e.g. glue/sst2); default: the file name."
        },
    )
    max_accuracy_drop: float = field(
        default=0.01,
        metadata={
            "help": "With validation_file: the most accuracy (a share, 0.01 = 1 point) a backend may lose to fp32."
        },
    )
    overwrite_output_dir: bool = field(
        default=False, metadata={"help": "Replace the files of an existing output_dir."}
    )

    def __post_init__(self):
        for name in ("min_agreement", "min_cosine", "max_accuracy_drop"):
            if not 0 <= getattr(self, name) <= 1:
                raise SettingError(name, f"must lie in [0, 1], got {getattr(self, name)}.")
        if self.max_length < 8:
            raise SettingError("max_length", f"must be at least 8 tokens, got {self.max_length}.")
        for name in ("text_pair_column", "dataset_card_name"):
            if getattr(self, name) and self.validation_file is None:
                raise SettingError(name, "describes validation_file; pass it too.")
        output_dir, model_dir = Path(self.output_dir).resolve(), Path(self.model_dir).resolve()
        if output_dir.exists() and model_dir in (output_dir, *output_dir.parents):
            raise SettingError(
                "output_dir", f"{self.output_dir} holds the source model_dir; choose a new folder."
            )
        if output_dir.is_dir() and any(output_dir.iterdir()) and not self.overwrite_output_dir:
            raise SettingError(
                "output_dir",
                f"{self.output_dir} already holds files; set overwrite_output_dir to replace them or choose "
                "another folder.",
            )
