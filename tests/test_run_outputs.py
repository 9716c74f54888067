"""What a finished training run leaves says what happened: curves with a point per logged step and no panel
spent on a constant or a lone point, a model card next to the model (written by the command layer's
``train``), a line saying where the model is, a training time that counts training only, and an evaluation
set named for what it is."""

import json
import time

import pytest
from test_training_loop import config, mlm_task, sequences

from briskbert.commands.training_run import train as train_and_write_card
from briskbert.hub_cards.card import render_card
from briskbert.training import run
from briskbert.training.engine.facts import JobFacts, TrainingFacts
from briskbert.training.engine.logging_utils import curve_figure
from briskbert.training.tasks.settings import DataSource


def train(output_dir, *flags, evaluate_fn=None, card_facts=None, trainer=run):
    task = mlm_task(
        train=sequences(16),
        evaluation=sequences(4, seed=1),
        evaluate_fn=evaluate_fn,
        job_facts=JobFacts.from_dict(card_facts or {}),
    )
    return trainer(
        task, config("--output_dir", str(output_dir), "--per_device_train_batch_size", "4", *flags)
    )


def visible_axes(figure):
    return [axis for axis in figure.axes if axis.get_visible()]


def figure_text(figure) -> str:
    return "\n".join(text.get_text() for axis in figure.axes for text in axis.texts)


# ------------------------------------------------------------------------------------------------ curves
@pytest.mark.parametrize(
    ("steps", "interval"), [(3, 1), (40, 1), (100, 2), (300, 6), (500, 10), (100_000, 10)]
)
def test_the_default_logging_interval_gives_short_runs_a_point_per_step(steps, interval):
    assert config("--output_dir", "x").log_interval(steps) == interval
    assert config("--output_dir", "x", "--logging_steps", "7").log_interval(steps) == 7  # as asked


def test_a_short_run_logs_and_plots_its_training_loss_at_every_step(tmp_path):
    result = train(tmp_path, "--max_train_steps", "4")  # no --logging_steps: the default
    assert [e["step"] for e in result.history if "loss" in e] == [1, 2, 3, 4]
    (loss_axis,) = visible_axes(curve_figure(result.history))
    lines = {line.get_label(): line for line in loss_axis.get_lines()}
    assert list(lines["training loss"].get_xdata()) == [1, 2, 3, 4]
    assert list(lines["validation loss"].get_xdata()) == [4] and lines["validation loss"].get_marker() == "o"


def test_a_lone_training_point_is_named_not_drawn_as_an_empty_curve():
    figure = curve_figure([{"step": 4, "loss": 1.3}, {"step": 4, "eval_loss": 1.2, "eval_recall_at_1": 0.5}])
    (loss_axis,) = visible_axes(figure)  # no panel for a metric evaluated once
    assert "training loss logged once (step 4)" in figure_text(figure)
    assert "evaluated once (step 4): recall_at_1 0.5" in figure_text(figure)


def test_counts_get_no_panel_and_metrics_evaluated_twice_do():
    history = [{"step": s, "loss": 3.0 - 0.1 * s} for s in range(1, 21)]
    history += [
        {
            "step": s,
            "eval_f1": 20.0 + s,
            "eval_exact_match": 10.0 + s,
            "eval_total": 24,
            "eval_num_unanswered": 0,
        }
        for s in (5, 10, 15, 20)
    ]
    history += [{"step": 20, "eval_accuracy_flat": 0.5}, {"step": 10, "eval_accuracy_flat": 0.5}]
    figure = curve_figure(history)
    titles = [axis.get_title() for axis in visible_axes(figure)]
    assert titles == [
        "Training and validation loss",
        "Validation f1",
        "Validation accuracy_flat",  # a constant quality (not a count) keeps its flat line
        "Validation exact_match",
    ]
    assert "counts: num_unanswered 0, total 24" in figure_text(figure)


# ------------------------------------------------------------------------------- the final folder and log
def test_the_final_folder_has_its_card_and_the_run_says_where_the_model_is(tmp_path, capsys):
    facts = {
        "task": "fill-mask",
        "datasets": ["wikitext2_excerpt.txt"],
        "eval_dataset": "wikitext2_excerpt.txt",
    }
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


def test_a_local_validation_file_is_not_called_the_public_validation_split():
    facts = DataSource(**SST2, dataset_card_name="glue/sst2").card_facts()
    assert facts["datasets"] == ["glue/sst2"]
    assert facts["eval_dataset"] == "sst2_validation_excerpt.tsv" and facts["eval_split"] is None
    described = DataSource(
        **SST2,
        dataset_card_name="glue/sst2",
        validation_card_name="a held-out part of the glue/sst2 train split",
    ).card_facts()
    assert described["eval_dataset_description"] == "a held-out part of the glue/sst2 train split"
    hub = DataSource(dataset_name="stanfordnlp/sst2").card_facts()
    assert (hub["eval_dataset"], hub["eval_split"]) == ("stanfordnlp/sst2", "validation")


def test_the_card_says_what_the_evaluation_data_is(tmp_path):
    result = train(tmp_path / "run", "--max_train_steps", "1")
    facts = {
        **json.loads((result.final_dir / "training_facts.json").read_text()),
        "metrics": {"eval_accuracy": 0.9},
        **DataSource(
            **SST2,
            dataset_card_name="glue/sst2",
            validation_card_name="a held-out part of the glue/sst2 train split",
        ).card_facts(),
    }
    card = render_card(result.final_dir, "me/model", facts=TrainingFacts.from_json(facts))
    assert (
        "Measured on a held-out part of the glue/sst2 train split (local data: sst2_validation_excerpt.tsv)."
        in card.text
    )
    assert "validation split" not in card.text
    assert card.data.eval_results is None  # no model-index claims a result on the public dataset
    bare_facts = TrainingFacts.from_json({**facts, "eval_dataset_description": None})
    bare = render_card(result.final_dir, "me/model", facts=bare_facts)
    assert "Measured on local data (sst2_validation_excerpt.tsv)." in bare.text
