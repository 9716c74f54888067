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

from briskbert.commands.arguments import parse
from briskbert.hub_cards.settings import PublishSettings


def main(argv=None) -> int:
    (settings,) = parse(__doc__, PublishSettings, argv=argv)
    from briskbert.hub_cards.publishing import publish

    result = publish(settings)  # its refusals are UserErrors: one line, exit 2
    return 0 if (settings.dry_run or settings.no_verify or result.verified) else 1
