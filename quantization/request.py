"""The torch-free settings ``briskbert quantize``'s command line is made from."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from briskbert.errors import SettingError
from briskbert.training.tasks.settings import MIN_SEQ_LENGTH, check_at_least, helped


@dataclass(frozen=True)
class QuantizeRequest:
    model_dir: Path = field(metadata={"help": "Saved briskbert model folder (fp32)."})
    output_dir: Path = field(metadata={"help": "New folder for the int8 model."})
    backend: str = helped(
        "auto: time every backend on the sample text (text_file) on this machine and keep the fastest within the "
        "agreement thresholds; or one of: the fp32 model as it is, ONNX Runtime fp32, ONNX Runtime int8, torchao "
        "int8.",
        "auto",
        choices=("auto", "fp32", "onnx-fp32", "onnx", "torch"),
    )
    torch_scheme: str = helped(
        "backend torch: int8 weights with fp32 arithmetic, or int8 weights and activations.",
        "int8-weight-only",
        choices=("int8-weight-only", "int8-dynamic"),
    )
    per_channel: bool = helped(
        "backend onnx: one weight scale per output channel (much closer to fp32) or per matrix.", True
    )
    # Off by default: measured as fast on a VNNI CPU, and 7-bit weights agree less with fp32.
    reduce_range: bool = helped(
        "backend onnx: 7-bit weights, for CPUs without VNNI whose int8 kernels can saturate.", False
    )
    keep_fp32: list[str] = field(
        default_factory=list,
        metadata={
            "help": "Modules left in fp32, by name or dotted part of it (classifier, mlp.down, layers.0).",
            "metavar": "MODULE",
        },
    )
    architecture: str | None = helped("Head to load; default: the folder's own `architectures` entry.")
    min_agreement: float = helped(
        "Lowest argmax agreement with fp32 (share of examples or tokens) accepted for logits.", 0.9
    )
    min_cosine: float = helped(
        "Lowest mean cosine similarity with fp32 accepted for hidden states and embeddings.", 0.95
    )
    text_file: Path | None = helped(
        "UTF-8 text whose sentences make the check batches; default: the bundled WikiText-2 excerpt."
    )
    max_length: int = helped("Longest text pair (tokens) in the check batches.", 128)
    validation_file: Path | None = helped(
        "Labelled CSV / TSV / JSON lines file on which a sequence classifier's fp32 and int8 accuracy are "
        "measured."
    )
    text_column: str = helped("validation_file: the text column.", "sentence")
    text_pair_column: str | None = helped("validation_file: the second text of pairs, if any.")
    label_column: str = helped("validation_file: the label column.", "label")
    dataset_card_name: str | None = helped(
        "validation_file's public name for the card (e.g. glue/sst2); default: the file name."
    )
    max_accuracy_drop: float = helped(
        "With validation_file: the most accuracy (a share, 0.01 = 1 point) a backend may lose to fp32.", 0.01
    )
    overwrite_output_dir: bool = helped("Replace the files of an existing output_dir.", False)

    def __post_init__(self):
        for name in ("min_agreement", "min_cosine", "max_accuracy_drop"):
            if not 0 <= getattr(self, name) <= 1:
                raise SettingError(name, f"must lie in [0, 1], got {getattr(self, name)}.")
        check_at_least(self, MIN_SEQ_LENGTH, "max_length")
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
