"""``torch_compile``: a compiled run trains, checkpoints, stops on SIGTERM, resumes, saves its final folder and
loads back in a fresh interpreter with the weights of the same run done eagerly.

Compiling changes nothing the run computes, so the eager run is the reference. The ``aot_eager`` backend goes
through the same wrapping (``OptimizedModule``), capture and autograd as inductor, without the minute of C++ code
generation that is torch's own to test."""

import json
import os
import signal
import subprocess
import sys

import accelerate.utils
import pytest
import torch
from accelerate.state import AcceleratorState
from test_training_loop import config, mlm_task, sequences, tiny_model, train_losses

from briskbert.training import TrainingInterrupted, run

STEPS = ("--max_train_steps", "4", "--per_device_train_batch_size", "4", "--learning_rate", "1e-3")
STEPS += ("--logging_steps", "1", "--eval_steps", "4", "--num_warmup_steps", "1")
STEPS += ("--checkpointing_steps", "2")


def run_tiny(output_dir, *extra, callbacks=()):
    AcceleratorState._reset_state()  # a process's first Accelerator fixes the dynamo plugin of every later one
    task = mlm_task(model=tiny_model(dropout=0.0), evaluation=sequences(6, seed=1))
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


@pytest.mark.slow  # three short runs and a fresh interpreter: about 30 s on two cores
def test_a_compiled_run_survives_an_interrupt_and_saves_the_eager_runs_model(tmp_path, aot_eager):
    eager = run_tiny(tmp_path / "eager")

    def stop_at_2(entry):
        if entry["step"] == 2:
            os.kill(os.getpid(), signal.SIGTERM)

    with pytest.raises(TrainingInterrupted):
        run_tiny(tmp_path / "compiled", "--torch_compile", callbacks=[stop_at_2])
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] > 0  # the run really was compiled
    resumed = run_tiny(tmp_path / "compiled", "--torch_compile", "--resume_from_checkpoint", "latest")
    want, got = train_losses(eager.history), train_losses(resumed.history)
    assert list(got) == [1, 2, 3, 4] and got == pytest.approx(want, rel=1e-5)

    code = f"""
import json, torch
from transformers import AutoModelForMaskedLM
models = [AutoModelForMaskedLM.from_pretrained(folder, trust_remote_code=True)
          for folder in ({str(resumed.final_dir)!r}, {str(eager.final_dir)!r})]
compiled, eager = (model.state_dict() for model in models)
print(json.dumps({{"class": type(models[0]).__name__, "keys": sorted(compiled) == sorted(eager),
                  "max_difference": max((compiled[k] - eager[k]).abs().max().item() for k in eager)}}))
"""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    process = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    assert process.returncode == 0, process.stderr[-2000:]
    loaded = json.loads(process.stdout.strip().splitlines()[-1])
    assert loaded["class"] == "BriskBertForMaskedLM" and loaded["keys"]
    assert loaded["max_difference"] < 1e-5
