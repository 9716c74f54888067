"""`convert_checkpoint`: a transformers checkpoint folder in, a BriskBert folder out. Weights are renamed and fused,
and every name and shape is checked against the target model before the folder is written and moved into place."""

import json
import re
from pathlib import Path

import torch

from briskbert.errors import UserError
from briskbert.files import staged_folder, write_atomic
from briskbert.inputs import read_json_object

from .. import modeling_briskbert
from ..configuration_briskbert import BriskBertConfig
from ..export import TOKENIZER_FILES, copy_files
from ..sentence_transformers_files import copy_sentence_transformers_files
from .families import SourceFamily, UnsupportedCheckpointError, family_for

# Buffers some versions saved; they carry no learned values.
_IGNORED = re.compile(r"(.*\.)?embeddings\.(position_ids|token_type_ids)$")
# Config fields a weight's shape is made of, named when a shape disagrees with config.json.
_SIZE_FIELDS = (
    "vocab_size hidden_size embedding_size intermediate_size max_position_embeddings type_vocab_size num_labels"
).split()


class CheckpointMismatchError(UserError):
    """The source checkpoint's weights do not match the target architecture."""


def load_state_dict(src: Path) -> dict[str, torch.Tensor]:
    """The weights of a checkpoint folder: model.safetensors (or its shards), else pytorch_model.bin."""
    from safetensors.torch import load_file

    shards = sorted(src.glob("model*.safetensors"))
    if shards:
        return {name: tensor for shard in shards for name, tensor in load_file(str(shard)).items()}
    return torch.load(src / "pytorch_model.bin", map_location="cpu", weights_only=True)


def name_map(family: SourceFamily, head_suffix: str, names) -> dict[str, tuple[str, int | None]]:
    """{source name: (BriskBert name, its index in the fused query/key/value projection, or None)}: head weights
    by the head's prefix table, encoder weights by the family's patterns under "model."; buffers left out. Both
    directions use it: import renames by it, export to a family (`export_family`) reads it backwards."""
    # the head's own renames over those of every head; a name takes its longest prefix
    head_renames = {**family.head_renames.get("*", {}), **family.head_renames.get(head_suffix, {})}
    encoder_renames = [
        (re.compile(f"^{pattern}"), replacement) for pattern, replacement in family.encoder_renames
    ]
    qkv_pattern = re.compile(family.qkv[0]) if family.qkv else None
    mapping = {}
    for name in names:
        if _IGNORED.match(name):
            continue
        head_prefix = max((p for p in head_renames if name.startswith(p)), key=len, default=None)
        if head_prefix is not None:
            mapping[name] = (head_renames[head_prefix] + name[len(head_prefix) :], None)
            continue
        inner = name.removeprefix(family.weight_prefix)
        qkv = qkv_pattern.fullmatch(inner) if qkv_pattern else None
        if qkv:
            layer, part, kind = qkv.groups()
            mapping[name] = (f"model.layers.{layer}.attention.qkv.{kind}", family.qkv[1].index(part))
            continue
        for pattern, replacement in encoder_renames:
            inner = pattern.sub(replacement, inner)
        mapping[name] = (f"model.{inner}", None)
    return mapping


def rename_weights(
    family: SourceFamily, head_suffix: str, state: dict[str, torch.Tensor]
) -> dict[str, tuple[str, torch.Tensor]]:
    """{BriskBert name: (source name, tensor)}, query/key/value concatenated into one projection."""
    converted, qkv_parts = {}, {}
    for name, (ours, part) in name_map(family, head_suffix, state).items():
        if part is None:
            converted[ours] = (name, state[name])
        else:
            qkv_parts.setdefault(ours, {})[part] = name
    for ours, parts in qkv_parts.items():
        if len(parts) < 3:  # left out: check_weights names it as missing
            continue
        fused = torch.cat([state[parts[i]] for i in range(3)], dim=0)
        source_name = parts[0].replace(family.qkv[1][0], "{" + ",".join(family.qkv[1]) + "}")
        converted[ours] = (source_name, fused)
    return converted


def check_weights(model, converted: dict[str, tuple[str, torch.Tensor]], src: Path, architecture: str):
    """Refuses missing, unexpected and wrongly shaped weights, naming them and the config field at fault."""
    expected = model.state_dict()
    tied = set(model._tied_weights_keys or {}) if model.config.tie_word_embeddings else set()
    unexpected = sorted(converted[name][0] for name in converted.keys() - expected.keys())
    missing = sorted(expected.keys() - converted.keys() - tied)
    if missing or unexpected:
        raise CheckpointMismatchError(
            f"Cannot convert {src} as {architecture}: "
            f"missing weights ({len(missing)}): {missing}; unexpected weights ({len(unexpected)}): {unexpected}"
        )
    for name, (source_name, tensor) in converted.items():
        wanted = tuple(expected[name].shape)
        if tuple(tensor.shape) != wanted:
            fields = [
                f"{f}={getattr(model.config, f)}"
                for f in _SIZE_FIELDS
                if getattr(model.config, f, None) in wanted and getattr(model.config, f) not in tensor.shape
            ]
            raise CheckpointMismatchError(
                f"{src}: weight {source_name} has shape {tuple(tensor.shape)} but config.json "
                f"({', '.join(fields) or 'its sizes'}) asks for {wanted}; the config and the weights disagree."
            )


def build_config(family: SourceFamily, head_suffix: str, source_config: dict, has_pooler: bool):
    """BriskBert options reproducing the source exactly; refuses what they cannot express, naming the field."""
    fields = {ours: source_config[theirs] for ours, theirs in family.names.items() if theirs in source_config}
    fields.update(family.imported(source_config))
    if head_suffix in family.head_config:
        fields.update(family.head_config[head_suffix](source_config))
    try:
        config = BriskBertConfig(**fields, add_pooling_layer=has_pooler)
    except ValueError as error:
        raise UnsupportedCheckpointError(f"config.json cannot be imported: {error}") from None
    source_layer_types = source_config.get("layer_types")
    if source_layer_types and source_layer_types != config.layer_types:
        raise UnsupportedCheckpointError(
            f"config.json field layer_types={source_layer_types} has no BriskBert equivalent: global layers "
            "must come every n layers from layer 0."
        )
    return config


def convert_checkpoint(
    src_dir,
    out_dir,
    architecture: str | None = None,
    save_tokenizer: bool = True,
    source_repo_id: str | None = None,
):
    """Converts the transformers folder `src_dir` (its head: `architecture`, default config.json's) into a BriskBert
    folder `out_dir` that gives the same outputs, replaced whole once complete; returns the model. `source_repo_id`
    (the checkpoint's Hub id) is recorded as the base model the cards of models trained from the folder name."""
    src, out = Path(src_dir), Path(out_dir)
    source_config = read_json_object(src / "config.json", "src", "pass a transformers checkpoint folder")
    family = family_for(source_config, src / "config.json")
    default = f"{family.prefixes[source_config['model_type']]}Model"
    architecture = architecture or (source_config.get("architectures") or [default])[0]
    head_suffix = family.head_suffix(architecture)

    converted = rename_weights(family, head_suffix, load_state_dict(src))
    model_class = getattr(
        modeling_briskbert, modeling_briskbert.AUTO_MAP[family.heads[head_suffix]].split(".")[1]
    )
    if model_class is modeling_briskbert.BriskBertModel:
        converted = {name.removeprefix("model."): value for name, value in converted.items()}
    has_pooler = any(name.removeprefix("model.").startswith("pooler.") for name in converted)
    model = model_class(build_config(family, head_suffix, source_config, has_pooler))
    check_weights(model, converted, src, architecture)
    model.load_state_dict({name: tensor for name, (_, tensor) in converted.items()}, strict=False)
    model.tie_weights()
    model.eval()

    # Write next to the destination and move into place at the end, so a failure leaves no half-written folder.
    with staged_folder(out) as staging:
        model.save_pretrained(staging)
        if save_tokenizer:
            if family.name == "BERT":  # WordPiece: briskbert's tokenizer, as remote code
                from briskbert.tokenization import BriskBertTokenizer

                BriskBertTokenizer.from_pretrained(str(src)).save_pretrained(staging)
            else:
                copy_files(src, staging, TOKENIZER_FILES)  # as they are
            copy_sentence_transformers_files(src, staging)
        if source_repo_id:
            # A schema-version-2 training_facts.json naming only the base model.
            facts = {"schema_version": 2, "base_model": source_repo_id}
            write_atomic(staging / "training_facts.json", json.dumps(facts, indent=2))
    return model
