"""Make the fastest model the CPU runs from a saved briskbert model, check it against the fp32 model on real text,
and write a folder that says what it holds.

The candidates (``--backend``; ``auto`` builds them all and keeps the fastest within the thresholds):

* ``fp32``: the model as it is, with briskbert's unpadded fast path; a transformers folder.
* ``onnx-fp32``: the graph ``export-onnx`` writes, with ONNX Runtime's fused kernels (attention, skip +
  LayerNorm, bias + GELU; :mod:`briskbert.modeling.onnx_fusion`).
* ``onnx``: that fused graph through ``onnxruntime.quantization.quantize_dynamic``: int8 weights for every matmul
  and the attention (one scale per output channel), int8 embedding tables, activations quantized per tensor at
  run time (``DynamicQuantizeLinear`` + ``MatMulInteger`` / ``QAttention``). Nodes of ``--keep_fp32`` modules
  stay fp32.
* ``torch``: torchao, the quantization library PyTorch maintains. ``int8-weight-only`` keeps int8 weights and
  computes in fp32; ``int8-dynamic`` also quantizes activations per token at run time. The folder is an ordinary
  transformers folder whose ``config.json`` carries transformers' torchao ``quantization_config``: it loads with
  ``AutoModel...from_pretrained(folder, trust_remote_code=True)``, ``pipeline()`` and sentence-transformers.

Every candidate and the fp32 model run the same padded batches of real text; the agreement of every output is
measured at real tokens (argmax agreement for logits, cosine similarity for hidden states and embeddings, the
largest absolute difference). Then they are timed on this machine on the sample text sorted by length (ONNX
graphs compute every padded position; :mod:`.inference` batches by length the same way), interleaved round after
round (:mod:`.choice`). A requested backend beyond the thresholds is refused and nothing is written. The kept one
is written to a staging folder beside ``output_dir`` with ``quantization.json`` (its speed-up, the table it was
chosen from, its agreement) and a README, and moved into place whole.

This package is not remote code: it is never copied into model folders. ``request`` holds the torch-free
dataclasses, ``backends`` the ways to build each candidate, ``agreement`` the comparison with fp32, ``choice``
the timing and the choice, ``inference`` the length-bucketed ONNX runner, ``job`` the job itself; the folder's
README is rendered by :mod:`briskbert.hub_cards.quantized`.
"""

from .request import LabelledData, QuantizationRefused, QuantizationResult, QuantizeRequest


def __getattr__(name: str):
    # the job imports torch: `briskbert quantize --help` parses the torch-free request without it
    if name == "quantize":
        from .job import quantize

        return quantize
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["LabelledData", "QuantizationRefused", "QuantizationResult", "QuantizeRequest", "quantize"]
