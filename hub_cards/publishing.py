"""Publish a saved model folder to the Hub (or a Hub-compatible server) as one commit, then verify it.

    publish("outputs/sst2", "me/briskbert-sst2", tag="v1")

1. Checks the folder: ``config.json`` with ``architectures`` and ``auto_map``, the code files ``auto_map``
   names (and their relative imports), safetensors weights (every shard of an index), and a tokenizer.
   An incomplete folder is refused with the list of what is missing.
2. Picks exactly the model files; optimizer/scheduler states, checkpoints, logs, hidden files, the training
   facts and anything else stay local unless named in ``include``. A single safetensors file larger than
   ``max_shard_size`` is re-sharded with an index.
3. Renders the model card (``hub_cards.card``).
4. Creates the repo (and branch) if needed and pushes everything in one ``create_commit`` whose parent is
   the branch head read just before, so the commit either lands whole or not at all. Files already on the
   Hub with the same content are skipped; with nothing changed no commit is made. Files the branch has
   that the folder no longer has are deleted in the same commit.
5. Tags the commit, then verifies it in a clean subprocess: fresh cache, the project not importable,
   Auto classes with ``trust_remote_code=True``, and a ``pipeline()`` smoke test for the model's task.

Network failures, timeouts and 5xx answers are retried with exponential backoff; after the last attempt a
``PublishError`` says which step failed and that the repo still points at its previous commit.
The token is taken from ``token=`` or the usual huggingface_hub sources and never printed or uploaded.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from fnmatch import fnmatch
from pathlib import Path

from .card import TASKS, CardError, read_config, render_card, task_for_architecture

TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.txt",
    "added_tokens.json",
    "tokenizer.model",
    "chat_template.jinja",
)
CONFIG_FILES = ("config.json", "generation_config.json")
# Never uploaded unless named in ``include`` (also reported in the dry run).
NEVER_BY_DEFAULT = (
    "optimizer*",
    "scheduler*",
    "rng_state*",
    "trainer_state.json",
    "training_args*",
    "checkpoint-*",
    "*.log",
    "logs",
    "runs",
    "events.out.tfevents*",
    "*.bin",
    "*.pt",
    "*.pth",
    "*.ckpt",
    "training_facts.json",
    "README.md",
    "*token*.txt",
    "*.env",
    "*.pem",
    "*.key",
)
PROJECT_PACKAGES = ("briskbert",)
_REL_IMPORT_RES = (
    re.compile(r"^\s*import\s+\.(\S+)\s*$", re.M),
    re.compile(r"^\s*from\s+\.(\S+)\s+import", re.M),
)


class IncompleteModelFolder(ValueError):
    def __init__(self, model_dir: Path, missing: list[str]):
        self.missing = missing
        super().__init__(
            f"{model_dir} cannot be published, it lacks:\n  - "
            + "\n  - ".join(missing)
            + "\nSave the model and tokenizer with save_pretrained (after importing modeling and "
            "tokenization so the code files and auto_map are written)."
        )


class PublishError(RuntimeError):
    """A publishing step failed for good; the message says which, and what state the repo is in."""


@dataclass
class PublishResult:
    repo_id: str
    revision: str
    files: dict[str, int]  # path in repo -> size in bytes (README.md included)
    card: str
    commit_id: str | None = None
    commit_url: str | None = None
    new_commit: bool = False
    tag: str | None = None
    verification: dict | None = None
    skipped: list[str] = field(default_factory=list)  # local files left out

    @property
    def verified(self) -> bool:
        return bool(self.verification and self.verification.get("ok"))


# ---- the folder ---------------------------------------------------------------------------------
def _module_files(auto_map: dict) -> list[str]:
    names = []
    for ref in auto_map.values():
        for item in ref if isinstance(ref, (list, tuple)) else [ref]:
            if isinstance(item, str):
                item = item.split("--", 1)[-1]  # "repo--module.Class" references another repo's code
                names.append(item.rsplit(".", 1)[0] + ".py")
    return list(dict.fromkeys(names))


def _with_relative_imports(folder: Path, files: list[str], missing: list[str]) -> list[str]:
    seen, todo = [], list(files)
    while todo:
        name = todo.pop(0)
        if name in seen:
            continue
        seen.append(name)
        path = folder / name
        if not path.is_file():
            missing.append(f"{name} (code file referenced by auto_map or imported by another code file)")
            continue
        text = path.read_text(encoding="utf-8")
        for regex in _REL_IMPORT_RES:
            todo += [m.split(".")[0] + ".py" for m in regex.findall(text)]
    return seen


def collect_files(
    model_dir: str | Path, include: tuple[str, ...] | list[str] = ()
) -> tuple[list[str], list[str]]:
    """(files to upload, local files left out). Raises ``IncompleteModelFolder`` listing what is missing."""
    folder = Path(model_dir)
    if not folder.is_dir():
        raise IncompleteModelFolder(folder, [f"the folder itself ({folder} does not exist)"])
    missing: list[str] = []
    chosen: list[str] = []
    config = None
    try:
        config = read_config(folder)
    except (CardError, ValueError):
        missing.append("config.json (a readable model configuration)")
    if config is not None:
        chosen += [f for f in CONFIG_FILES if (folder / f).is_file()]
        archs = config.get("architectures") or []
        if not archs:
            missing.append("config.json 'architectures' (which head this model is)")
        auto_map = config.get("auto_map") or {}
        if not auto_map:
            missing.append("config.json 'auto_map' (remote code entry points; import modeling before saving)")
        elif archs:
            try:
                _, auto_class, _ = task_for_architecture(archs[0])
                if auto_class not in auto_map:
                    missing.append(f"config.json auto_map['{auto_class}'] (needed to load {archs[0]})")
            except CardError as e:
                missing.append(str(e))
        chosen += _with_relative_imports(folder, _module_files(auto_map), missing)
    # weights
    if (folder / "model.safetensors.index.json").is_file():
        index = json.loads((folder / "model.safetensors.index.json").read_text())
        shards = sorted(set(index.get("weight_map", {}).values()))
        chosen.append("model.safetensors.index.json")
        for shard in shards:
            (chosen if (folder / shard).is_file() else missing).append(shard)
    elif (folder / "model.safetensors").is_file():
        chosen.append("model.safetensors")
    else:
        hint = (
            " (only PyTorch .bin weights found: re-save with safe_serialization)"
            if list(folder.glob("pytorch_model*.bin"))
            else ""
        )
        missing.append("model.safetensors (weights)" + hint)
    # tokenizer
    tok_files = [f for f in TOKENIZER_FILES if (folder / f).is_file()]
    if "tokenizer_config.json" not in tok_files or not (
        {"tokenizer.json", "vocab.txt", "tokenizer.model"} & set(tok_files)
    ):
        missing.append(
            "tokenizer (tokenizer_config.json plus tokenizer.json or vocab.txt: save the tokenizer too)"
        )
    else:
        tok_cfg = json.loads((folder / "tokenizer_config.json").read_text())
        chosen += tok_files
        chosen += _with_relative_imports(folder, _module_files(tok_cfg.get("auto_map") or {}), missing)
    if missing:
        raise IncompleteModelFolder(folder, list(dict.fromkeys(missing)))
    all_files = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    for rel in all_files:
        if rel not in chosen and any(fnmatch(rel, pat) or fnmatch(rel.split("/")[0], pat) for pat in include):
            chosen.append(rel)
    chosen = list(dict.fromkeys(chosen))
    skipped = [f for f in all_files if f not in chosen]
    return chosen, skipped


def _check_no_secret(folder: Path, files: list[str], token: str | None) -> None:
    if not token:
        return
    needle = token.encode()
    for rel in files:
        data = (folder / rel).read_bytes()
        if needle in data:
            raise PublishError(
                f"{rel} contains the access token; refusing to upload it. Remove the token "
                "from the file and publish again."
            )


def _maybe_shard(folder: Path, files: list[str], max_shard_size: int | str, workdir: Path) -> dict[str, Path]:
    """path in repo -> local path; a too-large model.safetensors becomes shards plus an index."""
    mapping = {f: folder / f for f in files}
    from huggingface_hub.serialization._base import parse_size_to_int

    limit = parse_size_to_int(max_shard_size) if isinstance(max_shard_size, str) else int(max_shard_size)
    single = folder / "model.safetensors"
    if "model.safetensors" not in mapping or single.stat().st_size <= limit:
        return mapping
    from huggingface_hub import split_torch_state_dict_into_shards
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    with safe_open(str(single), "pt") as f:
        metadata = f.metadata() or {"format": "pt"}
    state = load_file(str(single))
    split = split_torch_state_dict_into_shards(state, max_shard_size=limit)
    del mapping["model.safetensors"]
    for shard_name, names in split.filename_to_tensors.items():
        save_file({n: state[n].contiguous() for n in names}, str(workdir / shard_name), metadata=metadata)
        mapping[shard_name] = workdir / shard_name
    index = {
        "metadata": {"total_size": sum(t.numel() * t.element_size() for t in state.values())},
        "weight_map": split.tensor_to_filename,
    }
    (workdir / "model.safetensors.index.json").write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")
    mapping["model.safetensors.index.json"] = workdir / "model.safetensors.index.json"
    return mapping


# ---- retries -------------------------------------------------------------------------------------
def _retryable(exc: BaseException) -> bool:
    import httpx2
    from huggingface_hub.errors import HfHubHTTPError

    if isinstance(exc, (httpx2.TransportError, TimeoutError, ConnectionError)):
        return True
    if isinstance(exc, HfHubHTTPError) and exc.response is not None:
        return exc.response.status_code >= 500 or exc.response.status_code in (408, 429)
    return False


def _redact(text: str, token: str | None) -> str:
    return text.replace(token, "***") if token else text


def _retry(step: str, fn, *, attempts: int, backoff_s: float, token: str | None, log, state: str):
    for attempt in range(1, attempts + 1):
        try:
            return fn()
        except Exception as e:  # noqa: BLE001 - filtered by _retryable
            if not _retryable(e):
                raise PublishError(
                    f"{step} failed: {_redact(str(e) or type(e).__name__, token)}\n{state}"
                ) from None
            if attempt == attempts:
                raise PublishError(
                    f"{step} failed after {attempts} attempts; last error: {type(e).__name__}: "
                    f"{_redact(str(e), token)[:500]}\n{state}\nRe-run the same command to finish publishing."
                ) from None
            wait = backoff_s * 2 ** (attempt - 1)
            log(f"{step}: attempt {attempt} failed ({type(e).__name__}); retrying in {wait:.1f} s")
            time.sleep(wait)


# ---- verification ----------------------------------------------------------------------------------
_VERIFY_SCRIPT = r"""
import importlib.abc, json, sys
BLOCKED = set(sys.argv[2].split(","))
class _NoProject(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"{name} is part of the publishing project and must not be importable here")
sys.meta_path.insert(0, _NoProject())
args = json.loads(sys.argv[1])
repo, commit, task, auto_class = args["repo_id"], args["commit_id"], args["pipeline_tag"], args["auto_class"]
import transformers
from huggingface_hub import snapshot_download
from transformers import AutoTokenizer, pipeline
files = sorted(p for p in __import__("os").listdir(snapshot_download(repo, revision=commit)))
model = getattr(transformers, auto_class).from_pretrained(repo, revision=commit, trust_remote_code=True)
module = type(model).__module__
assert module.startswith("transformers_modules."), f"model class came from {module}, not the repo's code"
tokenizer = AutoTokenizer.from_pretrained(repo, revision=commit, trust_remote_code=True)
pipe = pipeline(task, model=repo, revision=commit, trust_remote_code=True)
text = "The cat sat on the mat."
if task == "fill-mask":
    out = pipe(f"The cat sat on the {tokenizer.mask_token}.", top_k=3)
    summary = [o["token_str"] for o in out]
    assert len(out) == 3
elif task == "text-classification":
    out = pipe(text)
    summary = out[0]["label"]
    assert summary in set(model.config.id2label.values())
elif task == "token-classification":
    out = pipe(text)
    summary = len(out)
elif task == "question-answering":
    out = pipe(question="Where did the cat sit?", context=text)
    summary = out["answer"]
    assert isinstance(summary, str)
else:
    out = pipe(text)
    summary = len(out[0][0])
    assert summary == model.config.hidden_size
print(json.dumps({"ok": True, "model_class": f"{module}.{type(model).__name__}",
                  "tokenizer_class": type(tokenizer).__name__, "task": task, "pipeline_output": summary,
                  "files": files}))
"""


def verify_commit(
    repo_id: str,
    commit_id: str,
    *,
    pipeline_tag: str,
    auto_class: str,
    endpoint: str,
    token: str | None = None,
    timeout_s: float = 600,
) -> dict:
    """Download ``commit_id`` into a fresh cache and load it in a clean interpreter. Returns
    ``{"ok": True, "model_class", "tokenizer_class", "task", "pipeline_output", "files"}`` or
    ``{"ok": False, "error"}``."""
    with tempfile.TemporaryDirectory(prefix="briskbert-verify-") as tmp:
        script = Path(tmp) / "verify_published_model.py"
        script.write_text(_VERIFY_SCRIPT)
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(
                (
                    "PYTHON",
                    "HF_HUB_CACHE",
                    "HUGGINGFACE_HUB_CACHE",
                    "HF_MODULES_CACHE",
                    "TRANSFORMERS_CACHE",
                    "HF_TOKEN",
                    "HUGGING_FACE_HUB_TOKEN",
                )
            )
            and k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_ENDPOINT", "HF_HOME")
        }
        env.update(
            {
                "HF_ENDPOINT": endpoint,
                "HF_HOME": str(Path(tmp) / "hf-home"),
                "HF_HUB_DISABLE_TELEMETRY": "1",
                "HF_HUB_DISABLE_PROGRESS_BARS": "1",
                "TRANSFORMERS_VERBOSITY": "error",
                "TOKENIZERS_PARALLELISM": "false",
            }
        )
        if token:
            env["HF_TOKEN"] = token  # environment only: never on the command line
        args = json.dumps(
            {
                "repo_id": repo_id,
                "commit_id": commit_id,
                "pipeline_tag": pipeline_tag,
                "auto_class": auto_class,
            }
        )
        try:
            proc = subprocess.run(
                [sys.executable, "-I", str(script), args, ",".join(PROJECT_PACKAGES)],
                cwd=tmp,
                env=env,
                capture_output=True,
                text=True,
                timeout=timeout_s,
            )
        except subprocess.TimeoutExpired:
            return {"ok": False, "error": f"verification did not finish within {timeout_s:.0f} s"}
        if proc.returncode == 0:
            for line in reversed(proc.stdout.strip().splitlines()):
                try:
                    return json.loads(line)
                except ValueError:
                    continue
        tail = _redact((proc.stderr or proc.stdout).strip(), token).splitlines()[-15:]
        return {"ok": False, "error": "\n".join(tail)}


# ---- publish ------------------------------------------------------------------------------------------
def _set_timeout(timeout_s: float | None):
    """Give every huggingface_hub request a timeout (plain API calls have none by default)."""
    from huggingface_hub.utils import _http

    if timeout_s is None:
        return lambda: None

    def factory():
        client = _http.default_client_factory()
        client.timeout = timeout_s
        return client

    _http.set_client_factory(factory)
    return lambda: _http.set_client_factory(_http.default_client_factory)


def publish(
    model_dir: str | Path,
    repo_id: str,
    *,
    revision: str = "main",
    tag: str | None = None,
    private: bool = False,
    commit_message: str | None = None,
    token: str | None = None,
    endpoint: str | None = None,
    dry_run: bool = False,
    verify: bool = True,
    include: tuple[str, ...] | list[str] = (),
    max_shard_size: int | str = "2GB",
    attempts: int = 4,
    backoff_s: float = 1.0,
    timeout_s: float | None = None,
    verify_timeout_s: float = 600,
    log=print,
) -> PublishResult:
    """Publish ``model_dir`` to ``repo_id`` (see the module docstring). Returns a ``PublishResult``;
    raises ``IncompleteModelFolder``, ``CardError`` or ``PublishError``."""
    from huggingface_hub import CommitOperationAdd, CommitOperationDelete, HfApi, constants, get_token

    folder = Path(model_dir)
    if repo_id.count("/") != 1:
        raise PublishError(f"--repo_id must be NAMESPACE/NAME, got {repo_id!r}")
    token = token or get_token()
    files, skipped = collect_files(folder, include)
    _check_no_secret(folder, files, token)
    config = read_config(folder)
    pipeline_tag, auto_class, _ = task_for_architecture(config["architectures"][0])
    card = str(render_card(folder, repo_id, revision=tag or revision, revision_is_pinned=bool(tag)))
    if token and token in card:
        raise PublishError("The rendered card contains the access token; refusing to publish it.")

    with tempfile.TemporaryDirectory(prefix="briskbert-publish-") as work:
        mapping = _maybe_shard(folder, files, max_shard_size, Path(work))
        sizes = {p: mapping[p].stat().st_size for p in sorted(mapping)}
        sizes["README.md"] = len(card.encode())
        result = PublishResult(
            repo_id=repo_id,
            revision=revision,
            files=dict(sorted(sizes.items())),
            card=card,
            tag=tag,
            skipped=skipped,
        )
        if dry_run:
            log(
                f"Dry run: would publish {len(sizes)} files to {repo_id}@{revision}"
                + (f" tagged {tag}" if tag else "")
            )
            for p, n in result.files.items():
                log(f"  {p}  ({n:,} bytes)")
            if skipped:
                log("Left out: " + ", ".join(skipped))
            log("---- README.md ----\n" + card)
            return result

        endpoint = (endpoint or constants.ENDPOINT).rstrip("/")
        api = HfApi(endpoint=endpoint, token=token)
        restore = _set_timeout(timeout_s)
        retry = dict(attempts=attempts, backoff_s=backoff_s, token=token, log=log)
        try:
            _retry(
                "create repo",
                lambda: api.create_repo(repo_id, private=private, exist_ok=True),
                state="Nothing was published.",
                **retry,
            )
            if revision != "main":
                _retry(
                    "create branch",
                    lambda: api.create_branch(repo_id, branch=revision, exist_ok=True),
                    state="Nothing was published.",
                    **retry,
                )
            head = _retry(
                "read branch head",
                lambda: api.repo_info(repo_id, revision=revision).sha,
                state="Nothing was published.",
                **retry,
            )
            state = f"{repo_id}@{revision} is unchanged at commit {head}."

            def push():
                current = api.repo_info(repo_id, revision=revision).sha
                remote = set(api.list_repo_files(repo_id, revision=current))
                ops = [
                    CommitOperationAdd(path_in_repo=p, path_or_fileobj=str(mapping[p]))
                    for p in sorted(mapping)
                ]
                ops.append(CommitOperationAdd(path_in_repo="README.md", path_or_fileobj=card.encode()))
                ops += [
                    CommitOperationDelete(path_in_repo=p)
                    for p in sorted(remote - set(sizes) - {".gitattributes"})
                ]
                info = api.create_commit(
                    repo_id,
                    ops,
                    revision=revision,
                    parent_commit=current,
                    commit_message=commit_message or f"Publish {folder.name} with briskbert",
                )
                return current, info

            parent, info = _retry("commit", push, state=state, **retry)
            result.commit_id, result.commit_url = info.oid, info.commit_url
            result.new_commit = info.oid != parent
            log(
                ("Committed " if result.new_commit else "No changes; already published at ") + info.commit_url
            )
            if tag:
                _retry(
                    "tag",
                    lambda: _ensure_tag(api, repo_id, tag, info.oid),
                    **retry,
                    state=f"The commit {info.oid} is published but not tagged.",
                )
                log(f"Tagged {info.oid} as {tag}")
        finally:
            restore()

    if verify:
        log("Verifying: fresh cache, clean interpreter, Auto classes and pipeline() ...")
        result.verification = verify_commit(
            repo_id,
            result.commit_id,
            pipeline_tag=pipeline_tag,
            auto_class=auto_class,
            endpoint=endpoint,
            token=token,
            timeout_s=verify_timeout_s,
        )
        if result.verified:
            v = result.verification
            log(
                f"Verified: {v['model_class']} + {v['tokenizer_class']}, pipeline('{pipeline_tag}') -> "
                f"{v['pipeline_output']}"
            )
        else:
            log("Verification FAILED:\n" + result.verification.get("error", ""))
    log(f"Commit: {result.commit_url}")
    return result


def _ensure_tag(api, repo_id: str, tag: str, commit_id: str) -> None:
    refs = api.list_repo_refs(repo_id)
    existing = {t.name: t.target_commit for t in refs.tags}
    if tag in existing:
        if existing[tag] != commit_id:
            raise PublishError(
                f"Tag {tag!r} already names commit {existing[tag]}; tags are not moved. "
                "Publish with a new --tag."
            )
        return
    api.create_tag(repo_id, tag=tag, revision=commit_id)


__all__ = [
    "IncompleteModelFolder",
    "PublishError",
    "PublishResult",
    "collect_files",
    "publish",
    "verify_commit",
    "TASKS",
]
