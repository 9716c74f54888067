"""The ways to a faster model: the fused ONNX graph (fp32, or with ONNX Runtime's dynamic int8 quantization), and
torchao on the PyTorch model (saved as a transformers folder that loads back as it is)."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from briskbert.errors import SettingError
from briskbert.modeling.export import ONNX_FILE, quiet_logs

from .request import QuantizeRequest

QUANTIZED_ONNX_FILE = "model_quantized.onnx"


def modules_to_keep(model: nn.Module, names: tuple[str, ...]) -> set[str]:
    """The Linear / Embedding modules whose dotted path contains one of `names` as a run of whole components
    (``classifier``, ``mlp.down``, ``layers.0``); each name must match at least one."""
    quantizable = [
        path for path, module in model.named_modules() if isinstance(module, (nn.Linear, nn.Embedding))
    ]
    kept = set()
    for name in names:
        matched = [path for path in quantizable if f".{name.strip('.')}." in f".{path}."]
        if not matched:
            raise SettingError(
                "keep_fp32",
                f"{name} names no Linear or Embedding module; module names look like "
                f"{', '.join(quantizable[:3])}, ..., {quantizable[-1]}.",
            )
        kept.update(matched)
    return kept


def precision(backend: str, request: QuantizeRequest) -> str:
    """What a backend's model computes in, as quantization.json's description says it."""
    fused = "fused attention, skip + LayerNorm and bias + GELU kernels"
    onnx_weights = (
        f"{'7-bit range' if request.reduce_range else 'int8'} "
        f"({'per output channel' if request.per_channel else 'per tensor'}, symmetric)"
    )
    torch_activations = {
        "int8-dynamic": " and int8 activations (per token, at run time)",
        "int8-weight-only": ", fp32 activations and arithmetic",
    }[request.torch_scheme]
    return {
        "fp32": "fp32 (the model as it is: briskbert's unpadded fast path)",
        "onnx-fp32": f"fp32: {fused} (ONNX Runtime)",
        "onnx": f"int8: weights {onnx_weights}, embedding tables int8, activations uint8 quantized per tensor at "
        f"run time; {fused}",
        "torch": f"int8: int8 weights (per output channel){torch_activations}; word embeddings int8 (per row)",
    }[backend]


def quantize_onnx(fp32_folder: Path, folder: Path, scopes, keep: set[str], request: QuantizeRequest) -> None:
    """Quantizes the fused fp32 graph of `fp32_folder` into `folder`/model_quantized.onnx, leaving the nodes of
    the `keep` modules in fp32."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    wanted = {f"model.{module}" for module in keep}  # the export wraps the model in an attribute `model`
    excluded = [name for name, paths in scopes.items() if wanted & set(paths)]
    folder.mkdir(parents=True, exist_ok=True)
    # quantize_dynamic logs "Please consider to run pre-processing" on the root logger: the graph is fused already.
    with quiet_logs():
        quantize_dynamic(
            fp32_folder / ONNX_FILE,
            folder / QUANTIZED_ONNX_FILE,
            per_channel=request.per_channel,
            reduce_range=request.reduce_range,
            weight_type=QuantType.QInt8,
            nodes_to_exclude=excluded,
            use_external_data_format=(fp32_folder / f"{ONNX_FILE}.data").exists(),
        )


def quantize_torch(model: nn.Module, keep: set[str], request: QuantizeRequest, staging: Path) -> None:
    """Quantizes `model` in place with torchao (every Linear, and the word embeddings int8 per row, bar the `keep`
    modules) and saves it into `staging` as a transformers folder whose config loads it back."""
    from torchao import quantization as ao
    from transformers import TorchAoConfig
    from transformers.quantizers.auto import AutoHfQuantizer

    # A decoder sharing the word-embedding matrix gets its own copy: a matmul weight is quantized per output
    # channel, a lookup table per row.
    decoder, embeddings = model.get_output_embeddings(), model.get_input_embeddings()
    if decoder is not None and decoder.weight is embeddings.weight:
        decoder.weight = nn.Parameter(decoder.weight.detach().clone())
        model.config.tie_word_embeddings = False
    linear_config = {
        "int8-weight-only": ao.Int8WeightOnlyConfig(set_inductor_config=False),
        "int8-dynamic": ao.Int8DynamicActivationInt8WeightConfig(set_inductor_config=False),
    }[request.torch_scheme]
    table = {
        path: linear_config
        for path, module in model.named_modules()
        if isinstance(module, nn.Linear) and path not in keep
    }
    embeddings_path = next(path for path, module in model.named_modules() if module is embeddings)
    if embeddings_path not in keep:
        table[embeddings_path] = ao.IntxWeightOnlyConfig(weight_dtype=torch.int8, granularity=ao.PerAxis(0))
    config = TorchAoConfig(ao.FqnToConfig(table), include_input_output_embeddings=embeddings_path not in keep)
    ao.quantize_(model, config.quant_type, filter_fn=None)
    # What from_pretrained(quantization_config=...) would attach; save_pretrained then writes torchao's
    # safetensors layout and the config that loads it back.
    model.config.quantization_config = config
    model.hf_quantizer = AutoHfQuantizer.from_config(config, pre_quantized=True)
    model.save_pretrained(staging)


def auto_class_of(architecture: str):
    import transformers

    from briskbert.modeling.modeling_briskbert import AUTO_MAP

    auto_name = next(name for name, ref in AUTO_MAP.items() if ref.endswith("." + architecture))
    return getattr(transformers, auto_name)
