"""``training_facts.json``: the facts a model card needs, written into the final model folder.

Schema (all keys optional for readers; the loop fills the training-derived ones, scripts the rest
through ``card_facts``)::

    task              str    e.g. "masked-language-modeling", "text-classification"
    pipeline_tag      str    Hub pipeline tag, e.g. "fill-mask", "text-classification"
    datasets          list   training data names or file names
    eval_dataset      str    what the metrics were measured on
    base_model        str|None  model this was fine-tuned / continued from
    language          str    e.g. "en"
    license           str    e.g. "apache-2.0"
    config_preset     str|None  BriskBertConfig preset the model was built from
    metrics           dict   {name: value}, final evaluation (e.g. "eval_accuracy", "eval_perplexity")
    best_metric       dict|None  {"name", "value", "step"} when --metric_for_best_model was tracked
    train_steps       int    optimizer steps taken
    epochs            float  passes over the training data
    tokens_seen       int    non-padding training tokens (all processes)
    examples_seen     int    training sequences/examples (all processes)
    global_batch_size int    per-device batch x processes x accumulation steps
    learning_rate, lr_scheduler_type, num_warmup_steps, weight_decay, mixed_precision, seed
    hardware          str    e.g. "1 x NVIDIA H100 80GB HBM3" or "CPU (2 cores, ...)"
    num_processes     int
    wall_time_s       float  training wall time (summed over resumed segments)
    framework_versions dict  torch / transformers / accelerate / datasets / tokenizers versions
"""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path

FACTS_FILE = "training_facts.json"


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


def write_training_facts(folder: str | Path, facts: dict) -> Path:
    path = Path(folder) / FACTS_FILE
    path.write_text(json.dumps(facts, indent=2, sort_keys=True, default=str))
    return path


def read_training_facts(folder: str | Path) -> dict:
    path = Path(folder) / FACTS_FILE
    return json.loads(path.read_text()) if path.is_file() else {}


def base_model_id(model_name_or_path: str | None) -> str | None:
    """The Hub id a model card can name as base model: a repo id as given, or for a local folder the id that
    folder records in its training facts (a converted checkpoint, a model fine-tuned from a Hub model); a
    local folder without one has no public base model."""
    if not model_name_or_path or not Path(model_name_or_path).exists():
        return model_name_or_path
    return read_training_facts(model_name_or_path).get("base_model")
