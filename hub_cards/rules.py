"""Model card metadata rules, the subset of the Hub's README front-matter validation a card must pass.

Shared by the card renderer (checked locally before anything is pushed) and by the local Hub server's
``/api/validate-yaml``, so a card that passes here passes there. Pure Python plus PyYAML.
"""

from __future__ import annotations

import re

import yaml

KNOWN_LICENSES = {
    "apache-2.0",
    "mit",
    "bsd",
    "bsd-2-clause",
    "bsd-3-clause",
    "cc-by-4.0",
    "cc-by-sa-4.0",
    "cc-by-nc-4.0",
    "cc-by-nc-sa-4.0",
    "cc0-1.0",
    "gpl-3.0",
    "lgpl-3.0",
    "agpl-3.0",
    "mpl-2.0",
    "openrail",
    "bigscience-openrail-m",
    "creativeml-openrail-m",
    "llama2",
    "llama3",
    "gemma",
    "unlicense",
    "other",
    "unknown",
}
PIPELINE_TAGS = {
    "text-classification",
    "token-classification",
    "question-answering",
    "fill-mask",
    "feature-extraction",
    "sentence-similarity",
    "zero-shot-classification",
    "text-generation",
    "summarization",
    "translation",
    "text2text-generation",
    "table-question-answering",
}
_FRONT_MATTER_RE = re.compile(r"\A---\s*\n(.*?)\n---\s*(\n|\Z)", re.DOTALL)
_REPO_ID_RE = re.compile(r"^(?:[A-Za-z0-9][\w.-]*/)?[A-Za-z0-9][\w.-]*$")
_LANG_RE = re.compile(r"^[a-z]{2,3}([-_][A-Za-z0-9]+)*$")


def split_front_matter(text: str) -> tuple[dict | None, str]:
    """(metadata dict or None when there is no front matter, body). Raises ValueError on bad YAML."""
    m = _FRONT_MATTER_RE.match(text)
    if not m:
        return None, text
    try:
        meta = yaml.safe_load(m.group(1))
    except yaml.YAMLError as e:
        raise ValueError(f"Invalid YAML in the README front matter: {e}") from e
    if meta is None:
        meta = {}
    if not isinstance(meta, dict):
        raise ValueError("The README front matter must be a YAML mapping")
    return meta, text[m.end() :]


def _str_list(value, key: str, errors: list[str]) -> None:
    if isinstance(value, str):
        return
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        errors.append(f'"{key}" must be a string or a list of non-empty strings')


def check_metadata(meta: dict) -> list[str]:
    """Messages for every rule ``meta`` breaks; empty when valid."""
    errors: list[str] = []
    if "license" in meta:
        lic = meta["license"]
        if not isinstance(lic, str) or lic not in KNOWN_LICENSES:
            errors.append(f'"license" must be a known license id (e.g. apache-2.0, mit, other), got {lic!r}')
    if "language" in meta:
        _str_list(meta["language"], "language", errors)
        langs = [meta["language"]] if isinstance(meta["language"], str) else meta["language"]
        if isinstance(langs, list):
            bad = [x for x in langs if isinstance(x, str) and not _LANG_RE.match(x)]
            if bad:
                errors.append(f'"language" entries must be ISO 639 codes such as "en", got {bad}')
    for key in ("tags", "datasets", "metrics", "base_model"):
        if key in meta and meta[key] is not None:
            _str_list(meta[key], key, errors)
    if isinstance(meta.get("base_model"), (str, list)):
        models = [meta["base_model"]] if isinstance(meta["base_model"], str) else meta["base_model"]
        bad = [x for x in models if isinstance(x, str) and not _REPO_ID_RE.match(x)]
        if bad:
            errors.append(
                f'"base_model" entries must be Hub repo ids such as "google-bert/bert-base-uncased", got {bad}'
            )
    if "library_name" in meta and not isinstance(meta["library_name"], str):
        errors.append('"library_name" must be a string')
    if "pipeline_tag" in meta and meta["pipeline_tag"] not in PIPELINE_TAGS:
        errors.append(f'"pipeline_tag" must be one of {sorted(PIPELINE_TAGS)}, got {meta["pipeline_tag"]!r}')
    if "model-index" in meta:
        errors.extend(_check_model_index(meta["model-index"]))
    return errors


def _check_model_index(index) -> list[str]:
    errors: list[str] = []
    if not isinstance(index, list):
        return ['"model-index" must be a list']
    for i, model in enumerate(index):
        if not isinstance(model, dict) or not isinstance(model.get("name"), str):
            errors.append(f'"model-index[{i}]" needs a "name" string')
            continue
        results = model.get("results")
        if not isinstance(results, list):
            errors.append(f'"model-index[{i}].results" must be a list')
            continue
        for j, res in enumerate(results):
            where = f"model-index[{i}].results[{j}]"
            if not isinstance(res, dict):
                errors.append(f'"{where}" must be a mapping')
                continue
            if not isinstance(res.get("task"), dict) or not isinstance(res["task"].get("type"), str):
                errors.append(f'"{where}.task.type" is required')
            ds = res.get("dataset")
            if (
                not isinstance(ds, dict)
                or not isinstance(ds.get("name"), str)
                or not isinstance(ds.get("type"), str)
            ):
                errors.append(f'"{where}.dataset" needs "name" and "type" strings')
            metrics = res.get("metrics")
            if not isinstance(metrics, list) or not metrics:
                errors.append(f'"{where}.metrics" must be a non-empty list')
                continue
            for k, met in enumerate(metrics):
                if not isinstance(met, dict) or not isinstance(met.get("type"), str) or "value" not in met:
                    errors.append(f'"{where}.metrics[{k}]" needs "type" and "value"')
                elif not isinstance(met["value"], (int, float, str)) or isinstance(met["value"], bool):
                    errors.append(f'"{where}.metrics[{k}].value" must be a number or a string')
    return errors


def check_card_text(text: str) -> list[str]:
    """All rule violations of a whole README text (front matter required)."""
    try:
        meta, _ = split_front_matter(text)
    except ValueError as e:
        return [str(e)]
    if meta is None:
        return ["The card has no YAML front matter (--- ... --- at the top)"]
    return check_metadata(meta)
