"""Re-ranking: negative pools drawn per epoch, the held-out split, the metrics beside chance, and the one-line
warnings, on tiny random models (the fusion itself is in ``test_lexical_fusion.py``)."""

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from briskbert.cli import main as cli
from briskbert.modeling.sentence_transformers_files import EmbeddingSpec
from briskbert.retrieval.dense import Retriever, encode_texts, exact_search
from briskbert.retrieval.fusion import Reranker
from briskbert.training.data.task_data import DataError
from briskbert.training.retrieval.embeddings import Pair, load_pairs
from briskbert.training.retrieval.reranker_task import (
    RerankerTask,
    RerankGroup,
    RerankGroups,
    group_ranking_metrics,
    hold_out,
    negative_pools,
)

ROOT = Path(__file__).resolve().parents[1]
XQUAD = str(ROOT / "data" / "xquad_en_excerpt.json")
SMALL = dict(hidden_size=32, intermediate_size=64)  # bert-tiny's layers, narrower: the models are random


def test_evaluate_retrieval_prints_the_warning_on_stderr(monkeypatch, capsys, tiny_models, tmp_path):
    from briskbert.commands.evaluate_retrieval import main as evaluate

    # A re-ranker that puts every distractor above every paragraph: Recall@1 after re-ranking is 0.
    def distractors_first(self, queries, retrieved, corpus, depth=None):
        head = {qid: ranking[: depth or self.top_k] for qid, ranking in retrieved.rankings.items()}
        return {qid: [10.0 if "filler" in corpus[pid] else 0.0 for pid in pids] for qid, pids in head.items()}

    monkeypatch.setattr(Reranker, "score", distractors_first)
    distractors = tmp_path / "distractors.txt"
    distractors.write_text("\n".join(f"filler passage number {i} about the weather" for i in range(20)))
    args = ["--model_name_or_path", tiny_models["encoder"], "--squad_file", XQUAD, "--articles", "3:4",
            "--extra_corpus_file", str(distractors), "--reranker_model_name_or_path", tiny_models["reranker"]]  # fmt: skip
    # No fusion.json (its weights never chosen): retrieval's order, metric for metric, and said in one line.
    report = evaluate(args)
    err = capsys.readouterr().err.strip().splitlines()
    assert report["retrieval"]["recall@1"] > 0 and report["reranked"]["recall@1"] == 0
    assert report["fused"] == report["retrieval"] and "warning" not in report
    assert [line for line in err if line.startswith("warning:")] == [
        "warning: the re-ranker has no fusion.json (its weights were never chosen): it is applied at weight 0, "
        "retrieval's order unchanged; train it with finetune-reranker, or set fusion_weight."
    ]
    # Forced with --fusion_weight 1: below retrieval, and the warning says so.
    report = evaluate([*args, "--fusion_weight", "1"])
    err = capsys.readouterr().err.strip().splitlines()
    assert report["fused"]["recall@1"] == 0 and report["warning"].startswith("re-ranking fused at weight 1")
    assert [line for line in err if line.startswith("warning:")] == [f"warning: {report['warning']}"]


# ---------------------------------------------------------------------------------------------- groups
class _GivenScores(torch.nn.Module):
    """A stand-in cross-encoder whose logits are the scores each batch carries."""

    def forward(self, scores, **unused):
        return SimpleNamespace(logits=scores)


class _OneProcess:
    def gather_for_metrics(self, value):
        return value


def test_the_reranker_states_chance_beside_its_metrics_and_warns_when_not_above_it():
    """Groups of 1 positive and 3 negatives: chance is accuracy 1/4, MRR (1 + 1/2 + 1/3 + 1/4) / 4."""
    first, last = [0.9, 0.1, 0.2, 0.3], [0.0, 0.1, 0.2, 0.3]  # the positive ranked first / last
    batches = [{"scores": torch.tensor([first, last])}, {"scores": torch.tensor([last, last])}]
    metrics = group_ranking_metrics(_GivenScores(), batches, _OneProcess())
    assert metrics["accuracy"] == 0.25 and metrics["mrr"] == pytest.approx((1 + 3 / 4) / 4)
    assert metrics["chance_accuracy"] == pytest.approx(0.25)
    assert metrics["chance_mrr"] == pytest.approx((1 + 1 / 2 + 1 / 3 + 1 / 4) / 4)

    task = RerankerTask.__new__(RerankerTask)  # its evaluation only, without a model folder to check
    task.data = SimpleNamespace(num_negatives=3)
    task.evaluate(_GivenScores(), batches, _OneProcess())
    assert task.verdict == (
        "eval_accuracy 0.2500 is not above 0.2500, what ranking the 1 positive among 4 passages at random "
        "scores on the same evaluation data"
    )
    task.evaluate(_GivenScores(), [{"scores": torch.tensor([first, first, first, last])}], _OneProcess())
    assert task.verdict is None


def test_groups_draw_fresh_negatives_each_epoch_deterministically():
    pool = [f"negative {i}" for i in range(12)]
    groups = RerankGroups([RerankGroup("q", "p", ["own"] + pool)], num_negatives=3, seed=7, own_negative=True)
    first = groups[0].negatives
    again = RerankGroups([RerankGroup("q", "p", ["own"] + pool)], 3, seed=7, own_negative=True)[0].negatives
    assert first == again and first[0] == "own" and len(set(first)) == 3
    groups.set_epoch(1)
    assert groups[0].negatives != first  # a fresh draw of 2 of 12 (this seed's epoch 1 differs)
    with pytest.raises(DataError):
        RerankGroups([RerankGroup("q", "p", ["one"])], num_negatives=2)


def test_retrieved_pools_are_the_retrievers_best_wrong_passages(tokenizer, tiny_model):
    from briskbert.modeling import BriskBertModel

    encoder = tiny_model(BriskBertModel, **SMALL).eval()
    spec = EmbeddingSpec("mean", True, 64)
    pairs = [
        Pair("who wrote les miserables?", "Victor Hugo wrote Les Miserables in 1862."),
        Pair("where is the eiffel tower?", "The Eiffel Tower stands in Paris."),
        Pair("what do bees make?", "Bees collect nectar and turn it into honey."),
    ]
    extra = ["Honey is sweet.", "Paris is in France.", "Hugo was a novelist.", "Towers are tall."]
    pools = negative_pools(pairs, 3, 0, Retriever(encoder, tokenizer, spec), extra)
    passages = [pair.positive for pair in pairs] + extra
    queries = encode_texts(encoder, tokenizer, [pair.query for pair in pairs], spec)
    _, order = exact_search(queries, encode_texts(encoder, tokenizer, passages, spec), top_k=len(passages))
    for pair, pool, row in zip(pairs, pools, order.tolist()):
        expected = [passages[index] for index in row if passages[index] != pair.positive][:3]
        assert pool.negatives == expected and pool.positive == pair.positive


# ---------------------------------------------------------------------------------------- held-out split
@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory, tokenizer, tiny_model):
    from briskbert.modeling import BriskBertForSequenceClassification, BriskBertModel
    from briskbert.modeling.sentence_transformers_files import write_sentence_transformers_files

    folders = {}
    for name, model_class, extra in (
        ("encoder", BriskBertModel, {}),
        ("reranker", BriskBertForSequenceClassification, {"num_labels": 1}),
    ):
        folder = tmp_path_factory.mktemp(name)
        tiny_model(model_class, **SMALL, **extra).save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        folders[name] = str(folder)
    write_sentence_transformers_files(folders["encoder"], EmbeddingSpec("mean", True, 128), 32)
    return folders


def test_without_a_validation_file_whole_articles_are_held_out():
    articles = json.loads(Path(XQUAD).read_text())["data"]
    pairs = load_pairs(XQUAD)
    for percentage, seed, count in ((10, 0, 1), (50, 2, 2)):
        train, held, split = hold_out(XQUAD, None, pairs, percentage, seed)
        assert len(split["articles"]) == count and split["validation_split_percentage"] == percentage
        chosen = [a for a in articles if a["title"] in split["articles"]]
        paragraphs = {p["context"] for a in chosen for p in a["paragraphs"]}
        questions = [q["question"] for a in chosen for p in a["paragraphs"] for q in p["qas"]]
        assert [pair.query for pair in held] == questions and {pair.positive for pair in held} == paragraphs
        assert not paragraphs & {pair.positive for pair in train} and len(train) + len(held) == len(pairs)
        assert [pairs[index] for index in split["questions"]] == held


def test_pairs_that_share_a_passage_stay_on_one_side():
    pairs = [Pair("q1", "p1", "p2"), Pair("q2", "p2", "p5"), Pair("q3", "p3", "p6"), Pair("q4", "p4", "p7")]
    sides = set()
    for seed in range(12):
        train, held, split = hold_out("pairs.jsonl", None, pairs, 30, seed)  # one of three groups
        assert split["articles"] == [] and split["num_documents"] == 1
        assert {pair.query for pair in held} in ({"q1", "q2"}, {"q3"}, {"q4"})
        sides.add(frozenset(pair.query for pair in held))
    assert len(sides) > 1  # the seed chooses
    linked = [Pair("q1", "p1", "p2"), Pair("q2", "p2", "p1")]
    with pytest.raises(DataError, match="one document .* give validation_file"):
        hold_out("pairs.jsonl", None, linked, 50, 0)


# ------------------------------------------------------------------------------------------------ flags
TRAIN = ["finetune-reranker", "--model_name_or_path", "m", "--train_file", XQUAD, "--output_dir", "o"]
EVALUATE = ["evaluate-retrieval", "--model_name_or_path", "m"]
SQUAD = [*EVALUATE, "--squad_file", XQUAD]


@pytest.mark.parametrize(
    "base, flags, message",
    [
        (TRAIN, "--negatives_corpus_file x.txt", "--negatives_corpus_file"),
        (TRAIN, "--num_negatives 3 --negative_pool_size 2", "--negative_pool_size"),
        (TRAIN, "--validation_articles 2:3", "--validation_articles needs validation_file"),
        (TRAIN, "--validation_split_percentage 100", "--validation_split_percentage must be in (0, 100)"),
        (SQUAD, "--reranker_model_name_or_path m --fusion_weight 2", "--fusion_weight expected a number in"),
        (SQUAD, "--fusion_weight 0.5", "--fusion_weight weighs a re-ranking stage"),
        (SQUAD, "--lexical_weight 0.5", "--lexical_weight weighs a re-ranking stage"),
        (EVALUATE, "--corpus_file c.jsonl", "need corpus_file, queries_file and qrels_file"),
    ],
)
def test_reranking_flags_are_one_line_errors(capsys, base, flags, message):
    assert cli([*base, *flags.split()]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and message in err, err
