"""Publish a saved model folder: its files (:mod:`.model_files`) and card, scanned for secrets, are committed to a
staging branch from the head read before, verified there (:mod:`.verification`), then committed to the branch and
tagged. A ``PublishError`` names the failed step and the repo's state; the token is never printed or uploaded."""

from __future__ import annotations

import secrets
import tempfile
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from briskbert.errors import UserError
from briskbert.files import file_digest

from .card import read_config, render_card, task_for_architecture
from .model_files import FileSelection, collect_files, shard_weights
from .secrets import Finding, scan_bytes, scan_files
from .settings import PublishSettings
from .verification import verify_commit


class PublishError(UserError):
    """A publishing step failed for good; the message says which, and what state the repo is in."""


class SecretsFound(PublishError):
    """Files to upload that are, or hold, credentials: each named with what it holds (never the secret)."""

    def __init__(self, findings: list[Finding]):
        super().__init__(
            f"refusing to publish: {'; '.join(f.describe() for f in findings)}. Delete the secret (or the file) "
            "from the model folder, or narrow include so the file is left out; revoke any secret that was ever "
            "shared. Nothing was published."
        )


@dataclass
class PublishResult:
    repo_id: str
    revision: str
    files: dict[str, int]  # path in repo -> size in bytes (README.md included)
    card: str
    selection: FileSelection  # what was chosen, and what was left out and why
    tag: str | None = None  # the tag asked for
    tagged: bool = False  # whether the commit carries it now
    commit_id: str | None = None
    new_commit: bool = False
    verification: dict | None = None
    kept: list[str] = field(default_factory=list)  # on the branch, not in the folder, kept
    deleted: list[str] = field(default_factory=list)  # on the branch, not in the folder, deleted

    @property
    def verified(self) -> bool:
        return bool(self.verification and self.verification.get("ok"))


def _error_text(exc: BaseException) -> str:
    """What went wrong, in one line: the Hub's own words when it sent any (huggingface_hub wraps a failed LFS
    upload in a RuntimeError whose cause is the HTTP error)."""
    from huggingface_hub.errors import HfHubHTTPError

    http = exc
    while http is not None and not isinstance(http, HfHubHTTPError):
        http = http.__cause__
    text = f"{type(exc).__name__}: {exc}"
    if http is not None and http.response is not None and http.server_message:
        text = f"the Hub answered {http.response.status_code}: {http.server_message}"
    return " ".join(text.split()).rstrip(".")


@dataclass
class _Publisher:
    """One publish's calls to the Hub and the files it pushes."""

    api: object  # huggingface_hub.HfApi
    repo_id: str
    revision: str
    files: dict[str, Path]  # path in repo -> local file, README.md (the card) included
    delete_missing: bool
    token: str | None
    log: Callable[[str], None]
    deletes: list[str] = field(default_factory=list)  # files on the branch each commit deletes

    @contextmanager
    def step(self, name: str, state: str | Callable[[], str] = "Nothing was published."):
        """Any failure inside is one ``PublishError`` naming the step and the repo's state (a callable is asked
        only then: the repo may have changed meanwhile)."""
        try:
            yield
        except PublishError:
            raise
        except Exception as e:  # noqa: BLE001 - every failure is one line with the repo's state
            message = _error_text(e).replace(self.token, "***") if self.token else _error_text(e)
            state = state() if callable(state) else state
            raise PublishError(f"{name} failed: {message[:500]}. {state}") from None

    def head(self) -> str:
        return self.api.repo_info(self.repo_id, revision=self.revision).sha

    def holds_these_files(self, commit_id: str) -> bool:
        """True when the commit holds these files with this content (the sha256 of an LFS file, the git blob id
        of any other), and no other file unless those are kept (``delete_missing`` unset)."""
        from huggingface_hub.hf_api import RepoFile
        from huggingface_hub.utils.sha import git_hash

        tree = self.api.list_repo_tree(self.repo_id, revision=commit_id, recursive=True)
        remote = {f.path: f for f in tree if isinstance(f, RepoFile) and f.path != ".gitattributes"}
        if not set(self.files) <= set(remote) or (self.delete_missing and set(remote) != set(self.files)):
            return False
        return all(
            file_digest(local) == remote[path].lfs.sha256
            if remote[path].lfs
            else git_hash(local.read_bytes()) == remote[path].blob_id
            for path, local in self.files.items()
        )

    def tag_is_done(self, tag: str) -> bool:
        """True when ``tag`` already names the branch head and nothing changed; False when the tag is free.
        Refuses, before any write, a tag that names anything else."""
        from huggingface_hub.errors import RepositoryNotFoundError

        with self.step("check the tag"):
            try:
                refs = self.api.list_repo_refs(self.repo_id)
            except RepositoryNotFoundError:
                return False
            target = {t.name: t.target_commit for t in refs.tags}.get(tag)
            if target is None:
                return False
            head = {b.name: b.target_commit for b in refs.branches}.get(self.revision)
            if target == head and self.holds_these_files(head):
                return True
        raise PublishError(
            f"Tag {tag!r} already names commit {target}; tags are not moved: publish under a new tag. Nothing "
            "was published."
        )

    def branch_state(self, read_before: str) -> str:
        """Where the branch is after a commit failed, read again: another writer may have committed, or this
        commit may have landed before its answer was lost."""
        where = f"{self.repo_id}@{self.revision}"
        try:
            now = self.head()
            ours = now != read_before and self.holds_these_files(now)
        except Exception as e:  # noqa: BLE001 - this only completes an error message
            return f"{where} was at commit {read_before}; reading it again failed ({type(e).__name__})."
        if now == read_before:
            return f"{where} is unchanged at commit {now}."
        if ours:
            return (
                f"{self.revision} moved to {now}, which holds exactly these files (the commit went through "
                "before the error); re-run to verify and tag it."
            )
        return (
            f"{self.revision} moved to {now} meanwhile (this publish started from {read_before}); nothing "
            "was published; re-run to publish on top of it."
        )

    def commit(self, message: str, branch: str, parent: str, state) -> str:
        """The id of one commit of exactly these files on ``branch``, whose parent must be ``parent``. A lost
        race (HTTP 412) is not retried: the files were chosen against a head that is gone."""
        from huggingface_hub import CommitOperationAdd, CommitOperationDelete

        with self.step("commit", state):
            ops = [CommitOperationAdd(p, str(self.files[p])) for p in sorted(self.files)]
            ops += [CommitOperationDelete(p) for p in self.deletes]
            info = self.api.create_commit(
                self.repo_id, ops, revision=branch, parent_commit=parent, commit_message=message
            )
        return info.oid

    def staged(self, message: str, head: str, verify: Callable | None) -> tuple[str | None, dict | None]:
        """(the branch's new commit, or None when verification failed; the verification): ``verify`` a commit on
        a staging branch made from ``head``, then commit the same files, hashed again, to the branch (the Hub's
        API cannot point a branch at another commit). Without ``verify`` the branch gets the commit at once."""
        if verify is None:
            return self.commit(message, self.revision, head, lambda: self.branch_state(head)), None
        staging = f"briskbert-staging-{secrets.token_hex(4)}"
        with self.step("create staging branch"):
            self.api.create_branch(self.repo_id, branch=staging, revision=head)
        unchanged = f"Nothing was published: {self.repo_id}@{self.revision} is unchanged at {head}."
        try:
            staged_id = self.commit(message, staging, head, unchanged)
            self.log(f"Staged {staged_id} on {staging}; verifying it in a clean interpreter ...")
            verification = verify(staged_id)
            if not verification.get("ok"):
                return None, verification
            with self.step("compare", unchanged):
                same = self.holds_these_files(staged_id)
            if not same:
                raise PublishError(f"The files changed on disk while {staged_id} was verified. {unchanged}")
            return self.commit(message, self.revision, head, lambda: self.branch_state(head)), verification
        finally:
            try:
                self.api.delete_branch(self.repo_id, branch=staging)
            except Exception as e:  # noqa: BLE001 - a leftover branch is reported, not fatal
                self.log(
                    f"Could not delete staging branch {staging} ({type(e).__name__}); delete it by hand."
                )


def _log_dry_run(result: PublishResult, delete_missing: bool, log) -> None:
    selection = result.selection
    where = f"{result.repo_id}@{result.revision}" + (f" tagged {result.tag}" if result.tag else "")
    log(f"Dry run: would publish {len(result.files)} files to {where}")
    for path, size in result.files.items():
        log(f"  {path}  ({size:,} bytes{', the card shown below' if path == 'README.md' else ''})")
    if selection.own_readme:
        log("Not uploaded: the folder's own README.md (the card shown below takes its place)")
    if selection.links:
        log("Symlinks followed (each resolves inside the folder): " + "; ".join(selection.links))
    if selection.training_state:
        state = ", ".join(selection.training_state)
        log(f"Left out, training state (include_training_state uploads it): {state}")
    if selection.skipped:
        log("Left out, not model files (include uploads them): " + ", ".join(selection.skipped))
    action = "deleted (delete_missing)." if delete_missing else "kept (delete_missing deletes them)."
    log(f"Files already on {result.revision} that this folder lacks would be {action}")
    log("---- README.md ----\n" + result.card)


def publish(settings: PublishSettings, *, endpoint: str | None = None, log=print) -> PublishResult:
    """Publish as the module docstring says, to ``endpoint`` (``HF_ENDPOINT`` by default)."""
    from huggingface_hub import HfApi, constants, get_token

    folder, token = Path(settings.model_dir).expanduser(), settings.token or get_token()
    repo_id, revision, tag = settings.repo_id, settings.revision, settings.tag
    selection = collect_files(folder, settings.include or (), settings.include_training_state)
    if findings := scan_files(folder, selection.upload, token=token):
        raise SecretsFound(findings)
    card = str(render_card(folder, repo_id, revision=tag or revision, revision_is_pinned=bool(tag)))
    if finding := scan_bytes(card.encode(), "README.md (the rendered card)", token=token):
        raise SecretsFound([finding])
    with tempfile.TemporaryDirectory(prefix="briskbert-publish-") as work:
        files = shard_weights(folder, selection.upload, settings.max_shard_size, Path(work))
        files["README.md"] = Path(work, "README.md")
        files["README.md"].write_bytes(card.encode())
        sizes = {path: local.stat().st_size for path, local in sorted(files.items())}
        result = PublishResult(repo_id, revision, sizes, card, selection, tag=tag)
        if settings.dry_run:
            _log_dry_run(result, settings.delete_missing, log)
            return result
        endpoint = (endpoint or constants.ENDPOINT).rstrip("/")
        api = HfApi(endpoint=endpoint, token=token)
        hub = _Publisher(api, repo_id, revision, files, settings.delete_missing, token, log)
        pipeline_tag, auto_class = task_for_architecture(read_config(folder)["architectures"][0])
        checks = dict(pipeline_tag=pipeline_tag, auto_class=auto_class, endpoint=endpoint, token=token)
        verify = None if settings.no_verify else (lambda commit: verify_commit(repo_id, commit, **checks))
        message = settings.commit_message or f"Publish {folder.name} with briskbert"
        _push(hub, result, message, settings.private, verify)
    return result


def _push(hub: _Publisher, result: PublishResult, message: str, private: bool, verify) -> None:
    """Check the tag, commit (staged and verified first unless ``verify`` is None), tag."""
    api, repo_id, revision, tag, log = hub.api, hub.repo_id, hub.revision, result.tag, hub.log
    result.tagged = bool(tag) and hub.tag_is_done(tag)
    with hub.step("create repo"):
        api.create_repo(repo_id, private=private, exist_ok=True)
    if revision != "main":
        with hub.step("create branch"):
            api.create_branch(repo_id, branch=revision, exist_ok=True)
    with hub.step("read the branch"):
        head = hub.head()
        remote = api.list_repo_files(repo_id, revision=head)
        unchanged = hub.holds_these_files(head)
    stale = sorted(set(remote) - set(hub.files) - {".gitattributes"})
    listed = ", ".join(stale)
    if stale and hub.delete_missing:
        log(f"Deleting from {revision} (not in the folder; delete_missing): {listed}")
    elif stale:
        log(f"Keeping on {revision} (not in the folder; delete_missing would delete them): {listed}")
    result.kept, result.deleted = ([], stale) if hub.delete_missing else (stale, [])
    hub.deletes = result.deleted
    commits = f"{api.endpoint}/{repo_id}/commit/"
    if unchanged:  # a re-run: verify and tag
        result.commit_id = head
        log(f"No changes; already published at {commits}{head}")
        if verify is not None:
            log("Verifying: fresh cache, clean interpreter, Auto classes and pipeline() ...")
            result.verification = verify(head)
    else:
        result.commit_id, result.verification = hub.staged(message, head, verify)
        result.new_commit = result.commit_id is not None
        if result.new_commit:
            log(f"Committed to {revision}: {commits}{result.commit_id}")
    if verify is not None and result.verified:
        v = result.verification
        log(f"Verified: {v['model_class']} + {v['tokenizer_class']} -> {v['pipeline_output']}")
    elif verify is not None:
        log("Verification FAILED:\n" + result.verification.get("error", ""))
        if result.commit_id is None:
            log(
                f"Not published: {repo_id}@{revision} stays at {head}; the staged commit failed verification."
            )
    if tag and not result.tagged and result.commit_id and (result.verified or verify is None):
        with hub.step("tag", f"The commit {result.commit_id} is published but not tagged."):
            api.create_tag(repo_id, tag=tag, revision=result.commit_id)
        result.tagged = True
        log(f"Tagged {result.commit_id} as {tag}")
    elif tag and not result.tagged:
        log(f"Not tagged as {tag}: a commit that failed verification is never tagged.")
