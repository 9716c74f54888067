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

This module is not remote code: it is never copied into model folders.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from torch import nn

from briskbert.errors import UserError
from briskbert.extras import TORCHAO_IMPORT_LOGGERS
from briskbert.modeling.export import (
    COMPANION_FILES,
    SENTENCE_EMBEDDING,
    ExportInputError,
    embedding_spec_of,
    encode_batch,
    export_onnx,
    load_for_export,
    longest_input,
    model_outputs,
    onnxruntime_session,
    quiet_loggers,
    read_texts,
    run_onnxruntime,
)

BACKENDS = ("onnx", "torch")
TORCH_SCHEMES = ("int8-weight-only", "int8-dynamic")
QUANTIZED_ONNX_FILE = "model_quantized.onnx"
QUANTIZATION_FILE = "quantization.json"
README_FILE = "README.md"
FACTS_FILE = "training_facts.json"
# A sentence-transformers folder's own files: they travel with the torch backend, whose folder stays one.
SENTENCE_TRANSFORMERS_FILES = (
    "modules.json",
    "sentence_bert_config.json",
    "config_sentence_transformers.json",
)
# The optional packages each backend needs, and the extra that installs them.
EXTRAS = {"onnx": (("onnx", "onnxscript", "onnxruntime"), "onnx"), "torch": (("torchao",), "torchao")}
CHECK_BATCHES, CHECK_ROWS = 4, 16


class QuantizationRefused(UserError):
    """The int8 model disagrees with the fp32 one beyond the thresholds; nothing was written."""


@dataclass(frozen=True)
class LabelledData:
    """A labelled table (CSV, TSV, JSON lines) on which the fp32 and int8 classifiers are both scored."""

    path: Path
    text_column: str = "sentence"
    text_pair_column: str | None = None
    label_column: str = "label"
    dataset_name: str | None = None  # its public name on the card (e.g. glue/sst2); default: the file name
    batch_size: int = 32


@dataclass(frozen=True)
class QuantizeRequest:
    model_dir: Path
    output_dir: Path
    backend: str = "onnx"
    architecture: str | None = None  # None: the folder's own `architectures` entry
    torch_scheme: str = "int8-weight-only"
    per_channel: bool = True  # onnx: one weight scale per output channel rather than per matrix
    reduce_range: bool = False  # onnx: 7-bit weights, for CPUs without VNNI whose int8 kernels can saturate
    keep_fp32: tuple[str, ...] = ()  # module names (e.g. "classifier", "mlp.down") left in fp32
    text_file: Path | None = None  # None: the bundled WikiText-2 excerpt
    max_length: int = 128
    min_agreement: float = 0.9  # argmax agreement of every logits output
    min_cosine: float = 0.95  # mean cosine similarity of every hidden-state / embedding output
    evaluation: LabelledData | None = None  # a labelled file both models are scored on (sequence classifiers)
    overwrite_output_dir: bool = False

    def __post_init__(self):
        if self.backend not in BACKENDS:
            raise UserError(f"--backend {self.backend!r} is not one of {', '.join(BACKENDS)}.")
        if self.torch_scheme not in TORCH_SCHEMES:
            raise UserError(f"--torch_scheme {self.torch_scheme!r} is not one of {', '.join(TORCH_SCHEMES)}.")
        for flag, value in (("--min_agreement", self.min_agreement), ("--min_cosine", self.min_cosine)):
            if not 0 <= value <= 1:
                raise UserError(f"{flag} must lie in [0, 1], got {value}.")
        if self.max_length < 8:
            raise UserError(f"--max_length must be at least 8 tokens, got {self.max_length}.")


@dataclass(frozen=True)
class Agreement:
    """How closely one output of the int8 model follows the fp32 model over the check examples."""

    output: str
    metric: str  # "argmax agreement" or "cosine similarity"
    mean: float  # the share of matching argmaxes, or the mean cosine
    worst: float  # the lowest per-example value (for argmax agreement: the mean again)
    count: int
    unit: (
        str  # what was counted: "examples" (per-sequence outputs) or "tokens" (per-token outputs, real ones)
    )
    max_abs_difference: float
    threshold: float

    @property
    def passed(self) -> bool:
        return self.mean >= self.threshold

    def describe(self) -> str:
        worst = f", worst {self.worst:.4f}" if self.metric == "cosine similarity" else ""
        return (
            f"{self.output}: {self.metric} {self.mean:.4f}{worst} over {self.count} {self.unit}, "
            f"max abs difference {self.max_abs_difference:.3g} (threshold {self.threshold:g})"
        )


@dataclass
class QuantizationResult:
    output_dir: Path
    backend: str
    architecture: str
    model_file: str
    precision: str
    fp32_bytes: int
    int8_bytes: int
    agreements: list[Agreement] = field(default_factory=list)
    evaluation: list[dict] = field(default_factory=list)  # {"dataset", "metric", "fp32", "int8", "examples"}

    @property
    def size_ratio(self) -> float:
        return self.fp32_bytes / self.int8_bytes


# ------------------------------------------------------------------------------------------------- inputs
def require_extra(backend: str) -> None:
    """One line naming the extra to install when a backend's optional packages are missing."""
    import importlib

    packages, extra = EXTRAS[backend]
    missing = []
    for package in packages:
        try:
            with quiet_torchao_import():
                importlib.import_module(package)
        except ImportError:
            missing.append(package)
    if missing:
        raise UserError(
            f"--backend {backend} needs {', '.join(missing)}: pip install 'briskbert[{extra}]' "
            f"(or pip install {' '.join(missing)})."
        )


def quiet_torchao_import():
    """torchao logs a warning for each CUDA kernel library it cannot load on a CPU-only machine."""
    return quiet_loggers(*TORCHAO_IMPORT_LOGGERS)


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


def modules_to_keep(model: nn.Module, names: tuple[str, ...]) -> set[str]:
    """The Linear / Embedding modules whose dotted path contains one of `names` as a run of whole components
    (``classifier``, ``mlp.down``, ``layers.0``); each name must match at least one."""
    quantizable = [
        path for path, module in model.named_modules() if isinstance(module, (nn.Linear, nn.Embedding))
    ]
    kept = set()
    for name in names:
        wanted = name.strip(".").split(".")
        matched = [
            path
            for path in quantizable
            if any(path.split(".")[i : i + len(wanted)] == wanted for i in range(len(path.split("."))))
        ]
        if not matched:
            raise UserError(
                f"--keep_fp32 {name} names no Linear or Embedding module; module names look like "
                f"{', '.join(quantizable[:3])}, ..., {quantizable[-1]}."
            )
        kept.update(matched)
    return kept


def check_batches(tokenizer, text_file, max_length: int, multiple_choice: bool) -> list[dict]:
    """CHECK_BATCHES padded batches of CHECK_ROWS text pairs each, of lengths from a few tokens to max_length."""
    texts = read_texts(text_file, CHECK_BATCHES * (CHECK_ROWS + 1))
    step = CHECK_ROWS + 1
    return [
        encode_batch(tokenizer, texts[i * step : (i + 1) * step], max_length, multiple_choice)
        for i in range(CHECK_BATCHES)
    ]


# ------------------------------------------------------------------------------------------------- agreement
def agreement_of(
    name: str,
    references: list[torch.Tensor],
    candidates: list[torch.Tensor],
    masks: list[torch.Tensor],
    request: QuantizeRequest,
) -> Agreement:
    """Argmax agreement for logits (over the labels, the vocabulary, or for start/end logits over the real
    tokens), cosine similarity for everything else; per-token outputs are compared at real tokens only."""
    matches, cosines, worst_difference, unit = [], [], 0.0, "examples"
    for reference, candidate, mask in zip(references, candidates, masks):
        reference, candidate = reference.float(), candidate.float()
        per_token = reference.shape[: mask.dim()] == mask.shape
        real = mask.bool()
        if name in ("start_logits", "end_logits"):  # a position over the sequence: padding cannot win
            reference = reference.masked_fill(~real, float("-inf"))
            candidate = candidate.masked_fill(~real, float("-inf"))
            matches.append(reference.argmax(-1) == candidate.argmax(-1))
            worst_difference = max(worst_difference, float((reference - candidate)[real].abs().max()))
            continue
        if per_token:
            reference, candidate, unit = reference[real], candidate[real], "tokens"
        worst_difference = max(worst_difference, float((reference - candidate).abs().max()))
        if "logits" in name:
            matches.append(reference.argmax(-1) == candidate.argmax(-1))
        else:
            cosines.append(nn.functional.cosine_similarity(reference, candidate, dim=-1))
    if matches:
        share = float(torch.cat(matches).float().mean())
        count = int(sum(match.numel() for match in matches))
        return Agreement(
            name, "argmax agreement", share, share, count, unit, worst_difference, request.min_agreement
        )
    cosine = torch.cat(cosines)
    return Agreement(
        name,
        "cosine similarity",
        float(cosine.mean()),
        float(cosine.min()),
        cosine.numel(),
        unit,
        worst_difference,
        request.min_cosine,
    )


def measure_agreement(
    reference_outputs: list[dict], candidate_outputs: list[dict], batches, request
) -> list[Agreement]:
    masks = [batch["attention_mask"] for batch in batches]
    return [
        agreement_of(
            name,
            [outputs[name] for outputs in reference_outputs],
            [outputs[name] for outputs in candidate_outputs],
            masks,
            request,
        )
        for name in reference_outputs[0]
    ]


# ------------------------------------------------------------------------------------------------- onnx backend
def onnx_precision(request: QuantizeRequest) -> str:
    weights = "per output channel" if request.per_channel else "per tensor"
    bits = "7-bit range" if request.reduce_range else "int8"
    return (
        f"int8: weights {bits} ({weights}, symmetric), embedding tables int8, activations uint8 quantized per "
        "tensor at run time"
    )


def graph_nodes_of_modules(onnx_path: Path, modules: set[str]) -> list[str]:
    """The graph nodes traced from the given modules (the exporter records each node's module path); the
    export wraps the model in a module whose attribute is `model`, hence the prefix."""
    import onnx

    wanted = {f"model.{module}" for module in modules}
    nodes = []
    for node in onnx.load(str(onnx_path), load_external_data=False).graph.node:
        scopes = next((p.value for p in node.metadata_props if p.key == "pkg.torch.onnx.name_scopes"), "")
        if any(f"'{module}'" in scopes for module in wanted):
            nodes.append(node.name)
    return nodes


def quantize_onnx(model, sample, embedding, keep: set[str], request: QuantizeRequest, staging: Path):
    """Exports the fp32 graph, quantizes it into `staging`, and returns (fp32 bytes, output names)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    fp32_path = staging / "model_fp32.onnx"
    output_names = export_onnx(model, sample, fp32_path, None, embedding)
    external = (staging / "model_fp32.onnx.data").exists()
    fp32_bytes = sum(path.stat().st_size for path in staging.glob("model_fp32.onnx*"))
    # quantize_dynamic logs "Please consider to run pre-processing" on the root logger: for this graph
    # pre-processing (shape inference, ORT's optimizer) was measured and changed neither speed nor agreement.
    with quiet_loggers("root"):
        quantize_dynamic(
            fp32_path,
            staging / QUANTIZED_ONNX_FILE,
            per_channel=request.per_channel,
            reduce_range=request.reduce_range,
            weight_type=QuantType.QInt8,
            nodes_to_exclude=graph_nodes_of_modules(fp32_path, keep),
            use_external_data_format=external,
        )
    for path in staging.glob("model_fp32.onnx*"):
        path.unlink()
    return fp32_bytes, output_names


# ------------------------------------------------------------------------------------------------- torch backend
def torchao_config(model: nn.Module, keep: set[str], scheme: str):
    """transformers' TorchAoConfig over an explicit module -> torchao config table: every Linear, and the word
    embeddings (int8 per row), except the modules kept in fp32."""
    from transformers import TorchAoConfig

    with quiet_torchao_import():
        from torchao.quantization import (
            FqnToConfig,
            Int8DynamicActivationInt8WeightConfig,
            Int8WeightOnlyConfig,
            IntxWeightOnlyConfig,
            PerAxis,
        )
    linear_config = {
        "int8-weight-only": Int8WeightOnlyConfig(set_inductor_config=False),
        "int8-dynamic": Int8DynamicActivationInt8WeightConfig(set_inductor_config=False),
    }[scheme]
    table = {
        path: linear_config
        for path, module in model.named_modules()
        if isinstance(module, nn.Linear) and path not in keep
    }
    embeddings = next(
        path for path, module in model.named_modules() if module is model.get_input_embeddings()
    )
    if embeddings not in keep:
        table[embeddings] = IntxWeightOnlyConfig(weight_dtype=torch.int8, granularity=PerAxis(0))
    return TorchAoConfig(FqnToConfig(table), include_input_output_embeddings=embeddings not in keep)


def untie_output_embeddings(model: nn.Module) -> None:
    """An MLM decoder sharing the word-embedding matrix gets its own copy: the two are quantized differently
    (a matmul weight per output channel, a lookup table per row) and saved separately."""
    decoder = model.get_output_embeddings()
    if decoder is not None and decoder.weight is model.get_input_embeddings().weight:
        decoder.weight = nn.Parameter(decoder.weight.detach().clone())
        model.config.tie_word_embeddings = False


def fp32_bytes_of(model: nn.Module) -> int:
    """The size of the model's tensors in fp32, shared tensors counted once."""
    seen, total = set(), 0
    for tensor in model.state_dict().values():
        if tensor.data_ptr() in seen:
            continue
        seen.add(tensor.data_ptr())
        total += tensor.numel() * (4 if tensor.is_floating_point() else tensor.element_size())
    return total


def quantize_torch(model: nn.Module, keep: set[str], request: QuantizeRequest, staging: Path) -> int:
    """Quantizes `model` in place with torchao and saves it (safetensors plus the torchao quantization config)
    into `staging`; returns the fp32 size."""
    from transformers.quantizers.auto import AutoHfQuantizer

    fp32_bytes = fp32_bytes_of(model)
    untie_output_embeddings(model)
    config = torchao_config(model, keep, request.torch_scheme)
    with quiet_torchao_import():
        from torchao.quantization import quantize_

        quantize_(model, config.quant_type, filter_fn=None)
    # What from_pretrained(quantization_config=...) would attach; save_pretrained then writes torchao's
    # safetensors layout and the config that loads it back.
    model.config.quantization_config = config
    model.hf_quantizer = AutoHfQuantizer.from_config(config, pre_quantized=True)
    model.save_pretrained(staging)
    return fp32_bytes


def auto_class_of(architecture: str):
    import transformers

    from briskbert.modeling.modeling_briskbert import AUTO_MAP

    auto_name = next(name for name, ref in AUTO_MAP.items() if ref.endswith("." + architecture))
    return getattr(transformers, auto_name)


def torch_precision(request: QuantizeRequest) -> str:
    if request.torch_scheme == "int8-dynamic":
        linear = "int8 weights (per output channel) and int8 activations (per token, at run time)"
    else:
        linear = "int8 weights (per output channel), fp32 activations and arithmetic"
    return f"int8: {linear}; word embeddings int8 (per row)"


# ------------------------------------------------------------------------------------------------- evaluation
@dataclass
class LabelledBatches:
    name: str
    batches: list[dict]
    labels: torch.Tensor


def labelled_batches(
    data: LabelledData, model, tokenizer, architecture: str, max_length: int
) -> LabelledBatches:
    """The labelled file as padded batches and label ids (the model's own label names, or ids 0..K-1)."""
    from briskbert.training.data.task_data import load_table, require_columns

    if architecture != "BriskBertForSequenceClassification" or model.config.problem_type not in (
        None,
        "single_label_classification",
    ):
        raise UserError(
            f"--validation_file scores single-label sequence classifiers; {architecture} "
            f"({model.config.problem_type or 'no problem_type'}) is checked by agreement only: drop the flag."
        )
    table = load_table(str(data.path), flag="--validation_file")
    columns = {"--text_column": data.text_column, "--text_pair_column": data.text_pair_column}
    require_columns(table, {**columns, "--label_column": data.label_column}, f"--validation_file {data.path}")
    label2id = {str(name): int(index) for name, index in model.config.label2id.items()}
    known = {**{str(i): i for i in range(model.config.num_labels)}, **label2id}
    unknown = sorted({str(value) for value in table[data.label_column]} - set(known))
    if unknown:
        raise UserError(
            f"--validation_file {data.path}: labels {', '.join(unknown[:5])} are not the model's "
            f"({', '.join(label2id)} or 0..{model.config.num_labels - 1}); pass --label_column with its labels."
        )
    labels = torch.tensor([known[str(value)] for value in table[data.label_column]])
    texts = table[data.text_column]
    pairs = table[data.text_pair_column] if data.text_pair_column else None
    batches = []
    for start in range(0, len(texts), data.batch_size):
        stop = start + data.batch_size
        encoded = tokenizer(
            texts[start:stop],
            pairs[start:stop] if pairs else None,
            truncation=True,
            max_length=max_length,
            padding=True,
            return_tensors="pt",
        )
        batches.append({name: encoded[name] for name in ("input_ids", "attention_mask", "token_type_ids")})
    return LabelledBatches(data.dataset_name or Path(data.path).name, batches, labels)


def accuracy_of(run: Callable[[dict], dict], data: LabelledBatches) -> float:
    predictions = torch.cat([run(batch)["logits"].argmax(-1) for batch in data.batches])
    return float((predictions == data.labels).float().mean())


# ------------------------------------------------------------------------------------------------- the folder
@contextmanager
def staged_folder(output_dir: Path):
    """A folder beside `output_dir` that replaces it whole once the body succeeds, and is removed otherwise."""
    output_dir = Path(output_dir)
    output_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=output_dir.parent, prefix=f".{output_dir.name}.quantize-"))
    umask = os.umask(0)
    os.umask(umask)
    staging.chmod(0o777 & ~umask)  # mkdtemp's folder is private; the result is an ordinary folder
    try:
        yield staging
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    if output_dir.exists():
        old = Path(tempfile.mkdtemp(dir=output_dir.parent, prefix=f".{output_dir.name}.old-"))
        os.replace(output_dir, old / "folder")
        os.replace(staging, output_dir)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(staging, output_dir)


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


def evaluation_table(facts: dict) -> str:
    if not facts["evaluation"]:
        return ""
    rows = "\n".join(
        f"| {e['dataset']} | {e['metric']} | {e['fp32']:.4f} | {e['int8']:.4f} | "
        f"{100 * (e['int8'] - e['fp32']):+.2f} points |"
        for e in facts["evaluation"]
    )
    return f"""## Evaluation

| data | metric | fp32 | int8 | change |
|---|---|---:|---:|---:|
{rows}

"""


def usage_snippet(facts: dict, folder_name: str) -> str:
    if facts["backend"] == "torchao":
        auto_class = auto_class_of(facts["architecture"]).__name__
        return f"""```python
from transformers import {auto_class}

# needs torchao (pip install torchao); the int8 weights load as they are
model = {auto_class}.from_pretrained("{folder_name}", trust_remote_code=True)
```"""
    return f"""```python
import onnxruntime
from transformers import AutoTokenizer

folder = "{folder_name}"
tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
session = onnxruntime.InferenceSession(f"{{folder}}/{facts["model_file"]}", providers=["CPUExecutionProvider"])
batch = tokenizer(["A warm, funny film.", "Dull."], padding=True, return_tensors="np")
feed = {{graph_input.name: batch[graph_input.name] for graph_input in session.get_inputs()}}
names = [graph_output.name for graph_output in session.get_outputs()]
outputs = dict(zip(names, session.run(None, feed)))
```"""


def plain_readme(facts: dict, folder_name: str, output_names: list[str]) -> str:
    """The README of a folder without a Hub card: what it holds, how far it is from fp32, and how to run it."""
    size = facts["weights_bytes"]
    rows = "\n".join(
        f"| `{a['output']}` | {a['metric']} | {a['mean']:.4f} | {a['worst']:.4f} | {a['max_abs_difference']:.3g} |"
        for a in facts["agreement"]["outputs"]
    )
    pooling = facts["sentence_embedding"]
    embedding_note = (
        f"\n`{SENTENCE_EMBEDDING}` is the sentence embedding ({pooling['pooling']} pooling"
        f"{', unit length' if pooling['normalize'] else ''}), as sentence-transformers computes it.\n"
        if pooling
        else ""
    )
    return f"""---
library_name: {"onnxruntime" if facts["backend"] == "onnxruntime" else "transformers"}
tags:
- briskbert
- {"onnx" if facts["backend"] == "onnxruntime" else "torchao"}
- int8
- quantized
---

# {folder_name}

`{facts["architecture"]}` from `{facts["source_model"]}`, quantized to int8 with {facts["method"]}.

| | |
|---|---|
| file | `{facts["model_file"]}` |
| precision | {facts["description"]} |
| weights | {size["int8"] / 2**20:.1f} MiB (fp32: {size["fp32"] / 2**20:.1f} MiB, {size["ratio"]:.2f}x smaller) |
| outputs | {", ".join(f"`{name}`" for name in output_names)} |
{embedding_note}
{evaluation_table(facts)}## Agreement with the fp32 model

Measured on {facts["agreement"]["checked_on"]}; per-token outputs at real tokens.

| output | metric | mean | worst | max abs difference |
|---|---|---:|---:|---:|
{rows}

## Usage

{usage_snippet(facts, folder_name)}

Written by `briskbert quantize`; `{QUANTIZATION_FILE}` holds these facts as JSON.
"""


def write_description(staging: Path, facts: dict, output_names: list[str], folder_name: str) -> None:
    """quantization.json, and the README: the Hub card (with its Quantization section) for a torch folder,
    the ONNX Runtime one otherwise."""
    (staging / QUANTIZATION_FILE).write_text(json.dumps(facts, indent=2) + "\n", encoding="utf-8")
    readme = None
    if facts["backend"] == "torchao":
        from briskbert.hub_cards.card import CardError, render_card

        try:
            readme = str(render_card(staging, repo_id=f"your-namespace/{folder_name}"))
        except CardError:  # a head the card has no usage snippet for (multiple choice): the plain README
            readme = None
    if readme is None:
        readme = plain_readme(facts, folder_name, output_names)
    (staging / README_FILE).write_text(readme, encoding="utf-8")


# ------------------------------------------------------------------------------------------------- the job
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
    require_extra(request.backend)
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
        write_description(staging, facts, output_names, Path(request.output_dir).name)
    return result
