"""Runs that used to end "fine" with the wrong result: a resumed run with a stale tokenizer, an overwrite
that deleted the model it was continuing."""

import json
import shutil
from pathlib import Path

import pytest

from briskbert.cli import main

ROOT = Path(__file__).resolve().parents[1]
EXCERPT = ROOT / "data" / "wikitext2_excerpt.txt"
TINY = "hidden_size=32,intermediate_size=64,num_hidden_layers=1,num_attention_heads=2"


def pretrain_argv(output_dir: Path, *extra: str) -> list[str]:
    return [
        "pretrain", "--train_file", str(EXCERPT), "--config_name", "bert-tiny", "--config_overrides", TINY,
        "--max_seq_length", "32", "--packing", "--per_device_train_batch_size", "4", "--max_train_steps", "1",
        "--output_dir", str(output_dir), *extra,
    ]  # fmt: skip


@pytest.mark.slow  # two tiny pretraining runs (~20 s)
def test_a_run_stopped_before_its_first_checkpoint_trains_the_tokenizer_it_is_asked_for(tmp_path):
    out = tmp_path / "run"
    assert main(pretrain_argv(out, "--vocab_size", "320")) == 0
    # What a run killed before its first checkpoint leaves: its tokenizer, no checkpoint, no final model.
    for name in ("final", "log_history.jsonl", "all_results.json"):
        shutil.rmtree(out / name) if (out / name).is_dir() else (out / name).unlink(missing_ok=True)
    resumed = pretrain_argv(out, "--vocab_size", "448")
    assert main([*resumed, "--resume_from_checkpoint", "latest"]) == 0
    vocab = json.loads((out / "final" / "tokenizer.json").read_text())["model"]["vocab"]
    assert len(vocab) == 448


def test_overwrite_never_deletes_the_model_the_run_starts_from(tmp_path):
    from test_training_loop import MLMTask, config

    from briskbert.errors import SettingError
    from briskbert.modeling import BriskBertForMaskedLM
    from briskbert.training import run

    out = tmp_path / "x"
    final = run(MLMTask(), config("--output_dir", str(out), "--max_train_steps", "1")).final_dir
    weights = (final / "model.safetensors").read_bytes()
    continued = config("--output_dir", str(out), "--max_train_steps", "1", "--overwrite_output_dir")
    with pytest.raises(SettingError, match=r"would delete .*final, which holds this run's input"):
        run(MLMTask(model=BriskBertForMaskedLM.from_pretrained(final)), continued)
    assert (final / "model.safetensors").read_bytes() == weights
