"""Export a briskbert model folder to ONNX and check the exported graph against PyTorch with ONNX Runtime.

    briskbert export-onnx --model_dir runs/classifier/final --output_dir runs/classifier/onnx

Writes ``model.onnx`` (weights in a ``.data`` file beside it only past ONNX's 2 GB limit) with dynamic batch and
sequence axes, plus the folder's config and tokenizer files; then prints the largest difference of each output
from PyTorch's on padded batches of real text (at real tokens), and exits 1 beyond ``--atol``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from briskbert.commands.arguments import parse
from briskbert.errors import CommandFailed
from briskbert.extras import require_extra
from briskbert.training.tasks.settings import MIN_SEQ_LENGTH, check_at_least, helped


@dataclass(frozen=True)
class ExportArguments:
    model_dir: Path = field(metadata={"help": "Saved briskbert model folder."})
    output_dir: Path = field(metadata={"help": "Folder to write model.onnx to."})
    architecture: str | None = helped(
        "Head to export (e.g. BriskBertModel, BriskBertForSequenceClassification); default: the folder's own "
        "`architectures` entry."
    )
    atol: float = helped(
        "Largest absolute difference between ONNX Runtime and PyTorch outputs that passes.", 1e-4
    )
    max_length: int = helped("Longest text pair (tokens) in the check batches.", 128)
    text_file: Path | None = helped(
        "UTF-8 text whose lines make the check batches; default: the bundled WikiText-2 excerpt."
    )
    opset_version: int | None = helped("ONNX opset; default: torch's exporter default.")
    overwrite_output_dir: bool = helped("Replace an existing model.onnx in --output_dir.", False)
    fuse: bool = helped(
        "Fuse attention, skip + LayerNorm and bias + GELU into ONNX Runtime's kernels (faster; the graph then runs "
        "on ONNX Runtime only). false: the exporter's plain ONNX graph.",
        True,
    )

    def __post_init__(self):
        check_at_least(self, 0, "atol")
        check_at_least(self, MIN_SEQ_LENGTH, "max_length")


def main(argv: list[str] | None = None) -> int:
    (args,) = parse(__doc__, ExportArguments, argv=argv)
    require_extra("onnx", "briskbert export-onnx")  # before torch and the exporter are imported
    from briskbert.modeling.export import export_and_check

    worst = export_and_check(
        args.model_dir,
        args.output_dir,
        architecture=args.architecture,
        text_file=args.text_file,
        max_length=args.max_length,
        opset_version=args.opset_version,
        overwrite_output_dir=args.overwrite_output_dir,
        fuse=args.fuse,
    )
    if worst > args.atol:
        raise CommandFailed(f"max abs difference {worst:.2e} exceeds --atol {args.atol:g}.")
    print(f"OK: max abs difference {worst:.2e} <= --atol {args.atol:g}.")
    return 0
