"""The loop's arithmetic and signals, each against a value worked out by hand.

Written to kill the mutants of ``training/engine/loop.py`` (see docs/testing.md): the item-weighted
evaluation loss, the fractional epoch count in the log and the facts, the clipping threshold the loop
hands to Accelerate, and what a first and a second Ctrl-C do.
"""

import json
import math
import signal
import time
from types import SimpleNamespace

import pytest
import torch
from test_training_loop import config, mlm_task, sequences

from briskbert.training import run
from briskbert.training.engine.config import TrainingSetupError
from briskbert.training.engine.loop import _prepare, _SignalCatcher, create_accelerator, evaluate_loss


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


def test_a_task_that_reports_only_metrics_gets_the_item_weighted_loss_too(tmp_path):
    """The loop records the model's own loss during a metrics-only evaluation: weighted by the items."""
    evaluation = sequences(9, seed=1)  # batches of 4, 4 and 1 sequences: unequal masked-token counts

    def metrics_only(model, dataloader, accelerator):
        rows = 0
        for batch in dataloader:
            model(**batch)  # the forward pass whose loss the loop records
            rows += len(batch["input_ids"])
        return {"score": float(rows)}

    task = mlm_task(evaluation=evaluation, evaluate_fn=metrics_only)
    flags = ("--max_train_steps", "1", "--per_device_eval_batch_size", "4", "--mixed_precision", "no")
    result = run(task, config("--output_dir", str(tmp_path), *flags))
    assert result.metrics["eval_score"] == 9.0
    reference = run(mlm_task(evaluation=evaluation), config("--output_dir", str(tmp_path / "loss"), *flags))
    assert result.metrics["eval_loss"] == pytest.approx(reference.metrics["eval_loss"], rel=1e-6)
    assert 0 <= result.metrics["eval_runtime_s"] < 60  # a duration, not a clock reading


def test_checkpoints_by_epoch_are_written_at_each_epoch_end_only(tmp_path):
    # 20 sequences in batches of 4: 5 steps per epoch.
    flags = (
        "--per_device_train_batch_size",
        "4",
        "--num_train_epochs",
        "2",
        "--checkpointing_steps",
        "epoch",
    )
    run(mlm_task(train=sequences(20)), config("--output_dir", str(tmp_path), *flags))
    assert sorted(p.name for p in tmp_path.glob("step_*")) == ["step_10", "step_5"]


def test_run_speed_is_tokens_over_the_training_time_to_one_decimal(tmp_path, monkeypatch):
    ticks = iter(range(10**6))
    monkeypatch.setattr(time, "perf_counter", lambda: 0.25 * next(ticks))  # a clock with exact steps
    run(mlm_task(), config("--output_dir", str(tmp_path), "--max_train_steps", "3"))
    results = json.loads((tmp_path / "all_results.json").read_text())
    expected = round(results["tokens_seen"] / results["train_runtime_s"], 1)
    assert results["train_tokens_per_s"] == expected and expected != int(expected)


def test_trackers_named_by_report_to_are_handed_to_accelerate(tmp_path, monkeypatch):
    import accelerate
    import accelerate.tracking

    seen = {}
    monkeypatch.setattr(accelerate, "Accelerator", lambda **kwargs: seen.update(kwargs))
    monkeypatch.setattr(accelerate.tracking, "get_available_trackers", lambda: ["wandb"])
    create_accelerator(config("--output_dir", str(tmp_path / "a"), "--report_to", "wandb"))
    assert seen["log_with"] == ["wandb"]
    create_accelerator(config("--output_dir", str(tmp_path / "b")))
    assert seen["log_with"] is None


def test_deepspeed_with_gradient_accumulation_is_refused_before_anything_is_prepared(tmp_path):
    deepspeed = SimpleNamespace(distributed_type=SimpleNamespace(value="DEEPSPEED"))
    inputs = SimpleNamespace(model=None, train_dataset=None, data_collator=None)
    accumulating = config("--output_dir", str(tmp_path), "--gradient_accumulation_steps", "2")
    with pytest.raises(TrainingSetupError, match="--gradient_accumulation_steps 1"):
        _prepare(accumulating, deepspeed, inputs)
