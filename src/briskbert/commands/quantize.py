"""Make the fastest model this CPU runs from a briskbert model folder, at the fp32 model's quality, and say what it is.

    briskbert quantize --model_dir runs/sst2/final --output_dir runs/sst2-fast               # --backend auto
    briskbert quantize --model_dir runs/sst2/final --output_dir runs/sst2-int8 --backend onnx \
        --validation_file data/sst2_validation_excerpt.tsv --text_column sentence --label_column label

--backend auto (the default) builds every candidate whose library is installed, checks each against fp32 on real
text, times them here and keeps the fastest within the thresholds. A named --backend keeps that one; beyond the
thresholds nothing is written (exit status 2). The folder's README and quantization.json say what it holds.
"""

from __future__ import annotations

from briskbert.commands.arguments import parse
from briskbert.extras import require_extra
from briskbert.quantization.request import QuantizeRequest


def main(argv: list[str] | None = None) -> int:
    (request,) = parse(__doc__, QuantizeRequest, argv=argv)
    extra = {"onnx": "onnx", "onnx-fp32": "onnx", "torch": "torchao"}.get(request.backend)
    if extra:
        require_extra(extra, f"--backend {request.backend}")
    from briskbert.quantization.job import quantize

    facts = quantize(request)
    sizes, choice = facts["weights_bytes"], facts["choice"]
    print(
        f"Wrote {request.output_dir / facts['model_file']} ({choice['backend']}, {choice['speedup']:.2f}x fp32 "
        f"here): {facts['description']}; {sizes[facts['precision']] / 2**20:.1f} MiB, {sizes['ratio']:.2f}x "
        f"smaller than fp32 ({sizes['fp32'] / 2**20:.1f} MiB)."
    )
    return 0
