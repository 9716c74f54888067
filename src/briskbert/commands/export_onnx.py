"""Export a briskbert model folder to ONNX and check the exported graph against PyTorch with ONNX Runtime.

    briskbert export-onnx --model_dir runs/classifier/final --output_dir runs/classifier/onnx

Writes ``model.onnx`` (weights in a ``.data`` file beside it only past ONNX's 2 GB limit) with dynamic batch and
sequence axes, plus the folder's config and tokenizer files. Then runs ONNX Runtime and PyTorch on padded
batches of real text of other shapes and prints the largest absolute difference of each output (at real
tokens); exits 1 when it exceeds ``--atol``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from briskbert.errors import CommandFailed, UserError
from briskbert.extras import require_extra


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Shows each flag's default and keeps the description's layout."""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("--model_dir", type=Path, required=True, help="Saved briskbert model folder.")
    parser.add_argument("--output_dir", type=Path, required=True, help="Folder to write model.onnx to.")
    parser.add_argument(
        "--architecture",
        default=None,
        help="Head to export (e.g. BriskBertModel, BriskBertForSequenceClassification); "
        "default: the folder's own `architectures` entry.",
    )
    parser.add_argument(
        "--atol",
        type=float,
        default=1e-4,
        help="Largest absolute difference between ONNX Runtime and PyTorch outputs that passes.",
    )
    parser.add_argument(
        "--max_length", type=int, default=128, help="Longest text pair (tokens) in the check batches."
    )
    parser.add_argument(
        "--text_file",
        type=Path,
        default=None,
        help="UTF-8 text whose lines make the check batches; default: the bundled WikiText-2 excerpt.",
    )
    parser.add_argument(
        "--opset_version", type=int, default=None, help="ONNX opset; default: torch's exporter default."
    )
    parser.add_argument(
        "--overwrite_output_dir", action="store_true", help="Replace an existing model.onnx in --output_dir."
    )
    args = parser.parse_args(argv)
    if args.atol < 0:
        parser.error(f"--atol must be >= 0, got {args.atol}")
    if args.max_length < 8:
        parser.error(f"--max_length must be at least 8 tokens, got {args.max_length}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    require_extra("onnx", "briskbert export-onnx")  # before torch and the exporter are imported
    from briskbert.modeling.export import ExportInputError, OnnxExportRequest, export_and_check

    request = OnnxExportRequest(
        model_dir=args.model_dir,
        output_dir=args.output_dir,
        architecture=args.architecture,
        text_file=args.text_file,
        max_length=args.max_length,
        opset_version=args.opset_version,
        overwrite_output_dir=args.overwrite_output_dir,
    )
    try:
        result = export_and_check(request)
    except ExportInputError as error:
        raise UserError(str(error)) from error
    print(f"Wrote {result.onnx_path} (inputs: {', '.join(result.input_names)}).")
    for check in result.checks:
        differences = ", ".join(f"{name} {value:.2e}" for name, value in check.max_abs_difference.items())
        print(
            f"ONNX Runtime vs PyTorch, batch {'x'.join(map(str, check.shape))} "
            f"({check.padding_fraction:.0%} padding): max abs difference {differences}"
        )
    worst = result.max_abs_difference
    if worst > args.atol:
        raise CommandFailed(f"max abs difference {worst:.2e} exceeds --atol {args.atol:g}.")
    print(f"OK: max abs difference {worst:.2e} <= --atol {args.atol:g}.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
