"""What a finished run leaves says what happened: curves, a model card next to the model and a line saying where it
is, a training time that counts training only, an evaluation set named for what it is, files a teammate can read."""

import json
import os
import stat
import time

import pytest
from test_training_loop import MLMTask, config, sequences

from briskbert.commands.training_run import train as train_and_write_card
from briskbert.hub_cards.card import render_card
from briskbert.training import run
from briskbert.training.engine.facts import JobFacts, TrainingFacts
from briskbert.training.engine.logging_utils import curve_figure
from briskbert.training.tasks.settings import DataSource


def train(output_dir, *flags, evaluate_fn=None, card_facts=None, trainer=run):
    task = MLMTask(None, sequences(16), sequences(4, seed=1), evaluate_fn, JobFacts(**(card_facts or {})))
    args = config("--output_dir", str(output_dir), "--per_device_train_batch_size", "4", *flags)
    return trainer(task, args)


def visible_axes(figure):
    return [axis for axis in figure.axes if axis.get_visible()]


# ------------------------------------------------------------------------------------------------ curves
@pytest.mark.parametrize(("steps", "interval"), [(40, 1), (300, 6), (100_000, 10)])
def test_the_default_logging_interval_gives_short_runs_a_point_per_step(steps, interval):
    assert config("--output_dir", "x").log_interval(steps) == interval
    assert config("--output_dir", "x", "--logging_steps", "7").log_interval(steps) == 7  # as asked


def test_a_metric_evaluated_twice_gets_a_panel_and_sizes_or_lone_points_do_not():
    history = [{"step": s, "loss": 3.0 - 0.1 * s} for s in range(1, 21)]
    history += [{"step": s, "eval_f1": 20.0 + s, "eval_total": 24, "eval_recall": 0.5} for s in (10, 20)]
    history += [{"step": 20, "eval_exact_match": 0.5}]
    titles = [axis.get_title() for axis in visible_axes(curve_figure(history))]
    assert titles == ["Training and validation loss", "Validation f1", "Validation recall"]


# ------------------------------------------------------------------------------- the final folder and log
def test_the_final_folder_has_its_card_and_the_run_says_where_the_model_is(tmp_path, capsys):
    facts = dict(task="fill-mask", datasets=["wikitext2_excerpt.txt"], eval_dataset="wikitext2_excerpt.txt")
    result = train(tmp_path / "mlm", "--max_train_steps", "2", card_facts=facts, trainer=train_and_write_card)
    card = (result.final_dir / "README.md").read_text()
    assert card.startswith("---\n") and "## Training details" in card and "trust_remote_code=True" in card
    assert 'repo_id = "your-namespace/mlm"' in card  # named after the run until it is published
    assert card == str(render_card(result.final_dir, "your-namespace/mlm"))  # what a publish would render
    printed = capsys.readouterr().out
    assert f"Saved the model to {result.final_dir} (training_facts.json)" in printed
    assert f"Wrote the model card {result.final_dir / 'README.md'}" in printed
    assert not (train(tmp_path / "library", "--max_train_steps", "1").final_dir / "README.md").exists()


def test_the_training_time_counts_training_steps_not_evaluations(tmp_path, monkeypatch):
    """Evaluations here take 1000 s on a shifted clock; the card's training time must not include them."""
    shift = [0.0]
    real_time, real_perf_counter = time.time, time.perf_counter
    monkeypatch.setattr(time, "time", lambda: real_time() + shift[0])
    monkeypatch.setattr(time, "perf_counter", lambda: real_perf_counter() + shift[0])

    def slow_evaluation(model, dataloader, accelerator):
        shift[0] += 1000.0
        return {"accuracy": 0.5}

    result = train(tmp_path, "--max_train_steps", "4", "--eval_steps", "1", evaluate_fn=slow_evaluation)
    facts = json.loads((result.final_dir / "training_facts.json").read_text())
    assert shift[0] == 4000.0 and 0 < facts["wall_time_s"] < 100
    assert json.loads((tmp_path / "all_results.json").read_text())["train_runtime_s"] < 100


# ------------------------------------------------------------------------------------ evaluation data
SST2 = dict(train_file="data/sst2_train_excerpt.tsv", validation_file="data/sst2_validation_excerpt.tsv")


def test_the_card_says_what_the_evaluation_data_is(tmp_path):
    """A local validation file is not called the public dataset's validation split, and the card says what it is."""
    described = "a held-out part of the glue/sst2 train split"
    data = DataSource(**SST2, dataset_card_name="glue/sst2", validation_card_name=described).card_facts()
    assert (data["eval_dataset"], data["eval_split"]) == ("sst2_validation_excerpt.tsv", None)
    hub = DataSource(dataset_name="stanfordnlp/sst2").card_facts()
    assert (hub["eval_dataset"], hub["eval_split"]) == ("stanfordnlp/sst2", "validation")
    result = train(tmp_path / "run", "--max_train_steps", "1")
    facts = {**json.loads((result.final_dir / "training_facts.json").read_text()), **data}
    facts["metrics"] = {"eval_accuracy": 0.9}
    card = render_card(result.final_dir, "me/model", facts=TrainingFacts.from_json(facts))
    assert f"Measured on {described} (local data: sst2_validation_excerpt.tsv)." in card.text
    assert "validation split" not in card.text
    assert card.data.eval_results is None  # no model-index claims a result on the public dataset
    bare_facts = TrainingFacts.from_json({**facts, "eval_dataset_description": None})
    bare = render_card(result.final_dir, "me/model", facts=bare_facts)
    assert "Measured on local data (sst2_validation_excerpt.tsv)." in bare.text


# ---------------------------------------------------------------------------------- what the plot shows
def test_a_lone_validation_point_is_not_under_the_legend_and_steps_are_whole():
    history = [{"step": s, "loss": 2.0 - 0.2 * s} for s in (1, 2, 3)] + [{"step": 3, "eval_loss": 1.9}]
    figure = curve_figure(history)
    figure.canvas.draw()
    (loss_axis,) = visible_axes(figure)
    lines = {line.get_label(): line for line in loss_axis.get_lines()}
    point = loss_axis.transData.transform((3, 1.9))  # the point in pixels, as drawn
    assert not loss_axis.get_legend().get_window_extent(figure.canvas.get_renderer()).contains(*point)
    assert loss_axis.get_xlabel() == "optimizer step"
    ticks = [tick for tick in loss_axis.get_xticks() if 0 <= tick <= 3]
    assert ticks and all(float(tick).is_integer() for tick in ticks), ticks  # no "0.5 steps"
    assert list(lines["training loss"].get_xdata()) == [1, 2, 3]
    assert list(lines["validation loss"].get_xdata()) == [3] and lines["validation loss"].get_marker() == "o"


HISTORY = [{"step": s, "loss": 2.0 - 0.02 * s, "eval_f1": s / 100} for s in range(1, 4)]


def test_a_failed_plot_write_leaves_no_empty_png(tmp_path, monkeypatch):
    from matplotlib.figure import Figure

    from briskbert.training.engine.logging_utils import plot_curves

    def broken_savefig(self, path, **kwargs):
        open(path, "wb").close()  # the file is created, then the write fails (a full disk, say)
        raise OSError("No space left on device")

    monkeypatch.setattr(Figure, "savefig", broken_savefig)
    with pytest.raises(OSError):
        plot_curves(HISTORY, tmp_path / "training_curves.png")
    assert list(tmp_path.iterdir()) == []
    monkeypatch.undo()
    plot_curves(HISTORY, tmp_path / "training_curves.png")
    assert (tmp_path / "training_curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ------------------------------------------------------------------------------ progress in a file or pipe
def test_progress_to_a_file_is_plain_lines_at_intervals_counted_from_a_resumed_step(tmp_path):
    from briskbert.training.engine.logging_utils import progress_bar

    with open(tmp_path / "log.txt", "w") as stream:  # not a terminal
        progress = progress_bar(60, initial=30, stream=stream)  # resumed at step 30
        for step in range(31, 61):
            progress.set_postfix(loss=f"{10 / step:.4f}")
            progress.update(1)
        progress.close()
    text = (tmp_path / "log.txt").read_text()
    lines = text.splitlines()
    assert "\r" not in text and [line.split(",")[0] for line in lines] == [
        f"training: step {n}/60 ({n * 100 // 60}%)" for n in (36, 42, 48, 54, 60)
    ]
    assert lines[0].endswith("loss 0.2778") and lines[-1].endswith("loss 0.1667")


# ------------------------------------------------------------------------------------- checkpoint files
def test_a_checkpoint_stores_a_tied_weight_once_and_every_file_honours_the_umask(tmp_path, caplog):
    """safetensors writes through a private temporary file (0o600): a teammate could not read the weights."""
    from safetensors import safe_open

    previous = os.umask(0o022)
    try:
        result = train(tmp_path, "--max_train_steps", "2", "--checkpointing_steps", "1")
    finally:
        os.umask(previous)
    assert "Removed shared tensor" not in caplog.text
    with safe_open(tmp_path / "step_2" / "model.safetensors", "pt") as saved:
        keys = set(saved.keys())
    assert "model.embeddings.word_embeddings.weight" in keys and "head.decoder.weight" not in keys
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    modes = {p.relative_to(tmp_path).as_posix(): stat.S_IMODE(p.stat().st_mode) for p in written}
    assert "final/model.safetensors" in modes and "step_2/model.safetensors" in modes
    assert set(modes.values()) == {0o644}
    assert result.final_dir.stat().st_mode & 0o777 == 0o755
