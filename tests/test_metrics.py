# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""``training/tasks/metrics.py`` around scikit-learn, SciPy and seqeval: values worked out by hand from the
published definitions; the SQuAD functions against the official v1.1 script, copied below."""

import math
import warnings
from pathlib import Path

import numpy as np
import pytest

from briskbert.training.tasks import metrics


def one_hot_logits(predictions, num_labels):
    return np.eye(num_labels)[predictions]


# ---------------------------------------------------------------------------------- classification
def test_single_label_metrics_hand_worked():
    # truth [0,0,1,1,2,2], prediction [0,1,1,1,2,0]: confusion (rows truth) [[1,1,0],[0,2,0],[1,0,1]]
    references = np.array([0, 0, 1, 1, 2, 2])
    result = metrics.classification_metrics(
        one_hot_logits([0, 1, 1, 1, 2, 0], 3), references, "single_label_classification"
    )
    assert set(result) == {"accuracy", "macro_f1", "matthews_correlation"}
    assert result["accuracy"] == pytest.approx(4 / 6)
    # F1 = 2TP / (predicted + actual): class 0: 2/4, class 1: 4/5, class 2: 2/3
    assert result["macro_f1"] == pytest.approx((0.5 + 0.8 + 2 / 3) / 3)
    # multi-class MCC, c = 4, s = 6, t = (2,2,2), p = (2,3,1): (4*6 - 12) / sqrt((36 - 14) * (36 - 12))
    assert result["matthews_correlation"] == pytest.approx(12 / math.sqrt(528))


def test_a_label_only_predicted_counts_in_macro_f1_and_constant_predictions_have_mcc_zero():
    # label 3 is predicted but never true: its F1 is 0 and it counts in the mean (class 0: 2/3)
    result = metrics.classification_metrics(one_hot_logits([0, 3], 4), [0, 0], "single_label_classification")
    assert result["macro_f1"] == pytest.approx((2 / 3 + 0.0) / 2)
    constant = metrics.classification_metrics(
        one_hot_logits([1, 1, 1], 2), [1, 0, 1], "single_label_classification"
    )
    assert constant["matthews_correlation"] == 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # one class in all: undefined, 0.0, and nothing printed in the log
        one_class = metrics.classification_metrics(
            one_hot_logits([0, 0], 2), [0, 0], "single_label_classification"
        )
    assert one_class == {"accuracy": 1.0, "macro_f1": 1.0, "matthews_correlation": 0.0}


def test_regression_metrics_hand_worked_with_ties():
    # Spearman of [1,2,2,3] vs [1,2,3,4]: ranks [1,2.5,2.5,4] vs [1,2,3,4];
    # centred: [-1.5,0,0,1.5] . [-1.5,-.5,.5,1.5] = 4.5; norms sqrt(4.5) * sqrt(5) -> 4.5 / sqrt(22.5)
    scores, labels = np.array([[1.0], [2.0], [2.0], [3.0]]), np.array([1.0, 2.0, 3.0, 4.0])
    result = metrics.classification_metrics(scores, labels, "regression")
    assert set(result) == {"pearson", "spearman", "mse"}
    assert result["spearman"] == pytest.approx(4.5 / math.sqrt(22.5))
    # centred scores [-1,0,0,1], labels [-1.5,-.5,.5,1.5]: 3 / sqrt(2 * 5)
    assert result["pearson"] == pytest.approx(3 / math.sqrt(10))
    assert result["mse"] == pytest.approx((0 + 0 + 1 + 1) / 4)
    assert metrics.classification_metrics(scores[:, 0], labels, "regression") == result  # shape (n,) too
    cubes = metrics.classification_metrics(labels**3, labels, "regression")  # monotone, not linear
    assert cubes["spearman"] == pytest.approx(1.0) and cubes["pearson"] < 0.99
    assert cubes["mse"] == pytest.approx((0 + 6**2 + 24**2 + 60**2) / 4)  # errors 0, 6, 24, 60
    constant = metrics.classification_metrics(np.ones(3), labels[:3], "regression")  # SciPy says NaN
    assert (constant["pearson"], constant["spearman"]) == (0.0, 0.0)


def test_multi_label_metrics_equal_scikit_learns_multilabel_form_on_soft_targets():
    from sklearn import metrics as sk

    rng = np.random.default_rng(0)
    logits, labels = rng.normal(size=(20, 4)), rng.random((20, 4))  # soft targets: above 0.5 is positive
    ours = metrics.classification_metrics(logits, labels, "multi_label_classification")
    predicted, truth = 1 / (1 + np.exp(-logits)) > 0.5, labels > 0.5
    micro, macro = (sk.f1_score(truth, predicted, average=how, zero_division=0) for how in ("micro", "macro"))
    expected = {"subset_accuracy": sk.accuracy_score(truth, predicted), "micro_f1": micro, "macro_f1": macro}
    assert ours == pytest.approx(expected)
    # one label column is still one column (its F1), not a binary task over both values
    one_column = np.array([[1.0], [1.0], [-1.0], [-1.0]]), np.array([[0.9], [0.5], [0.0], [1.0]])
    single = metrics.classification_metrics(*one_column, "multi_label_classification")
    assert single == pytest.approx({"subset_accuracy": 0.5, "micro_f1": 0.5, "macro_f1": 0.5})
    never = np.array([[1.0, -1.0]]), np.array([[1, 0]])  # a column never predicted nor present scores 0
    assert metrics.classification_metrics(*never, "multi_label_classification")["macro_f1"] == 0.5


def test_not_learned_names_a_single_predicted_class_and_a_chance_level_result():
    one_class = ["positive"] * 5
    assert metrics.not_learned(one_class, ["positive", "negative"] * 2 + ["positive"]) == (
        "The model predicts a single class (positive) for every validation example"
    )
    gold_tags = ["B-PER", "I-PER", "O", "O", "B-LOC", "O"]
    assert metrics.not_learned(["O"] * 6, gold_tags, unit="word") == (
        "The model predicts a single class (O) for every validation word"
    )
    assert metrics.not_learned(["O"] * 3, ["O"] * 3) is None  # one class in the references: nothing to learn
    gold = list("aaaaaabbbb")  # answering a: accuracy 0.6, macro-F1 (2 x 0.6 / 1.6) / 2 = 0.375
    # a 5/6 right, b never: accuracy 0.5; F1 of a = 2 x 5 / (9 + 6) = 0.667, of b 0: macro 0.333
    assert metrics.not_learned(list("aaaaabaaaa"), gold) == (
        "The model scores at chance level (accuracy 0.500, macro-F1 0.333; answering a for every "
        "validation example scores 0.600 and 0.375)"
    )
    # accuracy 0.6 and macro-F1 (8/12 + 2/4) / 2 = 0.583: better than answering a, but on 10 examples chance
    # does as well (table [[4, 2], [2, 2]]: chi-square p = 1.0); twenty times the data, p = 0.03, is learned
    better = list("aaaabbaabb")
    assert metrics.not_learned(better, gold).startswith("The model scores at chance level (accuracy 0.600")
    assert metrics.not_learned(better * 20, gold * 20) is None
    # every b found but 2 a in 3 called b (chi-square p < 0.01): a signal, yet no better than answering a
    # (accuracy 0.4 vs 0.9; macro-F1 (2 x 60 / 240 + 2 x 20 / 160) / 2 = 0.375 vs (1.8 / 1.9) / 2 = 0.474)
    rare = metrics.not_learned(["a"] * 60 + ["b"] * 140, ["a"] * 180 + ["b"] * 20)
    assert rare == (
        "The model scores at chance level (accuracy 0.400, macro-F1 0.375; answering a for every "
        "validation example scores 0.900 and 0.474)"
    )


def test_a_run_that_learned_nothing_says_so_in_its_last_line(tokenizer, tiny_model, tmp_path, capsys):
    """A classifier whose head always answers positive ends with the verdict naming the class and the fix."""
    import torch

    from briskbert.commands import finetune_classification
    from briskbert.modeling import BriskBertForSequenceClassification

    labels = {"negative": 0, "positive": 1}
    model = tiny_model(
        BriskBertForSequenceClassification,
        num_labels=2,
        id2label={0: "negative", 1: "positive"},
        label2id=labels,
    )
    with torch.no_grad():
        model.classifier.bias.copy_(torch.tensor([0.0, 100.0]))
    model.save_pretrained(tmp_path / "start")
    tokenizer.save_pretrained(tmp_path / "start")
    data = Path(__file__).resolve().parents[1] / "data"
    files = ["--train_file", str(data / "sst2_train_excerpt.tsv")]
    files += ["--validation_file", str(data / "sst2_validation_excerpt.tsv")]
    flags = "--label_names negative,positive --max_train_samples 8 --max_eval_samples 16 --max_train_steps 1"
    finetune_classification.main(
        ["--model_name_or_path", str(tmp_path / "start"), *files, *flags.split(), "--learning_rate", "1e-9"]
        + ["--output_dir", str(tmp_path / "run")]
    )
    assert capsys.readouterr().out.strip().splitlines()[-1] == (
        "The model predicts a single class (positive) for every validation example: it has not learned yet; "
        "train longer or raise --learning_rate."
    )


# ------------------------------------------------------------------------------------------------- NER
@pytest.mark.parametrize(
    "tags, expected",
    [
        # an I- tag after O starts an entity (conlleval, IOB1), as does one after another type
        (["I-PER", "I-PER", "O", "I-LOC", "I-ORG"], [("PER", 0, 1), ("LOC", 3, 3), ("ORG", 4, 4)]),
        (["S-PER", "B-LOC", "E-LOC", "O"], [("PER", 0, 0), ("LOC", 1, 2)]),  # IOBES
        # bare types (IO scheme), empty tags as O, and entities without a type
        (["PER", "PER", "O", "LOC"], [("PER", 0, 1), ("LOC", 3, 3)]),
        (["", "B-PER", None], [("PER", 1, 1)]),
        (["B", "I", "O"], [("_", 0, 1)]),
    ],
)
def test_get_entities_follows_conlleval_chunking(tags, expected):
    assert metrics.get_entities(tags) == expected
    with pytest.raises(ValueError, match="'X-PER' is not a BIO/IOBES tag"):
        metrics.get_entities([*tags, "X-PER"])


def test_entity_metrics_hand_worked():
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O", "B-MISC", "I-MISC"], ["B-PER"], ["I-PER"]]
    pred = [["B-PER", "I-PER", "O", "B-ORG"], ["I-ORG", "O", "B-MISC", "O"], ["B-PER"], ["I-PER"]]
    # gold: PER(0,1) LOC(3,3) | ORG(0,0) MISC(2,3) | PER | PER -> 6 entities (an entity ends with its sentence)
    # pred: PER(0,1) ORG(3,3) | ORG(0,0) MISC(2,2) | PER | PER -> 6 entities; correct: PER, ORG, PER, PER -> 4
    result = metrics.entity_metrics(pred, gold)
    assert (result["precision"], result["recall"], result["f1"]) == pytest.approx((4 / 6, 4 / 6, 4 / 6))
    assert result["accuracy"] == pytest.approx(7 / 10)  # equal token tags: 3 + 2 + 1 + 1
    counts = ("num_predicted_entities", "num_gold_entities", "num_correct_entities")
    assert [result[key] for key in counts] == [6, 6, 4]
    assert result["per_type"]["PER"] == {"precision": 1.0, "recall": 1.0, "f1": 1.0, "support": 3}
    assert result["per_type"]["LOC"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 1}
    # ORG: predicted 2, correct 1, gold 1 -> P=.5, R=1, F1=2/3; MISC: predicted 1, correct 0
    assert result["per_type"]["ORG"] == pytest.approx(
        {"precision": 0.5, "recall": 1.0, "f1": 2 / 3, "support": 1}
    )
    assert set(result["per_type"]) == {"PER", "LOC", "ORG", "MISC"}


def test_entity_metrics_without_any_entity_are_zero_not_an_error():
    result = metrics.entity_metrics([["O", "O"]], [["O", "O"]])
    assert (result["precision"], result["recall"], result["f1"], result["accuracy"]) == (0.0, 0.0, 0.0, 1.0)
    assert result["per_type"] == {} and result["num_gold_entities"] == 0
    only_predicted = metrics.entity_metrics([["B-ORG"]], [["O"]])  # a type never in the gold tags
    assert only_predicted["per_type"] == {"ORG": {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 0}}


# ----------------------------------------------------------------------------------------------- SQuAD
def official_normalize(s):
    """The SQuAD v1.1 evaluation script's normalize_answer, verbatim."""
    import re
    import string

    def remove_articles(text):
        return re.sub(r"\b(a|an|the)\b", " ", text)

    def white_space_fix(text):
        return " ".join(text.split())

    def remove_punc(text):
        exclude = set(string.punctuation)
        return "".join(ch for ch in text if ch not in exclude)

    def lower(text):
        return text.lower()

    return white_space_fix(remove_articles(remove_punc(lower(s))))


def official_f1(prediction, ground_truth):
    """The SQuAD v1.1 evaluation script's f1_score, verbatim."""
    from collections import Counter

    prediction_tokens = official_normalize(prediction).split()
    ground_truth_tokens = official_normalize(ground_truth).split()
    common = Counter(prediction_tokens) & Counter(ground_truth_tokens)
    num_same = sum(common.values())
    if num_same == 0:
        return 0
    precision = 1.0 * num_same / len(prediction_tokens)
    recall = 1.0 * num_same / len(ground_truth_tokens)
    return (2 * precision * recall) / (precision + recall)


WORDS = ["The", "a", "cat", "sat", "on", "the", "mat", "An", "owl,", "flew!", "Paris", "1,000", "cat's", " "]


def answers(seed):
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, int(rng.integers(0, 6)))) for _ in range(4)]


@pytest.mark.parametrize("seed", range(12))
def test_squad_scores_equal_the_official_script(seed):
    prediction, *golds = answers(seed)
    for gold in golds:
        assert metrics.normalize_answer(gold) == official_normalize(gold)
        assert metrics.f1_score(prediction, gold) == pytest.approx(official_f1(prediction, gold))
    result = metrics.squad_metrics({"q": prediction, "r": golds[0]}, {"q": golds, "r": golds[:1], "s": golds})
    best_f1 = max(official_f1(prediction, g) for g in golds)
    best_em = max(float(official_normalize(prediction) == official_normalize(g)) for g in golds)
    r_f1 = official_f1(golds[0], golds[0])  # 0 when the answer normalises to nothing
    # on 0-1: the official script's percent / 100
    expected = {"exact_match": (best_em + 1) / 3, "f1": (best_f1 + r_f1) / 3, "total": 3, "num_unanswered": 1}
    assert result == pytest.approx(expected)


def test_squad_v2_scores_and_splits_unanswerable_questions_which_v1_refuses():
    references = {"has": ["the Eiffel Tower"], "none": [], "blank": ["", "  "], "two": ["a cat", "dog"]}
    predictions = {"has": "Eiffel tower", "none": "", "blank": "something", "two": "dog"}
    result = metrics.squad_metrics(predictions, references, version_2=True)
    expected = {"exact_match": 3 / 4, "f1": 3 / 4, "total": 4, "num_unanswered": 0}
    expected |= {"HasAns_exact": 1.0, "HasAns_f1": 1.0, "HasAns_total": 2}
    expected |= {"NoAns_exact": 0.5, "NoAns_f1": 0.5, "NoAns_total": 2}
    assert result == pytest.approx(expected)
    only_answerable = metrics.squad_metrics({"q": "x"}, {"q": ["x y"]}, version_2=True)
    assert "NoAns_total" not in only_answerable and only_answerable["HasAns_f1"] == pytest.approx(2 / 3)
    assert metrics.f1_score("", "x", version_2=True) == 0.0
    assert metrics.f1_score("", "", version_2=True) == 1.0
    assert metrics.f1_score("the", "a", version_2=False) == 0.0
    with pytest.raises(ValueError, match="question 'q' has no gold answer; use version_2=True"):
        metrics.squad_metrics({"q": "x"}, {"q": []})
    assert metrics.squad_metrics({"q": ""}, {"q": ["", "x"]})["exact_match"] == 1.0  # v1 keeps "" answers
