"""Publish a saved model folder to the Hub (or a Hub-compatible server) as one commit, then verify it.

    publish("outputs/sst2", "me/briskbert-sst2", tag="v1")

The steps, each one function below:

1. **Check the folder** (``collect_files``): ``config.json`` with ``architectures`` and ``auto_map``, the
   code files ``auto_map`` names (and their relative imports), safetensors weights (every shard of an
   index), and a tokenizer. An incomplete folder is refused with the list of what is missing.
2. **Collect the files**: exactly the model files, plus what ``include`` names. Training state (optimizer
   and scheduler states, RNG states, checkpoints) stays local unless ``include_training_state`` is set, and
   is listed in the dry run either way. A single safetensors file larger than ``max_shard_size`` is
   re-sharded with an index.
3. **Scan for secrets** (``scan_for_secrets``, rules in ``secrets``): well-known credential files by name
   (``.env*``, SSH keys, ``*.pem``, gcloud and docker credentials, a kubeconfig, ...) and contents that hold
   private keys or access tokens (Hugging Face, AWS, Google, OpenAI-style, GitHub, Slack, ..., and the token
   in use), also in UTF-16/32 text, inside gzip/bz2/xz/zip data and in base64 runs, refuse the whole
   publish before anything is sent, naming each file and what was found (never the secret itself).
4. **Check the tag up front**: an existing ``tag`` is accepted only when it already names the branch head
   and nothing changed (a re-run of a finished publish); otherwise the publish stops before any write.
5. **Create the repo** (and branch) if needed.
6. **Commit** everything in one ``create_commit`` whose parent is the branch head read just before, so the
   commit lands whole or not at all; when another writer moved the branch meanwhile (HTTP 412), the error
   says where the branch is now. Files already on the Hub with the same content are skipped; with
   nothing changed no commit is made. Files the branch has that the folder no longer has are deleted.
7. **Verify** the commit in a clean interpreter (``verification.verify_commit``).
8. **Tag** it, only after verification passed (or was skipped with ``verify=False``): a commit that
   failed verification is never tagged.

Network failures, timeouts, 408, 429 and 5xx answers are retried with exponential backoff; other 4xx
answers are not (they would fail the same way). A ``PublishError`` says which step failed and what state
the repo is in. The token is taken from ``token=`` or the usual huggingface_hub sources (``HF_TOKEN``, the
saved login) and never printed or uploaded.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from fnmatch import fnmatch
from pathlib import Path

from briskbert.errors import UserError

from .card import TASKS, CardError, read_config, render_card, task_for_architecture
from .secrets import CONTENT_RULES, NAME_RULES, Finding, scan_bytes, scan_files
from .verification import verify_commit

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
# Training state: left out unless include_training_state is set, whatever ``include`` says.
TRAINING_STATE = (
    "optimizer*",
    "scheduler*",
    "scaler*",
    "rng_state*",
    "random_states*",
    "trainer_state.json",
    "training_args*",
    "checkpoint-*",
    "step_*",
    "*.ckpt",
    "*.pt",
    "*.pth",
)
_REL_IMPORT_RES = (
    re.compile(r"^\s*import\s+\.(\S+)\s*$", re.M),
    re.compile(r"^\s*from\s+\.(\S+)\s+import", re.M),
)


class IncompleteModelFolder(UserError, ValueError):
    """A folder that is not a complete model: one line naming the folder and everything it lacks."""

    def __init__(self, model_dir: Path, missing: list[str]):
        self.missing = missing
        super().__init__(
            f"{model_dir} cannot be published, it lacks: {'; '.join(missing)}. Save the model and tokenizer with "
            "save_pretrained (after importing briskbert.modeling, so the code files and auto_map are written)."
        )


class PublishError(RuntimeError):
    """A publishing step failed for good; the message says which, and what state the repo is in."""


@dataclass
class FileSelection:
    upload: list[str]  # paths relative to the folder, model files first
    training_state: list[str]  # left out unless include_training_state
    skipped: list[str]  # everything else left out


@dataclass
class PublishResult:
    repo_id: str
    revision: str
    files: dict[str, int]  # path in repo -> size in bytes (README.md included)
    card: str
    commit_id: str | None = None
    commit_url: str | None = None
    new_commit: bool = False
    tag: str | None = None  # the tag asked for
    tagged: bool = False  # whether the commit carries it now
    verification: dict | None = None
    skipped: list[str] = field(default_factory=list)  # local files left out
    training_state: list[str] = field(default_factory=list)  # left out unless asked for

    @property
    def verified(self) -> bool:
        return bool(self.verification and self.verification.get("ok"))


def _matches(rel: str, patterns: tuple[str, ...] | list[str]) -> bool:
    """A pattern matches the whole relative path or any one of its components."""
    return any(fnmatch(rel, pat) or any(fnmatch(part, pat) for part in rel.split("/")) for pat in patterns)


# ---- 1-2. the folder and its files -----------------------------------------------------------------------
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


def _config_and_code(folder: Path, missing: list[str]) -> list[str]:
    try:
        config = read_config(folder)
    except (CardError, ValueError):
        missing.append("config.json (a readable model configuration)")
        return []
    chosen = [f for f in CONFIG_FILES if (folder / f).is_file()]
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
    return chosen + _with_relative_imports(folder, _module_files(auto_map), missing)


def _weights(folder: Path, missing: list[str]) -> list[str]:
    if (folder / "model.safetensors.index.json").is_file():
        index = json.loads((folder / "model.safetensors.index.json").read_text())
        shards = sorted(set(index.get("weight_map", {}).values()))
        missing += [s for s in shards if not (folder / s).is_file()]
        return ["model.safetensors.index.json"] + [s for s in shards if (folder / s).is_file()]
    if (folder / "model.safetensors").is_file():
        return ["model.safetensors"]
    bin_only = list(folder.glob("pytorch_model*.bin"))
    hint = " (only PyTorch .bin weights found: re-save with safe_serialization)" if bin_only else ""
    missing.append("model.safetensors (weights)" + hint)
    return []


def _tokenizer(folder: Path, missing: list[str]) -> list[str]:
    tok_files = [f for f in TOKENIZER_FILES if (folder / f).is_file()]
    if "tokenizer_config.json" not in tok_files or not (
        {"tokenizer.json", "vocab.txt", "tokenizer.model"} & set(tok_files)
    ):
        missing.append(
            "tokenizer (tokenizer_config.json plus tokenizer.json or vocab.txt: save the tokenizer too)"
        )
        return []
    tok_cfg = json.loads((folder / "tokenizer_config.json").read_text())
    return tok_files + _with_relative_imports(folder, _module_files(tok_cfg.get("auto_map") or {}), missing)


def collect_files(
    model_dir: str | Path, include: tuple[str, ...] | list[str] = (), include_training_state: bool = False
) -> FileSelection:
    """The files to upload and those left out. Raises ``IncompleteModelFolder`` listing what is missing."""
    folder = Path(model_dir)
    if not folder.is_dir():
        raise IncompleteModelFolder(folder, [f"the folder itself ({folder} does not exist)"])
    missing: list[str] = []
    chosen = _config_and_code(folder, missing) + _weights(folder, missing) + _tokenizer(folder, missing)
    if missing:
        raise IncompleteModelFolder(folder, list(dict.fromkeys(missing)))
    chosen = list(dict.fromkeys(chosen))
    all_files = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    training_state = [f for f in all_files if f not in chosen and _matches(f, TRAINING_STATE)]
    for rel in all_files:
        # README.md is always the rendered card; training state needs its own flag.
        wanted = _matches(rel, include) and rel != "README.md"
        if rel not in chosen and wanted and (include_training_state or rel not in training_state):
            chosen.append(rel)
    if include_training_state:
        chosen += [f for f in training_state if f not in chosen]
    left_out = [f for f in all_files if f not in chosen]
    return FileSelection(
        upload=chosen,
        training_state=[f for f in left_out if f in training_state],
        skipped=[f for f in left_out if f not in training_state],
    )


# ---- 3. secrets ------------------------------------------------------------------------------------------
class SecretsFound(PublishError, UserError):
    """Files to upload that are, or hold, credentials: one line naming each file, what it holds (never the
    secret itself) and the fix."""

    def __init__(self, findings: list[Finding]):
        self.findings = findings
        listed = "; ".join(f.describe() for f in findings)
        super().__init__(
            f"refusing to publish: {listed}. Delete the secret (or the file) from the model folder, or narrow "
            "--include so the file is left out; revoke any secret that was ever shared. Nothing was published."
        )


def scan_for_secrets(folder: Path, files: list[str], token: str | None) -> None:
    """Raise ``SecretsFound`` when any file to upload is a credential file by its name or holds a private
    key or an access token (plain, UTF-16/32, compressed or base64-encoded; see ``secrets``)."""
    findings = scan_files(folder, files, token=token)
    if findings:
        raise SecretsFound(findings)


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


# ---- the network: timeouts and retries ------------------------------------------------------------------
def _retryable(exc: BaseException) -> bool:
    """Transport failures, timeouts, 408, 429 and 5xx; never another 4xx (it would fail the same way)."""
    import httpx2
    from huggingface_hub.errors import HfHubHTTPError

    if isinstance(exc, (httpx2.TransportError, TimeoutError, ConnectionError)):
        return True
    if isinstance(exc, HfHubHTTPError) and exc.response is not None:
        return exc.response.status_code >= 500 or exc.response.status_code in (408, 429)
    return False


def _redact(text: str, token: str | None) -> str:
    return text.replace(token, "***") if token else text


def _text(state: str | Callable[[], str]) -> str:
    return state() if callable(state) else state


@dataclass
class _Network:
    """Runs one publishing step against the Hub, retrying what is transient."""

    api: object  # huggingface_hub.HfApi
    attempts: int
    backoff_s: float
    token: str | None
    log: Callable[[str], None]

    def call(self, step: str, fn: Callable, state: str | Callable[[], str]):
        """``fn()``, retried while what fails is transient. ``state`` says what state the repo is in when
        it fails for good; a callable is asked only then (the repo may have changed while ``fn`` ran)."""
        for attempt in range(1, self.attempts + 1):
            try:
                return fn()
            except PublishError:
                raise
            except Exception as e:  # noqa: BLE001 - sorted by _retryable
                message = _redact(str(e) or type(e).__name__, self.token)
                if not _retryable(e):
                    raise PublishError(f"{step} failed: {message}\n{_text(state)}") from None
                if attempt == self.attempts:
                    raise PublishError(
                        f"{step} failed after {self.attempts} attempts; last error: {type(e).__name__}: "
                        f"{message[:500]}\n{_text(state)}\nRe-run the same command to finish publishing."
                    ) from None
                wait = self.backoff_s * 2 ** (attempt - 1)
                self.log(f"{step}: attempt {attempt} failed ({type(e).__name__}); retrying in {wait:.1f} s")
                time.sleep(wait)


@contextlib.contextmanager
def _request_timeout(timeout_s: float | None):
    """Give every huggingface_hub request a timeout (plain API calls have none by default)."""
    from huggingface_hub.utils import _http

    if timeout_s is None:
        yield
        return

    def factory():
        client = _http.default_client_factory()
        client.timeout = timeout_s
        return client

    _http.set_client_factory(factory)
    try:
        yield
    finally:
        _http.set_client_factory(_http.default_client_factory)


# ---- 4-8. the steps that talk to the Hub ---------------------------------------------------------------
def _digests(data_or_path: bytes | Path) -> tuple[str, str]:
    """(git blob sha1, sha256): what the Hub's tree shows for a regular and for an LFS file."""
    if isinstance(data_or_path, bytes):
        data = data_or_path
        return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest(), hashlib.sha256(data).hexdigest()
    size = data_or_path.stat().st_size
    sha1, sha256 = hashlib.sha1(b"blob %d\0" % size), hashlib.sha256()
    with open(data_or_path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            sha1.update(chunk)
            sha256.update(chunk)
    return sha1.hexdigest(), sha256.hexdigest()


@dataclass
class _Upload:
    """What one publish pushes: files by path in the repo, and the card."""

    repo_id: str
    revision: str
    files: dict[str, Path]
    card: bytes

    def matches_remote(self, api, commit_id: str) -> bool:
        """True when the commit holds exactly these files with this content."""
        from huggingface_hub.hf_api import RepoFile

        remote = {
            f.path: f
            for f in api.list_repo_tree(self.repo_id, revision=commit_id, recursive=True)
            if isinstance(f, RepoFile) and f.path != ".gitattributes"
        }
        local = {**self.files, "README.md": self.card}
        if set(remote) != set(local):
            return False
        for path, content in local.items():
            git_oid, sha256 = _digests(content)
            lfs = remote[path].lfs
            if (lfs.sha256 if lfs is not None else remote[path].blob_id) != (
                sha256 if lfs is not None else git_oid
            ):
                return False
        return True


def _check_tag_up_front(net: _Network, upload: _Upload, tag: str | None) -> bool:
    """Step 4: True when ``tag`` already names the branch head and nothing changed (nothing to do);
    False when the tag is free. Refuses before any write when the tag names anything else."""
    from huggingface_hub.errors import RepositoryNotFoundError, RevisionNotFoundError

    if not tag:
        return False
    api = net.api

    def tag_and_head() -> tuple[str | None, str | None]:
        try:
            tags = {t.name: t.target_commit for t in api.list_repo_refs(upload.repo_id).tags}
        except RepositoryNotFoundError:
            return None, None
        try:
            return tags.get(tag), api.repo_info(upload.repo_id, revision=upload.revision).sha
        except RevisionNotFoundError:
            return tags.get(tag), None

    target, head = net.call("check the tag", tag_and_head, "Nothing was published.")
    if target is None:
        return False
    if target == head and net.call(
        "compare", lambda: upload.matches_remote(api, head), "Nothing was published."
    ):
        return True
    raise PublishError(
        f"Tag {tag!r} already names commit {target}; tags are not moved. Publish with a new --tag. "
        "Nothing was published."
    )


def _create_repo(net: _Network, upload: _Upload, private: bool) -> None:
    """Step 5."""
    api, state = net.api, "Nothing was published."
    net.call("create repo", lambda: api.create_repo(upload.repo_id, private=private, exist_ok=True), state)
    if upload.revision != "main":
        net.call(
            "create branch",
            lambda: api.create_branch(upload.repo_id, branch=upload.revision, exist_ok=True),
            state,
        )


def _branch_state(net: _Network, upload: _Upload, read_before: str) -> str:
    """Where the branch is after a commit failed, read again: the head read before may be stale (another
    writer may have committed, or this commit may have landed before its answer was lost)."""
    where = f"{upload.repo_id}@{upload.revision}"
    try:
        now = net.api.repo_info(upload.repo_id, revision=upload.revision).sha
        ours = now != read_before and upload.matches_remote(net.api, now)
    except Exception as e:  # noqa: BLE001 - this only completes an error message
        return f"{where} was at commit {read_before}; reading it again failed ({type(e).__name__})."
    if now == read_before:
        return f"{where} is unchanged at commit {now}."
    if ours:
        return (
            f"{upload.revision} moved to {now}, which holds exactly these files (the commit went through "
            "before the error); re-run to verify and tag it."
        )
    return (
        f"{upload.revision} moved to {now} meanwhile (this publish started from {read_before}); nothing "
        "was published; re-run to publish on top of it."
    )


def _commit(net: _Network, upload: _Upload, message: str) -> tuple[str, str, bool]:
    """Step 6: (commit id, commit URL, whether a new commit was made). One commit whose parent is the head
    read just before: it lands whole or not at all. Losing a race to another writer (HTTP 412) is not
    retried: the files were chosen against a head that is gone."""
    from huggingface_hub import CommitOperationAdd, CommitOperationDelete
    from huggingface_hub.errors import HfHubHTTPError

    api, repo_id, revision = net.api, upload.repo_id, upload.revision
    head = net.call(
        "read branch head", lambda: api.repo_info(repo_id, revision=revision).sha, "Nothing was published."
    )

    def push():
        current = api.repo_info(repo_id, revision=revision).sha
        remote = set(api.list_repo_files(repo_id, revision=current))
        ops = [
            CommitOperationAdd(path_in_repo=p, path_or_fileobj=str(upload.files[p]))
            for p in sorted(upload.files)
        ]
        ops.append(CommitOperationAdd(path_in_repo="README.md", path_or_fileobj=upload.card))
        stale = remote - set(upload.files) - {"README.md", ".gitattributes"}
        ops += [CommitOperationDelete(path_in_repo=p) for p in sorted(stale)]
        try:
            info = api.create_commit(
                repo_id, ops, revision=revision, parent_commit=current, commit_message=message
            )
        except HfHubHTTPError as e:
            if e.response is None or e.response.status_code != 412:
                raise
            raise PublishError(
                f"commit lost a race: another commit landed on {repo_id}@{revision} after this publish read "
                f"its head. {_branch_state(net, upload, current)}"
            ) from None
        return current, info

    parent, info = net.call("commit", push, lambda: _branch_state(net, upload, head))
    return info.oid, info.commit_url, info.oid != parent


def _verify(
    result: PublishResult, pipeline_tag: str, auto_class: str, endpoint: str, token, timeout_s, log
) -> None:
    """Step 7."""
    log("Verifying: fresh cache, clean interpreter, Auto classes and pipeline() ...")
    result.verification = verify_commit(
        result.repo_id,
        result.commit_id,
        pipeline_tag=pipeline_tag,
        auto_class=auto_class,
        endpoint=endpoint,
        token=token,
        timeout_s=timeout_s,
    )
    v = result.verification
    if result.verified:
        log(
            f"Verified: {v['model_class']} + {v['tokenizer_class']}, pipeline('{pipeline_tag}') -> {v['pipeline_output']}"
        )
    else:
        log("Verification FAILED:\n" + v.get("error", ""))


def _tag(net: _Network, result: PublishResult) -> None:
    """Step 8: only a verified (or explicitly unverified) commit is tagged."""
    state = f"The commit {result.commit_id} is published but not tagged."
    net.call(
        "tag", lambda: net.api.create_tag(result.repo_id, tag=result.tag, revision=result.commit_id), state
    )
    result.tagged = True
    net.log(f"Tagged {result.commit_id} as {result.tag}")


def _log_dry_run(result: PublishResult, log) -> None:
    where = f"{result.repo_id}@{result.revision}" + (f" tagged {result.tag}" if result.tag else "")
    log(f"Dry run: would publish {len(result.files)} files to {where}")
    for path, size in result.files.items():
        log(f"  {path}  ({size:,} bytes)")
    if result.training_state:
        log(
            "Training state left out (upload it with --include_training_state): "
            + ", ".join(result.training_state)
        )
    if result.skipped:
        log("Left out: " + ", ".join(result.skipped))
    log("---- README.md ----\n" + result.card)


def _prepare(folder: Path, repo_id: str, revision: str, tag, include, include_training_state, token):
    """Steps 1-3 and the card: (selection, card text, pipeline tag, auto class)."""
    if repo_id.count("/") != 1:
        raise PublishError(f"--repo_id must be NAMESPACE/NAME, got {repo_id!r}")
    selection = collect_files(folder, include, include_training_state)
    scan_for_secrets(folder, selection.upload, token)
    pipeline_tag, auto_class, _ = task_for_architecture(read_config(folder)["architectures"][0])
    card = str(render_card(folder, repo_id, revision=tag or revision, revision_is_pinned=bool(tag)))
    finding = scan_bytes(card.encode(), "README.md (the rendered card)", token=token)
    if finding:
        raise SecretsFound([finding])
    return selection, card, pipeline_tag, auto_class


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
    include_training_state: bool = False,
    max_shard_size: int | str = "2GB",
    attempts: int = 4,
    backoff_s: float = 1.0,
    timeout_s: float | None = None,
    verify_timeout_s: float = 600,
    log=print,
) -> PublishResult:
    """Publish ``model_dir`` to ``repo_id`` (the steps are in the module docstring). Returns a
    ``PublishResult``; raises ``IncompleteModelFolder``, ``CardError`` or ``PublishError``."""
    from huggingface_hub import HfApi, constants, get_token

    folder, token = Path(model_dir), token or get_token()
    selection, card, pipeline_tag, auto_class = _prepare(
        folder, repo_id, revision, tag, include, include_training_state, token
    )
    with tempfile.TemporaryDirectory(prefix="briskbert-publish-") as work:
        upload = _Upload(
            repo_id,
            revision,
            _maybe_shard(folder, selection.upload, max_shard_size, Path(work)),
            card.encode(),
        )
        sizes = {p: path.stat().st_size for p, path in upload.files.items()} | {"README.md": len(upload.card)}
        result = PublishResult(repo_id, revision, dict(sorted(sizes.items())), card, tag=tag)
        result.skipped, result.training_state = selection.skipped, selection.training_state
        if dry_run:
            _log_dry_run(result, log)
            return result
        endpoint = (endpoint or constants.ENDPOINT).rstrip("/")
        net = _Network(HfApi(endpoint=endpoint, token=token), attempts, backoff_s, token, log)
        with _request_timeout(timeout_s):
            result.tagged = _check_tag_up_front(net, upload, tag)
            _create_repo(net, upload, private)
            message = commit_message or f"Publish {folder.name} with briskbert"
            result.commit_id, result.commit_url, result.new_commit = _commit(net, upload, message)
            log(
                ("Committed " if result.new_commit else "No changes; already published at ")
                + result.commit_url
            )
            if verify:
                _verify(result, pipeline_tag, auto_class, endpoint, token, verify_timeout_s, log)
            if tag and not result.tagged and (result.verified or not verify):
                _tag(net, result)
            elif tag and not result.tagged:
                log(f"Not tagged as {tag}: a commit that failed verification is never tagged.")
    log(f"Commit: {result.commit_url}")
    return result


__all__ = [
    "FileSelection",
    "IncompleteModelFolder",
    "PublishError",
    "PublishResult",
    "CONTENT_RULES",
    "NAME_RULES",
    "SecretsFound",
    "TASKS",
    "collect_files",
    "publish",
    "scan_for_secrets",
    "verify_commit",
]
