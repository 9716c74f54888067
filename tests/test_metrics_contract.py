# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""The local metrics against the libraries that define them: scikit-learn, SciPy and seqeval.

Many random inputs per metric (fixed seeds), including the degenerate ones (a constant series, a label never
predicted, empty entity sets). Written to kill the mutants of ``training/tasks/metrics.py`` (see
docs/testing.md); hand-worked examples are in ``tests/test_metrics.py``.
"""

import numpy as np
import pytest
import scipy.stats
import sklearn.metrics as sk
from seqeval import metrics as seqeval
from seqeval.metrics.sequence_labeling import get_entities as seqeval_entities

from briskbert.training.tasks import metrics

CASES = 40


def label_pairs(seed: int):
    rng = np.random.default_rng(seed)
    n, k = int(rng.integers(1, 30)), int(rng.integers(1, 5))
    references = rng.integers(0, k, n)
    noise = rng.random(n) < rng.random()  # anywhere from almost right to almost random
    predictions = np.where(noise, rng.integers(0, k + 1, n), references)  # k: a label never in the truth
    return predictions, references


@pytest.mark.parametrize("seed", range(CASES))
def test_classification_metrics_equal_scikit_learn(seed):
    predictions, references = label_pairs(seed)
    assert metrics.accuracy(predictions, references) == pytest.approx(
        sk.accuracy_score(references, predictions)
    )
    assert metrics.macro_f1(predictions, references) == pytest.approx(
        sk.f1_score(references, predictions, average="macro", zero_division=0)
    )
    labels = [0, 1, 2, 7]  # one never seen
    assert list(metrics.per_class_f1(predictions, references, labels).values()) == pytest.approx(
        sk.f1_score(references, predictions, labels=labels, average=None, zero_division=0).tolist()
    )
    assert metrics.macro_f1(predictions, references, labels) == pytest.approx(
        sk.f1_score(references, predictions, labels=labels, average="macro", zero_division=0)
    )
    assert metrics.matthews_corrcoef(predictions, references) == pytest.approx(
        sk.matthews_corrcoef(references, predictions), abs=1e-12
    )


def series_pairs(seed: int):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(3, 40))
    x = rng.integers(0, 6, n).astype(float) if seed % 2 else rng.normal(size=n)  # ties on odd seeds
    y = x * rng.normal() + rng.normal(size=n) * rng.random() * 3
    return x, y


@pytest.mark.parametrize("seed", range(CASES))
def test_correlations_and_ranks_equal_scipy(seed):
    x, y = series_pairs(seed)
    assert metrics.rank_with_ties(x).tolist() == scipy.stats.rankdata(x).tolist()
    if np.ptp(x) > 0 and np.ptp(y) > 0:
        assert metrics.pearson(x, y) == pytest.approx(scipy.stats.pearsonr(x, y)[0], abs=1e-12)
        assert metrics.spearman(x, y) == pytest.approx(scipy.stats.spearmanr(x, y)[0], abs=1e-12)


def test_correlations_of_constant_series_are_zero():
    assert metrics.pearson([1.0, 1.0, 1.0], [1.0, 2.0, 3.0]) == 0.0
    assert metrics.pearson([1.0, 2.0, 3.0], [5.0, 5.0, 5.0]) == 0.0
    assert metrics.spearman([2, 2, 2, 2], [1, 2, 3, 4]) == 0.0


@pytest.mark.parametrize("seed", range(CASES))
def test_multilabel_metrics_equal_scikit_learn(seed):
    rng = np.random.default_rng(seed)
    n, k = int(rng.integers(1, 20)), int(rng.integers(2, 6))  # scikit-learn reads one column as binary
    references = rng.random((n, k)) < 0.3
    predictions = np.where(rng.random((n, k)) < 0.3, ~references, references)
    ours = metrics.multilabel_metrics(predictions.astype(int), references.astype(int))
    assert ours["subset_accuracy"] == pytest.approx(sk.accuracy_score(references, predictions))
    assert ours["micro_f1"] == pytest.approx(
        sk.f1_score(references, predictions, average="micro", zero_division=0)
    )
    assert ours["macro_f1"] == pytest.approx(
        sk.f1_score(references, predictions, average="macro", zero_division=0)
    )


@pytest.mark.parametrize("seed", range(10))
def test_classification_metrics_dispatch_equals_scikit_learn(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(3, 30))
    logits, labels = rng.normal(size=(n, 3)), rng.integers(0, 3, n)
    single = metrics.classification_metrics(logits, labels, "single_label_classification")
    predictions = logits.argmax(-1)
    assert single == pytest.approx(
        {
            "accuracy": sk.accuracy_score(labels, predictions),
            "macro_f1": sk.f1_score(labels, predictions, average="macro", zero_division=0),
            "matthews_correlation": sk.matthews_corrcoef(labels, predictions),
        },
        abs=1e-12,
    )
    scores, targets = rng.normal(size=(n, 1)), rng.normal(size=n)
    regression = metrics.classification_metrics(scores, targets, "regression")
    assert regression == pytest.approx(
        {
            "pearson": scipy.stats.pearsonr(scores[:, 0], targets)[0],
            "spearman": scipy.stats.spearmanr(scores[:, 0], targets)[0],
            "mse": sk.mean_squared_error(targets, scores[:, 0]),
        },
        abs=1e-12,
    )
    assert metrics.classification_metrics(scores[:, 0], targets, "regression") == regression
    multi_logits, multi_labels = rng.normal(size=(n, 4)), (rng.random((n, 4)) < 0.5).astype(float)
    multi = metrics.classification_metrics(multi_logits, multi_labels, "multi_label_classification")
    predicted = 1 / (1 + np.exp(-multi_logits)) > 0.5
    assert multi["micro_f1"] == pytest.approx(
        sk.f1_score(multi_labels.astype(bool), predicted, average="micro", zero_division=0)
    )


@pytest.mark.parametrize(
    "call, message",
    [
        (
            lambda: metrics.accuracy([[0, 1]], [[0, 1]]),
            "`predictions` must be one-dimensional, got shape (1, 2)",
        ),
        (lambda: metrics.accuracy([0], [[0]]), "`references` must be one-dimensional"),
        (lambda: metrics.accuracy(3, [3]), "`predictions` must be one-dimensional, got shape ()"),
        (lambda: metrics.macro_f1([0, 1], [0]), "differ in length (2 vs 1)"),
        (lambda: metrics.matthews_corrcoef([], []), "zero examples"),
        (lambda: metrics.pearson([1.0], [1.0, 2.0]), "differ in length"),
        (lambda: metrics.rank_with_ties([[1]]), "`values` must be one-dimensional"),
        (lambda: metrics.multilabel_metrics(np.zeros((2, 3)), np.zeros((2, 2))), "got (2, 3) and (2, 2)"),
        (lambda: metrics.multilabel_metrics(np.zeros(3), np.zeros(3)), "equal-shaped 2-D"),
        (lambda: metrics.multilabel_metrics(np.zeros((0, 2)), np.zeros((0, 2))), "zero examples"),
        (
            lambda: metrics.classification_metrics(np.zeros((2, 2)), [0, 1], "ranking"),
            "unknown problem_type 'ranking'",
        ),
    ],
)
def test_bad_inputs_are_refused_in_one_clear_sentence(call, message):
    with pytest.raises(ValueError) as error:
        call()
    assert message in str(error.value)


# --------------------------------------------------------------------------------------------------- NER
def tag_sequences(seed: int, scheme: str):
    rng = np.random.default_rng(seed)
    prefixes = {"IOB2": "BI", "IOB1": "I", "IOBES": "BIES"}[scheme]
    sentences = []
    for _ in range(int(rng.integers(1, 6))):
        tags = []
        for _ in range(int(rng.integers(1, 12))):
            if rng.random() < 0.35:
                tags.append("O")
            else:
                tags.append(f"{rng.choice(list(prefixes))}-{rng.choice(['PER', 'LOC', 'ORG'])}")
        sentences.append(tags)
    return sentences


@pytest.mark.parametrize("scheme", ["IOB2", "IOB1", "IOBES"])
@pytest.mark.parametrize("seed", range(CASES // 2))
def test_entities_equal_seqeval_default_mode(seed, scheme):
    for tags in tag_sequences(seed, scheme):
        assert metrics.get_entities(tags) == seqeval_entities(tags)


@pytest.mark.parametrize("seed", range(CASES))
def test_entity_metrics_equal_seqeval(seed):
    references = tag_sequences(seed, "IOB2")
    predictions = []
    rng = np.random.default_rng(seed + 1000)
    for sentence in references:  # a corrupted copy: some entities right, some not
        predictions.append(
            [t if rng.random() < 0.7 else rng.choice(["O", "B-PER", "I-LOC", "I-PER"]) for t in sentence]
        )
    ours = metrics.entity_metrics(predictions, references)
    assert ours["precision"] == pytest.approx(
        seqeval.precision_score(references, predictions, zero_division=0)
    )
    assert ours["recall"] == pytest.approx(seqeval.recall_score(references, predictions, zero_division=0))
    assert ours["f1"] == pytest.approx(seqeval.f1_score(references, predictions, zero_division=0))
    assert ours["accuracy"] == pytest.approx(seqeval.accuracy_score(references, predictions))
    gold_entities = {(i, *e) for i, s in enumerate(references) for e in seqeval_entities(s)}
    guessed_entities = {(i, *e) for i, s in enumerate(predictions) for e in seqeval_entities(s)}
    assert ours["num_gold_entities"] == len(gold_entities)
    assert ours["num_predicted_entities"] == len(guessed_entities)
    assert ours["num_correct_entities"] == len(gold_entities & guessed_entities)
    report = seqeval.classification_report(references, predictions, output_dict=True, zero_division=0)
    for entity_type, scores in ours["per_type"].items():
        theirs = report.get(entity_type, {"precision": 0.0, "recall": 0.0, "f1-score": 0.0, "support": 0})
        assert (scores["precision"], scores["recall"], scores["f1"], scores["support"]) == pytest.approx(
            (theirs["precision"], theirs["recall"], theirs["f1-score"], theirs["support"])
        )
    types = {e[0] for s in references + predictions for e in seqeval_entities(s)}
    assert set(ours["per_type"]) == types


def test_tags_without_prefix_and_unknown_prefixes():
    assert metrics.get_entities(["PER", "PER", "O", "LOC"]) == [("PER", 0, 1), ("LOC", 3, 3)]
    assert metrics.get_entities(["", "B-PER", None]) == [("PER", 1, 1)]
    assert metrics.get_entities(["B", "I", "O"]) == [("", 0, 1)]
    with pytest.raises(ValueError, match="'X-PER' is not a BIO/IOBES tag"):
        metrics.get_entities(["X-PER"])


def test_entity_metrics_refuse_unpaired_input():
    with pytest.raises(ValueError, match="got 1 predicted and 2 gold sentences"):
        metrics.entity_metrics([["O"]], [["O"], ["O"]])
    with pytest.raises(ValueError, match="zero sentences"):
        metrics.entity_metrics([], [])
    with pytest.raises(ValueError, match="sentence 1: 1 predicted tags for 2 gold tags"):
        metrics.entity_metrics([["O"], ["O"]], [["O"], ["O", "O"]])


def test_entity_metrics_without_any_entity_are_zero_not_an_error():
    result = metrics.entity_metrics([["O", "O"]], [["O", "O"]])
    assert (result["precision"], result["recall"], result["f1"], result["accuracy"]) == (0.0, 0.0, 0.0, 1.0)
    assert result["per_type"] == {}


# ------------------------------------------------------------------------------------------------- SQuAD
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


@pytest.mark.parametrize("seed", range(CASES))
def test_squad_scores_equal_the_official_script(seed):
    prediction, *golds = answers(seed)
    for gold in golds:
        assert metrics.normalize_answer(gold) == official_normalize(gold)
        assert metrics.f1_score(prediction, gold) == pytest.approx(official_f1(prediction, gold))
        expected_em = float(official_normalize(prediction) == official_normalize(gold))
        assert metrics.exact_match_score(prediction, gold) == expected_em
    result = metrics.squad_metrics({"q": prediction, "r": golds[0]}, {"q": golds, "r": golds[:1], "s": golds})
    best_f1 = max(official_f1(prediction, g) for g in golds)
    best_em = max(float(official_normalize(prediction) == official_normalize(g)) for g in golds)
    r_f1 = official_f1(golds[0], golds[0])  # 0 when the answer normalises to nothing
    assert result == pytest.approx(
        {
            "exact_match": 100 * (best_em + 1) / 3,
            "f1": 100 * (best_f1 + r_f1) / 3,
            "total": 3,
            "num_unanswered": 1,
        }
    )


def test_squad_v2_scores_unanswerable_questions_and_splits_them():
    references = {"has": ["the Eiffel Tower"], "none": [], "blank": ["", "  "], "two": ["a cat", "dog"]}
    predictions = {"has": "Eiffel tower", "none": "", "blank": "something", "two": "dog"}
    result = metrics.squad_metrics(predictions, references, version_2=True)
    assert result == pytest.approx(
        {
            "exact_match": 300 / 4,
            "f1": 300 / 4,
            "total": 4,
            "num_unanswered": 0,
            "HasAns_exact": 100.0,
            "HasAns_f1": 100.0,
            "HasAns_total": 2,
            "NoAns_exact": 50.0,
            "NoAns_f1": 50.0,
            "NoAns_total": 2,
        }
    )
    only_answerable = metrics.squad_metrics({"q": "x"}, {"q": ["x y"]}, version_2=True)
    assert "NoAns_total" not in only_answerable and only_answerable["HasAns_f1"] == pytest.approx(100 * 2 / 3)
    assert (
        metrics.f1_score("", "x", version_2=True) == 0.0 and metrics.f1_score("", "", version_2=True) == 1.0
    )
    assert metrics.f1_score("the", "a", version_2=False) == 0.0


def test_squad_v1_refuses_questions_without_answers_and_empty_sets():
    with pytest.raises(ValueError, match="question 'q' has no gold answer; use version_2=True"):
        metrics.squad_metrics({"q": "x"}, {"q": []})
    with pytest.raises(ValueError, match="zero questions"):
        metrics.squad_metrics({}, {})
    assert metrics.squad_metrics({"q": ""}, {"q": ["", "x"]})["exact_match"] == 100.0  # v1 keeps "" answers
