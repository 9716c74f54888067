"""README front matter parsed within limits (size, nodes, depth, no alias) for the local Hub: ``yaml.safe_load``
alone lets a stranger's card cost seconds of CPU, gigabytes ("billion laughs") or a recursion overflow."""

from __future__ import annotations

from dataclasses import dataclass

import yaml
from huggingface_hub.repocard import REGEX_YAML_BLOCK

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass(frozen=True)
class YamlLimits:
    max_bytes: int = 1 << 20  # the YAML text (real cards, model-index included, stay far below)
    max_nodes: int = 50_000  # scalars, lists and mappings together
    max_depth: int = 64  # nested lists and mappings


class FrontMatterError(ValueError):
    """The front matter cannot be read: invalid YAML, not a mapping, or past a limit."""


def _check_events(text: str, limits: YamlLimits) -> None:
    nodes = depth = 0
    too_deep = FrontMatterError(
        f"The README front matter nests lists and mappings deeper than {limits.max_depth} levels"
    )
    try:
        for event in yaml.parse(text, Loader=_Loader):
            if isinstance(event, yaml.AliasEvent):
                raise FrontMatterError("YAML aliases (*name) are not accepted in the README front matter")
            nodes += isinstance(event, (yaml.ScalarEvent, yaml.CollectionStartEvent))
            if nodes > limits.max_nodes:
                raise FrontMatterError(f"The README front matter has more than {limits.max_nodes} YAML nodes")
            depth += isinstance(event, yaml.CollectionStartEvent) - isinstance(event, yaml.CollectionEndEvent)
            if depth > limits.max_depth:
                raise too_deep
    except yaml.YAMLError as e:
        # libyaml 0.2.6+ scans a run of "[" ahead of its first event and stops at its own depth limit (1000).
        if "maximum nesting depth" in str(e):
            raise too_deep from None
        raise


def load_front_matter(text: str, limits: YamlLimits = YamlLimits()) -> dict | None:
    """The front matter of a README as a dict (``{}`` when empty), None when there is none; raises
    ``FrontMatterError`` for invalid YAML, a document that is not a mapping, or one past ``limits``."""
    match = REGEX_YAML_BLOCK.match(text[: limits.max_bytes + 16])
    if match is None:
        if len(text) > limits.max_bytes + 16 and REGEX_YAML_BLOCK.match(text):
            raise FrontMatterError(f"The README front matter is larger than {limits.max_bytes} bytes")
        return None
    try:
        _check_events(match.group(2), limits)
        meta = yaml.load(match.group(2), Loader=_Loader)  # noqa: S506 - a safe loader, on a checked document
    except FrontMatterError:
        raise
    except (yaml.YAMLError, ValueError, TypeError, OverflowError, RecursionError) as e:
        # ValueError and OverflowError: a timestamp or number that looks valid to the parser but is not.
        raise FrontMatterError(f"Invalid YAML in the README front matter: {e}") from None
    if not isinstance(meta, dict | None):
        raise FrontMatterError("The README front matter must be a YAML mapping")
    return meta or {}
