"""`briskbert quantize`: the fastest CPU model (fp32, the fused ONNX graph in fp32 or int8, torchao int8) that
agrees with the fp32 model on real text, in a folder whose `quantization.json` and README say what it holds."""

from .request import QuantizeRequest


def __getattr__(name: str):
    if name == "quantize":  # the job imports torch: `briskbert quantize --help` parses the request without it
        from .job import quantize

        return quantize
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["QuantizeRequest", "quantize"]
