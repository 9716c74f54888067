"""The loop's arithmetic and signals, each against a value worked out by hand.

Written to kill the mutants of ``training/engine/loop.py`` (see docs/testing.md): the item-weighted
evaluation loss, the fractional epoch count in the log and the facts, the clipping threshold the loop
hands to Accelerate, and what a first and a second Ctrl-C do.
"""

import json
import math
import signal
from types import SimpleNamespace

import pytest
import torch
from test_training_loop import config, mlm_task, sequences

from briskbert.training import run
from briskbert.training.engine.loop import _SignalCatcher, create_accelerator, evaluate_loss


class ConstantLossModel:
    """Answers each batch with the loss the batch carries."""

    def __call__(self, loss, items):
        return SimpleNamespace(loss=torch.tensor(loss))


def test_evaluation_loss_is_weighted_by_the_items_of_each_batch(tmp_path):
    accelerator = create_accelerator(config("--output_dir", str(tmp_path)))
    batches = [{"loss": 2.0, "items": 3}, {"loss": 5.0, "items": 1}, {"loss": 9.0, "items": 0}]
    result = evaluate_loss(ConstantLossModel(), batches, accelerator, lambda batch: batch["items"])
    assert result == {"loss": pytest.approx((2.0 * 3 + 5.0 * 1) / 4)}  # an empty batch adds nothing
    nothing = evaluate_loss(ConstantLossModel(), batches[2:], accelerator, lambda batch: batch["items"])
    assert math.isnan(nothing["loss"])


def test_a_run_that_stops_mid_epoch_counts_the_fraction_of_the_epoch(tmp_path):
    # 20 sequences in batches of 4: 5 batches per epoch, so 7 steps are 1.4 epochs.
    flags = ("--per_device_train_batch_size", "4", "--max_train_steps", "7", "--logging_steps", "7")
    result = run(mlm_task(train=sequences(20)), config("--output_dir", str(tmp_path), *flags))
    assert result.facts.run.epochs == pytest.approx(1.4)
    assert [e["epoch"] for e in result.history if "loss" in e] == [pytest.approx(1.4)]
    assert json.loads((tmp_path / "all_results.json").read_text())["epochs"] == pytest.approx(1.4)


@pytest.mark.parametrize(("max_grad_norm", "expected"), [("0.5", 0.5), ("0", math.inf)])
def test_gradients_are_clipped_to_the_flag_and_zero_turns_clipping_off(tmp_path, max_grad_norm, expected):
    accelerator = create_accelerator(config("--output_dir", str(tmp_path)))
    asked, clip = [], accelerator.clip_grad_norm_

    def recording_clip(parameters, max_norm, **kwargs):
        asked.append(max_norm)
        return clip(parameters, max_norm, **kwargs)

    accelerator.clip_grad_norm_ = recording_clip
    flags = ("--max_train_steps", "2", "--max_grad_norm", max_grad_norm)
    run(mlm_task(), config("--output_dir", str(tmp_path / "run"), *flags), accelerator=accelerator)
    assert asked == [expected, expected]


def test_the_first_interrupt_is_remembered_and_a_second_ctrl_c_aborts():
    catcher = _SignalCatcher()
    catcher._handle(signal.SIGTERM, None)
    assert catcher.signal_number == signal.SIGTERM  # remembered: the loop stops after this step
    with pytest.raises(KeyboardInterrupt):
        catcher._handle(signal.SIGINT, None)
    first_ctrl_c = _SignalCatcher()
    first_ctrl_c._handle(signal.SIGINT, None)
    assert first_ctrl_c.signal_number == signal.SIGINT
    with pytest.raises(KeyboardInterrupt):
        first_ctrl_c._handle(signal.SIGINT, None)
    again = _SignalCatcher()
    again._handle(signal.SIGTERM, None)
    again._handle(signal.SIGTERM, None)  # a second SIGTERM does not abort: it is not a user at the keyboard
    assert again.signal_number == signal.SIGTERM
