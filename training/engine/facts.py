"""``training_facts.json``: what a model card says about how a model was trained, as typed dataclasses.

:class:`TrainingFacts` has two parts: the :class:`JobFacts` a training job states about itself (its
:meth:`Task.facts <briskbert.training.engine.task.Task.facts>`: task, data, base model, card metadata,
job-specific details) and the :class:`RunFacts` the training loop measured (steps, tokens, hardware,
final metrics, ...). The loop writes them into the final model folder; the model card
(:mod:`briskbert.hub_cards.card`) reads them back with :func:`read_training_facts`.

The file is one flat JSON object (so ``json.load(...)["pipeline_tag"]`` keeps working for scripts)::

    {"schema_version": 2, <JobFacts fields>, "details": {...}, <RunFacts fields>}

Versions: a file without ``schema_version`` is version 1, the untyped dict earlier releases (and
``briskbert convert``) wrote; it is migrated on reading: each key that names a field of this version
fills that field, every other key moves into ``details``. A file of a newer version than this code
knows, or one whose values have the wrong type, is refused with a :class:`FactsError` naming the file.
"""

from __future__ import annotations

import json
import math
import os
import platform
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from briskbert.errors import UserError

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

    @classmethod
    def from_dict(cls, values: dict, source: str = "the job's card facts") -> JobFacts:
        """Facts given as a dict of version-1 keys: keys naming a field fill it, the others go to
        ``details`` (for jobs that still describe themselves with a dict)."""
        return TrainingFacts.from_json(
            {key: value for key, value in values.items() if value is not None}, source
        ).job


@dataclass(frozen=True)
class BestMetric:
    """The best evaluation of a run tracked with ``--metric_for_best_model``."""

    name: str
    value: float | None
    step: int | None


@dataclass(frozen=True)
class RunFacts:
    """What the training loop measured (None: not recorded, e.g. in a migrated version-1 file)."""

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

    def to_json(self) -> dict:
        """The flat JSON object written to the file (see the module docstring)."""
        data = {"schema_version": SCHEMA_VERSION, **asdict(self.job)}
        if self.run is not None:
            data.update(asdict(self.run))
        return data

    @classmethod
    def from_json(cls, data: dict, source: str = FACTS_FILE) -> TrainingFacts:
        """Facts from a file's JSON object, migrated from version 1; ``source`` names the file in errors."""
        if not isinstance(data, dict):
            raise FactsError(f"{source}: expected a JSON object, got {type(data).__name__}.")
        version = data.get("schema_version", 1)
        if version not in (1, SCHEMA_VERSION):
            raise FactsError(
                f"{source} has schema_version {version!r}; this briskbert reads versions 1 and "
                f"{SCHEMA_VERSION}: upgrade briskbert to read it."
            )
        values = {key: value for key, value in data.items() if key != "schema_version"}
        job_names, run_names = _names(JobFacts) - {"details"}, _names(RunFacts)
        unknown = sorted(set(values) - job_names - run_names - {"details"})
        if unknown and version == SCHEMA_VERSION:
            raise FactsError(
                f"{source}: unknown key(s) {unknown} for schema_version {SCHEMA_VERSION}; job-specific "
                "facts belong under 'details'."
            )
        details = values.get("details", {})
        if not isinstance(details, dict):
            raise FactsError(f"{source}: 'details' must be an object, got {details!r}.")
        details = {**{key: values[key] for key in unknown}, **details}  # version 1: extra keys -> details
        job = JobFacts(
            **{key: _checked(source, key, values[key]) for key in job_names & set(values)}, details=details
        )
        run = None
        if run_names & set(values):
            run_values = {key: _checked(source, key, values[key]) for key in run_names & set(values)}
            best = run_values.get("best_metric")
            if best is not None:
                run_values["best_metric"] = BestMetric(best.get("name"), best.get("value"), best.get("step"))
            run = RunFacts(**run_values)
        return cls(job, run)


def _names(kind) -> set[str]:
    return {f.name for f in fields(kind)}


def _checked(source: str, key: str, value):
    """``value`` as its field's type says (lists become tuples); another type raises :class:`FactsError`."""
    kind = _FIELD_TYPES[key].replace(" | None", "")
    if value is None:
        return {"tuple[str, ...]": (), "dict": {}}.get(kind)
    if kind == "tuple[str, ...]":
        value = [value] if isinstance(value, str) else value
        if isinstance(value, list) and all(isinstance(item, str) for item in value):
            return tuple(value)
    elif kind == "int":
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif kind == "float":
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return value
    elif isinstance(value, {"str": str}.get(kind, dict)):  # str, or an object (dict, BestMetric)
        return value
    expected = {
        "tuple[str, ...]": "a list of strings",
        "int": "an integer",
        "float": "a number",
        "str": "a string",
    }
    raise FactsError(f"{source}: {key!r} must be {expected.get(kind, 'an object')}, got {value!r}.")


# Field name -> its annotation (``from __future__ import annotations`` keeps them as text).
_FIELD_TYPES = {f.name: f.type for kind in (JobFacts, RunFacts) for f in fields(kind)}


def write_training_facts(folder: str | Path, facts: TrainingFacts) -> Path:
    path = Path(folder) / FACTS_FILE
    path.write_text(json.dumps(_plain(facts.to_json()), indent=2, sort_keys=True, default=str))
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
    """The facts in ``folder/training_facts.json`` (migrated; empty facts when the file is absent)."""
    path = Path(folder) / FACTS_FILE
    if not path.is_file():
        return TrainingFacts()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise FactsError(f"{path} is not valid JSON ({error}); delete it or write it again.") from None
    return TrainingFacts.from_json(data, str(path))


def hardware_description(accelerator) -> str:
    n = accelerator.num_processes
    import torch

    if accelerator.device.type == "cuda":
        return f"{n} x {torch.cuda.get_device_name(accelerator.device)}"
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"CPU ({cores} cores, {cpu})" + (f", {n} processes" if n > 1 else "")


def framework_versions() -> dict:
    versions = {}
    for name in ("torch", "transformers", "accelerate", "datasets", "tokenizers"):
        try:
            versions[name] = __import__(name).__version__
        except ImportError:
            pass
    return versions


def base_model_id(model_name_or_path: str | None) -> str | None:
    """The Hub id a model card can name as base model: a repo id as given, or for a local folder the id that
    folder records in its training facts (a converted checkpoint, a model fine-tuned from a Hub model); a
    local folder without one has no public base model."""
    if not model_name_or_path or not Path(model_name_or_path).exists():
        return model_name_or_path
    return read_training_facts(model_name_or_path).job.base_model
