"""The loop's arithmetic and signals, each against a value worked out by hand.

Written to kill the mutants of ``training/engine/loop.py`` (see docs/testing.md): the item-weighted
evaluation loss (also recorded for metrics-only evaluations), the fractional epoch count in the log and the
facts, optimizer steps per epoch under accumulation, the logged and final speeds, each process's share of the
gradient, the clipping threshold handed to Accelerate, trackers, checkpoints by epoch and by steps, what a
first and a second Ctrl-C do and the resume hint.
"""

import contextlib
import json
import math
import signal
import time
from types import SimpleNamespace

import pytest
import torch
from test_training_loop import FakeTokenizer, config, mlm_task, sequences, tiny_model

from briskbert.training import run
from briskbert.training.data.masking import MaskingCollator, count_masked_tokens
from briskbert.training.engine.config import TrainingSetupError
from briskbert.training.engine.loop import (
    _accumulate_gradients,
    _prepare,
    _SignalCatcher,
    create_accelerator,
    evaluate_loss,
)


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
    # 28 sequences in batches of 4: 7 batches per epoch, so 8 steps are 1 1/7 epochs, 1.1429 to 4 places.
    flags = ("--per_device_train_batch_size", "4", "--max_train_steps", "8", "--logging_steps", "8")
    result = run(mlm_task(train=sequences(28)), config("--output_dir", str(tmp_path), *flags))
    assert result.facts.run.epochs == 1.1429
    assert [e["epoch"] for e in result.history if "loss" in e] == [1.1429]
    assert json.loads((tmp_path / "all_results.json").read_text())["epochs"] == 1.1429


def test_an_epoch_of_accumulated_batches_is_that_many_optimizer_steps(tmp_path):
    # 20 sequences in batches of 4, 2 batches per step: 5 batches make 3 optimizer steps.
    flags = (
        "--per_device_train_batch_size",
        "4",
        "--gradient_accumulation_steps",
        "2",
        "--num_train_epochs",
        "1",
    )
    result = run(mlm_task(train=sequences(20)), config("--output_dir", str(tmp_path), *flags))
    assert result.global_step == 3


def test_the_logged_speed_is_the_intervals_tokens_over_its_time(tmp_path, monkeypatch):
    from briskbert.training.engine import loop

    clock = [1000.0 + 0.37 * k for k in range(4)]  # the interval opens, then one reading per logged step
    readings = iter(clock)
    monkeypatch.setattr(
        loop, "time", SimpleNamespace(time=lambda: next(readings), perf_counter=time.perf_counter)
    )
    result = run(
        mlm_task(), config("--output_dir", str(tmp_path), "--max_train_steps", "3", "--logging_steps", "1")
    )
    entries = [e for e in result.history if "loss" in e]
    seen = [0] + [e["tokens_seen"] for e in entries]
    speeds = [(seen[k + 1] - seen[k]) / (clock[k + 1] - clock[k]) for k in range(3)]
    assert [e["tokens_per_s"] for e in entries] == [round(speed, 1) for speed in speeds]
    assert any(round(speed, 1) not in (speed // 1, round(speed, 2)) for speed in speeds)  # tenths matter here


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


def test_a_metrics_only_evaluation_without_labels_reports_no_loss(tmp_path):
    def unlabelled(model, dataloader, accelerator):
        for batch in dataloader:
            model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])  # loss is None
        return {"score": 1.0}

    task = mlm_task(evaluation=sequences(6, seed=1), evaluate_fn=unlabelled)
    result = run(task, config("--output_dir", str(tmp_path), "--max_train_steps", "1"))
    assert result.metrics["eval_score"] == 1.0 and "eval_loss" not in result.metrics


def test_the_resume_hint_mentions_the_launcher_only_for_several_processes(tmp_path, capsys):
    from briskbert.training.engine.loop import _interrupted

    for processes, mentioned in [(1, False), (2, True)]:
        accelerator = SimpleNamespace(is_main_process=True, num_processes=processes)
        interrupted = _interrupted(accelerator, signal.SIGINT, tmp_path / "step_3", 3)
        message = capsys.readouterr().err
        assert f"Interrupted by SIGINT at step 3; the checkpoint is {tmp_path / 'step_3'}" in message
        assert ("launched the same way" in message) == mentioned and interrupted.code == 130


class Stream(torch.utils.data.IterableDataset):
    def __iter__(self):
        return iter(sequences(12))


def test_a_streamed_training_set_checkpoints_by_steps_but_not_by_epoch(tmp_path):
    flags = ("--max_train_steps", "2", "--per_device_train_batch_size", "4")
    run(mlm_task(train=Stream()), config("--output_dir", str(tmp_path), *flags, "--checkpointing_steps", "2"))
    assert (tmp_path / "step_2").is_dir()
    with pytest.raises(TrainingSetupError, match="no epochs"):
        run(
            mlm_task(train=Stream()),
            config("--output_dir", str(tmp_path / "epochs"), *flags, "--checkpointing_steps", "epoch"),
        )


class SecondOfTwoProcesses:
    """What `_accumulate_gradients` asks of Accelerate, on one of two processes holding equal shares: the item
    count is summed over both, and DDP will average the two processes' (equal) gradients."""

    num_processes, device = 2, torch.device("cpu")

    def reduce(self, tensor, reduction):
        return tensor * 2

    def backward(self, loss):
        loss.backward()

    def no_sync(self, model):
        return contextlib.nullcontext()


def test_each_process_scales_its_gradient_so_that_ddp_averaging_gives_the_window_gradient(tmp_path):
    collator = MaskingCollator(FakeTokenizer(), mlm_probability=0.3)
    window = [collator(sequences(12)[:5]), collator(sequences(12)[5:])]
    model = tiny_model(dropout=0.0)
    _accumulate_gradients(SecondOfTwoProcesses(), model, window, count_masked_tokens)
    two = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    accelerator = create_accelerator(config("--output_dir", str(tmp_path)))
    _accumulate_gradients(accelerator, model, window, count_masked_tokens)
    for g_two, p in zip(two, model.parameters()):
        torch.testing.assert_close(g_two, p.grad, rtol=1e-5, atol=1e-8)
