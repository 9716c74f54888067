#!/usr/bin/env bash
# The whole briskbert flow on the bundled data (see scripts/quickstart.py); sets up .venv on first use.
# Extra arguments go to scripts/quickstart.py, e.g. --size fast or --size large.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
exec python scripts/quickstart.py "$@"
