"""The shared training loop: optimizer groups, schedules, window-normalised accumulation, exact resume
after an interruption, outputs. Small models and a few steps keep each test to a few seconds."""

import argparse
import json
import os
import signal

import pytest
import torch
from torch import nn

from briskbert.commands.training_flags import add_training_arguments, training_config_from_args
from briskbert.modeling import BriskBertConfig, BriskBertForMaskedLM
from briskbert.training import PreparedTask, TrainingConfig, TrainingInterrupted, parameter_groups, run
from briskbert.training.data.masking import MaskingCollator, count_masked_tokens
from briskbert.training.engine.loop import _accumulate_gradients, create_accelerator
from briskbert.training.engine.optim import create_scheduler

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
    config = BriskBertConfig.from_preset(
        "bert-tiny",
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        hidden_dropout_prob=dropout,
        attention_probs_dropout_prob=dropout,
    )
    return BriskBertForMaskedLM(config)


def parse(*argv):
    return add_training_arguments(argparse.ArgumentParser()).parse_args(list(argv))


def config(*argv) -> TrainingConfig:
    return training_config_from_args(parse(*argv))


def mlm_task(model=None, train=None, evaluation=None, **kwargs) -> PreparedTask:
    """Masked-language modelling of the fake sequences with a tiny model: the loop's test job."""
    return PreparedTask(
        model=model or tiny_model(),
        train_dataset=train or sequences(20),
        eval_dataset=evaluation,
        data_collator=MaskingCollator(FakeTokenizer(), seed=42),
        eval_collator=MaskingCollator(FakeTokenizer(), seed=99),
        count_items_fn=count_masked_tokens,
        **kwargs,
    )


def test_weight_decay_skips_biases_norms_and_embeddings_by_module_type():
    for preset in ("bert-tiny", "modern-tiny"):  # LayerNorm and RMSNorm
        model = BriskBertForMaskedLM(BriskBertConfig.from_preset(preset, vocab_size=VOCAB))
        decay, no_decay = parameter_groups(model, 0.01)
        assert decay["weight_decay"] == 0.01 and no_decay["weight_decay"] == 0.0
        expected = set()  # a tied decoder weight *is* the embedding matrix: not decayed either
        for module in model.modules():
            for name, p in module.named_parameters(recurse=False):
                if (
                    isinstance(module, (nn.Embedding, nn.LayerNorm))
                    or type(module).__name__.endswith("Norm")
                    or name == "bias"
                ):
                    expected.add(id(p))
        assert {id(p) for p in no_decay["params"]} == expected
        assert any(type(m).__name__ == "RMSNorm" for m in model.modules()) == (preset == "modern-tiny")
        linear_weights = {id(m.weight) for m in model.modules() if isinstance(m, nn.Linear)} - expected
        assert linear_weights and linear_weights <= {id(p) for p in decay["params"]}
        n_params = len({id(p) for p in model.parameters()})
        assert len(decay["params"]) + len(no_decay["params"]) == n_params  # tied weights listed once


def test_warmup_stable_decay_schedule():
    opt = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=1.0)
    sched = create_scheduler(
        opt, "warmup_stable_decay", num_warmup_steps=2, num_training_steps=10, decay_ratio=0.2
    )
    lrs = []
    for _ in range(10):
        lrs.append(sched.get_last_lr()[0])
        opt.step()
        sched.step()
    assert lrs == [0.0, 0.5] + [1.0] * 7 + [0.5]  # warm-up, stable, linear decay over the last 20 %


def test_window_loss_equals_big_batch_loss():
    """Accumulating uneven micro-batches gives the gradient and loss of one batch over all masked tokens."""
    collator = MaskingCollator(FakeTokenizer(), mlm_probability=0.3)
    examples = sequences(12)
    window = [collator(examples[:3]), collator(examples[3:5]), collator(examples[5:12])]  # 3 micro-batches
    big = collator(examples)
    assert len({int(count_masked_tokens(b)) for b in window}) > 1  # the counts really differ

    accelerator = create_accelerator(config("--output_dir", "unused"))
    model = tiny_model(dropout=0.0)
    loss_sum, items, _, _ = _accumulate_gradients(accelerator, model, window, count_masked_tokens).tolist()
    window_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    loss = model(**big).loss
    loss.backward()
    assert loss_sum / items == pytest.approx(loss.item(), rel=1e-5)
    for g_window, p in zip(window_grads, model.parameters()):
        torch.testing.assert_close(g_window, p.grad, rtol=1e-4, atol=1e-7)


def run_tiny(output_dir, *extra, callbacks=()):
    args = config(
        "--output_dir",
        str(output_dir),
        "--max_train_steps",
        "6",
        "--per_device_train_batch_size",
        "4",
        "--gradient_accumulation_steps",
        "2",
        "--learning_rate",
        "1e-3",
        "--logging_steps",
        "1",
        "--eval_steps",
        "4",
        "--num_warmup_steps",
        "2",
        *extra,
    )
    return run(mlm_task(evaluation=sequences(6, seed=1)), args, callbacks=callbacks)


def train_losses(history):
    return {e["step"]: e["loss"] for e in history if "loss" in e}


def test_interrupt_then_resume_reproduces_the_uninterrupted_losses(tmp_path):
    """SIGTERM at step 4 (mid-epoch, after an epoch boundary and an evaluation, dropout on) saves a
    checkpoint; resuming gives the same losses at steps 5-6 as a run that was never interrupted."""
    reference = run_tiny(tmp_path / "reference")

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
    resumed = run_tiny(tmp_path / "run", "--resume_from_checkpoint", "latest")
    assert resumed.global_step == 6
    want, got = train_losses(reference.history), train_losses(resumed.history)
    assert [got[s] for s in (5, 6)] == [want[s] for s in (5, 6)]  # bit-exact on CPU
    assert [got[s] for s in (1, 2, 3, 4)] == [want[s] for s in (1, 2, 3, 4)]  # log history kept
    assert resumed.metrics["eval_loss"] == reference.metrics["eval_loss"]


def test_outputs_checkpoint_rotation_and_best_model(tmp_path):
    result = run_tiny(
        tmp_path,
        "--checkpointing_steps",
        "2",
        "--checkpoints_total_limit",
        "2",
        "--metric_for_best_model",
        "loss",
    )
    assert sorted(p.name for p in tmp_path.glob("step_*")) == ["step_4", "step_6"]
    for name in (
        "all_results.json",
        "log_history.jsonl",
        "training_curves.png",
        "best/config.json",
        "final/model.safetensors",
        "final/training_facts.json",
    ):
        assert (tmp_path / name).is_file(), name
    results = json.loads((tmp_path / "all_results.json").read_text())
    assert results["train_steps"] == 6 and results["tokens_seen"] > 0 and "eval_loss" in results
    facts = json.loads((tmp_path / "final" / "training_facts.json").read_text())
    for key in ("train_steps", "tokens_seen", "hardware", "wall_time_s", "metrics", "global_batch_size"):
        assert key in facts, key
    assert result.best_metric["name"] == "eval_loss"
    lines = [json.loads(line) for line in (tmp_path / "log_history.jsonl").read_text().splitlines()]
    assert [e["step"] for e in lines if "loss" in e] == [1, 2, 3, 4, 5, 6]
    assert all(e["tokens_per_s"] > 0 and e["grad_norm"] > 0 for e in lines if "loss" in e)


def test_each_step_moves_the_weights_with_the_scheduled_learning_rate(tmp_path):
    """The schedule is stepped once per optimizer step: linear warm-up over 2 steps to 1e-3, then linear
    decay to 0 at step 6 (worked out by hand); and the optimizer really changed the weights."""
    result = run_tiny(tmp_path)
    rates = [e["learning_rate"] for e in result.history if "loss" in e]
    assert rates == pytest.approx([5e-4, 1e-3, 7.5e-4, 5e-4, 2.5e-4, 0.0], abs=1e-12)
    start = tiny_model().state_dict()
    trained = BriskBertForMaskedLM.from_pretrained(result.final_dir).state_dict()
    moved = [name for name, weight in trained.items() if not torch.equal(weight, start[name])]
    assert "model.layers.0.attention.qkv.weight" in moved and len(moved) > len(trained) // 2, moved


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--gradient_accumulation_steps", "0"], "--gradient_accumulation_steps must be >= 1"),
        (
            ["--num_warmup_steps", "10", "--warmup_ratio", "0.1"],
            "either --num_warmup_steps or --warmup_ratio",
        ),
        (["--checkpointing_steps", "often"], "positive integer or 'epoch'"),
        # Every tracker accelerate supports is accepted; a missing package is named (none is installed here).
        (["--report_to", "wandb"], "needs the wandb package: pip install wandb"),
        (["--report_to", "mlflow"], "pip install mlflow"),
        (["--report_to", "tensorbord"], "use none, all, or a comma list of .*comet_ml.*mlflow"),
        (["--greater_is_better", "true"], "needs --metric_for_best_model"),
        (["--learning_rate", "nan"], "--learning_rate must be a finite number, got nan"),
        (["--max_grad_norm", "inf"], "--max_grad_norm must be a finite number"),
    ],
)
def test_contradictory_training_flags_fail_before_training(argv, message):
    with pytest.raises(ValueError, match=message):
        config("--output_dir", "x", *argv)


def test_too_small_dataset_is_a_clear_error(tmp_path):
    args = config("--output_dir", str(tmp_path), "--per_device_train_batch_size", "32")
    with pytest.raises(ValueError, match="fewer than one batch"):
        run(mlm_task(train=sequences(5)), args)


def test_after_training_runs_once_on_the_saved_final_model(tmp_path):
    class Recording(PreparedTask):
        def after_training(self, result, accelerator):
            calls.append((result.final_dir, (result.final_dir / "config.json").is_file()))

    calls = []
    args = config(
        "--output_dir", str(tmp_path / "run"), "--max_train_steps", "2", "--per_device_train_batch_size", "4"
    )
    task = mlm_task()
    result = run(Recording(**{name: getattr(task, name) for name in task.__dataclass_fields__}), args)
    assert calls == [(result.final_dir, True)]  # after final/ was written, once
