"""Model cards: metadata from config and training facts, the tables, and validation (local and server)."""

from __future__ import annotations

import dataclasses
import json

import pytest
from huggingface_hub import ModelCard
from huggingface_hub.repocard_data import model_index_to_eval_results

from briskbert.hub_cards.card import CardError, render_card
from briskbert.training.engine.facts import (
    SCHEMA_VERSION,
    BestMetric,
    FactsError,
    JobFacts,
    RunFacts,
    TrainingFacts,
    read_training_facts,
    write_training_facts,
)

FACTS = dict(schema_version=2, task="text-classification", eval_dataset="sst2", train_steps=120)
FACTS.update(datasets=["stanfordnlp/sst2", "sst2_train_excerpt.tsv"])
FACTS.update(metrics={"eval_accuracy": 0.8512, "eval_loss": 0.41, "epoch": 3.0})
FACTS.update(tokens_seen=54321, hardware="CPU (2 cores)", wall_time_s=75.0)
FACTS.update(base_model="testuser/briskbert-mlm", license="apache-2.0", language="en", mixed_precision="bf16")


def saved_config(folder, arch: str, **overrides):
    from briskbert.modeling import BriskBertConfig

    config = BriskBertConfig.from_preset("bert-tiny", **overrides)
    config.architectures = [arch]
    config.save_pretrained(folder)
    return folder


@pytest.mark.parametrize(
    "arch,tag",
    [
        ("BriskBertForSequenceClassification", "text-classification"),
        ("BriskBertForTokenClassification", "token-classification"),
        ("BriskBertForQuestionAnswering", "question-answering"),
        ("BriskBertForMaskedLM", "fill-mask"),
        ("BriskBertForPreTraining", "fill-mask"),
        ("BriskBertModel", "feature-extraction"),
    ],
)
def test_pipeline_tag_follows_the_architecture(tmp_path, arch, tag):
    card = render_card(saved_config(tmp_path, arch), "testuser/m")
    assert card.data.pipeline_tag == tag
    assert f'pipeline("{tag}", model=repo_id, revision=revision, trust_remote_code=True' in card.text
    assert "rope_theta" not in card.text  # meaningless without rope


def test_metadata_and_sections_from_config_and_facts(tmp_path):
    options = dict(sliding_window=8, global_attn_every_n_layers=2, position_embedding_type="rope")
    folder = saved_config(tmp_path, "BriskBertForSequenceClassification", norm_type="rmsnorm", **options)
    (folder / "training_facts.json").write_text(json.dumps(FACTS))
    card = render_card(folder, "testuser/sst2", revision="v1", revision_is_pinned=True)
    data = card.data.to_dict()
    assert (data["library_name"], data["license"], data["language"]) == ("transformers", "apache-2.0", "en")
    assert "briskbert" in data["tags"] and data["base_model"] == "testuser/briskbert-mlm"
    assert data["datasets"] == ["stanfordnlp/sst2"]  # a local file name is no Hub dataset id
    results = model_index_to_eval_results(data["model-index"])[1]
    assert {(r.metric_type, r.metric_value) for r in results} == {("accuracy", 0.8512), ("loss", 0.41)}
    assert "| `sliding_window` | 8 |" in card.text and "| `rope_theta` | 10,000 |" in card.text
    assert "| `dtype` | float32 |" in card.text  # the saved weights, whatever the training ran in
    for fact in (
        "| optimizer steps | 120 |",
        "| tokens seen | 54,321 |",
        "| hardware | CPU (2 cores) |",
        "| training time | 75 s |",
        "| accuracy | 0.8512 |",
        "| precision | bf16 mixed precision (fp32 master weights) |",
    ):
        assert fact in card.text
    assert 'revision = "v1"  # pinned' in card.text
    assert "AutoModelForSequenceClassification.from_" in card.text
    # deterministic: re-rendering gives the same bytes (so re-publishing makes no commit)
    assert str(render_card(folder, "testuser/sst2", revision="v1", revision_is_pinned=True)) == str(card)
    # and it parses back as a ModelCard with the same metadata
    assert ModelCard(str(card)).data.to_dict() == data


def test_the_hubs_metadata_rules_are_checked_locally(tmp_path):
    from briskbert.hub_cards.rules import check_metadata

    assert check_metadata({"base_model": "sentence-transformers/all-MiniLM-L6-v2"}) == []
    (tmp_path / "training_facts.json").write_text(json.dumps({**FACTS, "base_model": "/home/me/runs/minilm"}))
    with pytest.raises(CardError, match="training_facts.json makes an invalid card: .*Hub repo ids"):
        render_card(saved_config(tmp_path, "BriskBertForMaskedLM"), "testuser/m")


def test_datasets_are_named_by_their_public_name_never_by_a_local_file(tmp_path):
    folder = saved_config(tmp_path, "BriskBertForSequenceClassification")
    public = {
        **FACTS,
        "datasets": ["stanfordnlp/sst2"],
        "eval_dataset": "stanfordnlp/sst2",
        "eval_split": "validation",
    }
    (folder / "training_facts.json").write_text(json.dumps(public))
    card = render_card(folder, "testuser/m")
    (result, *_) = model_index_to_eval_results(card.data.to_dict()["model-index"])[1]
    assert (result.dataset_type, result.dataset_split) == ("stanfordnlp/sst2", "validation")
    assert "Measured on stanfordnlp/sst2 (validation split)." in card.text

    local = {**FACTS, "datasets": ["/home/me/data/train.tsv"], "eval_dataset": "dev.tsv"}
    (folder / "training_facts.json").write_text(json.dumps(local))
    card = render_card(folder, "testuser/m")
    data = card.data.to_dict()
    assert "datasets" not in data and "model-index" not in data  # a file is no Hub dataset
    assert "/home/me" not in card.text and "| training data | local data (train.tsv) |" in card.text


@pytest.mark.parametrize(
    "arch, tag, loader",
    [
        ("BriskBertModel", "sentence-similarity", "SentenceTransformer"),
        ("BriskBertForSequenceClassification", "text-ranking", "CrossEncoder"),
    ],
)
def test_embedding_and_reranker_cards_use_sentence_transformers(tmp_path, arch, tag, loader):
    folder = saved_config(tmp_path, arch)
    facts = {"schema_version": 2, "pipeline_tag": tag, "library_name": "sentence-transformers"}
    (folder / "training_facts.json").write_text(json.dumps(facts))
    card = render_card(folder, "testuser/m")
    assert card.data.pipeline_tag == tag and card.data.library_name == "sentence-transformers"
    assert f"{loader}(repo_id, revision=revision, trust_remote_code=True)" in card.text
    assert "pipeline(" not in card.text


def test_the_facts_a_run_writes_come_back_typed_and_on_the_card(tmp_path):
    folder = saved_config(tmp_path, "BriskBertForSequenceClassification")
    described = dict(tags=["sentiment"], limitations=["English movie reviews only."], model_name="sst2-tiny")
    data = dict(datasets=["stanfordnlp/sst2"], eval_dataset="stanfordnlp/sst2", eval_split="validation")
    job = JobFacts(task="text-classification", library_name="transformers", **data, **described)
    metrics = {"eval_accuracy": 0.85, "eval_loss": float("nan")}
    run = RunFacts(metrics=metrics, train_steps=20, best_metric=BestMetric("eval_accuracy", 0.9, 10))
    write_training_facts(folder, TrainingFacts(job, run))
    data = json.loads((folder / "training_facts.json").read_text())
    assert data["schema_version"] == SCHEMA_VERSION
    assert data["metrics"]["eval_loss"] is None  # JSON has no NaN
    back = read_training_facts(folder)
    assert back.job == job and back.run.best_metric == run.best_metric
    card = render_card(folder, "testuser/m")
    meta = card.data.to_dict()
    assert "sentiment" in meta["tags"] and meta["model-index"][0]["name"] == "sst2-tiny"
    assert "English movie reviews only." in card.text and "(validation split)" in card.text
    assert "| loss |" not in card.text  # not a finite number
    # The final folder holds the last step's weights, not the best evaluation's: the card says which is where.
    assert (
        "| weights in this folder | step 20, the run's last; its best, accuracy 0.9 at step 10, is in the "
        "run's `best/` folder |"
    ) in card.text
    run = dataclasses.replace(run, best_metric=BestMetric("eval_accuracy", 0.85, 20))
    write_training_facts(folder, TrainingFacts(job, run))
    text = render_card(folder, "testuser/m").text
    assert "| weights in this folder | step 20, the run's last and its best by accuracy 0.85 |" in text


@pytest.mark.parametrize(
    "facts, message",
    [
        ({"task": "x"}, r"training_facts.json has schema_version None.*write it again"),
        (
            {"schema_version": 99, "task": "x"},
            r"training_facts.json has schema_version 99.*upgrade briskbert",
        ),
        ({"schema_version": 2, "problem_type": "x"}, r"unknown key\(s\) \['problem_type'\].*'details'"),
        ({"schema_version": 2, "train_steps": "many"}, r"'train_steps' must be int \| None, got 'many'"),
    ],
)
def test_facts_of_another_version_or_with_unknown_keys_are_refused(tmp_path, facts, message):
    (tmp_path / "training_facts.json").write_text(json.dumps(facts))
    with pytest.raises(FactsError, match=message):
        read_training_facts(tmp_path)


def test_the_ner_usage_snippet_prints_whole_words_as_entities(tokenizer, tiny_model, tmp_path):
    """The card's snippet, run on a model tagging everything B-PER, prints whole words, not ## pieces."""
    import contextlib
    import io
    import re

    import torch

    from briskbert.modeling import BriskBertForTokenClassification

    labels = ["O", "B-PER", "I-PER"]
    model = tiny_model(
        BriskBertForTokenClassification,
        num_labels=3,
        id2label=dict(enumerate(labels)),
        label2id={label: i for i, label in enumerate(labels)},
    )
    with torch.no_grad():
        model.classifier.weight.zero_()
        model.classifier.bias.copy_(torch.tensor([0.0, 10.0, 0.0]))
    folder = tmp_path / "ner"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    snippet = re.search(r"```python\n(.*?)```", render_card(folder).text, re.DOTALL).group(1)
    snippet = re.sub(r'repo_id = ".*"', f"repo_id = {str(folder)!r}", snippet)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(snippet, {})
    printed = printed.getvalue()
    assert "Merkel" in snippet and "'word': 'merkel'" in printed and "##" not in printed, printed


def test_the_card_names_the_training_data_as_used(tmp_path):
    """A local excerpt given a public name is named as the file and rows used; the metadata keeps the id."""
    from briskbert.training.tasks.settings import DataSource

    data = DataSource(train_file="data/sst2_train_excerpt.tsv", dataset_card_name="glue/sst2").card_facts()
    job = JobFacts(task="text-classification", **data, details={"num_train_examples": 2000})
    folder = saved_config(tmp_path, "BriskBertForSequenceClassification")
    write_training_facts(folder, TrainingFacts(job, RunFacts(train_steps=10)))
    card = render_card(folder)
    used = "2,000 rows of glue/sst2 (the local file sst2_train_excerpt.tsv)"
    assert f"| training data | {used} |" in card.text and f"trained on {used}." in card.text
    assert card.data.to_dict()["datasets"] == ["glue/sst2"]


def test_baselines_stand_beside_the_metrics_and_are_no_results_of_the_model(tmp_path):
    """Chance levels are shown beside the model's metrics and kept out of the model-index."""
    folder = saved_config(tmp_path, "BriskBertForSequenceClassification")
    metrics = dict(eval_accuracy=0.1304, eval_chance_accuracy=0.25, eval_mrr=0.5036, eval_chance_mrr=0.5208)
    job = JobFacts(task="text-ranking", datasets=["stanfordnlp/sst2"], eval_dataset="stanfordnlp/sst2")
    write_training_facts(folder, TrainingFacts(job, RunFacts(metrics=metrics, train_steps=10)))
    card = render_card(folder, "testuser/m")
    assert "| accuracy | 0.1304 (chance 0.25) |" in card.text
    assert "| mrr | 0.5036 (chance 0.5208) |" in card.text
    assert "chance_" not in card.text
    results = model_index_to_eval_results(card.data.to_dict()["model-index"])[1]
    assert {result.metric_name for result in results} == {"accuracy", "mrr"}


def test_the_yaml_parsers_own_depth_limit_reads_as_the_servers(monkeypatch):
    """Whichever PyYAML is installed (libyaml may stop "[" runs first), the refusal names the limit."""
    from briskbert.hub_cards import front_matter

    def parse(text, Loader):
        raise front_matter.yaml.YAMLError("while increasing flow level\nexceeded maximum nesting depth")
        yield

    monkeypatch.setattr(front_matter.yaml, "parse", parse)
    with pytest.raises(front_matter.FrontMatterError, match="deeper than 64 levels"):
        front_matter.load_front_matter("---\nx: [[[]]]\n---\n", front_matter.YamlLimits())
