"""Publish a saved briskbert model folder to the Hub: checked, committed to a staging branch, verified to
load, and only then committed to the branch and tagged (a failed verification leaves the branch as it was).

    briskbert publish --model_dir outputs/sst2 --repo_id me/briskbert-sst2 --tag v1

The token comes from $HF_TOKEN, --token_file or the saved login (`hf auth login`); the endpoint from
$HF_ENDPOINT (the real Hub by default, or a `briskbert local-hub`). A damaged folder, a file holding
credentials, or a symlink or code reference (auto_map) leading outside the folder stops the publish before
anything is sent. Training state stays local unless --include_training_state; files on the branch the folder
lacks are kept unless --delete_missing.
"""

from briskbert.commands.arguments import parse
from briskbert.hub_cards.settings import PublishSettings


def main(argv=None) -> int:
    (settings,) = parse(__doc__, PublishSettings, argv=argv)
    from briskbert.hub_cards.publishing import publish

    result = publish(settings)  # its refusals are UserErrors: one line, exit 2
    return 0 if (settings.dry_run or settings.no_verify or result.verified) else 1
