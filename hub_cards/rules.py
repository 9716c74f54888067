"""The Hub's README front-matter rules, shared by the card renderer and the local Hub's ``/api/validate-yaml``:
``check_metadata`` lists what the Hub refuses, ``metadata_warnings`` the values outside its documented lists."""

from __future__ import annotations

import re

# The license ids hub-docs ``repositories-licenses.md`` lists; another is a warning (the list grows).
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
#: list keys whose entries must also match a pattern: key -> (pattern, what an entry must be)
_ENTRY_RULES = {
    "language": (re.compile(r"^[a-z]{2,3}([-_][A-Za-z0-9]+)*$"), 'ISO 639 codes such as "en"'),
    "base_model": (
        re.compile(r"^(?:[A-Za-z0-9][\w.-]*/)?[A-Za-z0-9][\w.-]*$"),
        'Hub repo ids such as "google-bert/bert-base-uncased"',
    ),
}


def check_metadata(meta: dict) -> list[str]:
    """Messages for every rule ``meta`` breaks; empty when valid."""
    examples = {"license": "apache-2.0", "library_name": "transformers", "pipeline_tag": "fill-mask"}
    errors = [
        f'"{key}" must be a string such as {example}, got {meta[key]!r}'
        for key, example in examples.items()
        if key in meta and not isinstance(meta[key], str)
    ]
    for key in ("language", "tags", "datasets", "metrics", "base_model"):
        if key not in meta or (meta[key] is None and key != "language"):
            continue
        values = [meta[key]] if isinstance(meta[key], str) else meta[key]
        if not isinstance(values, list) or not all(isinstance(v, str) and v for v in values):
            errors.append(f'"{key}" must be a string or a list of non-empty strings')
        elif key in _ENTRY_RULES and (bad := [v for v in values if not _ENTRY_RULES[key][0].match(v)]):
            errors.append(f'"{key}" entries must be {_ENTRY_RULES[key][1]}, got {bad}')
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
