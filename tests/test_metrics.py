# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""Local metrics against hand-worked examples of their published definitions.

Expected values are worked out by hand (shown in the comments) from scikit-learn's / SciPy's
definitions, the CoNLL ``conlleval`` chunking rules, and the official SQuAD v1.1 / v2.0 scripts.
"""

import math

import numpy as np
import pytest

from briskbert.training.tasks import metrics

# ---------------------------------------------------------------------------------------------- #
# classification and regression
# ---------------------------------------------------------------------------------------------- #


def test_accuracy_and_macro_f1_hand_worked():
    predictions = [0, 1, 1, 2, 0, 2]
    references = [0, 1, 0, 2, 1, 1]
    assert metrics.accuracy(predictions, references) == pytest.approx(3 / 6)
    # class 0: TP=1, predicted 2, actual 2 -> F1 = 2/4; class 1: TP=1, predicted 2, actual 3 -> 2/5;
    # class 2: TP=1, predicted 2, actual 1 -> 2/3.
    assert metrics.macro_f1(predictions, references) == pytest.approx((0.5 + 0.4 + 2 / 3) / 3)
    # a label that only appears in the predictions counts with F1 = 0 (as scikit-learn does)
    assert metrics.macro_f1([0, 3], [0, 0]) == pytest.approx((2 / 3 + 0.0) / 2)


def test_matthews_binary_matches_the_textbook_formula():
    predictions = [1, 1, 1, 0, 0, 0, 1, 0]
    references = [1, 1, 0, 0, 0, 1, 1, 1]
    tp, tn, fp, fn = 3, 2, 1, 2
    expected = (tp * tn - fp * fn) / math.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
    assert metrics.matthews_corrcoef(predictions, references) == pytest.approx(expected)
    assert metrics.matthews_corrcoef([1, 1, 1], [1, 0, 1]) == 0.0  # constant prediction: undefined -> 0


def test_matthews_multiclass_hand_worked():
    # confusion (rows truth, cols prediction) for truth [0,0,1,1,2,2], prediction [0,1,1,1,2,0]:
    # [[1,1,0],[0,2,0],[1,0,1]]; c=4, s=6, t=(2,2,2), p=(2,3,1)
    # MCC = (4*6 - (4+6+2)) / sqrt((36 - 14) * (36 - 12)) = 12 / sqrt(528)
    value = metrics.matthews_corrcoef([0, 1, 1, 1, 2, 0], [0, 0, 1, 1, 2, 2])
    assert value == pytest.approx(12 / math.sqrt(528))


def test_pearson_and_spearman_with_ties():
    x = [1.0, 2.0, 3.0, 4.0, 5.0]
    assert metrics.pearson(x, [2 * v + 1 for v in x]) == pytest.approx(1.0)
    assert metrics.pearson(x, [-v for v in x]) == pytest.approx(-1.0)
    # tie-averaged ranks: [10, 20, 20, 30] -> [1, 2.5, 2.5, 4]
    assert metrics.rank_with_ties([10, 20, 20, 30]).tolist() == [1.0, 2.5, 2.5, 4.0]
    assert metrics.rank_with_ties([3, 1, 3, 3]).tolist() == [3.0, 1.0, 3.0, 3.0]
    # Spearman of [1,2,2,3] vs [1,2,3,4]: ranks [1,2.5,2.5,4] vs [1,2,3,4];
    # centred: [-1.5,0,0,1.5] · [-1.5,-.5,.5,1.5] = 4.5; norms sqrt(4.5)*sqrt(5) -> 4.5/sqrt(22.5)
    assert metrics.spearman([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(4.5 / math.sqrt(22.5))
    # monotone but non-linear: Spearman 1, Pearson below 1
    y = [v**3 for v in x]
    assert metrics.spearman(x, y) == pytest.approx(1.0)
    assert metrics.pearson(x, y) < 0.99
    assert metrics.pearson([1, 1, 1], [1, 2, 3]) == 0.0


def test_classification_metrics_dispatch_and_errors():
    logits = np.array([[2.0, -1.0], [0.1, 0.3], [1.0, 0.0]])
    result = metrics.classification_metrics(logits, np.array([0, 1, 1]), "single_label_classification")
    assert result["accuracy"] == pytest.approx(2 / 3)
    assert set(result) == {"accuracy", "macro_f1", "matthews_correlation"}
    reg = metrics.classification_metrics(
        np.array([[0.5], [1.5], [2.5]]), np.array([1.0, 2.0, 3.0]), "regression"
    )
    assert reg["pearson"] == pytest.approx(1.0) and reg["mse"] == pytest.approx(0.25)
    multi = metrics.classification_metrics(
        np.array([[3.0, -2.0, 1.0], [-1.0, 2.0, -3.0]]),
        np.array([[1, 0, 1], [0, 1, 1]]),
        "multi_label_classification",
    )
    # predictions [[1,0,1],[0,1,0]]; subset accuracy 1/2; micro: TP=3, predicted 3, actual 4 -> 6/7
    assert multi["subset_accuracy"] == pytest.approx(0.5)
    assert multi["micro_f1"] == pytest.approx(6 / 7)
    # columns: 1, 1, 2*1/(1+2)
    assert multi["macro_f1"] == pytest.approx((1 + 1 + 2 / 3) / 3)
    with pytest.raises(ValueError, match="problem_type"):
        metrics.classification_metrics(logits, np.array([0, 1, 1]), "ranking")
    with pytest.raises(ValueError, match="zero examples"):
        metrics.accuracy([], [])


# ---------------------------------------------------------------------------------------------- #
# CoNLL entity metrics
# ---------------------------------------------------------------------------------------------- #


@pytest.mark.parametrize(
    "tags, expected",
    [
        # IOB2
        (["B-PER", "I-PER", "O", "B-LOC"], [("PER", 0, 1), ("LOC", 3, 3)]),
        # an I- tag after O starts an entity (conlleval), as does one after another type
        (["I-PER", "I-PER", "O", "I-LOC", "I-ORG"], [("PER", 0, 1), ("LOC", 3, 3), ("ORG", 4, 4)]),
        # B- after I- of the same type starts a second entity; I- after B- of another type too
        (["B-PER", "I-PER", "B-PER", "I-LOC"], [("PER", 0, 1), ("PER", 2, 2), ("LOC", 3, 3)]),
        # an entity running to the end of the sentence is closed
        (["O", "B-MISC", "I-MISC"], [("MISC", 1, 2)]),
        # IOBES
        (["S-PER", "B-LOC", "E-LOC", "O"], [("PER", 0, 0), ("LOC", 1, 2)]),
        (["O", "O"], []),
    ],
)
def test_get_entities_follows_conlleval_chunking(tags, expected):
    assert metrics.get_entities(tags) == expected


def test_entity_metrics_hand_worked():
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O", "B-MISC", "I-MISC"]]
    pred = [["B-PER", "I-PER", "O", "B-ORG"], ["I-ORG", "O", "B-MISC", "O"]]
    # gold: PER(0,1) LOC(3,3) | ORG(0,0) MISC(2,3) -> 4 entities
    # pred: PER(0,1) ORG(3,3) | ORG(0,0) MISC(2,2) -> 4 entities; correct: PER, ORG(sentence 2) -> 2
    result = metrics.entity_metrics(pred, gold)
    assert result["precision"] == pytest.approx(0.5)
    assert result["recall"] == pytest.approx(0.5)
    assert result["f1"] == pytest.approx(0.5)
    assert result["accuracy"] == pytest.approx(5 / 8)  # equal token tags: 3 + 2
    assert result["per_type"]["PER"]["f1"] == pytest.approx(1.0)
    assert result["per_type"]["LOC"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 1}
    # ORG: predicted 2, correct 1, gold 1 -> P=.5, R=1, F1=2/3
    assert result["per_type"]["ORG"]["f1"] == pytest.approx(2 / 3)


def test_entity_metrics_rejects_misaligned_input():
    with pytest.raises(ValueError, match="sentence 0"):
        metrics.entity_metrics([["O"]], [["O", "B-PER"]])
    with pytest.raises(ValueError, match="not a BIO"):
        metrics.get_entities(["X-PER"])


# ---------------------------------------------------------------------------------------------- #
# SQuAD
# ---------------------------------------------------------------------------------------------- #


def test_squad_normalisation_is_the_official_one():
    assert metrics.normalize_answer("The  Eiffel-Tower!") == "eiffeltower"
    assert metrics.normalize_answer("an apple and a pear") == "apple and pear"
    # articles are removed only as whole words, after punctuation removal ("the." -> "the" -> removed)
    assert metrics.normalize_answer("Theatre, the.") == "theatre"
    assert metrics.normalize_answer("  Über   ÉCOLE ") == "über école"


def test_squad_em_f1_hand_worked():
    assert metrics.exact_match_score("the Denver Broncos", "Denver Broncos") == 1.0
    # prediction tokens [denver, broncos, won], gold [denver, broncos] -> P=2/3, R=1, F1=0.8
    assert metrics.f1_score("Denver Broncos won", "Denver Broncos") == pytest.approx(0.8)
    assert metrics.f1_score("Carolina", "Denver Broncos") == 0.0
    result = metrics.squad_metrics(
        {"q1": "Denver Broncos", "q2": "in 2016 season"},
        {"q1": ["Broncos", "Denver Broncos"], "q2": ["2016"], "q3": ["x"]},
    )
    # q1: EM 1, F1 1; q2: EM 0, F1 = 2*(1/3*1)/(1/3+1) = 0.5; q3 unanswered: 0 -> over 3 questions
    assert result["exact_match"] == pytest.approx(100 / 3)
    assert result["f1"] == pytest.approx(100 * 1.5 / 3)
    assert result["num_unanswered"] == 1


def test_squad_v2_null_answers():
    references = {"a": ["Paris"], "b": []}
    result = metrics.squad_metrics({"a": "Paris", "b": ""}, references, version_2=True)
    assert result["exact_match"] == 100.0 and result["f1"] == 100.0
    assert result["NoAns_total"] == 1 and result["HasAns_total"] == 1
    wrong = metrics.squad_metrics({"a": "", "b": "Paris"}, references, version_2=True)
    assert wrong["exact_match"] == 0.0 and wrong["f1"] == 0.0
    with pytest.raises(ValueError, match="version_2"):
        metrics.squad_metrics({"b": ""}, {"b": []})
