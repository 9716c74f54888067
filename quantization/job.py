"""The quantize job: build every candidate in a staged folder, measure its agreement with fp32 and its speed here,
keep the requested one (``auto``: the fastest within the thresholds), describe it (``quantization.json``, README)."""

from __future__ import annotations

import copy
import importlib.metadata
import json
import shutil
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from torch import nn

from briskbert.errors import SettingError, UserError
from briskbert.extras import is_installed
from briskbert.files import staged_folder
from briskbert.hub_cards.card import QUANTIZATION_FILE
from briskbert.hub_cards.quantized import render_quantized_readme
from briskbert.modeling import export
from briskbert.modeling.sentence_transformers_files import copy_sentence_transformers_files
from briskbert.training.engine.facts import FACTS_FILE

from . import backends
from .inference import length_batches
from .request import QuantizeRequest

CANDIDATES = ".candidates"  # inside the staged folder: every candidate's files, until one is kept
# Per backend: the library quantization.json names, and how the kept model was made.
FUSED = "torch.onnx.export, then ONNX Runtime's transformer optimizer (fused kernels)"
BACKENDS = {
    "fp32": ("briskbert", "none: the fp32 model was the fastest within the thresholds"),
    "onnx-fp32": ("onnxruntime", FUSED),
    "onnx": ("onnxruntime", f"{FUSED}, then onnxruntime.quantization.quantize_dynamic"),
    "torch": ("torchao", "torchao ({scheme}) through transformers' TorchAoConfig"),
}
# fp32 is always a candidate and within the thresholds: the choice is never slower than fp32 as measured.
TIMING_BATCH, TIMING_ROUNDS = 16, 3
# Agreement with fp32 is measured on CHECK_BATCHES padded batches of CHECK_ROWS text pairs.
CHECK_BATCHES, CHECK_ROWS = 4, 16


def agreement_of(name: str, references, candidates, masks, request: QuantizeRequest) -> dict:
    """How closely one output follows fp32: argmax agreement for logits (start/end logits over the real tokens),
    cosine similarity for everything else; per-token outputs are compared at real tokens only."""
    logits, values, difference, unit = "logits" in name, [], 0.0, "examples"
    for reference, candidate, mask in zip(references, candidates, masks):
        reference, candidate, real = reference.float(), candidate.float(), mask.bool()
        if name in ("start_logits", "end_logits"):  # a position over the sequence: padding cannot win
            reference, candidate = reference.masked_fill(~real, -1e9), candidate.masked_fill(~real, -1e9)
        elif reference.shape[: real.dim()] == real.shape:
            reference, candidate, unit = reference[real], candidate[real], "tokens"
        difference = max(difference, float((reference - candidate).abs().max()))
        if logits:
            values.append((reference.argmax(-1) == candidate.argmax(-1)).float())
        else:
            values.append(nn.functional.cosine_similarity(reference, candidate, dim=-1))
    values = torch.cat(values)
    return dict(
        output=name,
        metric="argmax agreement" if logits else "cosine similarity",
        mean=float(values.mean()),
        worst=float(values.mean() if logits else values.min()),  # an argmax agreement's worst is its mean
        count=values.numel(),
        unit=unit,
        max_abs_difference=difference,
        threshold=request.min_agreement if logits else request.min_cosine,
    )


def labelled_batches(request: QuantizeRequest, model, tokenizer, architecture: str, max_length: int):
    """The validation file as padded batches and their label ids (the model's own label names, or 0..K-1)."""
    from briskbert.training.data.task_data import load_table, require_columns

    config = model.config
    single_label = config.problem_type in (None, "single_label_classification")
    if architecture != "BriskBertForSequenceClassification" or not single_label:
        raise SettingError(
            "validation_file",
            f"scores single-label sequence classifiers; {architecture} "
            f"({config.problem_type or 'no problem_type'}) is checked by agreement only: drop it.",
        )
    path = request.validation_file
    table = load_table(str(path), "validation_file")
    columns = {name: getattr(request, name) for name in ("text_column", "text_pair_column", "label_column")}
    require_columns(table, columns, f"validation_file {path}")
    # from id2label: transformers leaves label2id None when a config is given id2label alone
    label2id = {str(name): int(index) for index, name in (config.id2label or {}).items()}
    known = {**{str(i): i for i in range(config.num_labels)}, **label2id}
    unknown = sorted({str(value) for value in table[request.label_column]} - set(known))
    if unknown:
        raise SettingError(
            "validation_file",
            f"{path}: labels {', '.join(unknown[:5])} are not the model's "
            f"({', '.join(label2id)} or 0..{config.num_labels - 1}); give a label_column with its labels.",
        )
    labels = torch.tensor([known[str(value)] for value in table[request.label_column]])
    pairs = list(table[request.text_pair_column]) if request.text_pair_column else None
    batches = length_batches(tokenizer, list(table[request.text_column]), 32, max_length, "pt", pairs)
    order = [index for indices, _ in batches for index in indices]
    return [batch for _, batch in batches], labels[order]


def accuracy_of(run, labelled) -> float:
    """The share of `labelled` (batches, labels) whose argmax of `run(batch)["logits"]` is the label."""
    batches, labels = labelled
    predictions = torch.cat([run(batch)["logits"].argmax(-1) for batch in batches])
    return float((predictions == labels).float().mean())


@dataclass
class Candidate:
    backend: str
    folder: Path | None  # its files; None: the fp32 model itself, saved only if kept
    run: Callable[[dict], dict]  # a batch through the model as users will run it
    model_file: str
    agreements: list = field(default_factory=list)
    accuracy: float | None = None  # on validation_file, when given
    note: str = ""  # why it is beyond the thresholds ("" when within)


def wanted_backends(request: QuantizeRequest) -> list[str]:
    """fp32 and the requested backend, or for auto every backend whose library is installed."""
    if request.backend != "auto":
        return list(dict.fromkeys(["fp32", request.backend]))
    return [name for name, (library, _) in BACKENDS.items() if name == "fp32" or is_installed(library)]


def torch_runner(model, embedding) -> Callable[[dict], dict]:
    return torch.inference_mode()(lambda batch: export.model_outputs(model, batch, embedding))


def onnx_runner(path: Path, output_names) -> Callable[[dict], dict]:
    session = export.onnxruntime_session(path, torch.get_num_threads())
    return lambda batch: export.run_onnxruntime(session, batch, output_names)


def build_candidates(root: Path, model, architecture: str, embedding, sample, request) -> list[Candidate]:
    """Every wanted backend's model, written under `root`, with the function that runs it."""
    keep = backends.modules_to_keep(model, request.keep_fp32)
    wanted = wanted_backends(request)
    candidates = [Candidate("fp32", None, torch_runner(model, embedding), "model.safetensors")]
    if {"onnx-fp32", "onnx"} & set(wanted):
        print("Exporting the fused ONNX graph ...")
        output_names, _, scopes = export.export_onnx(model, sample, root / "onnx-fp32", embedding)
        if "onnx-fp32" in wanted:
            run = onnx_runner(root / "onnx-fp32" / export.ONNX_FILE, output_names)
            candidates.append(Candidate("onnx-fp32", root / "onnx-fp32", run, export.ONNX_FILE))
        if "onnx" in wanted:
            print("Quantizing it with ONNX Runtime ...")
            backends.quantize_onnx(root / "onnx-fp32", root / "onnx", scopes, keep, request)
            run = onnx_runner(root / "onnx" / backends.QUANTIZED_ONNX_FILE, output_names)
            candidates.append(Candidate("onnx", root / "onnx", run, backends.QUANTIZED_ONNX_FILE))
    if "torch" in wanted:
        print(f"Quantizing with torchao ({request.torch_scheme}) ...")
        backends.quantize_torch(copy.deepcopy(model), keep, request, root / "torch")
        # Loaded back from the folder, the way users load it.
        loaded = backends.auto_class_of(architecture).from_pretrained(
            str(root / "torch"), trust_remote_code=True
        )
        candidates.append(
            Candidate("torch", root / "torch", torch_runner(loaded.eval(), embedding), "model.safetensors")
        )
    return candidates


def measure(candidate: Candidate, references, batches, labelled, fp32: Candidate, request) -> None:
    """Sets the candidate's agreement with fp32 on the check batches, its accuracy, and why it fails, if it does."""
    masks = [batch["attention_mask"] for batch in batches]
    outputs = [candidate.run(batch) for batch in batches]
    candidate.agreements = [
        agreement_of(name, [r[name] for r in references], [o[name] for o in outputs], masks, request)
        for name in references[0]
    ]
    notes = [
        f"{a['output']} {a['metric']} {a['mean']:.6g} < "
        f"{'min_agreement' if 'logits' in a['output'] else 'min_cosine'} {a['threshold']:g}"
        for a in candidate.agreements
        if a["mean"] < a["threshold"]
    ]
    if labelled:
        candidate.accuracy = accuracy_of(candidate.run, labelled)
        if fp32.accuracy - candidate.accuracy > request.max_accuracy_drop:
            notes.append(
                f"accuracy {candidate.accuracy:.4f} < fp32 {fp32.accuracy:.4f} - {request.max_accuracy_drop:g}"
            )
    candidate.note = "; ".join(notes)


def time_candidates(runs: dict[str, Callable[[dict], object]], batches: list[dict]) -> dict[str, list[float]]:
    """Seconds per round for each candidate, after a warm-up; the order flips every round so drifting load hits
    all alike."""
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


def speed_table(candidates, seconds: dict[str, list[float]], real_tokens: int) -> list[dict]:
    """One row per candidate, fastest first (median rounds; `speedup_range`: the single rounds' extremes)."""
    rows = []
    for candidate in candidates:
        rounds = seconds[candidate.backend]
        speedups = [fp32 / value for fp32, value in zip(seconds["fp32"], rounds)]  # round by round
        rows.append(
            dict(
                backend=candidate.backend,
                tokens_per_second=real_tokens / statistics.median(rounds),
                speedup=statistics.median(seconds["fp32"]) / statistics.median(rounds),
                speedup_range=[min(speedups), max(speedups)],
                rounds=len(rounds),
                agreement=min(agreement["mean"] for agreement in candidate.agreements),
                passed=not candidate.note,
                accuracy=candidate.accuracy,
                note=candidate.note,
            )
        )
    return sorted(rows, key=lambda row: -row["tokens_per_second"])


def choose(rows: list[dict]) -> dict:
    """The fastest row within the thresholds (`rows` are fastest first)."""
    return next(row for row in rows if row["passed"])


def keep(candidate: Candidate, model, model_dir: Path, staging: Path) -> None:
    """Moves the kept candidate's files into the staged folder, over the source's tokenizer and companions."""
    companions = export.COMPANION_FILES
    if candidate.backend in ("torch", "fp32"):  # still a transformers (and sentence-transformers) folder
        companions = (*companions, FACTS_FILE)
        copy_sentence_transformers_files(model_dir, staging)
    export.copy_files(model_dir, staging, companions)
    if candidate.folder is None:
        model.save_pretrained(staging)
    else:
        for path in candidate.folder.iterdir():
            path.rename(staging / path.name)
    shutil.rmtree(staging / CANDIDATES, ignore_errors=True)  # absent when fp32 was the only candidate


def quantization_facts(
    request, kept: Candidate, rows, architecture, embedding, evaluation, sizes, notes
) -> dict:
    """What quantization.json says. `sizes`: (fp32 bytes, the kept model's bytes); `notes`: (what agreement was
    checked on, what was timed)."""
    chosen = next(row for row in rows if row["backend"] == kept.backend)
    settings = {"keep_fp32": list(request.keep_fp32)}
    if kept.backend == "onnx":
        settings.update(per_channel=request.per_channel, reduce_range=request.reduce_range)
    if kept.backend == "torch":
        settings.update(torch_scheme=request.torch_scheme)
    description = backends.precision(kept.backend, request)
    precision = description.split(":")[0].split(" ")[0]
    library, method = BACKENDS[kept.backend]
    extra = {"onnxruntime": ["onnxruntime", "onnx"], "torchao": ["torchao"]}.get(library, [])
    return {
        "precision": precision,
        "description": description,
        "backend": library,
        "method": method.format(scheme=request.torch_scheme),
        "settings": settings,
        "model_file": kept.model_file,
        "architecture": architecture,
        "source_model": "/".join(Path(request.model_dir).parts[-2:]),
        "sentence_embedding": None if embedding is None else asdict(embedding),
        "weights_bytes": {"fp32": sizes[0], precision: sizes[1], "ratio": round(sizes[0] / sizes[1], 2)},
        "agreement": {"checked_on": notes[0], "outputs": kept.agreements},
        "evaluation": evaluation,
        "choice": {
            "requested": request.backend,
            "backend": kept.backend,
            "speedup": round(chosen["speedup"], 3),
            "speedup_range": [round(value, 3) for value in chosen["speedup_range"]],
            "rounds": chosen["rounds"],
            "tokens_per_second": round(chosen["tokens_per_second"], 1),
            "timed_on": notes[1],
            "candidates": rows,
        },
        "software": {name: importlib.metadata.version(name) for name in ["torch", "transformers", *extra]},
    }


def quantize(request: QuantizeRequest) -> dict:
    """Writes the kept candidate to `request.output_dir` whole; returns its quantization.json. A requested backend
    beyond the thresholds raises UserError with nothing written."""
    model, tokenizer, architecture, embedding = export.load_for_export(
        request.model_dir, request.architecture
    )
    max_length = min(request.max_length, tokenizer.model_max_length)
    multiple_choice = architecture == "BriskBertForMultipleChoice"
    texts = export.read_texts(request.text_file, CHECK_BATCHES * (CHECK_ROWS + 1))
    step = CHECK_ROWS + 1  # pairs of consecutive sentences, of lengths from a few tokens to max_length
    batches = [
        export.encode_batch(tokenizer, texts[i * step : (i + 1) * step], max_length, multiple_choice)
        for i in range(CHECK_BATCHES)
    ]
    timing = batches  # the same sentences one by one, sorted by length (choices cannot be)
    if not multiple_choice:
        timing = [batch for _, batch in length_batches(tokenizer, texts, TIMING_BATCH, max_length, "pt")]
    labelled = None
    if request.validation_file is not None:
        labelled = labelled_batches(request, model, tokenizer, architecture, max_length)
    examples = CHECK_BATCHES * CHECK_ROWS // (2 if multiple_choice else 1)
    with staged_folder(request.output_dir) as staging:
        candidates = build_candidates(
            staging / CANDIDATES, model, architecture, embedding, batches[0], request
        )
        fp32 = candidates[0]
        references = [fp32.run(batch) for batch in batches]
        for candidate in candidates:  # fp32 first: the others' accuracy is compared with its
            measure(candidate, references, batches, labelled, fp32, request)
        requested = {candidate.backend: candidate for candidate in candidates}.get(request.backend)
        if requested and requested.note:  # refused before the timing
            scheme = "" if request.backend == "onnx" else "torch_scheme int8-weight-only, "
            raise UserError(
                f"the int8 model disagrees with the fp32 one on {examples} text pairs ({requested.note}); nothing "
                f"was written to {request.output_dir}. Try {scheme}keep_fp32 with the most sensitive modules, "
                "backend auto, or lower the threshold if this is acceptable."
            )
        print(f"Timing {len(candidates)} candidates on {len(timing)} batches of the sample text ...")
        seconds = time_candidates({c.backend: c.run for c in candidates}, timing)
        real_tokens = sum(int(batch["attention_mask"].sum()) for batch in timing)
        rows = speed_table(candidates, seconds, real_tokens)
        for row in rows:
            accuracy = "" if row["accuracy"] is None else f", accuracy {row['accuracy']:.4f}"
            refused = "" if row["passed"] else f"  (not kept: {row['note']})"
            low, high = row["speedup_range"]
            print(
                f"  {row['backend']:<10} {row['tokens_per_second']:10,.0f} tokens/s  {row['speedup']:5.2f}x fp32 "
                f"({low:.2f}-{high:.2f}x over {row['rounds']} rounds)  agreement {row['agreement']:.4f}{accuracy}{refused}"
            )
        backend = choose(rows)["backend"] if request.backend == "auto" else request.backend
        kept = next(candidate for candidate in candidates if candidate.backend == backend)
        print(f"Kept {backend}: {backends.precision(backend, request)}.")
        keep(kept, model, request.model_dir, staging)
        evaluation = []
        if labelled:
            name = request.dataset_card_name or Path(request.validation_file).name
            scores = dict(fp32=fp32.accuracy, int8=kept.accuracy, examples=len(labelled[1]))
            evaluation.append(dict(dataset=name, metric="accuracy", **scores))
        text = Path(request.text_file).name if request.text_file else "the bundled WikiText-2 excerpt"
        notes = (
            f"{examples} padded text pairs from {text}",
            f"{len(timing)} batches of {text} sentences sorted by length, {real_tokens} real tokens, "
            f"{torch.get_num_threads()} threads, median of {rows[0]['rounds']} interleaved rounds",
        )
        pattern = kept.model_file + "*" if kept.model_file.endswith(".onnx") else "model*.safetensors"
        sizes = model.get_memory_footprint(), sum(path.stat().st_size for path in staging.glob(pattern))
        facts = quantization_facts(request, kept, rows, architecture, embedding, evaluation, sizes, notes)
        (staging / QUANTIZATION_FILE).write_text(json.dumps(facts, indent=2) + "\n", encoding="utf-8")
        auto_class = backends.auto_class_of(architecture).__name__
        readme = render_quantized_readme(
            staging, Path(request.output_dir).name, list(references[0]), auto_class
        )
        (staging / "README.md").write_text(readme, encoding="utf-8")
    return facts
