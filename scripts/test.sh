#!/usr/bin/env bash
# The test suite; sets up .venv on first use. Extra arguments go to pytest, e.g. -m "not slow".
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
exec python -m pytest -q "$@"
