"""Publish a saved briskbert model folder to the Hub as one commit, then verify it loads.

    briskbert publish --model_dir outputs/sst2 --repo_id me/briskbert-sst2 --tag v1

The token comes from $HF_TOKEN, --token_file or the saved login (`hf auth login`); --token also works but
shows in `ps` to every local user. The endpoint comes from $HF_ENDPOINT (the real Hub by default; a local
server started with `briskbert local-hub` works the same). Files that look like credentials, or that hold
private keys or access tokens, stop the publish; optimizer states and checkpoints stay local unless
--include_training_state is given. The commit is tagged only after it passed verification.
"""

import argparse
import sys
from pathlib import Path

from briskbert.errors import UserError


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    pass


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=_HelpFormatter)
    p.add_argument("--model_dir", required=True)
    p.add_argument("--repo_id", required=True, help="NAMESPACE/NAME")
    p.add_argument("--revision", default="main", help="branch to commit to (created from main if missing)")
    p.add_argument("--tag", default=None, help="tag the verified commit (the card's usage snippet pins it)")
    p.add_argument("--private", action="store_true", help="create the repo as private")
    p.add_argument("--commit_message", default=None)
    p.add_argument("--token_file", default=None, help="file holding the access token (first line)")
    p.add_argument(
        "--token",
        default=None,
        help="access token; visible in `ps`: prefer $HF_TOKEN, --token_file or the saved login",
    )
    p.add_argument("--dry_run", action="store_true", help="print the file list and the card; contact nothing")
    p.add_argument(
        "--include",
        action="append",
        default=[],
        help="glob of extra files to upload (repeatable), e.g. training_facts.json",
    )
    p.add_argument(
        "--include_training_state",
        action="store_true",
        help="also upload optimizer/scheduler/RNG states and checkpoints (left out otherwise)",
    )
    p.add_argument("--max_shard_size", default="2GB", help="re-shard model.safetensors above this size")
    p.add_argument("--no_verify", action="store_true", help="skip the download-and-load check")
    p.add_argument("--attempts", type=int, default=4, help="tries per network step")
    p.add_argument("--backoff_s", type=float, default=1.0, help="first retry delay (doubles each time)")
    p.add_argument("--timeout_s", type=float, default=None, help="timeout for each HTTP request")
    return p


def _token(args, parser: argparse.ArgumentParser) -> str | None:
    if not args.token_file:
        return args.token
    path = Path(args.token_file)
    lines = path.read_text(encoding="utf-8").splitlines() if path.is_file() else []
    if not lines or not lines[0].strip():
        parser.error(f"--token_file {path} is missing or empty: its first line must be the token")
    return lines[0].strip()


def main(argv=None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    token = _token(args, parser)
    if args.attempts < 1:
        parser.error(f"--attempts must be at least 1, got {args.attempts}")

    from briskbert.hub_cards.card import CardError
    from briskbert.hub_cards.publishing import IncompleteModelFolder, PublishError, publish

    try:
        result = publish(
            args.model_dir,
            args.repo_id,
            revision=args.revision,
            tag=args.tag,
            private=args.private,
            commit_message=args.commit_message,
            token=token,
            dry_run=args.dry_run,
            verify=not args.no_verify,
            include=tuple(args.include),
            include_training_state=args.include_training_state,
            max_shard_size=args.max_shard_size,
            attempts=args.attempts,
            backoff_s=args.backoff_s,
            timeout_s=args.timeout_s,
        )
    except (IncompleteModelFolder, CardError, PublishError) as error:
        raise UserError(str(error)) from error
    if args.dry_run:
        return 0
    return 0 if (args.no_verify or result.verified) else 1


if __name__ == "__main__":
    sys.exit(main())
