"""`convert_checkpoint`: a transformers checkpoint folder in, a BriskBert folder out (config, safetensors, code,
the source tokenizer, the sentence-transformers files), written beside the destination and moved into place only
when complete."""

import json
from pathlib import Path

from briskbert.files import staged_folder, write_atomic
from briskbert.inputs import read_json_object

from ..export import TOKENIZER_FILES, copy_files
from ..sentence_transformers_files import copy_sentence_transformers_files
from .families import SourceFamily, UnsupportedCheckpointError, family_for
from .weights import check_weights, load_state_dict, rename_weights


def build_config(family: SourceFamily, head_suffix: str, source_config: dict, has_pooler: bool):
    """BriskBert options reproducing the source exactly; refuses what they cannot express, naming the field."""
    from ..configuration_briskbert import BriskBertConfig

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

    from .. import modeling_briskbert

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
