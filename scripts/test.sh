#!/usr/bin/env bash
# The test suite; sets up .venv on first use. Extra arguments go to pytest, e.g. -m "not slow" or -n 0 (serial).
# One worker per CPU core (pytest-xdist); a test file stays on one worker, sharing its module fixtures.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
exec python -m pytest -q -n auto --dist loadfile "$@"
