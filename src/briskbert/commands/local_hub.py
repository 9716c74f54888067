"""Run the local Hub-compatible server.

    export LOCAL_HUB_TOKEN=hf_local_example_3f9a
    briskbert local-hub --host 127.0.0.1 --port 8080 --data_dir ./hub-data

Then point the clients at it: ``HF_ENDPOINT=http://127.0.0.1:8080 HF_TOKEN=$LOCAL_HUB_TOKEN ...``. The token
comes from $LOCAL_HUB_TOKEN or --token_file; --token also works but shows in `ps` to every local user. With
``--upload_mode lfs`` large/binary files go through the LFS API and clients need ``HF_HUB_DISABLE_XET=1``.
Private repos answer anonymous reads like missing ones (404 RepoNotFound); pull requests are refused.
"""

import argparse
import os
import sys
from pathlib import Path

from briskbert.errors import UserError


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    pass


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=_HelpFormatter)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8080)
    p.add_argument("--data_dir", required=True, help="storage folder (created if missing)")
    p.add_argument("--token_file", default=None, help="file holding the bearer token (first line)")
    p.add_argument(
        "--token",
        default=None,
        help="bearer token for writes and private reads; visible in `ps`: prefer $LOCAL_HUB_TOKEN or "
        "--token_file. Without any token the server accepts anonymous writes",
    )
    p.add_argument("--user", default="testuser", help="user name reported by whoami")
    p.add_argument("--upload_mode", choices=["regular", "lfs"], default="regular")
    p.add_argument("--log_file", default=None, help="append one line per request (method, path, status)")
    p.add_argument("--read_timeout_s", type=float, default=30.0, help="close connections silent this long")
    p.add_argument("--max_connections", type=int, default=64, help="connections served at once")
    p.add_argument("--max_json_mb", type=int, default=16, help="largest JSON request body")
    p.add_argument("--max_commit_mb", type=int, default=4096, help="largest ndjson commit (regular uploads)")
    p.add_argument("--fault_step", default=None, help="inject faults at this protocol step (for tests)")
    p.add_argument("--fault_kind", choices=["500", "400", "drop", "stall"], default="500")
    p.add_argument("--fault_times", type=int, default=1)
    p.add_argument("--fault_stall_s", type=float, default=2.0)
    return p


def _token(args, parser: argparse.ArgumentParser) -> str | None:
    if args.token_file:
        path = Path(args.token_file)
        if not path.is_file():
            parser.error(
                f"--token_file {path} does not exist: write the token into it, or use $LOCAL_HUB_TOKEN"
            )
        lines = path.read_text(encoding="utf-8").splitlines()
        if not lines or not lines[0].strip():
            parser.error(f"--token_file {path} is empty: its first line must be the token")
        return lines[0].strip()
    return args.token or os.environ.get("LOCAL_HUB_TOKEN") or None


def main(argv=None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    token = _token(args, parser)

    from briskbert.hub_server import DataDirInUse, ServerLimits, serve
    from briskbert.hub_server.server import STEPS

    if args.fault_step and args.fault_step not in STEPS:
        parser.error(f"--fault_step must be one of {', '.join(STEPS)}, got {args.fault_step!r}")
    fault = None
    if args.fault_step:
        fault = {"step": args.fault_step, "kind": args.fault_kind, "times": args.fault_times}
        fault["stall_s"] = args.fault_stall_s
    limits = ServerLimits(
        max_json_bytes=args.max_json_mb << 20,
        max_commit_bytes=args.max_commit_mb << 20,
        read_timeout_s=args.read_timeout_s,
        max_connections=args.max_connections,
    )
    where = f"http://{args.host}:{args.port}"
    print(f"local hub serving {os.path.abspath(args.data_dir)} on {where}", flush=True)
    if token is None:
        print("warning: no token set; anyone who can reach the port can write", file=sys.stderr, flush=True)
    try:
        serve(
            args.host,
            args.port,
            args.data_dir,
            token,
            fault=fault,
            user=args.user,
            upload_mode=args.upload_mode,
            log_file=args.log_file,
            limits=limits,
        )
    except DataDirInUse as error:
        raise UserError(str(error)) from error
    except OSError as error:
        raise UserError(f"cannot serve on {where}: {error.strerror or error}; pick another --port") from error
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
