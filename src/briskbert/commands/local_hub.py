"""Run the local Hub-compatible server.

    export LOCAL_HUB_TOKEN=hf_local_example_3f9a
    briskbert local-hub --host 127.0.0.1 --port 8080 --data_dir ./hub-data

Then point the clients at it: ``HF_ENDPOINT=http://127.0.0.1:8080 HF_TOKEN=$LOCAL_HUB_TOKEN ...``. The token
comes from $LOCAL_HUB_TOKEN or --token_file; --token also works but shows in `ps` to every local user. With
``--upload_mode lfs`` large/binary files go through the LFS API and clients need ``HF_HUB_DISABLE_XET=1``.
Private repos answer anonymous reads like missing ones (404 RepoNotFound); pull requests are refused.
"""

import contextlib
import errno
import os
import sys
from dataclasses import dataclass, field

from briskbert.commands.arguments import parse
from briskbert.errors import SettingError, UserError
from briskbert.extras import require_extra
from briskbert.hub_cards.settings import read_token_file


@dataclass(frozen=True, kw_only=True)
class ServerArguments:
    host: str = "127.0.0.1"
    port: int = 8080
    data_dir: str = field(
        default=None, metadata={"help": "storage folder (created if missing)", "required": True}
    )
    token_file: str | None = field(default=None, metadata={"help": "file whose first line is the token"})
    token: str | None = field(
        default=None,
        metadata={
            "help": "bearer token for writes and private reads; visible in `ps`: prefer $LOCAL_HUB_TOKEN or "
            "--token_file. Without any token the server accepts anonymous writes"
        },
    )
    user: str = field(default="testuser", metadata={"help": "user name reported by whoami"})
    upload_mode: str = field(default="regular", metadata={"choices": ["regular", "lfs"]})
    log_file: str | None = field(default=None, metadata={"help": "append method, path, status per request"})
    read_timeout_s: float = field(default=30.0, metadata={"help": "close connections silent this long"})
    max_connections: int = field(default=64, metadata={"help": "connections served at once"})
    max_json_mb: int = field(default=16, metadata={"help": "largest JSON request body"})
    max_commit_mb: int = field(default=4096, metadata={"help": "largest ndjson commit (regular uploads)"})
    fault_step: str | None = field(default=None, metadata={"help": "inject faults at this step (tests)"})
    fault_kind: str = field(default="500", metadata={"choices": ["500", "400", "drop", "stall"]})
    fault_times: int = 1
    fault_stall_s: float = 2.0


def main(argv=None) -> int:
    (args,) = parse(__doc__, ServerArguments, argv=argv)
    require_extra("hub", "briskbert local-hub")
    token = args.token or os.environ.get("LOCAL_HUB_TOKEN") or None
    if args.token_file:
        token = read_token_file(args.token_file)

    from briskbert.hub_server import DataDirInUse, HubServer, ServerLimits

    fault = dict(
        step=args.fault_step, kind=args.fault_kind, times=args.fault_times, stall_s=args.fault_stall_s
    )
    limits = ServerLimits(
        max_json_bytes=args.max_json_mb << 20,
        max_commit_bytes=args.max_commit_mb << 20,
        read_timeout_s=args.read_timeout_s,
        max_connections=args.max_connections,
    )
    try:
        server = HubServer(
            (args.host, args.port),
            args.data_dir,
            token,
            fault=fault if args.fault_step else None,
            user=args.user,
            upload_mode=args.upload_mode,
            log_file=args.log_file,
            limits=limits,
        )
    except DataDirInUse as error:
        raise SettingError("data_dir", str(error)) from error
    except OSError as error:
        if error.errno == errno.EADDRINUSE:
            raise SettingError(
                "port",
                f"{args.port} is already in use on {args.host}: pick another --port, or --port 0 for a free one",
            ) from None
        raise UserError(f"cannot serve on {args.host}:{args.port}: {error.strerror or error}") from error
    print(f"local hub serving {os.path.abspath(args.data_dir)} on {server.url}", flush=True)
    if token is None:
        print("warning: no token set; anyone who can reach the port can write", file=sys.stderr, flush=True)
    try:
        with contextlib.suppress(KeyboardInterrupt):
            server.serve_forever()
    finally:
        server.server_close()
    return 0
