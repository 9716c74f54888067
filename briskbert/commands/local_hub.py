"""Run the local Hub-compatible server.

    briskbert local-hub --host 127.0.0.1 --port 8080 --data_dir ./hub-data --token TOKEN

Then point the clients at it: ``HF_ENDPOINT=http://127.0.0.1:8080 HF_TOKEN=TOKEN ...``. With
``--upload_mode lfs`` large/binary files go through the LFS API and clients need ``HF_HUB_DISABLE_XET=1``.
"""

import argparse
import os

from briskbert.hub_server import serve
from briskbert.hub_server.server import STEPS


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8080)
    p.add_argument("--data_dir", required=True, help="storage folder (created if missing)")
    p.add_argument(
        "--token",
        default=os.environ.get("LOCAL_HUB_TOKEN"),
        help="bearer token required for writes and private reads (or $LOCAL_HUB_TOKEN); "
        "without one the server accepts anonymous writes",
    )
    p.add_argument("--user", default="testuser", help="user name reported by whoami")
    p.add_argument("--upload_mode", choices=["regular", "lfs"], default="regular")
    p.add_argument("--log_file", default=None, help="append one line per request (method, path, status)")
    p.add_argument("--fault_step", choices=STEPS, default=None, help="inject faults at this protocol step")
    p.add_argument("--fault_kind", choices=["500", "drop", "stall"], default="500")
    p.add_argument("--fault_times", type=int, default=1)
    p.add_argument("--fault_stall_s", type=float, default=2.0)
    args = p.parse_args(argv)
    fault = None
    if args.fault_step:
        fault = {
            "step": args.fault_step,
            "kind": args.fault_kind,
            "times": args.fault_times,
            "stall_s": args.fault_stall_s,
        }
    print(f"local hub serving {os.path.abspath(args.data_dir)} on http://{args.host}:{args.port}", flush=True)
    try:
        serve(
            args.host,
            args.port,
            args.data_dir,
            args.token,
            fault=fault,
            user=args.user,
            upload_mode=args.upload_mode,
            log_file=args.log_file,
        )
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
