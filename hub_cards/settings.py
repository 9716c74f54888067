"""What ``briskbert publish`` is asked to do, one field per flag; torch-free, so ``--help`` stays fast."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from briskbert.errors import SettingError


@dataclass(frozen=True)
class PublishSettings:
    model_dir: str
    repo_id: str = field(metadata={"help": "NAMESPACE/NAME"})
    revision: str = field(default="main", metadata={"help": "branch to commit to (made from main if absent)"})
    tag: str | None = field(default=None, metadata={"help": "tag for the verified commit (the card pins it)"})
    private: bool = field(default=False, metadata={"help": "create the repo as private"})
    commit_message: str | None = None
    token_file: str | None = field(default=None, metadata={"help": "file whose first line is the token"})
    token: str | None = field(
        default=None,
        metadata={"help": "access token; visible in `ps`: prefer $HF_TOKEN, a token_file or the saved login"},
    )
    dry_run: bool = field(default=False, metadata={"help": "print the files and the card; contact nothing"})
    include_training_state: bool = field(
        default=False, metadata={"help": "also upload optimizer/scheduler/RNG states and checkpoints"}
    )
    max_shard_size: str = field(default="2GB", metadata={"help": "re-shard weights above this size"})
    no_verify: bool = field(default=False, metadata={"help": "skip the download-and-load check"})
    delete_missing: bool = field(
        default=False, metadata={"help": "delete branch files the folder lacks (kept and listed otherwise)"}
    )
    # each --include adds one glob (a list field would take several values after one --include instead)
    include: str | None = field(
        default=None, metadata={"action": "append", "help": "glob of extra files to upload (repeatable)"}
    )

    def __post_init__(self):
        if self.repo_id.count("/") != 1:
            raise SettingError("repo_id", f"must be NAMESPACE/NAME, got {self.repo_id!r}")
        if self.token_file:  # read here, once: the rest only sees ``token``
            object.__setattr__(self, "token", read_token_file(self.token_file))


def read_token_file(token_file: str) -> str:
    """The token on the first line of ``token_file``; a missing or empty file is a ``SettingError``."""
    path = Path(token_file)
    token = path.read_text(encoding="utf-8").partition("\n")[0].strip() if path.is_file() else ""
    if not token:
        raise SettingError("token_file", f"{path} is missing or empty: its first line must be the token")
    return token
