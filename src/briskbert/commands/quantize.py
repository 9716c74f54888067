"""Quantize a briskbert model folder to int8 for CPU inference, and check it against the fp32 model on real text.

    briskbert quantize --model_dir runs/sst2/final --output_dir runs/sst2-int8                  # ONNX Runtime
    briskbert quantize --model_dir runs/sst2/final --output_dir runs/sst2-int8-pt --backend torch  # torchao

--backend onnx (the fast CPU path; needs briskbert[onnx]) exports the model and quantizes it with ONNX Runtime's
dynamic quantization: int8 weights per output channel, int8 embedding tables, activations quantized per tensor at
run time. The folder holds model_quantized.onnx, the tokenizer, a README and quantization.json, and runs with
onnxruntime.InferenceSession. A sentence-transformers folder's graph also outputs its sentence_embedding.

--backend torch (needs briskbert[torchao]) quantizes with torchao and writes a transformers folder that
AutoModel...from_pretrained(folder, trust_remote_code=True) and sentence-transformers load as it is (torchao
installed). --torch_scheme int8-weight-only stores int8 weights and computes in fp32 (about 4x less memory for the
weights); int8-dynamic also quantizes activations per token and computes in int8 where torch has int8 kernels
(GPUs; CPUs with AMX or VNNI, under torch.compile).

Then the int8 and fp32 models run the same padded batches of real text, and the agreement of every output is
printed: argmax agreement of logits, cosine similarity of hidden states and embeddings, the largest absolute
difference. Below --min_agreement / --min_cosine nothing is written and the job exits with status 2. With
--validation_file, a sequence classifier is also scored in both precisions on labelled data:

    briskbert quantize --model_dir runs/sst2/final --output_dir runs/sst2-int8 \
        --validation_file data/sst2_validation_excerpt.tsv --text_column sentence --label_column label

The folder's README and quantization.json state the precision, the size, the agreement and the accuracies.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from briskbert.extras import require_extra


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Shows each flag's default and keeps the description's layout."""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("--model_dir", type=Path, required=True, help="Saved briskbert model folder (fp32).")
    parser.add_argument("--output_dir", type=Path, required=True, help="New folder for the int8 model.")
    parser.add_argument(
        "--backend", choices=("onnx", "torch"), default="onnx", help="ONNX Runtime or torchao."
    )
    parser.add_argument(
        "--torch_scheme",
        choices=("int8-weight-only", "int8-dynamic"),
        default="int8-weight-only",
        help="--backend torch: int8 weights with fp32 arithmetic, or int8 weights and activations.",
    )
    parser.add_argument(
        "--per_channel",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="--backend onnx: one weight scale per output channel (much closer to fp32) or per matrix.",
    )
    parser.add_argument(
        "--reduce_range",
        action="store_true",
        help="--backend onnx: 7-bit weights, for CPUs without VNNI whose int8 kernels can saturate.",
    )
    parser.add_argument(
        "--keep_fp32",
        nargs="+",
        default=[],
        metavar="MODULE",
        help="Modules left in fp32, by name or dotted part of it (classifier, mlp.down, layers.0).",
    )
    parser.add_argument(
        "--architecture", default=None, help="Head to load; default: the folder's own `architectures` entry."
    )
    parser.add_argument(
        "--min_agreement",
        type=float,
        default=0.9,
        help="Lowest argmax agreement with fp32 (share of examples or tokens) accepted for logits outputs.",
    )
    parser.add_argument(
        "--min_cosine",
        type=float,
        default=0.95,
        help="Lowest mean cosine similarity with fp32 accepted for hidden-state and embedding outputs.",
    )
    parser.add_argument(
        "--text_file",
        type=Path,
        default=None,
        help="UTF-8 text whose sentences make the check batches; default: the bundled WikiText-2 excerpt.",
    )
    parser.add_argument(
        "--max_length", type=int, default=128, help="Longest text pair (tokens) in the check batches."
    )
    parser.add_argument(
        "--validation_file",
        type=Path,
        default=None,
        help="Labelled CSV / TSV / JSON lines file on which a sequence classifier's fp32 and int8 accuracy are "
        "measured.",
    )
    parser.add_argument("--text_column", default="sentence", help="--validation_file: the text column.")
    parser.add_argument(
        "--text_pair_column", default=None, help="--validation_file: the second text of pairs, if any."
    )
    parser.add_argument("--label_column", default="label", help="--validation_file: the label column.")
    parser.add_argument(
        "--dataset_card_name",
        default=None,
        help="--validation_file's public name for the card (e.g. glue/sst2); default: the file name.",
    )
    parser.add_argument(
        "--overwrite_output_dir", action="store_true", help="Replace the files of an existing --output_dir."
    )
    args = parser.parse_args(argv)
    if args.validation_file is None and (args.text_pair_column or args.dataset_card_name):
        parser.error("--text_pair_column and --dataset_card_name describe --validation_file; pass it too.")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    require_extra({"onnx": "onnx", "torch": "torchao"}[args.backend], f"--backend {args.backend}")
    from briskbert.quantization import LabelledData, QuantizeRequest, quantize

    request = QuantizeRequest(
        model_dir=args.model_dir,
        output_dir=args.output_dir,
        backend=args.backend,
        architecture=args.architecture,
        torch_scheme=args.torch_scheme,
        per_channel=args.per_channel,
        reduce_range=args.reduce_range,
        keep_fp32=tuple(args.keep_fp32),
        text_file=args.text_file,
        max_length=args.max_length,
        min_agreement=args.min_agreement,
        min_cosine=args.min_cosine,
        evaluation=None
        if args.validation_file is None
        else LabelledData(
            args.validation_file,
            args.text_column,
            args.text_pair_column,
            args.label_column,
            args.dataset_card_name,
        ),
        overwrite_output_dir=args.overwrite_output_dir,
    )
    result = quantize(request)
    print(
        f"Wrote {result.output_dir / result.model_file}: {result.precision}; "
        f"{result.int8_bytes / 2**20:.1f} MiB, {result.size_ratio:.2f}x smaller than fp32 "
        f"({result.fp32_bytes / 2**20:.1f} MiB)."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
