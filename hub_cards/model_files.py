"""Which files of a saved model folder a publish uploads: config, remote code, safetensors weights and tokenizer,
plus what ``include`` names (training state only when asked for). A symlink, code reference or shard leading
outside the folder is ``OutsideTheFolder``."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from fnmatch import fnmatch
from pathlib import Path

from briskbert.errors import SettingError, UserError
from briskbert.inputs import check_model_folder, read_json_object

from .card import read_config, task_for_architecture

TOKENIZER_FILES = tuple(
    "tokenizer.json tokenizer_config.json special_tokens_map.json vocab.txt added_tokens.json tokenizer.model "
    "chat_template.jinja".split()
)
CONFIG_FILES = ("config.json", "generation_config.json")
# Training state: left out unless include_training_state is set, whatever ``include`` says.
TRAINING_STATE = tuple(
    "optimizer* scheduler* scaler* rng_state* random_states* trainer_state.json training_args* checkpoint-* "
    "step_* *.ckpt *.pt *.pth".split()
)
_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class IncompleteModelFolder(UserError):
    """A folder that is not a complete model: one line naming everything it lacks."""


class OutsideTheFolder(UserError):
    """A symlink, code reference or weights shard that would publish something from outside the folder."""


@dataclass
class FileSelection:
    upload: list[str]  # paths relative to the folder, model files first
    training_state: list[str]  # left out unless include_training_state
    skipped: list[str]  # everything else left out (the folder's own README.md is not among them)
    links: list[str]  # "link -> target" for each symlink followed (inside)
    own_readme: bool  # the folder has a README.md: the rendered card replaces it


def _matches(rel: str, patterns: tuple[str, ...] | list[str]) -> bool:
    """A pattern matches the whole relative path or any one of its components."""
    return any(fnmatch(rel, pat) or any(fnmatch(part, pat) for part in rel.split("/")) for pat in patterns)


def folder_listing(folder: Path) -> tuple[list[str], list[str]]:
    """(every file under ``folder``, relative; "link -> target" for each symlink followed). A symlink is
    followed only when it resolves inside the folder; any other is refused, all named in one line."""
    root, files, followed, outside = folder.resolve(), [], [], []
    todo = [(folder, "", frozenset([root]))]  # (folder, its relative prefix, the real folders above it)
    while todo:
        path, prefix, above = todo.pop()
        for entry in sorted(os.scandir(path), key=lambda e: e.name):
            rel, real = prefix + entry.name, Path(entry.path)
            if entry.is_symlink():
                try:
                    real = real.resolve()
                except (OSError, RuntimeError):  # a loop of links
                    outside.append(f"{rel} -> {os.readlink(entry.path)} (a loop)")
                    continue
                if not real.is_relative_to(root):
                    outside.append(f"{rel} -> {os.readlink(entry.path)}")
                    continue
                followed.append(f"{rel} -> {real.relative_to(root).as_posix() or '.'}")
            if real.is_dir() and real.resolve() not in above:  # a link back up is not walked twice
                todo.append((Path(entry.path), rel + "/", above | {real.resolve()}))
            elif real.is_file():
                files.append(rel)
    if outside:
        raise OutsideTheFolder(
            f"{folder} holds symlinks that resolve outside it: {'; '.join(outside)}. Only files inside the model "
            "folder are published: replace each link with a copy of what it points to, or delete it. Nothing "
            "was published."
        )
    return sorted(files), followed


def _code_files(folder: Path, config_name: str, config: dict, missing: list[str]) -> list[str]:
    """The code files ``config_name``'s references name (``auto_map`` entries, custom pipelines' ``impl``), and
    those they import relatively (found as transformers finds them when it loads remote code)."""
    from transformers.dynamic_module_utils import get_relative_imports

    refs = [
        (f"auto_map[{key!r}]", item)
        for key, ref in (config.get("auto_map") or {}).items()
        for item in (ref if isinstance(ref, list) else [ref])
        if item
    ]
    pipelines = config.get("custom_pipelines")
    for task, entry in (pipelines if isinstance(pipelines, dict) else {}).items():
        refs.append(
            (f"custom_pipelines[{task!r}].impl", entry.get("impl") if isinstance(entry, dict) else entry)
        )
    todo = []
    for field_name, value in refs:  # "module.Class", or "repo--module.Class" (another repo's code, here too)
        module = value.split("--", 1)[-1].rpartition(".")[0] if isinstance(value, str) else ""
        if not _MODULE.fullmatch(module):
            raise OutsideTheFolder(
                f"{folder / config_name}: {field_name} is {value!r}: a code reference must be 'module.Class' naming "
                "a module file inside the model folder (no path, no '..', no package); fix the reference or save "
                "the model again with save_pretrained. Nothing was published."
            )
        todo.append(module + ".py")
    seen = []
    while todo:
        name = todo.pop(0)
        if name in seen:
            continue
        seen.append(name)
        if not (folder / name).is_file():
            missing.append(f"{name} (code file referenced by {config_name} or imported by another code file)")
            continue
        for module in sorted(get_relative_imports(folder / name)):
            if not _MODULE.fullmatch(module):
                raise OutsideTheFolder(
                    f"{folder / name}: 'from .{module} import' is not a module beside it: remote code may import "
                    "only modules in the model folder itself. Nothing was published."
                )
            todo.append(module + ".py")
    return seen


def _model_files(folder: Path, missing: list[str]) -> list[str]:
    """Config and its code, weights and tokenizer (and its code); what a whole model lacks goes to ``missing``."""
    config = read_config(folder)  # a malformed one is a CardError naming the file and the field
    archs = config.get("architectures") or []
    if not archs:
        missing.append("config.json 'architectures' (which head this model is)")
    elif not (auto_map := config.get("auto_map")):
        missing.append("config.json 'auto_map' (remote code entry points; import modeling before saving)")
    elif (auto_class := task_for_architecture(archs[0])[1]) not in auto_map:
        missing.append(f"config.json auto_map['{auto_class}'] (needed to load {archs[0]})")
    code = _code_files(folder, "config.json", config, missing)
    files = [f for f in CONFIG_FILES if (folder / f).is_file()] + code

    index = folder / "model.safetensors.index.json"
    if index.is_file():  # check_model_folder has read it: every shard it names is there
        index_json = read_json_object(index, "model_dir", "save the model with save_pretrained")
        files += [index.name, *sorted(set((index_json.get("weight_map") or {}).values()))]
    elif (folder / "model.safetensors").is_file():
        files.append("model.safetensors")
    else:
        missing.append("model.safetensors (weights; .bin weights only: load and save_pretrained them again)")

    tokenizer = [f for f in TOKENIZER_FILES if (folder / f).is_file()]
    vocabulary = {"tokenizer.json", "vocab.txt", "tokenizer.model"} & set(tokenizer)
    if "tokenizer_config.json" in tokenizer and vocabulary:
        tok_config = read_config(folder, "tokenizer_config.json")
        files += tokenizer + _code_files(folder, "tokenizer_config.json", tok_config, missing)
    else:
        missing.append("tokenizer (tokenizer_config.json, and tokenizer.json or vocab.txt: save it too)")
    return list(dict.fromkeys(files))


def collect_files(
    model_dir: str | Path, include: tuple[str, ...] | list[str] = (), include_training_state: bool = False
) -> FileSelection:
    """The files to upload and those left out; ``IncompleteModelFolder`` lists what a whole model lacks."""
    folder = Path(model_dir)
    listing, links = folder_listing(folder) if folder.is_dir() else ([], [])  # first: no read through a link
    # the manifest, weights' headers, config and tokenizer, before anything reads them
    check_model_folder(folder, "model_dir", need_tokenizer=(folder / "tokenizer.json").is_file())
    missing: list[str] = []
    chosen = _model_files(folder, missing)
    if missing:
        raise IncompleteModelFolder(
            f"{folder} cannot be published, it lacks: {'; '.join(dict.fromkeys(missing))}. Save the model and "
            "tokenizer with save_pretrained (after importing briskbert.modeling, so the code files and auto_map "
            "are written)."
        )
    if strays := [f for f in chosen if f not in listing]:  # e.g. an index naming "../x.safetensors"
        raise OutsideTheFolder(
            f"{folder}: {', '.join(strays)} named by model.safetensors.index.json is not a file inside the "
            "folder; save the model again with save_pretrained. Nothing was published."
        )
    others = [f for f in listing if f not in chosen and f != "README.md"]  # README.md is the rendered card
    state = [f for f in others if _matches(f, TRAINING_STATE)]
    chosen += [f for f in others if f not in state and _matches(f, include)]
    chosen += state if include_training_state else []
    left_out = [f for f in others if f not in chosen]
    return FileSelection(
        upload=chosen,
        training_state=[f for f in left_out if f in state],
        skipped=[f for f in left_out if f not in state],
        links=links,
        own_readme="README.md" in listing,
    )


def shard_weights(
    folder: Path, files: list[str], max_shard_size: int | str, workdir: Path
) -> dict[str, Path]:
    """path in repo -> local path; a model.safetensors above ``max_shard_size`` becomes shards and their index
    (written into ``workdir``)."""
    mapping = {f: folder / f for f in files}
    if "model.safetensors" not in mapping:
        return mapping
    from huggingface_hub import save_torch_state_dict, split_torch_state_dict_into_shards
    from safetensors.torch import load_file

    weights = load_file(mapping["model.safetensors"])
    try:
        sharded = split_torch_state_dict_into_shards(weights, max_shard_size=max_shard_size).is_sharded
    except ValueError as error:  # a size huggingface_hub cannot read
        raise SettingError("max_shard_size", f"must be a size such as 2GB or 500MB: {error}") from None
    if not sharded:
        return mapping
    save_torch_state_dict(weights, workdir, max_shard_size=max_shard_size)
    del mapping["model.safetensors"]
    return mapping | {path.name: path for path in sorted(workdir.glob("model*.safetensors*"))}
