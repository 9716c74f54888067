"""``torch_compile`` (the ``aot_eager`` backend): a compiled run trains, stops on SIGTERM, resumes, and saves
the weights of the same run done eagerly."""

import os
import signal

import accelerate.utils
import pytest
import torch
from accelerate.state import AcceleratorState
from test_training_loop import MLMTask, config, sequences, tiny_model, train_losses

from briskbert.training import TrainingInterrupted, run

STEPS = ("--max_train_steps", "2", "--per_device_train_batch_size", "4", "--learning_rate", "1e-3")
STEPS += ("--logging_steps", "1", "--eval_steps", "2", "--num_warmup_steps", "1", "--checkpointing_steps")
STEPS += ("1",)


def run_tiny(output_dir, *extra, callbacks=()):
    AcceleratorState._reset_state()  # a process's first Accelerator fixes the dynamo plugin of every later one
    task = MLMTask(model=tiny_model(dropout=0.0), evaluation=sequences(6, seed=1))
    return run(task, config("--output_dir", str(output_dir), *STEPS, *extra), callbacks=callbacks)


@pytest.fixture
def aot_eager(monkeypatch):
    """The Accelerator's dynamo plugin with the ``aot_eager`` backend."""
    plugin = accelerate.utils.TorchDynamoPlugin
    monkeypatch.setattr(
        accelerate.utils, "TorchDynamoPlugin", lambda **kw: plugin(**{**kw, "backend": "aot_eager"})
    )
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()
    AcceleratorState._reset_state()  # or every later Accelerator of this process compiles its model too


@pytest.mark.slow  # three short runs: about 20 s on two cores
def test_a_compiled_run_survives_an_interrupt_and_saves_the_eager_runs_model(tmp_path, aot_eager):
    eager = run_tiny(tmp_path / "eager")

    def stop_at_1(entry):
        if entry["step"] == 1:
            os.kill(os.getpid(), signal.SIGTERM)

    with pytest.raises(TrainingInterrupted):
        run_tiny(tmp_path / "compiled", "--torch_compile", callbacks=[stop_at_1])
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] > 0  # the run really was compiled
    resumed = run_tiny(tmp_path / "compiled", "--torch_compile", "--resume_from_checkpoint", "latest")
    want, got = train_losses(eager.history), train_losses(resumed.history)
    assert list(got) == [1, 2] and got == pytest.approx(want, rel=1e-5)

    from transformers import AutoModelForMaskedLM

    compiled, reference = (
        AutoModelForMaskedLM.from_pretrained(folder, trust_remote_code=True)
        for folder in (resumed.final_dir, eager.final_dir)
    )
    assert type(compiled).__name__ == "BriskBertForMaskedLM"  # the model's class, not torch.compile's wrapper
    weights, expected = compiled.state_dict(), reference.state_dict()
    assert sorted(weights) == sorted(expected)
    assert max((weights[k] - expected[k]).abs().max().item() for k in expected) < 1e-5
