"""A BriskBert folder written back as a transformers family's own folder, loadable without remote code. The import
is the oracle: the family's config must import back to every option, its weights follow the import's name map."""

import json
from pathlib import Path

import torch
import transformers

import briskbert.tokenization  # noqa: F401  (registers BriskBertTokenizer for AutoTokenizer)
from briskbert.files import staged_folder

from .. import modeling_briskbert
from ..configuration_briskbert import BriskBertConfig
from .agreement import OUTPUT_TOLERANCE, largest_difference
from .families import FAMILIES, SourceFamily, UnsupportedCheckpointError
from .folder import CheckpointMismatchError, build_config, name_map

# Options that change nothing a saved model computes (how it runs, what its training did), left out of the check.
_RUNTIME_OPTIONS = ("unpad_inputs", "sparse_prediction", "add_pooling_layer")
# Options only other heads read: an MLM folder does not need the family to express them.
_HEAD_OPTIONS = tuple(
    "pooler_activation token_head_activation classifier_norm classifier_pooling classifier_dropout use_crf".split()
)
# model_type -> (class prefix, family), tried in this order when no family is named.
TARGETS = {
    model_type: (prefix, family) for family in FAMILIES for model_type, prefix in family.prefixes.items()
}


def differences(family: SourceFamily, suffix: str, ours, theirs) -> list[str]:
    """ "option=ours (family: theirs)" for every option the family's config does not bring back on import."""
    try:
        back = build_config(family, suffix, theirs.to_dict(), has_pooler=True).to_dict()
    except UnsupportedCheckpointError as error:
        return [str(error)]
    ignored = _RUNTIME_OPTIONS + (_HEAD_OPTIONS if suffix in ("ForMaskedLM", "Model") else ())
    mine, back = _effective(ours.to_dict()), _effective(back)
    return [
        f"{name}={mine[name]!r} ({family.name}: {back.get(name)!r})"
        for name in type(ours).__annotations__
        if name not in ignored and mine[name] != back.get(name)
    ]


def _effective(options: dict) -> dict:
    """Options whose None means another option's value, given that value."""
    return dict(
        options,
        local_rope_theta=options["local_rope_theta"] or options["rope_theta"],
        head_activation=options["head_activation"] or options["hidden_act"],
        embedding_size=options["embedding_size"] or options["hidden_size"],
    )


def family_weights(family: SourceFamily, suffix: str, family_model, mine: dict, tied: set) -> dict:
    """The family model's state dict filled with BriskBert's weights `mine` (head names: "model.layers..."), by
    the import's name map backwards; refuses a weight (bar the `tied` ones) the family has no place for."""
    theirs = family_model.state_dict()
    state, used = dict(theirs), set()
    for name, (ours_name, part) in name_map(family, suffix, theirs).items():
        if ours_name not in mine:
            raise CheckpointMismatchError(
                f"{family.name} weight {name} has no BriskBert counterpart {ours_name}."
            )
        state[name] = mine[ours_name] if part is None else mine[ours_name].chunk(3, dim=0)[part]
        used.add(ours_name)
    unused = sorted(set(mine) - used - tied)
    if unused:
        raise CheckpointMismatchError(f"{family.name} has no place for the weights {unused}.")
    return state


def _save_plain_tokenizer(tokenizer, folder: Path):
    """The tokenizer, saved under transformers' own class (a briskbert subclass becomes its base class)."""
    tokenizer.save_pretrained(folder)
    path = folder / "tokenizer_config.json"
    settings = json.loads(path.read_text(encoding="utf-8"))
    plain = next(c for c in type(tokenizer).__mro__ if c.__module__.startswith("transformers."))
    settings.pop("auto_map", None)
    settings["tokenizer_class"] = plain.__name__
    path.write_text(json.dumps(settings, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    for leftover in folder.glob("tokenization_*.py"):
        leftover.unlink()


def pick_family(
    ours, auto_class: str, family: str | None, tokenizer
) -> tuple[str, SourceFamily, str, object]:
    """(class prefix, family, head suffix, family config) of the named family, else of the first that expresses
    `ours`; refusals name each option the (closest) family cannot express."""
    refusals = []
    for model_type in [family] if family else TARGETS:
        prefix, source = TARGETS[model_type]
        suffix = next((s for s, auto in source.heads.items() if auto == auto_class), None)
        if suffix is None:
            refusals.append((source, [f"{prefix} has no head for {auto_class}."]))
            continue
        # Unset options take the family's default: if that differs, `differences` names the option.
        options = ours.to_dict()
        fields = {
            theirs: options[name] for name, theirs in source.names.items() if options.get(name) is not None
        }
        if model_type == "modernbert":
            fields.update(cls_token_id=tokenizer.cls_token_id, sep_token_id=tokenizer.sep_token_id)
            fields.setdefault("bos_token_id", tokenizer.cls_token_id)
            fields.setdefault("eos_token_id", tokenizer.sep_token_id)
        try:
            fields.update(source.exported(options))
            theirs = getattr(transformers, f"{prefix}Config")(**fields)
        except Exception as error:  # `exported`'s refusal, or transformers' strict config fields' own errors
            refusals.append((source, [str(error).splitlines()[-1].strip()]))
            continue
        problems = differences(source, suffix, ours, theirs)
        if not problems:
            return prefix, source, suffix, theirs
        refusals.append((source, problems))
    source, problems = min(refusals, key=lambda refusal: len(refusal[1]))
    closest = "" if family else f", the closest of {', '.join(TARGETS)},"
    raise UnsupportedCheckpointError(
        f"{'; '.join(problems)}: {source.name}{closest} cannot express "
        f"{'these options' if len(problems) > 1 else 'this option'}."
    )


def export_to_family(model_dir, output_dir, family: str | None = None) -> tuple[str, float]:
    """Writes `model_dir` as the family's folder `output_dir` once transformers loads it back without remote code
    within `OUTPUT_TOLERANCE`; returns (the family's class, the largest difference)."""
    config = BriskBertConfig.from_pretrained(model_dir)
    class_name = (config.architectures or ["BriskBertModel"])[0]
    auto_class = next(
        auto for auto, ref in modeling_briskbert.AUTO_MAP.items() if ref.endswith(f".{class_name}")
    )
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir, trust_remote_code=True)
    # Refused before the weights are read.
    prefix, source, suffix, theirs = pick_family(config, auto_class, family, tokenizer)
    ours = getattr(modeling_briskbert, class_name).from_pretrained(model_dir, dtype=torch.float32).eval()
    family_class = getattr(transformers, f"{prefix}{suffix}")
    family_model = family_class(theirs).eval()
    mine = ours.state_dict()
    if class_name == "BriskBertModel":  # the bare encoder's names lack the heads' "model." prefix
        mine = {f"model.{name}": value for name, value in mine.items()}
    tied = set(ours._tied_weights_keys or {}) if config.tie_word_embeddings else set()
    family_model.load_state_dict(family_weights(source, suffix, family_model, mine, tied), strict=True)
    with staged_folder(output_dir) as staging:
        family_model.save_pretrained(staging)
        _save_plain_tokenizer(tokenizer, staging)
        loaded = getattr(transformers, auto_class).from_pretrained(staging).eval()
        plain_tokenizer = transformers.AutoTokenizer.from_pretrained(staging)
        texts = ["A plain check of the tokenizer's ids.", "Zebras, 42 quarks; naïve café!"]
        if (
            type(loaded) is not family_class
            or plain_tokenizer(texts)["input_ids"] != tokenizer(texts)["input_ids"]
        ):
            raise CheckpointMismatchError(
                f"{staging} does not load back as {family_class.__name__} with its tokenizer."
            )
        difference = largest_difference(loaded, ours, plain_tokenizer)
        if difference > OUTPUT_TOLERANCE:
            raise CheckpointMismatchError(
                f"{family_class.__name__} differs from {model_dir} by {difference:.1e}, more than {OUTPUT_TOLERANCE:g}."
            )
    return family_class.__name__, difference
