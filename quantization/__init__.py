"""Quantize a saved briskbert model to int8, check it against the fp32 model on real text, and write a folder that
says what it holds.

Two backends, one check:

* ``onnx`` (the fast CPU path): the model is exported as ``export-onnx`` exports it, then
  ``onnxruntime.quantization.quantize_dynamic`` stores the weights of every matmul in int8 (one scale per output
  channel) and the embedding tables in int8; activations are quantized per tensor at run time
  (``DynamicQuantizeLinear`` + ``MatMulInteger``). The folder holds ``model_quantized.onnx`` and the tokenizer, and
  runs with ``onnxruntime.InferenceSession``.
* ``torch`` (for users who stay in PyTorch): torchao, the quantization library PyTorch maintains
  (``torch.ao.quantization`` is deprecated). ``int8-weight-only`` keeps int8 weights and computes in fp32;
  ``int8-dynamic`` also quantizes activations per token at run time and computes in int8 where torch has int8
  kernels. The word embeddings are stored in int8 per row. The folder is an ordinary transformers folder whose
  ``config.json`` carries transformers' torchao ``quantization_config``: ``AutoModel...from_pretrained(folder,
  trust_remote_code=True)`` loads it as it is (torchao installed), and so do ``pipeline()`` and sentence-transformers.

The quantized model (for ``torch``: as loaded back from the written folder) and the fp32 model run the same padded
batches of real text; the agreement of every output is measured at real tokens: argmax agreement for logits,
cosine similarity for hidden states and embeddings, and the largest absolute difference. Below the thresholds the
job refuses and writes nothing. The folder is written to a staging folder beside ``output_dir`` and moved into
place whole.

This package is not remote code: it is never copied into model folders. ``request`` holds the torch-free
dataclasses, ``backends`` the two ways to int8, ``agreement`` the comparison with fp32, ``job`` the job itself;
the folder's README is rendered by :mod:`briskbert.hub_cards.quantized`.
"""

from .request import LabelledData, QuantizationRefused, QuantizationResult, QuantizeRequest


def __getattr__(name: str):
    # the job imports torch: `briskbert quantize --help` parses the torch-free request without it
    if name == "quantize":
        from .job import quantize

        return quantize
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["LabelledData", "QuantizationRefused", "QuantizationResult", "QuantizeRequest", "quantize"]
