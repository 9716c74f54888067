"""``training_facts.json``, how a model was trained, for its card: :class:`JobFacts` (what a job states) and
:class:`RunFacts` (what the loop measured) in one flat object, ``{"schema_version": 2, <fields of both>}``."""

from __future__ import annotations

import contextlib
import json
import math
import os
import platform
import types
import typing
from dataclasses import asdict, dataclass, field, fields
from importlib.metadata import version
from pathlib import Path

from briskbert.errors import UserError
from briskbert.files import write_atomic
from briskbert.inputs import read_json_object

FACTS_FILE = "training_facts.json"
SCHEMA_VERSION = 2


class FactsError(UserError, ValueError):
    """A ``training_facts.json`` this version cannot read (the message names the file)."""


@dataclass(frozen=True)
class JobFacts:
    """What a training job says about the model it trains: the card's description, metadata and data."""

    task: str | None = None  # e.g. "masked-language-modeling", "text-classification"
    pipeline_tag: str | None = None  # Hub pipeline tag; None: the card derives it from the architecture
    datasets: tuple[str, ...] = ()  # training data: Hub dataset ids or local file names
    train_files: tuple[str, ...] = ()  # the local files the training data was read from, by name
    eval_dataset: str | None = None  # what the metrics were measured on
    eval_split: str | None = None  # the public dataset's split, only when the metrics were measured on it
    eval_dataset_description: str | None = None  # what a local evaluation file is (--validation_card_name)
    base_model: str | None = None  # the Hub id this model was fine-tuned or continued from
    config_preset: str | None = None  # the BriskBertConfig preset a fresh model was built from
    language: str = "en"
    license: str = "apache-2.0"
    library_name: str = "transformers"  # or "sentence-transformers"
    tags: tuple[str, ...] = ()  # extra Hub tags
    limitations: tuple[str, ...] = ()  # extra lines for the card's Limitations section
    model_name: str | None = None
    description: str | None = None
    details: dict = field(default_factory=dict)  # job-specific record (labels, objective, ...): not rendered

    def __post_init__(self):
        for name in ("datasets", "train_files", "tags", "limitations"):  # any sequence of names, as a tuple
            value = getattr(self, name)
            object.__setattr__(self, name, (value,) if isinstance(value, str) else tuple(value or ()))


@dataclass(frozen=True)
class BestMetric:
    """The best evaluation of a run tracked with ``--metric_for_best_model``."""

    name: str
    value: float | None
    step: int | None


@dataclass(frozen=True)
class RunFacts:
    """What the training loop measured (None: not recorded)."""

    metrics: dict = field(default_factory=dict)  # final evaluation {"eval_accuracy": 0.85, ...}
    best_metric: BestMetric | None = None
    train_steps: int | None = None  # optimizer steps
    epochs: float | None = None  # passes over the training data (None: streamed)
    tokens_seen: int | None = None  # non-padding training tokens, all processes
    examples_seen: int | None = None
    global_batch_size: int | None = None  # per device x processes x accumulation
    learning_rate: float | None = None
    lr_scheduler_type: str | None = None
    num_warmup_steps: int | None = None
    weight_decay: float | None = None
    mixed_precision: str | None = None
    seed: int | None = None
    hardware: str | None = None  # e.g. "1 x NVIDIA H100 80GB HBM3", "CPU (2 cores, ...)"
    num_processes: int | None = None
    wall_time_s: float | None = None  # summed over resumed segments
    framework_versions: dict = field(default_factory=dict)  # torch, transformers, ... versions


@dataclass(frozen=True)
class TrainingFacts:
    """Everything ``training_facts.json`` holds; ``run`` is None for a model no loop trained."""

    job: JobFacts = field(default_factory=JobFacts)
    run: RunFacts | None = None

    @classmethod
    def from_json(cls, data: dict, source: str = FACTS_FILE) -> TrainingFacts:
        version = data.get("schema_version")
        if version != SCHEMA_VERSION:
            raise FactsError(
                f"{source} has schema_version {version!r}; this briskbert reads version {SCHEMA_VERSION}: "
                "write it again with this briskbert, or upgrade briskbert to read a newer one."
            )
        job_names, run_names = {f.name for f in fields(JobFacts)}, {f.name for f in fields(RunFacts)}
        unknown = sorted(set(data) - job_names - run_names - {"schema_version"})
        if unknown:
            raise FactsError(
                f"{source}: unknown key(s) {unknown}; job-specific facts belong under 'details'."
            )
        job = JobFacts(**_typed(source, JobFacts, {k: v for k, v in data.items() if k in job_names}))
        run = _typed(source, RunFacts, {k: v for k, v in data.items() if k in run_names})
        return cls(job, RunFacts(**run) if run else None)


def _typed(source: str, kind, values: dict) -> dict:
    """``values`` checked against ``kind``'s field types (a JSON list becomes a tuple, an object a BestMetric)."""
    hints, spelled = typing.get_type_hints(kind), {f.name: f.type for f in fields(kind)}
    checked = {}
    for name, value in values.items():
        hint = hints[name]
        members = typing.get_args(hint) if isinstance(hint, types.UnionType) else [hint]
        allowed = [typing.get_origin(member) or member for member in members]
        if tuple in allowed and isinstance(value, list) and all(isinstance(item, str) for item in value):
            value = tuple(value)
        elif BestMetric in allowed and isinstance(value, dict) and set(value) == {"name", "value", "step"}:
            value = BestMetric(**_typed(source, BestMetric, value))
        allowed += [int] if float in allowed else []
        if isinstance(value, bool) or not isinstance(value, tuple(allowed)):
            raise FactsError(f"{source}: {name!r} must be {spelled[name]}, got {value!r}.")
        checked[name] = value
    return checked


def write_training_facts(folder: str | Path, facts: TrainingFacts) -> Path:
    data = {"schema_version": SCHEMA_VERSION, **asdict(facts.job), **(asdict(facts.run) if facts.run else {})}
    path = Path(folder) / FACTS_FILE
    write_atomic(path, json.dumps(_plain(data), indent=2, sort_keys=True, default=str))
    return path


def _plain(value):
    """JSON-safe: numpy/torch scalars as numbers, NaN and infinities as null (JSON has neither)."""
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def read_training_facts(folder: str | Path) -> TrainingFacts:
    """The facts in ``folder/training_facts.json`` (empty facts when the file is absent)."""
    path = Path(folder) / FACTS_FILE
    if not path.is_file():
        return TrainingFacts()
    data = read_json_object(path, "model_name_or_path", "delete it or train the model again")
    return TrainingFacts.from_json(data, str(path))


def hardware_description(accelerator) -> str:
    """``1 x NVIDIA H100 80GB HBM3``, or ``CPU (2 cores, <model name>)``."""
    import torch

    n = accelerator.num_processes
    if accelerator.device.type == "cuda":
        return f"{n} x {torch.cuda.get_device_name(accelerator.device)}"
    cpu = platform.processor() or platform.machine()
    # Linux names the CPU model only in /proc/cpuinfo; the card should say which CPU a run's speed was measured on
    with contextlib.suppress(OSError):
        names = [
            line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("model name")
        ]
        cpu = names[0].split(":", 1)[1].strip() if names else cpu
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"CPU ({cores} cores, {cpu})" + (f", {n} processes" if n > 1 else "")


def framework_versions() -> dict:
    names = ("torch", "transformers", "accelerate", "datasets", "tokenizers")
    return {name: version(name) for name in names}  # all dependencies of briskbert


def base_model_id(model_name_or_path: str | None) -> str | None:
    """The Hub id a card names as base model: a repo id as given, or what a local folder's facts record."""
    if not model_name_or_path or not Path(model_name_or_path).exists():
        return model_name_or_path
    return read_training_facts(model_name_or_path).job.base_model
