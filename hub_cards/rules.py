"""Model card metadata rules, the subset of the Hub's README front-matter validation a card must pass.

Errors (``check_metadata``) are what the Hub refuses: wrong types, a malformed model-index. Values outside
the Hub's documented license and pipeline lists are warnings (``metadata_warnings``), since the Hub accepts
them. Shared by the card renderer (checked locally before anything is pushed) and by the local Hub server's
``/api/validate-yaml``, so a card that passes here passes there. The front matter is read by :mod:`.front_matter`.
"""

from __future__ import annotations

import re

from .front_matter import load_front_matter

# The license ids the Hub documents (hub-docs ``repositories-licenses.md``, Llama 3.x included). An id
# outside the list is a warning, not an error: the Hub adds ids over time, and ``other`` + ``license_name``
# covers the rest.
KNOWN_LICENSES = frozenset(
    """
    apache-2.0 mit openrail bigscience-openrail-m creativeml-openrail-m bigscience-bloom-rail-1.0
    bigcode-openrail-m afl-3.0 artistic-2.0 bsl-1.0 bsd bsd-2-clause bsd-3-clause bsd-3-clause-clear c-uda
    cc cc0-1.0 cc-by-2.0 cc-by-2.5 cc-by-3.0 cc-by-4.0 cc-by-sa-3.0 cc-by-sa-4.0 cc-by-nc-2.0 cc-by-nc-3.0
    cc-by-nc-4.0 cc-by-nd-4.0 cc-by-nc-nd-3.0 cc-by-nc-nd-4.0 cc-by-nc-sa-2.0 cc-by-nc-sa-3.0 cc-by-nc-sa-4.0
    cdla-sharing-1.0 cdla-permissive-1.0 cdla-permissive-2.0 wtfpl ecl-2.0 epl-1.0 epl-2.0 etalab-2.0
    eupl-1.1 agpl-3.0 gfdl gpl gpl-2.0 gpl-3.0 lgpl lgpl-2.1 lgpl-3.0 isc
    lppl-1.3c ms-pl mpl-2.0 odc-by odbl openrail++ osl-3.0 postgresql
    ofl-1.1 ncsa unlicense zlib pddl lgpl-lr deepfloyd-if-license
    llama2 llama3 llama3.1 llama3.2 llama3.3 gemma unknown other
    """.split()
)
# The Hub's pipeline types (huggingface.js ``packages/tasks/src/pipelines.ts``); unknown ones warn.
PIPELINE_TAGS = frozenset(
    """
    biology text-classification token-classification table-question-answering question-answering
    zero-shot-classification translation summarization feature-extraction text-generation
    text2text-generation fill-mask sentence-similarity text-to-speech text-to-audio
    automatic-speech-recognition audio-to-audio audio-classification audio-text-to-text
    voice-activity-detection depth-estimation image-classification object-detection image-segmentation
    text-to-image image-to-text image-to-image image-to-video unconditional-image-generation
    video-classification reinforcement-learning robotics tabular-classification tabular-regression
    tabular-to-text table-to-text multiple-choice text-ranking text-retrieval time-series-forecasting
    text-to-video image-text-to-text visual-question-answering document-question-answering
    zero-shot-image-classification graph-ml mask-generation zero-shot-object-detection text-to-3d
    image-to-3d image-feature-extraction video-text-to-text keypoint-detection visual-document-retrieval
    any-to-any other
    """.split()
)
_REPO_ID_RE = re.compile(r"^(?:[A-Za-z0-9][\w.-]*/)?[A-Za-z0-9][\w.-]*$")
_LANG_RE = re.compile(r"^[a-z]{2,3}([-_][A-Za-z0-9]+)*$")


def _str_list(value, key: str, errors: list[str]) -> None:
    if isinstance(value, str):
        return
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        errors.append(f'"{key}" must be a string or a list of non-empty strings')


def check_metadata(meta: dict) -> list[str]:
    """Messages for every rule ``meta`` breaks; empty when valid."""
    errors: list[str] = []
    if "license" in meta and not isinstance(meta["license"], str):
        errors.append(f'"license" must be a license id string such as apache-2.0, got {meta["license"]!r}')
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
    if "pipeline_tag" in meta and not isinstance(meta["pipeline_tag"], str):
        errors.append(f'"pipeline_tag" must be a string such as fill-mask, got {meta["pipeline_tag"]!r}')
    if "model-index" in meta:
        errors.extend(_check_model_index(meta["model-index"]))
    return errors


def metadata_warnings(meta: dict) -> list[str]:
    """Values the Hub's documented lists do not know: accepted (the lists grow), but worth a second look."""
    warnings = []
    lic = meta.get("license")
    if isinstance(lic, str) and lic not in KNOWN_LICENSES:
        warnings.append(
            f'"license" {lic!r} is not in the Hub\'s license list; if it is your own, use "other" '
            'with "license_name" and a LICENSE file'
        )
    tag = meta.get("pipeline_tag")
    if isinstance(tag, str) and tag not in PIPELINE_TAGS:
        warnings.append(f'"pipeline_tag" {tag!r} is not one of the Hub\'s pipeline types (e.g. fill-mask)')
    return warnings


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
        meta = load_front_matter(text)
    except ValueError as e:
        return [str(e)]
    if meta is None:
        return ["The card has no YAML front matter (--- ... --- at the top)"]
    return check_metadata(meta)
