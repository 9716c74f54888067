"""Publish a saved briskbert model folder to the Hub: checked, committed to a staging branch, verified to
load, and only then committed to the branch (a failed verification leaves the branch as it was).

    briskbert publish --model_dir outputs/sst2 --repo_id me/briskbert-sst2 --tag v1

The token comes from $HF_TOKEN, --token_file or the saved login (`hf auth login`); --token also works but
shows in `ps` to every local user. The endpoint comes from $HF_ENDPOINT (the real Hub by default; a local
server started with `briskbert local-hub` works the same). Files that look like credentials, or that hold
private keys or access tokens, stop the publish, and so does a symlink or code reference (auto_map) that
leads outside the folder; optimizer states and checkpoints stay local unless --include_training_state is
given. Files already on the branch that the folder lacks are listed and kept, unless --delete_missing. A
damaged folder (its manifest, a weights header, config or tokenizer) stops the publish before anything is
sent, --no_verify included. The commit is tagged only after it passed verification.
"""

from dataclasses import dataclass, field
from pathlib import Path

from briskbert.commands.arguments import parse
from briskbert.errors import SettingError


@dataclass(frozen=True)
class PublishArguments:
    model_dir: str
    repo_id: str = field(metadata={"help": "NAMESPACE/NAME"})
    revision: str = field(
        default="main", metadata={"help": "branch to commit to (created from main if missing)"}
    )
    tag: str | None = field(
        default=None, metadata={"help": "tag the verified commit (the card's usage snippet pins it)"}
    )
    private: bool = field(default=False, metadata={"help": "create the repo as private"})
    commit_message: str | None = None
    token_file: str | None = field(
        default=None, metadata={"help": "file holding the access token (first line)"}
    )
    token: str | None = field(
        default=None,
        metadata={"help": "access token; visible in `ps`: prefer $HF_TOKEN, --token_file or the saved login"},
    )
    dry_run: bool = field(
        default=False, metadata={"help": "print the file list and the card; contact nothing"}
    )
    include_training_state: bool = field(
        default=False,
        metadata={"help": "also upload optimizer/scheduler/RNG states and checkpoints (left out otherwise)"},
    )
    max_shard_size: str = field(
        default="2GB", metadata={"help": "re-shard model.safetensors above this size"}
    )
    no_verify: bool = field(default=False, metadata={"help": "skip the download-and-load check"})
    delete_missing: bool = field(
        default=False,
        metadata={
            "help": "delete files on the branch that the folder lacks (they are kept and listed otherwise)"
        },
    )
    # each --include adds one glob (a list field would take several values after one --include instead)
    include: str | None = field(
        default=None,
        metadata={
            "action": "append",
            "help": "glob of extra files to upload (repeatable), e.g. training_facts.json",
        },
    )


def main(argv=None) -> int:
    (args,) = parse(__doc__, PublishArguments, argv=argv)
    token = args.token
    if args.token_file:
        path = Path(args.token_file)
        token = path.read_text(encoding="utf-8").partition("\n")[0].strip() if path.is_file() else ""
        if not token:
            raise SettingError("token_file", f"{path} is missing or empty: its first line must be the token")
    from briskbert.hub_cards.publishing import publish

    result = publish(  # its refusals are UserErrors: one line, exit 2
        Path(args.model_dir).expanduser(),
        args.repo_id,
        revision=args.revision,
        tag=args.tag,
        private=args.private,
        commit_message=args.commit_message,
        token=token,
        dry_run=args.dry_run,
        verify=not args.no_verify,
        include=args.include or (),
        include_training_state=args.include_training_state,
        delete_missing=args.delete_missing,
        max_shard_size=args.max_shard_size,
    )
    return 0 if (args.dry_run or args.no_verify or result.verified) else 1
