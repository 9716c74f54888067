"""The quantize job: load the fp32 model, quantize it into a staged folder, measure the agreement, refuse or
describe the folder (``quantization.json`` and its README) and move it into place whole."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import torch

from briskbert.errors import UserError
from briskbert.files import staged_folder
from briskbert.hub_cards.card import QUANTIZATION_FILE
from briskbert.hub_cards.quantized import render_quantized_readme
from briskbert.modeling.export import (
    COMPANION_FILES,
    ExportInputError,
    embedding_spec_of,
    load_for_export,
    longest_input,
    model_outputs,
    onnxruntime_session,
    run_onnxruntime,
)
from briskbert.training.engine.facts import FACTS_FILE

from .agreement import (
    CHECK_BATCHES,
    CHECK_ROWS,
    accuracy_of,
    check_batches,
    labelled_batches,
    measure_agreement,
)
from .backends import (
    QUANTIZED_ONNX_FILE,
    auto_class_of,
    modules_to_keep,
    onnx_precision,
    quantize_onnx,
    quantize_torch,
    quiet_torchao_import,
    torch_precision,
)
from .request import Agreement, QuantizationRefused, QuantizationResult, QuantizeRequest

README_FILE = "README.md"
# A sentence-transformers folder's own files: they travel with the torch backend, whose folder stays one.
SENTENCE_TRANSFORMERS_FILES = (
    "modules.json",
    "sentence_bert_config.json",
    "config_sentence_transformers.json",
)


def check_output_dir(model_dir: Path, output_dir: Path, overwrite: bool) -> None:
    output_dir, model_dir = Path(output_dir), Path(model_dir)
    if output_dir.exists() and not output_dir.is_dir():
        raise UserError(f"--output_dir {output_dir} is a file; pass a folder.")
    if output_dir.exists() and model_dir.resolve() in (output_dir.resolve(), *output_dir.resolve().parents):
        raise UserError(f"--output_dir {output_dir} holds the source --model_dir; choose a new folder.")
    if output_dir.is_dir() and any(output_dir.iterdir()) and not overwrite:
        raise UserError(
            f"--output_dir {output_dir} already holds files; pass --overwrite_output_dir to replace them or "
            "choose another folder."
        )


def copy_companions(model_dir: Path, staging: Path, backend: str) -> None:
    names = list(COMPANION_FILES)
    if backend == "torch":
        names += [*SENTENCE_TRANSFORMERS_FILES, FACTS_FILE]
        modules_file = Path(model_dir) / "modules.json"
        if modules_file.is_file():  # the pooling and normalisation folders modules.json names
            for module in json.loads(modules_file.read_text(encoding="utf-8")):
                if module.get("path") and (Path(model_dir) / module["path"]).is_dir():
                    shutil.copytree(Path(model_dir) / module["path"], staging / module["path"])
    for name in names:
        if (Path(model_dir) / name).is_file() and not (staging / name).exists():
            shutil.copyfile(Path(model_dir) / name, staging / name)


def software_versions(backend: str) -> dict[str, str]:
    import importlib.metadata

    packages = ("torch", "transformers") + (("onnxruntime", "onnx") if backend == "onnx" else ("torchao",))
    return {name: importlib.metadata.version(name) for name in packages}


def quantization_facts(
    result: QuantizationResult, request: QuantizeRequest, embedding, checked_on: str
) -> dict:
    """What quantization.json says: enough to know what the folder holds and how far it is from fp32."""
    method = (
        "onnxruntime.quantization.quantize_dynamic"
        if request.backend == "onnx"
        else f"torchao ({request.torch_scheme}) through transformers' TorchAoConfig"
    )
    return {
        "precision": "int8",
        "description": result.precision,
        "backend": "onnxruntime" if request.backend == "onnx" else "torchao",
        "method": method,
        "settings": {
            "per_channel": request.per_channel,
            "reduce_range": request.reduce_range,
            "keep_fp32": list(request.keep_fp32),
        }
        if request.backend == "onnx"
        else {"torch_scheme": request.torch_scheme, "keep_fp32": list(request.keep_fp32)},
        "model_file": result.model_file,
        "architecture": result.architecture,
        "source_model": "/".join(Path(request.model_dir).parts[-2:]),
        "sentence_embedding": None if embedding is None else asdict(embedding),
        "weights_bytes": {
            "fp32": result.fp32_bytes,
            "int8": result.int8_bytes,
            "ratio": round(result.size_ratio, 2),
        },
        "agreement": {
            "checked_on": checked_on,
            "outputs": [asdict(agreement) for agreement in result.agreements],
        },
        "evaluation": result.evaluation,
        "software": software_versions(request.backend),
    }


def weights_bytes(staging: Path, backend: str) -> tuple[str, int]:
    pattern = QUANTIZED_ONNX_FILE + "*" if backend == "onnx" else "model*.safetensors"
    files = sorted(staging.glob(pattern))
    return files[0].name, sum(path.stat().st_size for path in files)


def refuse(failed: list[Agreement], request: QuantizeRequest, examples: int) -> QuantizationRefused:
    what = "; ".join(
        f"{a.output} {a.metric} {a.mean:.6g} < {'--min_agreement' if 'argmax' in a.metric else '--min_cosine'} "
        f"{a.threshold:g}"
        for a in failed
    )
    hint = (
        "--keep_fp32 with the most sensitive modules, or --backend torch"
        if request.backend == "onnx"
        else "--torch_scheme int8-weight-only or --keep_fp32 with the most sensitive modules"
    )
    return QuantizationRefused(
        f"the int8 model disagrees with the fp32 one on {examples} text pairs ({what}); nothing was written to "
        f"{request.output_dir}. Try {hint}, or lower the threshold if this is acceptable."
    )


def prepare(request: QuantizeRequest):
    """The fp32 model, its tokenizer and head, its sentence-embedding pooling, and the check batches."""
    check_output_dir(request.model_dir, request.output_dir, request.overwrite_output_dir)
    try:
        model, tokenizer, architecture = load_for_export(request.model_dir, request.architecture)
        embedding = embedding_spec_of(request.model_dir, architecture)
        max_length = min(request.max_length, longest_input(model, tokenizer))
        multiple_choice = architecture == "BriskBertForMultipleChoice"
        batches = check_batches(tokenizer, request.text_file, max_length, multiple_choice)
    except ExportInputError as error:
        raise UserError(str(error)) from error
    labelled = None
    if request.evaluation is not None:
        labelled = labelled_batches(request.evaluation, model, tokenizer, architecture, max_length)
    return model, architecture, embedding, batches, labelled


def quantize_into(staging: Path, model, architecture: str, embedding, batches, request: QuantizeRequest):
    """Writes the int8 model into `staging`; returns (fp32 bytes, output names, a function running a batch
    through the int8 model as users will run it, its precision)."""
    keep = modules_to_keep(model, request.keep_fp32)
    if request.backend == "onnx":
        fp32_bytes, output_names = quantize_onnx(model, batches[0], embedding, keep, request, staging)
        session = onnxruntime_session(staging / QUANTIZED_ONNX_FILE)
        return (
            fp32_bytes,
            output_names,
            lambda batch: run_onnxruntime(session, batch, output_names),
            onnx_precision(request),
        )
    fp32_bytes = quantize_torch(model, keep, request, staging)
    with quiet_torchao_import():  # loaded back from the folder, the way users load it
        loaded = auto_class_of(architecture).from_pretrained(str(staging), trust_remote_code=True).eval()

    def run(batch):
        with torch.inference_mode():
            return model_outputs(loaded, batch, embedding)

    return fp32_bytes, list(run(batches[0])), run, torch_precision(request)


def quantize(request: QuantizeRequest, progress: Callable[[str], None] = print) -> QuantizationResult:
    """Quantizes `request.model_dir` into `request.output_dir` (whole, or not at all) and measures how closely
    the int8 model follows the fp32 one; raises QuantizationRefused below the thresholds."""
    model, architecture, embedding, batches, labelled = prepare(request)
    with torch.inference_mode():  # before quantization: the torch backend quantizes this model in place
        references = [model_outputs(model, batch, embedding) for batch in batches]
        fp32_accuracy = accuracy_of(lambda batch: model_outputs(model, batch), labelled) if labelled else None
    with staged_folder(request.output_dir) as staging:
        method = "ONNX Runtime" if request.backend == "onnx" else f"torchao ({request.torch_scheme})"
        progress(f"Quantizing {architecture} with {method} ...")
        fp32_bytes, output_names, run, precision = quantize_into(
            staging, model, architecture, embedding, batches, request
        )
        model_file, int8_bytes = weights_bytes(staging, request.backend)
        result = QuantizationResult(
            Path(request.output_dir),
            request.backend,
            architecture,
            model_file,
            precision,
            fp32_bytes,
            int8_bytes,
        )
        result.agreements = measure_agreement(references, [run(batch) for batch in batches], batches, request)
        examples = CHECK_BATCHES * CHECK_ROWS // (2 if architecture == "BriskBertForMultipleChoice" else 1)
        for agreement in result.agreements:
            progress("  " + agreement.describe())
        failed = [agreement for agreement in result.agreements if not agreement.passed]
        if failed:
            raise refuse(failed, request, examples)
        if labelled:
            result.evaluation = [
                dict(
                    dataset=labelled.name,
                    metric="accuracy",
                    fp32=fp32_accuracy,
                    int8=accuracy_of(run, labelled),
                    examples=len(labelled.labels),
                )
            ]
            progress(
                f"  accuracy on {labelled.name}: fp32 {fp32_accuracy:.4f}, int8 {result.evaluation[0]['int8']:.4f}"
            )
        copy_companions(request.model_dir, staging, request.backend)
        text = Path(request.text_file).name if request.text_file else "the bundled WikiText-2 excerpt"
        facts = quantization_facts(result, request, embedding, f"{examples} padded text pairs from {text}")
        (staging / QUANTIZATION_FILE).write_text(json.dumps(facts, indent=2) + "\n", encoding="utf-8")
        readme = render_quantized_readme(
            staging, Path(request.output_dir).name, output_names, auto_class_of(architecture).__name__
        )
        (staging / README_FILE).write_text(readme, encoding="utf-8")
    return result
