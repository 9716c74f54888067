"""Torch-free checks of the files and names a user hands to a command, before any heavy work: each raises a
:class:`~briskbert.errors.SettingError` naming the setting, the file and the fix, not a deep library error later."""

from __future__ import annotations

import codecs
import json
import re
from dataclasses import dataclass
from pathlib import Path

from .errors import SettingError
from .files import manifest_problem

#: files from which ``AutoTokenizer`` can build a vocabulary (any one is enough)
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "vocab.json", "spiece.model", "sentencepiece.bpe.model")
#: weight files ``from_pretrained`` reads (any one of them is enough)
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")

_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?$")
_SURROGATE = re.compile("[\ud800-\udfff]")  # text that JSON's \ud800 escapes make, which UTF-8 cannot encode


@dataclass(frozen=True)
class ModelLocation:
    """Where a model named on the command line lives: a checked local folder or a Hub repo id."""

    name: str
    is_local: bool


def looks_like_local_path(name: str) -> bool:
    """True when ``name`` can only mean a path: it exists, is written as one, is no valid repo id, or starts
    with a folder that exists here (``runs/model``)."""
    if Path(name).expanduser().exists() or name.startswith(("/", ".", "~")) or name.endswith("/"):
        return True
    return not _REPO_ID.match(name) or ("/" in name and Path(name.split("/", 1)[0]).is_dir())


def check_model_source(name: str, setting: str, need_tokenizer: bool = True) -> ModelLocation:
    """A local model folder (checked by :func:`check_model_folder`) or a Hub repo that can be reached."""
    if not looks_like_local_path(name):
        check_hub_repo(name, setting)
        return ModelLocation(name, is_local=False)
    check_model_folder(Path(name).expanduser(), setting, need_tokenizer)
    return ModelLocation(str(Path(name).expanduser()), is_local=True)


def check_tokenizer_source(name: str, setting: str) -> None:
    """A local folder with tokenizer files, or a Hub repo that can be reached."""
    if not looks_like_local_path(name):
        return check_hub_repo(name, setting)
    _check_folder(Path(name).expanduser(), setting, "tokenizer")
    check_tokenizer_files(Path(name).expanduser(), setting)


def check_model_folder(folder: Path, setting: str, need_tokenizer: bool = True) -> dict:
    """The one check of a saved model folder before it is loaded: its manifest, config, weights (and tokenizer
    files), each parsed as far as it can be without torch; returns the parsed ``config.json``."""
    from safetensors import SafetensorError, safe_open

    _check_folder(folder, setting, "model")
    config = read_json_object(folder / "config.json", setting, "save the model with save_pretrained")
    if "model_type" not in config:
        raise SettingError(
            setting, f"{folder / 'config.json'} has no 'model_type'; it is not a transformers model config."
        )
    weights = [folder / name for name in WEIGHT_FILES if (folder / name).is_file()]
    if not weights:
        raise SettingError(
            setting,
            f"{folder} has no model weights (none of {', '.join(WEIGHT_FILES)}); "
            "save the model with save_pretrained or point at the complete folder.",
        )
    for weight_file in _weight_files(weights[0], setting):
        try:  # the header parses and every tensor lies inside the file
            if weight_file.suffix == ".safetensors":
                with safe_open(str(weight_file), framework="numpy"):
                    pass
        except (SafetensorError, OSError) as error:
            raise SettingError(
                setting, f"{weight_file} is truncated or damaged ({error}); download or save the model again."
            ) from None
    if need_tokenizer:
        check_tokenizer_files(folder, setting)
    return config


def _check_folder(folder: Path, setting: str, what: str) -> None:
    """``folder`` exists, is a folder, and still matches its manifest when it has one."""
    if not folder.exists():
        raise SettingError(setting, f"{folder}: the {what} folder does not exist; check the path.")
    if not folder.is_dir():
        raise SettingError(setting, f"{folder} is a file; give the {what} folder that holds it.")
    problem = manifest_problem(folder)
    if problem:
        raise SettingError(
            setting, f"{problem}; the folder was damaged after it was saved: save or copy it again."
        )


#: fewer entries than this cannot spell ordinary text: the special tokens plus letters and digits alone are ~70
MIN_VOCAB_ENTRIES = 100


def check_tokenizer_files(folder: Path, setting: str) -> None:
    """A folder must hold at least one vocabulary file: a ``tokenizer.json`` with a vocabulary, or a WordPiece
    ``vocab.txt`` (one token a line) large enough to tokenize text with more than ``[UNK]``."""
    present = [name for name in TOKENIZER_FILES if (folder / name).is_file()]
    if not present:
        raise SettingError(
            setting,
            f"{folder} has no tokenizer files (expected one of {', '.join(TOKENIZER_FILES)}); "
            "save the tokenizer into it with tokenizer.save_pretrained, or give tokenizer_name.",
        )
    if "tokenizer.json" in present:
        tokenizer = read_json_object(
            folder / "tokenizer.json", setting, "save the tokenizer again with save_pretrained"
        )
        model = tokenizer.get("model")
        if not (isinstance(model, dict) and model.get("vocab")):
            raise SettingError(
                setting,
                f"{folder / 'tokenizer.json'} has no vocabulary (no 'model' with a 'vocab'); save the "
                "tokenizer again with save_pretrained or train one with briskbert train-tokenizer.",
            )
    elif present[0] == "vocab.txt":
        with open(folder / "vocab.txt", "rb") as handle:
            entries = sum(1 for line in handle if line.strip())
        if entries < MIN_VOCAB_ENTRIES:
            raise SettingError(
                setting,
                f"{folder / 'vocab.txt'} holds {entries} tokens; a usable WordPiece vocabulary has at least "
                f"{MIN_VOCAB_ENTRIES} (special tokens, characters, word pieces): train one with briskbert "
                "train-tokenizer or copy the model's complete vocab.txt.",
            )


def check_text_file(path: str | Path, setting: str, allow_empty: bool = False) -> Path:
    """An existing, UTF-8 encoded (and, unless ``allow_empty``, non-blank) text file."""
    path = Path(path)
    if not path.exists():
        raise SettingError(setting, f"{path} does not exist.")
    if not path.is_file():
        raise SettingError(setting, f"{path} is a folder, not a file; name a file inside it.")
    decoder = codecs.getincrementaldecoder("utf-8")()
    line, has_text = 1, False
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            try:
                text = decoder.decode(chunk)
            except UnicodeDecodeError as error:
                line += chunk[: error.start].count(b"\n")
                raise SettingError(
                    setting,
                    f"{path} is not UTF-8 text (byte 0x{chunk[error.start]:02x} on line {line}); "
                    "re-save the file as UTF-8.",
                ) from None
            line += text.count("\n")
            has_text = has_text or bool(text.strip())
    if not has_text and not allow_empty:
        raise SettingError(setting, f"{path} is empty; give a file with data.")
    return path


def read_json_object(path: Path, setting: str, fix: str) -> dict:
    """Parse a JSON object file; a missing or malformed one is a :class:`SettingError` saying ``fix``."""
    if not path.is_file():
        raise SettingError(setting, f"{path} is missing; {fix}.")
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise SettingError(setting, f"{path} is not UTF-8 text; {fix}.") from None
    except json.JSONDecodeError as error:
        raise SettingError(
            setting,
            f"{path} is not valid JSON (line {error.lineno}, column {error.colno}: {error.msg}); {fix}.",
        ) from None
    except RecursionError:
        raise SettingError(setting, f"{path} nests too deeply to be read; {fix}.") from None
    if not isinstance(value, dict):
        raise SettingError(setting, f"{path} holds a JSON {type(value).__name__}, not an object; {fix}.")
    field = _not_unicode(value)
    if field is not None:  # JSON's \ud800 escapes decode to text that cannot be written out again
        raise SettingError(
            setting, f"{path}: {field} holds a lone surrogate (\\ud800-\\udfff), not text; {fix}."
        )
    return value


def _not_unicode(value, where: str = "") -> str | None:
    """The first field (``'a'.'b'[0]``) whose key or text holds a lone surrogate, or None."""
    if isinstance(value, str):
        return (where or "the document") if _SURROGATE.search(value) else None
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        here = f"{where}[{key}]" if isinstance(key, int) else f"{where}{'.' if where else ''}{key!r}"
        if isinstance(key, str) and _SURROGATE.search(key):
            return here
        found = _not_unicode(item, here)
        if found is not None:
            return found
    return None


def config_problem(config: dict) -> str | None:
    """What is wrong with the fields of a ``config.json`` that the card and the publisher read, or None."""
    archs, auto_map, labels = config.get("architectures"), config.get("auto_map"), config.get("id2label")
    if archs is not None and not (isinstance(archs, list) and all(isinstance(a, str) for a in archs)):
        return f"'architectures' must be a list of class names, got {archs!r:.80}"
    if "model_type" in config and not isinstance(config["model_type"], str):
        return f"'model_type' must be a string, got {config['model_type']!r:.80}"
    if auto_map is not None and not (
        isinstance(auto_map, dict)
        and all(
            isinstance(ref, str) or isinstance(ref, list) and all(isinstance(r, str | None) for r in ref)
            for ref in auto_map.values()
        )
    ):
        return f"'auto_map' must map Auto classes to 'module.Class' names, got {auto_map!r:.80}"
    if labels is not None and not (isinstance(labels, dict) and all(k.isdecimal() for k in labels)):
        return f"'id2label' must map label ids (0, 1, ...) to names, got {labels!r:.80}"
    return None


def check_hub_repo(repo_id: str, setting: str) -> None:
    """A repo id in the local Hub cache or that answers on the Hub, asked once without retries."""
    from huggingface_hub import HfApi, try_to_load_from_cache

    if isinstance(try_to_load_from_cache(repo_id, "config.json"), str):
        return
    try:
        HfApi().model_info(repo_id, timeout=10)
    except Exception as error:  # noqa: BLE001 - not found, gated, no network, offline: all mean "cannot use it"
        raise SettingError(
            setting,
            f"{repo_id!r}: there is no local folder of that name, and the Hub did not provide a repo of that name "
            f"({type(error).__name__}); give an existing folder or a Hub repo id you can access.",
        ) from None


def _weight_files(first: Path, setting: str) -> list[Path]:
    """The weight files behind ``first``: itself, or every shard a safetensors index names."""
    if not first.name.endswith(".index.json"):
        return [first]
    index = read_json_object(first, setting, "save the model again with save_pretrained")
    weight_map = index.get("weight_map")
    if not (
        isinstance(weight_map, dict) and weight_map and all(isinstance(n, str) for n in weight_map.values())
    ):
        raise SettingError(
            setting,
            f"{first} has no 'weight_map' from tensor names to shard files; save the model again with "
            "save_pretrained.",
        )
    shards = sorted(set(weight_map.values()))
    missing = [name for name in shards if not (first.parent / name).is_file()]
    if missing:
        raise SettingError(
            setting,
            f"{first.parent} lacks the weight shards {missing[:3]} its index names; copy the "
            "complete folder.",
        )
    return [first.parent / name for name in shards]
