"""Make the fastest model this CPU runs from a briskbert model folder, at the fp32 model's quality, and say what it is.

    briskbert quantize --model_dir runs/sst2/final --output_dir runs/sst2-fast               # --backend auto
    briskbert quantize --model_dir runs/sst2/final --output_dir runs/sst2-int8 --backend onnx

--backend auto (the default) builds every candidate whose library is installed: the fp32 model as it is
(briskbert's unpadded fast path), the ONNX graph with ONNX Runtime's fused kernels in fp32 (`onnx-fp32`) and with
int8 matmuls (`onnx`: dynamic quantization, int8 weights per output channel, activations quantized at run time),
and torchao int8 (`torch`). Each runs the check batches (its agreement with fp32: argmax agreement of logits,
cosine similarity of hidden states and embeddings) and is timed on this machine on the sample text (--text_file)
sorted by length, interleaved round after round. The fastest within --min_agreement / --min_cosine (and, with
--validation_file, --max_accuracy_drop) is kept; the table it was chosen from is printed and saved. fp32 is always
within them, so the choice is never slower than the fp32 model as measured.

A named --backend keeps that one (timed against fp32 all the same); beyond the thresholds nothing is written and
the job exits with status 2. The ONNX backends need briskbert[onnx]: the folder holds model.onnx or
model_quantized.onnx and runs with ONNX Runtime (briskbert.quantization.inference.OnnxModel batches texts by
length). The PyTorch backends write a transformers folder that AutoModel...from_pretrained(folder,
trust_remote_code=True), pipeline() and sentence-transformers load as it is (torch: with torchao installed).

With --validation_file, a sequence classifier is also scored on labelled data:

    briskbert quantize --model_dir runs/sst2/final --output_dir runs/sst2-int8 \
        --validation_file data/sst2_validation_excerpt.tsv --text_column sentence --label_column label

The folder's README and quantization.json state the kept backend, its speed-up over fp32 on this machine, the
precision, the size, the agreement and the accuracies.
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
    from briskbert.quantization import quantize

    facts = quantize(request)
    sizes, choice = facts["weights_bytes"], facts["choice"]
    print(
        f"Wrote {request.output_dir / facts['model_file']} ({choice['backend']}, {choice['speedup']:.2f}x fp32 "
        f"here): {facts['description']}; {sizes[facts['precision']] / 2**20:.1f} MiB, {sizes['ratio']:.2f}x "
        f"smaller than fp32 ({sizes['fp32'] / 2**20:.1f} MiB)."
    )
    return 0
