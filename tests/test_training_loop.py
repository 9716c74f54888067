"""The shared training loop against one big batch, values worked out by hand or an uninterrupted run."""

import json
import math
import os
import signal
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from briskbert.commands.arguments import parse
from briskbert.errors import SettingError, UserError
from briskbert.modeling import BriskBertConfig, BriskBertForMaskedLM
from briskbert.training import (
    JobFacts,
    Task,
    TaskInputs,
    TrainingConfig,
    TrainingDiverged,
    TrainingInterrupted,
    run,
)
from briskbert.training.data.masking import MaskingCollator, count_masked_tokens
from briskbert.training.engine import loop
from briskbert.training.engine.config import TrainingSetupError
from briskbert.training.engine.evaluation import Evaluation
from briskbert.training.engine.loop import EpochShuffleSampler, create_accelerator, make_dataloader, prepare
from briskbert.training.engine.signals import SignalCatcher, report

VOCAB = 120


class FakeTokenizer:
    """Just what MaskingCollator needs: ids 0..4 are [PAD] [UNK] [CLS] [SEP] [MASK]."""

    pad_token_id, cls_token_id, sep_token_id, mask_token_id = 0, 2, 3, 4
    all_special_ids = [0, 1, 2, 3, 4]

    def __len__(self):
        return VOCAB


def sequences(n, length=24, seed=0):
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        body = torch.randint(5, VOCAB, (length - 2 - i % 5,), generator=g).tolist()  # uneven lengths
        out.append({"input_ids": [2, *body, 3], "idx": i})
    return out


def tiny_model(seed=0, dropout=0.1):
    torch.manual_seed(seed)
    config = BriskBertConfig.from_preset("bert-tiny", vocab_size=VOCAB, hidden_size=32, intermediate_size=64)
    config.hidden_dropout_prob = config.attention_probs_dropout_prob = dropout
    return BriskBertForMaskedLM(config)


def config(*argv: str) -> TrainingConfig:
    """A TrainingConfig from flags, parsed as the command line parses them."""
    (parsed,) = parse(None, TrainingConfig, argv=list(argv))
    return parsed


class MLMTask(Task):
    """Masked-language modelling of the fake sequences (20 by default), a tiny model: the loop's test job."""

    def __init__(
        self, model=None, train=None, evaluation=None, evaluate_fn=None, job_facts=None, collator=None
    ):
        self.model, self.evaluation = model or tiny_model(), evaluation
        self.train = sequences(20) if train is None else train
        self.evaluate_fn, self.job_facts = evaluate_fn, job_facts or JobFacts()
        self.collator = collator or MaskingCollator(FakeTokenizer(), seed=42)

    def build(self, accelerator, config):
        eval_collator = MaskingCollator(FakeTokenizer(), seed=99)
        return TaskInputs(self.model, self.train, self.collator, None, self.evaluation, eval_collator)

    def count_items(self, batch):
        return count_masked_tokens(batch)

    def evaluate(self, model, dataloader, accelerator):
        return None if self.evaluate_fn is None else self.evaluate_fn(model, dataloader, accelerator)

    def facts(self):
        return self.job_facts


def run_tiny(output_dir, *extra, callbacks=()):
    flags = ("--max_train_steps", "6", "--per_device_train_batch_size", "4", "--gradient_accumulation_steps")
    flags += ("2", "--learning_rate", "1e-3", "--logging_steps", "1", "--eval_steps", "4")
    args = config("--output_dir", str(output_dir), *flags, "--num_warmup_steps", "2", *extra)
    return run(MLMTask(evaluation=sequences(6, seed=1)), args, callbacks=callbacks)


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """Six steps, checkpoints every 2 (the last 2 kept), evaluations at 4 and 6 keeping the best model."""
    flags = ("--checkpointing_steps", "2", "--checkpoints_total_limit", "2")
    return run_tiny(tmp_path_factory.mktemp("finished"), *flags, "--metric_for_best_model", "loss")


def train_losses(history):
    return {e["step"]: e["loss"] for e in history if "loss" in e}


# ----------------------------------------------------------------------------------------- accumulation
def premasked(n):
    """Sequences whose masked positions are fixed (1 to 4 each): a batch's items do not depend on its split."""
    out = []
    for example in sequences(n):
        ids = example["input_ids"]
        masked = set(range(1, 2 + example["idx"] % 4))
        labels = [token if i in masked else -100 for i, token in enumerate(ids)]
        out.append({"input_ids": [4 if i in masked else t for i, t in enumerate(ids)], "labels": labels})
    return out


def pad(examples):
    width = max(len(e["input_ids"]) for e in examples)

    def column(key, fill):
        return torch.tensor([e[key] + [fill] * (width - len(e[key])) for e in examples])

    ids = column("input_ids", 0)
    return {"input_ids": ids, "attention_mask": (ids != 0).long(), "labels": column("labels", -100)}


def test_an_accumulated_window_trains_like_one_batch_of_all_its_items(tmp_path):
    """Micro-batches of 4 with unequal masked-token counts give one batch of 12's loss and gradient norm."""
    logged = []
    for batch, accumulation in (("12", "1"), ("4", "3")):
        flags = ("--per_device_train_batch_size", batch, "--gradient_accumulation_steps", accumulation)
        task = MLMTask(model=tiny_model(dropout=0.0), train=premasked(12), collator=pad)
        flags += ("--max_grad_norm", "0")  # the norm is measured, not clipped
        args = config("--output_dir", str(tmp_path / accumulation), "--max_train_steps", "1", *flags)
        (entry,) = [e for e in run(task, args).history if "loss" in e]
        logged.append(entry)
    one_batch, window = logged
    assert one_batch["loss"] == pytest.approx(
        tiny_model(dropout=0.0)(**pad(premasked(12))).loss.item(), rel=1e-5
    )
    assert window["loss"] == pytest.approx(one_batch["loss"], rel=1e-5)
    assert window["grad_norm"] == pytest.approx(one_batch["grad_norm"], rel=1e-4)


@pytest.mark.parametrize(("max_grad_norm", "expected"), [("0.5", 0.5), ("0", math.inf)])
def test_gradients_are_clipped_to_the_flag_and_zero_turns_clipping_off(tmp_path, max_grad_norm, expected):
    accelerator = create_accelerator(config("--output_dir", str(tmp_path)))
    asked, clip = [], accelerator.clip_grad_norm_

    def recording_clip(parameters, max_norm, **kwargs):
        asked.append(max_norm)
        return clip(parameters, max_norm, **kwargs)

    accelerator.clip_grad_norm_ = recording_clip
    flags = ("--max_train_steps", "2", "--max_grad_norm", max_grad_norm)
    run(MLMTask(), config("--output_dir", str(tmp_path / "run"), *flags), accelerator=accelerator)
    assert asked == [expected, expected]


def test_each_step_moves_the_weights_with_the_scheduled_learning_rate(finished_run):
    """Warm-up over 2 steps to 1e-3, then linear decay to 0 at step 6 (by hand); the weights really moved."""
    result = finished_run
    rates = [e["learning_rate"] for e in result.history if "loss" in e]
    assert rates == pytest.approx([5e-4, 1e-3, 7.5e-4, 5e-4, 2.5e-4, 0.0], abs=1e-12)
    start = tiny_model().state_dict()
    trained = BriskBertForMaskedLM.from_pretrained(result.final_dir).state_dict()
    moved = [name for name, weight in trained.items() if not torch.equal(weight, start[name])]
    assert "model.layers.0.attention.qkv.weight" in moved and len(moved) > len(trained) // 2, moved


# ------------------------------------------------------------------------- the host never waits in a step
ENGINE = str(Path(loop.__file__).parent)
HOST_READS = ("item", "tolist", "cpu", "numpy", "__float__", "__int__", "__bool__", "__index__")


def test_a_training_step_never_reads_the_device_from_the_host(tmp_path, monkeypatch):
    """A step reads nothing back from the device (the host queues the next meanwhile); the logs do."""
    reads, inside = [], [False]

    def counting(name, method):
        def read(tensor, *args, **kwargs):
            caller = sys._getframe(1).f_code.co_filename
            if inside[0] and caller.startswith(ENGINE):
                reads.append(f"{name} in {Path(caller).name}:{sys._getframe(1).f_lineno}")
            return method(tensor, *args, **kwargs)

        return read

    for name in HOST_READS:
        monkeypatch.setattr(torch.Tensor, name, counting(name, getattr(torch.Tensor, name)))
    step = loop._train_step

    def watched_step(*args, **kwargs):
        inside[0] = True
        try:
            return step(*args, **kwargs)
        finally:
            inside[0] = False

    monkeypatch.setattr(loop, "_train_step", watched_step)
    flags = ("--max_train_steps", "3", "--per_device_train_batch_size", "4", "--gradient_accumulation_steps")
    result = run(MLMTask(), config("--output_dir", str(tmp_path), *flags, "2", "--logging_steps", "3"))
    assert result.global_step == 3 and result.facts.run.tokens_seen > 0
    assert reads == []


def test_a_nan_loss_is_never_applied_and_stops_the_run_at_the_next_log(tmp_path):
    """A NaN at step 2, checked on the device: no weight changes after it; the log of step 4 stops the run."""
    model, calls, weights = tiny_model(dropout=0.0), [], {}

    def nan_loss_from_step_2(module, args, kwargs, outputs):
        calls.append(1)
        if len(calls) == 2:
            weights.update({name: p.detach().clone() for name, p in model.named_parameters()})
        if len(calls) >= 2:  # every later step too: the first is the one reported
            outputs.loss = outputs.loss * float("nan")
        return outputs

    model.register_forward_hook(nan_loss_from_step_2, with_kwargs=True)
    flags = ("--max_train_steps", "6", "--per_device_train_batch_size", "4", "--logging_steps", "4")
    with pytest.raises(TrainingDiverged, match="loss became nan at step 2, so training stopped before"):
        run(MLMTask(model=model), config("--output_dir", str(tmp_path), *flags))
    assert len(calls) == 4 and not (tmp_path / "final").exists()  # steps 3 and 4 ran, and were skipped too
    for name, parameter in model.named_parameters():
        assert torch.equal(parameter, weights[name]), name


def epoch_batches(workers: int, epochs: int = 2) -> list[dict]:
    sampler, collator = EpochShuffleSampler(20, seed=0), MaskingCollator(FakeTokenizer(), seed=42)
    loader = make_dataloader(sequences(20), collator, 4, sampler, workers)
    batches = []
    for epoch in range(epochs):  # as accumulation_windows does: set_epoch, then a new iterator
        sampler.set_epoch(epoch)
        collator.set_epoch(epoch)
        batches += list(loader)
    return batches


def test_the_shuffle_is_a_permutation_drawn_from_the_seed_and_the_epoch():
    def order(seed, epoch):
        sampler = EpochShuffleSampler(50, seed=seed)
        sampler.set_epoch(epoch)
        return list(sampler)

    assert order(1, 0) != order(2, 0) and order(1, 0) != order(1, 1) and order(1, 1) == order(1, 1)
    assert sorted(order(1, 3)) == list(range(50))


def test_loader_workers_prepare_the_same_batches_epoch_after_epoch():
    """Workers mask in their own processes: each epoch's masks are still the ones one process draws."""
    alone, helped = epoch_batches(0), epoch_batches(2)
    assert len(alone) == len(helped) == 10
    for one, other in zip(alone, helped):
        assert one.keys() == other.keys() and all(torch.equal(one[key], other[key]) for key in one)


# --------------------------------------------------------------------------------- interruption, resume
def test_interrupt_then_resume_reproduces_the_uninterrupted_losses(tmp_path, finished_run):
    """SIGTERM at step 4 (mid-epoch, after an evaluation, dropout on), resumed: steps 5-6 as never stopped."""
    reference = finished_run

    def kill_at_4(entry):
        if entry["step"] == 4:
            os.kill(os.getpid(), signal.SIGTERM)

    with pytest.raises(TrainingInterrupted) as stopped:
        run_tiny(tmp_path / "run", callbacks=[kill_at_4])
    assert stopped.value.code == 143 and stopped.value.checkpoint == tmp_path / "run" / "step_4"
    assert "--resume_from_checkpoint" in stopped.value.command
    assert not (tmp_path / "run" / "final").exists()
    state = json.loads((tmp_path / "run" / "step_4" / "trainer_state.json").read_text())
    # 5 batches per epoch, windows of 2: steps 1-3 are epoch 0, step 4 took batches 0-1 of epoch 1.
    assert state["global_step"] == 4 and state["epoch"] == 1 and state["batches_in_epoch"] == 2
    # as the quickstart resumes: a checkpoint wins over --overwrite_output_dir, which only starts a run anew
    resumed = run_tiny(tmp_path / "run", "--resume_from_checkpoint", "latest", "--overwrite_output_dir")
    assert resumed.global_step == 6
    want, got = train_losses(reference.history), train_losses(resumed.history)
    assert [got[s] for s in (5, 6)] == [want[s] for s in (5, 6)]  # bit-exact on CPU
    assert [got[s] for s in (1, 2, 3, 4)] == [want[s] for s in (1, 2, 3, 4)]  # log history kept
    assert resumed.metrics["eval_loss"] == reference.metrics["eval_loss"]


def test_the_first_signal_is_reported_and_only_a_second_ctrl_c_aborts():
    with SignalCatcher() as catcher:
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGTERM)  # no abort (no user at the keyboard), nor what stopped the run
        assert catcher.signal_number == signal.SIGINT  # remembered: the loop stops after this step
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)


def test_a_multi_process_resume_line_names_the_launcher_or_the_parents_command(tmp_path, monkeypatch, capsys):
    from briskbert.processes import RESUME_COMMAND_VARIABLE

    monkeypatch.setenv(RESUME_COMMAND_VARIABLE, "briskbert quickstart --size fast")
    stop = report(signal.SIGINT, tmp_path / "step_3", 3, 2, main_process=True)
    assert stop.code == 130 and stop.command == "briskbert quickstart --size fast"
    assert capsys.readouterr().err == (
        f"\nInterrupted by SIGINT at step 3; the checkpoint is {tmp_path / 'step_3'}. Resume with (launched the "
        "same way, e.g. with accelerate launch):\n  briskbert quickstart --size fast\n"
    )


# ---------------------------------------------------------------------------------------------- outputs
def test_outputs_checkpoint_rotation_and_best_model(finished_run):
    result, tmp_path = finished_run, finished_run.output_dir
    assert sorted(p.name for p in tmp_path.glob("step_*")) == ["step_4", "step_6"]
    outputs = ("all_results.json", "log_history.jsonl", "training_curves.png", "best/config.json")
    for name in (*outputs, "final/model.safetensors", "final/training_facts.json"):
        assert (tmp_path / name).is_file(), name
    results = json.loads((tmp_path / "all_results.json").read_text())
    assert results["train_steps"] == 6 and results["tokens_seen"] > 0 and "eval_loss" in results
    facts = json.loads((tmp_path / "final" / "training_facts.json").read_text())
    for key in ("train_steps", "tokens_seen", "hardware", "wall_time_s", "metrics", "global_batch_size"):
        assert key in facts, key
    assert facts["global_batch_size"] == 4 * 1 * 2  # batch x processes x steps
    assert 0 < facts["wall_time_s"] < 120
    # the card names the CPU model a run's speed was measured on
    cpu_models = [line for line in Path("/proc/cpuinfo").read_text().splitlines() if "model name" in line]
    assert cpu_models[0].split(":", 1)[1].strip() in facts["hardware"]
    speed = results["tokens_seen"] / results["train_runtime_s"]
    assert results["train_tokens_per_s"] == pytest.approx(speed, rel=0.05)
    assert result.best_metric["name"] == "eval_loss"
    lines = [json.loads(line) for line in (tmp_path / "log_history.jsonl").read_text().splitlines()]
    assert [e["step"] for e in lines if "loss" in e] == [1, 2, 3, 4, 5, 6]
    assert all(e["tokens_per_s"] > 0 and e["grad_norm"] > 0 for e in lines if "loss" in e)


@pytest.mark.parametrize("split", ["training", "evaluation"])
def test_an_empty_dataset_is_refused_before_a_step(tmp_path, split):
    task = MLMTask(train=[]) if split == "training" else MLMTask(evaluation=[])
    with pytest.raises(TrainingSetupError, match=f"The {split} dataset is empty"):
        run(task, config("--output_dir", str(tmp_path), "--max_train_steps", "1"))


class BlankingCollator(MaskingCollator):
    """Masks as usual, but leaves no labelled position in every ``every``-th batch."""

    def __init__(self, every: int):
        super().__init__(FakeTokenizer(), seed=42)
        self.every, self.calls = every, 0

    def __call__(self, examples):
        batch = super().__call__(examples)
        self.calls += 1
        if self.calls % self.every == 0:
            batch["labels"].fill_(-100)
        return batch


def test_a_batch_without_items_adds_nothing_and_a_window_without_any_is_refused(tmp_path):
    """Half of each window has no masked token: its NaN mean is not trained on. A window of none stops the run."""
    flags = ("--max_train_steps", "2", "--per_device_train_batch_size", "4")
    flags += ("--gradient_accumulation_steps", "2")
    args = config("--output_dir", str(tmp_path / "half"), *flags)
    result = run(MLMTask(collator=BlankingCollator(2)), args)
    assert len(train_losses(result.history)) == 2
    assert all(math.isfinite(loss) for loss in train_losses(result.history).values())
    with pytest.raises(TrainingSetupError, match="has no items to compute a loss on"):
        run(MLMTask(collator=BlankingCollator(1)), config("--output_dir", str(tmp_path / "none"), *flags))


class EpochCollator(MaskingCollator):
    def set_epoch(self, epoch):
        self.epochs = [*getattr(self, "epochs", []), epoch]
        super().set_epoch(epoch)


def test_an_epoch_of_accumulated_batches_is_that_many_steps_and_checkpoints_by_epoch_end_it(tmp_path):
    # 12 sequences in batches of 4, 2 batches per step: 3 batches make 2 optimizer steps (the second short).
    flags = ("--per_device_train_batch_size", "4", "--gradient_accumulation_steps", "2", "--num_train_epochs")
    flags += ("2", "--checkpointing_steps", "epoch")
    collator = EpochCollator(FakeTokenizer(), seed=42)  # told each epoch: it masks each epoch anew
    args = config("--output_dir", str(tmp_path), *flags)
    result = run(MLMTask(train=sequences(12), collator=collator), args)
    assert result.global_step == 4 and collator.epochs == [0, 1]
    assert sorted(p.name for p in tmp_path.glob("step_*")) == ["step_2", "step_4"]


class Stream(torch.utils.data.IterableDataset):
    def __iter__(self):
        return iter(sequences(12))


def test_a_streamed_training_set_checkpoints_by_steps_but_not_by_epoch(tmp_path):
    flags = ("--max_train_steps", "2", "--per_device_train_batch_size", "4")
    run(MLMTask(train=Stream()), config("--output_dir", str(tmp_path), *flags, "--checkpointing_steps", "2"))
    assert (tmp_path / "step_2").is_dir()
    with pytest.raises(SettingError, match="no epochs"):
        by_epoch = config("--output_dir", str(tmp_path / "epochs"), *flags, "--checkpointing_steps", "epoch")
        run(MLMTask(train=Stream()), by_epoch)


def test_a_run_that_stops_mid_epoch_counts_the_fraction_of_the_epoch(tmp_path):
    # 12 sequences in batches of 4: 3 batches per epoch, so 4 steps are 1 1/3 epochs, 1.3333 to 4 places.
    flags = ("--per_device_train_batch_size", "4", "--max_train_steps", "4", "--logging_steps", "4")
    result = run(MLMTask(train=sequences(12)), config("--output_dir", str(tmp_path), *flags))
    assert [e["epoch"] for e in result.history if "loss" in e] == [1.3333]
    assert json.loads((tmp_path / "all_results.json").read_text())["epochs"] == 1.3333


def test_tokens_seen_counts_real_tokens_with_or_without_an_attention_mask():
    """What the card reports as tokens seen, for any task's batches (``run`` takes a user's task too)."""
    ids, mask = torch.ones(2, 5, dtype=torch.long), torch.tensor([[1] * 5, [1, 1, 0, 0, 0]])
    assert loop._count_tokens({"input_ids": ids, "attention_mask": mask}) == 7
    assert loop._count_tokens({"input_ids": ids}) == 10 and loop._count_tokens({"pixel_values": ids}) == 0


# ------------------------------------------------------------------------------------------- evaluation
class ConstantLossModel(torch.nn.Module):
    """Answers each batch with the loss the batch carries."""

    def forward(self, loss, items):
        return SimpleNamespace(loss=torch.tensor(loss))


def test_evaluation_loss_is_weighted_by_the_items_of_each_batch(tmp_path):
    accelerator = create_accelerator(config("--output_dir", str(tmp_path)))
    task = SimpleNamespace(count_items=lambda batch: batch["items"], evaluate=lambda *args: None)

    def eval_loss(batches):
        evaluation = Evaluation(config("--output_dir", str(tmp_path)), batches, task)
        return evaluation.evaluate(accelerator, ConstantLossModel())["eval_loss"]

    batches = [{"loss": 2.0, "items": 3}, {"loss": 5.0, "items": 1}, {"loss": 9.0, "items": 0}]
    assert eval_loss(batches) == pytest.approx((2.0 * 3 + 5.0 * 1) / 4)  # an empty batch adds nothing
    assert math.isnan(eval_loss(batches[2:]))


def test_a_metrics_only_evaluation_without_labels_reports_no_loss(tmp_path):
    def unlabelled(model, dataloader, accelerator):
        for batch in dataloader:
            model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])  # loss is None
        return {"score": 1.0}

    task = MLMTask(evaluation=sequences(6, seed=1), evaluate_fn=unlabelled)
    result = run(task, config("--output_dir", str(tmp_path), "--max_train_steps", "1"))
    assert result.metrics["eval_score"] == 1.0 and "eval_loss" not in result.metrics


# -------------------------------------------------------------------------------------- refused set-ups
@pytest.mark.parametrize(
    "argv, named",
    [
        (["--gradient_accumulation_steps", "0"], "gradient_accumulation_steps"),
        (["--warmup_ratio", "1"], "warmup_ratio must be in"),
        (["--checkpointing_steps", "often"], "checkpointing_steps"),
        # Every tracker accelerate supports is accepted; a missing package is named (none is installed here).
        (["--report_to", "wandb"], "pip install wandb"),
        (["--report_to", "tensorbord"], "tensorbord"),
        (["--greater_is_better", "true"], "metric_for_best_model"),
        (["--learning_rate", "nan"], "learning_rate must be a finite number, got nan"),
    ],
)
def test_contradictory_training_settings_fail_before_training(argv, named):
    with pytest.raises(UserError, match=named):
        config("--output_dir", "x", *argv)


def test_too_small_dataset_is_a_clear_error(tmp_path):
    args = config("--output_dir", str(tmp_path), "--per_device_train_batch_size", "32")
    with pytest.raises(UserError, match="fewer than one batch"):
        run(MLMTask(train=sequences(5)), args)


def test_deepspeed_with_gradient_accumulation_is_refused_before_anything_is_prepared(tmp_path):
    deepspeed = SimpleNamespace(distributed_type=SimpleNamespace(value="DEEPSPEED"))
    inputs = SimpleNamespace(model=None, train_dataset=None, data_collator=None)
    accumulating = config("--output_dir", str(tmp_path), "--gradient_accumulation_steps", "2")
    with pytest.raises(SettingError, match="gradient_accumulation_steps must be 1 under DeepSpeed"):
        prepare(accumulating, deepspeed, inputs)


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
