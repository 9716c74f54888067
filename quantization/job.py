"""The quantize job: load the fp32 model, build the candidates (fp32 as it is, the fused ONNX graph in fp32 and int8,
torchao int8) in a staged folder, measure each one's agreement with fp32 and its speed on the sample text, keep
the requested one (or, with ``auto``, the fastest within the thresholds), describe the folder
(``quantization.json`` and its README) and move it into place whole."""

from __future__ import annotations

import copy
import importlib.util
import json
import shutil
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from briskbert.errors import SettingError, UserError
from briskbert.extras import TORCHAO_IMPORT_LOGGERS
from briskbert.files import staged_folder
from briskbert.hub_cards.card import QUANTIZATION_FILE
from briskbert.hub_cards.quantized import render_quantized_readme
from briskbert.modeling.export import (
    COMPANION_FILES,
    ONNX_FILE,
    embedding_spec_of,
    export_fused,
    load_for_export,
    longest_input,
    model_outputs,
    onnxruntime_session,
    quiet_loggers,
    read_texts,
    run_onnxruntime,
)
from briskbert.modeling.sentence_transformers_files import copy_sentence_transformers_files
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
    ONNX_FP32_PRECISION,
    QUANTIZED_ONNX_FILE,
    auto_class_of,
    fp32_bytes_of,
    modules_to_keep,
    onnx_precision,
    quantize_onnx,
    quantize_torch,
    torch_precision,
)
from .inference import length_batches
from .request import QuantizeRequest

README_FILE = "README.md"
CANDIDATES = ".candidates"  # inside the staged folder: every candidate's files, until one is kept
FP32_PRECISION = "fp32 (the model as it is: briskbert's unpadded fast path)"
# What quantization.json calls each backend's library, and the name of its weights file.
LIBRARIES = {"fp32": "briskbert", "onnx-fp32": "onnxruntime", "onnx": "onnxruntime", "torch": "torchao"}


def check_output_dir(model_dir: Path, output_dir: Path, overwrite: bool) -> None:
    output_dir, model_dir = Path(output_dir), Path(model_dir)
    if output_dir.exists() and model_dir.resolve() in (output_dir.resolve(), *output_dir.resolve().parents):
        raise SettingError("output_dir", f"{output_dir} holds the source model_dir; choose a new folder.")
    if output_dir.is_dir() and any(output_dir.iterdir()) and not overwrite:
        raise SettingError(
            "output_dir",
            f"{output_dir} already holds files; set overwrite_output_dir to replace them or choose another folder.",
        )


def copy_companions(model_dir: Path, staging: Path, backend: str) -> None:
    names = list(COMPANION_FILES)
    if backend in ("torch", "fp32"):  # still a transformers (and sentence-transformers) folder
        names.append(FACTS_FILE)
        copy_sentence_transformers_files(model_dir, staging)
    for name in names:
        if (Path(model_dir) / name).is_file() and not (staging / name).exists():
            shutil.copyfile(Path(model_dir) / name, staging / name)


def software_versions(backend: str) -> dict[str, str]:
    import importlib.metadata

    extra = {"onnx-fp32": ("onnxruntime", "onnx"), "onnx": ("onnxruntime", "onnx"), "torch": ("torchao",)}
    packages = ("torch", "transformers") + extra.get(backend, ())
    return {name: importlib.metadata.version(name) for name in packages}


def weights_bytes(folder: Path, model_file: str) -> int:
    pattern = model_file + "*" if model_file.endswith(".onnx") else "model*.safetensors"
    return sum(path.stat().st_size for path in folder.glob(pattern))


def prepare(request: QuantizeRequest):
    """The fp32 model, its head and sentence-embedding pooling, the check batches, the timing batches (the same
    sentences one by one, sorted by length) and the labelled batches."""
    check_output_dir(request.model_dir, request.output_dir, request.overwrite_output_dir)
    model, tokenizer, architecture = load_for_export(request.model_dir, request.architecture)
    embedding = embedding_spec_of(request.model_dir, architecture)
    max_length = min(request.max_length, longest_input(model, tokenizer))
    multiple_choice = architecture == "BriskBertForMultipleChoice"
    texts = read_texts(request.text_file, CHECK_BATCHES * (CHECK_ROWS + 1))
    batches = check_batches(tokenizer, texts, max_length, multiple_choice)
    timing = batches
    if not multiple_choice:
        timing = [batch for _, batch in length_batches(tokenizer, texts, TIMING_BATCH, max_length, "pt")]
    labelled = None
    if request.validation_file is not None:
        labelled = labelled_batches(request, model, tokenizer, architecture, max_length)
    return model, architecture, embedding, batches, timing, labelled


@dataclass
class Candidate:
    backend: str
    folder: Path | None  # its files; None: the fp32 model itself, saved only if kept
    run: Callable[[dict], dict]  # a batch through the model as users will run it
    precision: str
    model_file: str


def wanted_backends(request: QuantizeRequest) -> list[str]:
    """fp32 and the requested backend, or for auto every backend whose library is installed."""
    if request.backend != "auto":
        return list(dict.fromkeys(["fp32", request.backend]))
    found = {name: importlib.util.find_spec(name) is not None for name in ("onnxruntime", "torchao")}
    return [name for name in LIBRARIES if name == "fp32" or found[LIBRARIES[name]]]


def onnx_candidate(backend: str, folder: Path, model_file: str, precision: str, output_names) -> Candidate:
    session = onnxruntime_session(folder / model_file, torch.get_num_threads())
    return Candidate(
        backend, folder, lambda batch: run_onnxruntime(session, batch, output_names), precision, model_file
    )


def torch_runner(model, embedding) -> Callable[[dict], dict]:
    def run(batch):
        with torch.inference_mode():
            return model_outputs(model, batch, embedding)

    return run


def build_candidates(root: Path, model, architecture: str, embedding, sample, request, progress):
    """Every wanted backend's model, written under `root`, with the function that runs it."""
    keep = modules_to_keep(model, request.keep_fp32)
    wanted = wanted_backends(request)

    candidates = [
        Candidate("fp32", None, torch_runner(model, embedding), FP32_PRECISION, "model.safetensors")
    ]
    if {"onnx-fp32", "onnx"} & set(wanted):
        progress("Exporting the fused ONNX graph ...")
        output_names, _, scopes = export_fused(model, sample, embedding, root / "onnx-fp32")
        if "onnx-fp32" in wanted:
            candidates.append(
                onnx_candidate("onnx-fp32", root / "onnx-fp32", ONNX_FILE, ONNX_FP32_PRECISION, output_names)
            )
        if "onnx" in wanted:
            progress("Quantizing it with ONNX Runtime ...")
            quantize_onnx(root / "onnx-fp32", root / "onnx", scopes, keep, request)
            precision = onnx_precision(request)
            candidates.append(
                onnx_candidate("onnx", root / "onnx", QUANTIZED_ONNX_FILE, precision, output_names)
            )
    if "torch" in wanted:
        progress(f"Quantizing with torchao ({request.torch_scheme}) ...")
        quantize_torch(copy.deepcopy(model), keep, request, root / "torch")
        with quiet_loggers(*TORCHAO_IMPORT_LOGGERS):  # loaded back from the folder, the way users load it
            loaded = auto_class_of(architecture).from_pretrained(str(root / "torch"), trust_remote_code=True)
        run = torch_runner(loaded.eval(), embedding)
        candidates.append(
            Candidate("torch", root / "torch", run, torch_precision(request), "model.safetensors")
        )
    return candidates


def quality_of(candidate: Candidate, references, batches, labelled, fp32_accuracy, request):
    """(agreements, accuracy, (lowest agreement, passed, accuracy, why not)) of one candidate."""
    agreements = measure_agreement(references, [candidate.run(batch) for batch in batches], batches, request)
    accuracy = accuracy_of(candidate.run, labelled) if labelled else None
    notes = [agreement.shortfall for agreement in agreements if not agreement.passed]
    if accuracy is not None and fp32_accuracy - accuracy > request.max_accuracy_drop:
        notes.append(f"accuracy {accuracy:.4f} < fp32 {fp32_accuracy:.4f} - {request.max_accuracy_drop:g}")
    lowest = min(agreement.mean for agreement in agreements)
    return agreements, accuracy, (lowest, not notes, accuracy, "; ".join(notes))


def keep_candidate(candidate: Candidate, model, request: QuantizeRequest, staging: Path) -> None:
    """Moves the kept candidate's files into the staged folder, with the source's tokenizer and companions."""
    if candidate.folder is None:
        model.save_pretrained(staging)
    else:
        for path in candidate.folder.iterdir():
            path.rename(staging / path.name)
    shutil.rmtree(staging / CANDIDATES, ignore_errors=True)  # absent when fp32 was the only candidate
    copy_companions(request.model_dir, staging, "torch" if candidate.backend in ("fp32", "torch") else "onnx")


# ------------------------------------------------------------------------------------------------- the choice
# Every candidate is timed on the same length-sorted batches of the sample text, interleaved round after round on
# this machine; the fastest within the thresholds is kept. fp32 is always a candidate and always within them, so
# the choice is never slower than fp32 as measured.
TIMING_BATCH, TIMING_ROUNDS = 16, 3


@dataclass(frozen=True)
class SpeedRow:
    """One candidate as measured: its speed on the sample text and how far its outputs are from fp32."""

    backend: str
    tokens_per_second: float  # real (non-padding) tokens of the timing batches per second, median round
    speedup: float  # against the fp32 model on the same batches, median rounds
    speedup_range: tuple[float, float]  # the lowest and highest speed-up of a single round
    rounds: int
    agreement: float  # the lowest mean agreement over the outputs (argmax share or cosine)
    passed: bool  # within min_agreement / min_cosine (and max_accuracy_drop)
    accuracy: float | None = None  # on validation_file, when given
    note: str = ""  # why it was not kept

    def describe(self) -> str:
        accuracy = "" if self.accuracy is None else f", accuracy {self.accuracy:.4f}"
        kept = "" if self.passed else f"  (not kept: {self.note})"
        low, high = self.speedup_range
        return (
            f"{self.backend:<10} {self.tokens_per_second:10,.0f} tokens/s  {self.speedup:5.2f}x fp32 "
            f"({low:.2f}-{high:.2f}x over {self.rounds} rounds)  agreement {self.agreement:.4f}{accuracy}{kept}"
        )


def time_candidates(runs: dict[str, Callable[[dict], object]], batches: list[dict]) -> dict[str, list[float]]:
    """The seconds each candidate takes for all `batches` in each round: a warm-up pass each, then TIMING_ROUNDS
    rounds with every candidate in turn (the order reversed every other round, so drifting load hits all alike)."""
    for run in runs.values():
        run(batches[0])
    seconds: dict[str, list[float]] = {name: [] for name in runs}
    for round_index in range(TIMING_ROUNDS):
        for name in list(runs) if round_index % 2 == 0 else list(runs)[::-1]:
            start = time.perf_counter()
            for batch in batches:
                runs[name](batch)
            seconds[name].append(time.perf_counter() - start)
    return seconds


def speed_table(
    seconds: dict[str, list[float]], real_tokens: int, quality: dict[str, tuple]
) -> list[SpeedRow]:
    """The rows, fastest first, from each backend's seconds per round (the median round's speed, and the spread
    of the speed-up over fp32 in the same round); `quality` maps each backend to (agreement, passed, accuracy,
    note)."""
    rows = []
    for name, rounds in seconds.items():
        speedups = [fp32 / value for fp32, value in zip(seconds["fp32"], rounds)]  # round by round
        median = statistics.median(rounds)
        speedup = statistics.median(seconds["fp32"]) / median
        spread = (min(speedups), max(speedups))
        rows.append(SpeedRow(name, real_tokens / median, speedup, spread, len(rounds), *quality[name]))
    return sorted(rows, key=lambda row: -row.tokens_per_second)


def choose(rows: list[SpeedRow]) -> SpeedRow:
    """The fastest candidate within the thresholds."""
    return max((row for row in rows if row.passed), key=lambda row: row.tokens_per_second)


# ------------------------------------------------------------------------------------------------- the facts
METHODS = {
    "fp32": "none: the fp32 model was the fastest within the thresholds",
    "onnx-fp32": "torch.onnx.export, then ONNX Runtime's transformer optimizer (fused kernels)",
    "onnx": "torch.onnx.export, ONNX Runtime's transformer optimizer, then onnxruntime.quantization.quantize_dynamic",
}


def quantization_facts(
    request, kept, rows, agreements, evaluation, sizes, architecture, embedding, notes
) -> dict:
    """What quantization.json says: what the folder holds, how far it is from fp32, and how fast it ran here.
    `sizes`: (fp32 bytes, the kept model's bytes); `notes`: (what agreement was checked on, what was timed)."""
    chosen = next(row for row in rows if row.backend == kept.backend)
    settings = {"keep_fp32": list(request.keep_fp32)}
    if kept.backend == "onnx":
        settings.update(per_channel=request.per_channel, reduce_range=request.reduce_range)
    if kept.backend == "torch":
        settings.update(torch_scheme=request.torch_scheme)
    precision = kept.precision.split(":")[0].split(" ")[0]
    return {
        "precision": precision,
        "description": kept.precision,
        "backend": LIBRARIES[kept.backend],
        "method": METHODS.get(
            kept.backend, f"torchao ({request.torch_scheme}) through transformers' TorchAoConfig"
        ),
        "settings": settings,
        "model_file": kept.model_file,
        "architecture": architecture,
        "source_model": "/".join(Path(request.model_dir).parts[-2:]),
        "sentence_embedding": None if embedding is None else asdict(embedding),
        "weights_bytes": {"fp32": sizes[0], precision: sizes[1], "ratio": round(sizes[0] / sizes[1], 2)},
        "agreement": {"checked_on": notes[0], "outputs": [asdict(agreement) for agreement in agreements]},
        "evaluation": evaluation,
        "choice": {
            "requested": request.backend,
            "backend": kept.backend,
            "speedup": round(chosen.speedup, 3),
            "speedup_range": [round(value, 3) for value in chosen.speedup_range],
            "rounds": chosen.rounds,
            "tokens_per_second": round(chosen.tokens_per_second, 1),
            "timed_on": notes[1],
            "candidates": [asdict(row) for row in rows],
        },
        "software": software_versions(kept.backend),
    }


def quantize(request: QuantizeRequest, progress: Callable[[str], None] = print) -> dict:
    """Builds the candidates, measures them, and writes the kept one to `request.output_dir` (whole, or not at
    all); returns what its quantization.json says. Raises UserError, nothing written, when the requested backend is
    beyond the thresholds."""
    model, architecture, embedding, batches, timing, labelled = prepare(request)
    with torch.inference_mode():
        references = [model_outputs(model, batch, embedding) for batch in batches]
        fp32_accuracy = accuracy_of(lambda batch: model_outputs(model, batch), labelled) if labelled else None
    examples = CHECK_BATCHES * CHECK_ROWS // (2 if architecture == "BriskBertForMultipleChoice" else 1)
    with staged_folder(request.output_dir) as staging:
        root = staging / CANDIDATES
        candidates = build_candidates(root, model, architecture, embedding, batches[0], request, progress)
        measured = {
            c.backend: quality_of(c, references, batches, labelled, fp32_accuracy, request)
            for c in candidates
        }
        note = measured[request.backend][2][3] if request.backend != "auto" else ""
        if note:  # refused before the timing
            hint = (
                "keep_fp32 with the most sensitive modules, backend auto"
                if request.backend == "onnx"
                else "torch_scheme int8-weight-only or keep_fp32 with the most sensitive modules"
            )
            raise UserError(
                f"the int8 model disagrees with the fp32 one on {examples} text pairs ({note}); nothing was "
                f"written to {request.output_dir}. Try {hint}, or lower the threshold if this is acceptable."
            )
        progress(f"Timing {len(candidates)} candidates on {len(timing)} batches of the sample text ...")
        seconds = time_candidates({c.backend: c.run for c in candidates}, timing)
        real_tokens = sum(int(batch["attention_mask"].sum()) for batch in timing)
        rows = speed_table(seconds, real_tokens, {name: quality[2] for name, quality in measured.items()})
        for row in rows:
            progress("  " + row.describe())
        backend = choose(rows).backend if request.backend == "auto" else request.backend
        agreements, accuracy, _ = measured[backend]
        kept = next(candidate for candidate in candidates if candidate.backend == backend)
        progress(f"Kept {backend}: {kept.precision}.")
        for agreement in agreements:
            progress("  " + agreement.describe())
        keep_candidate(kept, model, request, staging)
        evaluation = []
        if labelled:
            evaluation.append(
                dict(
                    dataset=labelled.name,
                    metric="accuracy",
                    fp32=fp32_accuracy,
                    int8=accuracy,
                    examples=len(labelled.labels),
                )
            )
            progress(f"  accuracy on {labelled.name}: fp32 {fp32_accuracy:.4f}, {backend} {accuracy:.4f}")
        text = Path(request.text_file).name if request.text_file else "the bundled WikiText-2 excerpt"
        notes = (
            f"{examples} padded text pairs from {text}",
            f"{len(timing)} batches of {text} sentences sorted by length, {real_tokens} real tokens, "
            f"{torch.get_num_threads()} threads, median of {rows[0].rounds} interleaved rounds",
        )
        sizes = fp32_bytes_of(model), weights_bytes(staging, kept.model_file)
        facts = quantization_facts(
            request, kept, rows, agreements, evaluation, sizes, architecture, embedding, notes
        )
        (staging / QUANTIZATION_FILE).write_text(json.dumps(facts, indent=2) + "\n", encoding="utf-8")
        readme = render_quantized_readme(
            staging, Path(request.output_dir).name, list(references[0]), auto_class_of(architecture).__name__
        )
        (staging / README_FILE).write_text(readme, encoding="utf-8")
    return facts
