"""A training run follows its learning-rate schedule step by step, and its weights move.

Through the command line (``briskbert pretrain``), so that it holds whatever the loop looks like inside: the
learning rate logged at every step must be the one transformers' own scheduler gives for that step. Without
``scheduler.step()`` in the loop the rate would stay at its warm-up start, 0, and nothing would train.
"""

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from torch import nn
from transformers import get_scheduler

from briskbert.commands.pretrain import main
from briskbert.tokenization import BriskBertTokenizer, train_wordpiece_tokenizer

EXCERPT = Path(__file__).resolve().parents[1] / "data" / "wikitext2_excerpt.txt"


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tokenizer")
    train_wordpiece_tokenizer(
        files=[str(EXCERPT)],
        vocab_size=400,
        round_to_multiple_of=None,
        output_dir=folder,
        show_progress=False,
    )
    BriskBertTokenizer.from_pretrained(folder)  # loads: a usable tokenizer folder
    return folder


def pretrain(tmp_path, tokenizer_dir, *extra):
    return main(
        [
            "--train_file",
            str(EXCERPT),
            "--config_name",
            "bert-tiny",
            "--config_overrides",
            "hidden_size=32,intermediate_size=64",
            "--tokenizer_name",
            str(tokenizer_dir),
            "--max_seq_length",
            "32",
            "--per_device_train_batch_size",
            "4",
            "--max_train_steps",
            "6",
            "--logging_steps",
            "1",
            "--eval_steps",
            "6",
            "--learning_rate",
            "1e-3",
            "--seed",
            "3",
            "--output_dir",
            str(tmp_path / "run"),
            *extra,
        ]
    )


def test_logged_learning_rates_are_transformers_schedule_and_the_weights_move(
    tmp_path, tokenizer_dir, monkeypatch
):
    monkeypatch.setenv("BRISKBERT_CACHE", str(tmp_path / "cache"))
    schedule, warmup = "linear", "2"
    pretrain(tmp_path, tokenizer_dir, "--lr_scheduler_type", schedule, "--num_warmup_steps", warmup)
    history = [json.loads(line) for line in (tmp_path / "run" / "log_history.jsonl").read_text().splitlines()]
    logged = {e["step"]: e["learning_rate"] for e in history if "learning_rate" in e}
    assert sorted(logged) == [1, 2, 3, 4, 5, 6]

    optimizer = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=1e-3)
    reference = get_scheduler(schedule, optimizer, num_warmup_steps=int(warmup), num_training_steps=6)
    expected = {}
    for step in range(1, 7):
        optimizer.step()
        reference.step()
        expected[step] = reference.get_last_lr()[0]  # the rate in force after optimizer step `step`
    assert logged == pytest.approx(expected, rel=1e-9, abs=0)
    assert max(logged.values()) > 1e-4  # it really trains at some point

    final = load_file(tmp_path / "run" / "final" / "model.safetensors")
    again = tmp_path / "untrained"
    main_args = ["--max_train_steps", "1", "--learning_rate", "1e-30", "--output_dir", str(again)]
    pretrain(tmp_path, tokenizer_dir, "--lr_scheduler_type", "constant", *main_args)
    untrained = load_file(again / "final" / "model.safetensors")
    moved = [name for name in final if not torch.allclose(final[name], untrained[name], rtol=0, atol=1e-6)]
    assert len(moved) > len(final) // 2  # the same seed's start, trained for 6 steps: most tensors moved
