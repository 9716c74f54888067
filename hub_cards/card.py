"""The model card (README.md) of a saved folder: ``templates/model_card.md`` filled from its config, training and
quantization facts. No dates, sorted tables: the same folder renders the same card, so a re-publish is a no-op."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

from huggingface_hub import EvalResult, ModelCard, ModelCardData

from briskbert import inputs
from briskbert.errors import SettingError, UserError
from briskbert.files import write_atomic
from briskbert.training.engine.facts import JobFacts, RunFacts, TrainingFacts, read_training_facts

from .rules import check_metadata

QUANTIZATION_FILE = "quantization.json"
TEMPLATE_PATH = Path(__file__).parent / "templates" / "model_card.md"
#: config options shown in the architecture table, in this order
ARCHITECTURE_OPTIONS = """
    hidden_size num_hidden_layers num_attention_heads num_key_value_heads intermediate_size
    position_embedding_type rope_theta norm_type norm_position hidden_act mlp_type sliding_window
    global_attn_every_n_layers vocab_size max_position_embeddings type_vocab_size attention_bias mlp_bias
    classifier_pooling tie_word_embeddings
    """.split()
#: architecture suffix -> pipeline tag; its Auto class is "AutoModel" + the suffix ("Model": no head ends in it)
TASKS = {
    "ForSequenceClassification": "text-classification",
    "ForTokenClassification": "token-classification",
    "ForQuestionAnswering": "question-answering",
    "ForMaskedLM": "fill-mask",
    "ForPreTraining": "fill-mask",
    "Model": "feature-extraction",
}
_DATASET_ID_RE = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")
_FILE_SUFFIXES = (".txt", ".tsv", ".csv", ".json", ".jsonl", ".parquet", ".arrow")
_NOT_METRICS = {"epoch", "runtime", "samples_per_second", "steps_per_second", "step"}
#: what a trivial answer scores (``chance_accuracy`` beside ``accuracy``): shown beside a metric, never a result
BASELINES = {"chance": "chance", "majority": "majority class"}


def _is_baseline(metric: str) -> bool:
    return metric.split("_", 1)[0] in BASELINES


class CardError(UserError):
    """The folder or the facts cannot make a valid card (one line naming the file and the fix)."""


def task_for_architecture(architecture: str) -> tuple[str, str]:
    """(pipeline tag, Auto class name) of a class name such as BriskBertForMaskedLM."""
    for suffix, pipeline_tag in TASKS.items():
        if architecture.endswith(suffix):
            return pipeline_tag, "AutoModel" + suffix.removeprefix("Model")
    raise CardError(f"Unknown architecture {architecture!r}: expected a name ending in {', '.join(TASKS)}")


def read_config(model_dir: str | Path, name: str = "config.json") -> dict:
    """``config.json`` (or ``tokenizer_config.json``), with the fields the card and the publisher use checked."""
    path = Path(model_dir) / name
    config = inputs.read_json_object(path, "model_dir", "save the model with save_pretrained")
    if problem := inputs.config_problem(config):
        raise CardError(f"{path}: {problem}; save the model with save_pretrained again")
    return config


def read_quantization(model_dir: str | Path) -> dict | None:
    path = Path(model_dir) / QUANTIZATION_FILE  # written by briskbert quantize
    return json.loads(path.read_text()) if path.is_file() else None


def _fmt(value) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{int(value):,}" if value.is_integer() and abs(value) >= 1000 else f"{value:.4g}"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, dict):
        return ", ".join(f"{k} {_fmt(v)}" for k, v in sorted(value.items()))
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v) for v in value)
    return str(value).replace("|", "\\|")


def _duration(seconds) -> str:
    seconds = float(seconds)
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def _precision(mixed_precision: str) -> str:  # accelerate's mixed_precision: no, fp16, bf16 or fp8
    return "fp32" if mixed_precision == "no" else f"{mixed_precision} mixed precision (fp32 master weights)"


def _is_public_dataset(name) -> bool:
    """A Hub dataset id (``stanfordnlp/sst2``, ``squad``), not a local file name."""
    return (
        isinstance(name, str)
        and bool(_DATASET_ID_RE.match(name))
        and not name.lower().endswith(_FILE_SUFFIXES)
    )


def _data_names(value) -> str:
    """Datasets by their public names; local files are said to be local, by file name only."""
    names = [value] if isinstance(value, str) else [str(name) for name in value]
    local = [name.replace("\\", "/").rsplit("/", 1)[-1] for name in names if not _is_public_dataset(name)]
    public = [name for name in names if _is_public_dataset(name)]
    return ", ".join(public + ([f"local data ({_fmt(local)})"] if local else []))


def _training_data(job: JobFacts) -> str:
    """``2,000 rows of glue/sst2 (the local file sst2_train_excerpt.tsv)``: names, local files, rows used."""
    if not job.datasets:
        return ""
    names = _data_names(job.datasets)
    if files := [name for name in job.train_files if name not in job.datasets]:
        names += f" (the local file{'s' if len(files) > 1 else ''} {_fmt(files)})"
    rows = job.details.get("num_train_examples")
    return f"{rows:,} rows of {names}" if isinstance(rows, int) else names


def render_card(
    model_dir: str | Path,
    repo_id: str | None = None,
    revision: str = "main",
    facts: TrainingFacts | None = None,
    revision_is_pinned: bool = False,
) -> ModelCard:
    """The card of ``model_dir`` as published to ``repo_id`` at ``revision``, which the usage snippet pins
    (``revision_is_pinned``: a tag; otherwise a branch, and the snippet says to pin a commit id)."""
    model_dir = Path(model_dir)
    # with its architectures: save_pretrained writes them, publish checks them
    config = read_config(model_dir)
    if facts is None:
        try:
            facts = read_training_facts(model_dir)
        except SettingError as error:  # named after the training jobs' setting: here it is this folder's file
            raise CardError(error.problem) from None
    job, run = facts.job, facts.run or RunFacts()
    quantization = read_quantization(model_dir)
    default_tag, auto_class = task_for_architecture(config["architectures"][0])
    pipeline_tag = job.pipeline_tag or default_tag
    repo_id = repo_id or f"your-namespace/{model_dir.name}"
    model_name = job.model_name or repo_id.split("/")[-1]
    metrics = {  # final evaluation metrics worth a row: finite numbers, not counters such as the epoch
        k.removeprefix("eval_"): v
        for k, v in sorted(run.metrics.items())
        if isinstance(v, (int, float))
        and not isinstance(v, bool)
        and math.isfinite(v)
        and k.removeprefix("eval_") not in _NOT_METRICS
    }
    labels = [config["id2label"][k] for k in sorted(config.get("id2label") or {}, key=int)]
    eval_dataset = job.eval_dataset or next((d for d in job.datasets if _is_public_dataset(d)), None)
    card = ModelCard.from_template(
        _card_data(config, job, pipeline_tag, model_name, metrics, eval_dataset, quantization),
        template_path=str(TEMPLATE_PATH),
        model_name=model_name,
        repo_id=repo_id,
        revision=revision,
        revision_is_pinned=revision_is_pinned,
        auto_class=auto_class,
        pipeline_tag=pipeline_tag,
        default_tag=default_tag,
        config=config,
        architecture_options=ARCHITECTURE_OPTIONS,
        fmt=_fmt,
        labels=labels if pipeline_tag in ("text-classification", "token-classification") else None,
        job=job,
        run=run,
        training_data=_training_data(job),
        weights_here=_weights_here(run),
        duration=_duration,
        precision=_precision,
        metric_rows=_metric_rows(metrics),
        eval_dataset=_eval_data_name(eval_dataset, job.eval_split, job.eval_dataset_description),
        quantization=quantization,
    )
    if problems := check_metadata(card.data.to_dict()):  # what the Hub would refuse (validate() needs it)
        raise CardError(f"{model_dir / 'training_facts.json'} makes an invalid card: " + "; ".join(problems))
    return card


def write_card(model_dir: str | Path, repo_id: str | None = None) -> None:
    write_atomic(Path(model_dir) / "README.md", str(render_card(model_dir, repo_id)))


def _metric_rows(metrics: dict) -> list[tuple[str, str]]:
    """``accuracy | 0.6 (majority class 0.582)``: each metric with the baselines measured beside it."""
    rows = []
    for name, value in metrics.items():
        beside = [
            f"{words} {_fmt(float(metrics[f'{b}_{name}']))}"
            for b, words in BASELINES.items()
            if f"{b}_{name}" in metrics
        ]
        if not _is_baseline(name):
            rows.append((name, _fmt(float(value)) + (f" ({', '.join(beside)})" if beside else "")))
    return rows


def _card_data(config, job: JobFacts, pipeline_tag, model_name, metrics, eval_dataset, quantization):
    """The front matter; model-index results only for a public evaluation dataset, and not for a quantized model
    (its metrics were measured before quantization)."""
    eval_results = None
    if metrics and _is_public_dataset(eval_dataset) and quantization is None:
        eval_results = [
            EvalResult(
                task_type=pipeline_tag,
                dataset_type=eval_dataset,
                dataset_name=eval_dataset,
                dataset_split=job.eval_split or None,
                metric_type=name,
                metric_name=name,
                metric_value=round(float(value), 6),
            )
            for name, value in metrics.items()
            if not _is_baseline(name)
        ]
    tags = ["briskbert", "bert", "encoder", config.get("model_type") or "briskbert", *job.tags]
    if quantization:
        tags += [quantization.get("precision", "int8"), "quantized", quantization.get("backend", "torchao")]
    return ModelCardData(
        language=job.language,
        license=job.license,
        library_name=job.library_name if job.library_name == "sentence-transformers" else "transformers",
        pipeline_tag=pipeline_tag,
        tags=list(dict.fromkeys(tags)),
        datasets=[d for d in job.datasets if _is_public_dataset(d)] or None,
        base_model=job.base_model or None,
        model_name=model_name if eval_results else None,
        eval_results=eval_results,
    )


def _weights_here(run: RunFacts) -> str | None:
    best, last_step = run.best_metric, run.train_steps
    if best is None or last_step is None:
        return None
    here = f"step {last_step:,}, the run's last"
    if best.step is not None and best.value is not None:
        measured = f"{best.name.removeprefix('eval_')} {_fmt(best.value)}"
        if best.step == last_step:
            return here + f" and its best by {measured}"
        here += f"; its best, {measured} at step {best.step:,}, is in the run's `best/` folder"
    return here


def _eval_data_name(eval_dataset, split: str | None, description: str | None) -> str:
    """What "Measured on ..." names: a public dataset (and split), or the job's description of a local file."""
    if description:
        return f"{description} (local data: {_fmt(eval_dataset)})" if eval_dataset else description
    if not eval_dataset:
        return "held-out data"
    return _data_names(eval_dataset) + (f" ({split} split)" if split else "")
