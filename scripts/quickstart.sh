#!/usr/bin/env bash
# The whole briskbert flow on the bundled data (`briskbert quickstart`); sets up .venv on first use.
# Extra arguments go to `briskbert quickstart`, e.g. --size fast, --size large, or --fresh. Run again, it
# skips the finished steps and continues an interrupted one.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
exec python -m briskbert quickstart "$@"
