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

import sys

from briskbert.commands.arguments import parse
from briskbert.extras import require_extra
from briskbert.quantization.request import QuantizeRequest


def main(argv: list[str] | None = None) -> int:
    (request,) = parse(__doc__, QuantizeRequest, argv=argv)
    require_extra({"onnx": "onnx", "torch": "torchao"}[request.backend], f"--backend {request.backend}")
    from briskbert.quantization import quantize

    result = quantize(request)
    print(
        f"Wrote {result.output_dir / result.model_file}: {result.precision}; "
        f"{result.int8_bytes / 2**20:.1f} MiB, {result.size_ratio:.2f}x smaller than fp32 "
        f"({result.fp32_bytes / 2**20:.1f} MiB)."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
