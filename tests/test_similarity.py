# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""Sentence similarity on scored pairs: the losses and evaluate-similarity against sentence-transformers, the
data formats, and the fine-tuning loop's validation against evaluate-similarity on the saved model."""

import json
from pathlib import Path

import pytest
import torch

from briskbert.cli import main as cli
from briskbert.training.retrieval.embeddings import load_training_examples
from briskbert.training.retrieval.similarity import (
    ScoredPair,
    ScoredPairCollator,
    cosent_loss,
    cosine_mse_loss,
    load_scored_pairs,
)

ROOT = Path(__file__).resolve().parents[1]
STSB_TRAIN = str(ROOT / "data" / "stsb_train_excerpt.tsv")
STSB_DEV = str(ROOT / "data" / "stsb_dev_excerpt.tsv")


# ------------------------------------------------------------------------------------------------ losses
def _embeddings_and_scores(n=12, seed=0):
    generator = torch.Generator().manual_seed(seed)
    first = torch.randn(n, 16, generator=generator, requires_grad=True)
    second = torch.randn(n, 16, generator=generator, requires_grad=True)
    scores = torch.tensor([0.0, 5.0, 2.4, 2.4, 3.8, 1.0, 5.0, 0.0, 4.2, 3.0, 1.6, 2.4])[:n]  # with ties
    return first, second, scores


def test_cosent_loss_and_gradients_equal_sentence_transformers():
    from sentence_transformers.sentence_transformer.losses import CoSENTLoss

    first, second, scores = _embeddings_and_scores()
    ours = cosent_loss(first, second, scores, scale=20.0)
    ours_value = float(ours.detach())
    ours_grads = torch.autograd.grad(ours, (first, second))
    theirs = CoSENTLoss(model=None, scale=20.0).compute_loss_from_embeddings([first, second], scores)
    theirs_grads = torch.autograd.grad(theirs, (first, second))
    assert ours_value == pytest.approx(float(theirs.detach()), rel=1e-6)
    for a, b in zip(ours_grads, theirs_grads):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)
    # The order of the scores is all that matters: rescaling them (0-5 -> 0-1) leaves the loss as it is.
    assert float(cosent_loss(first, second, scores / 5, 20.0).detach()) == pytest.approx(ours_value, rel=1e-6)


def test_cosine_mse_equals_sentence_transformers_on_scores_mapped_to_0_1():
    from sentence_transformers.sentence_transformer.losses import CosineSimilarityLoss

    first, second, scores = _embeddings_and_scores()
    ours = cosine_mse_loss(first, second, scores, scores_from=(0.0, 5.0))
    theirs = CosineSimilarityLoss(model=None).compute_loss_from_embeddings([first, second], scores / 5)
    assert float(ours.detach()) == pytest.approx(float(theirs.detach()), rel=1e-6)
    # A scale that does not start at 0 (1 to 5 stars): the low end maps to 0, the high end to 1.
    stars = cosine_mse_loss(first, second, 1 + scores * 4 / 5, scores_from=(1.0, 5.0))
    assert float(stars.detach()) == pytest.approx(float(theirs.detach()), rel=1e-6)


# -------------------------------------------------------------------------------------------------- data
ROWS = [
    ("A man plays a guitar.", "A person plays guitar.", 4.6),
    ("A cat sleeps.", "Stocks fell today.", 0.2),
]


def test_scored_pairs_read_the_same_from_tsv_csv_and_json_lines(tmp_path, tokenizer):
    import csv

    rows = "".join(f"{a}\t{b}\t{s}\n" for a, b, s in ROWS)
    (tmp_path / "p.tsv").write_text("sentence1\tsentence2\tscore\n" + rows)
    with open(tmp_path / "p.csv", "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["score", "sentence1", "sentence2", "genre"])  # any column order, extra columns
        writer.writerows([(s, a, b, "x") for a, b, s in ROWS])
    rows = [json.dumps({"sentence1": a, "sentence2": b, "score": s}) + "\n" for a, b, s in ROWS]
    (tmp_path / "p.jsonl").write_text("".join(rows))
    expected = [ScoredPair(a, b, s) for a, b, s in ROWS]
    for name in ("p.tsv", "p.csv", "p.jsonl"):
        assert load_training_examples(str(tmp_path / name)) == expected, name

    batch = ScoredPairCollator(tokenizer, max_seq_length=32)(expected)
    assert batch["labels"].tolist() == pytest.approx([4.6, 0.2])
    assert batch["input_ids"].shape[0] == 4  # the two first sentences, then the two second ones

    triplet = "A dog runs.\tAn animal moves.\tA dog sleeps.\n"
    (tmp_path / "nli.tsv").write_text("anchor\tpositive\tnegative\n" + triplet)
    (pair,) = load_training_examples(str(tmp_path / "nli.tsv"))  # NLI triplets: pairs with hard negatives
    assert (pair.query, pair.positive, pair.negative) == ("A dog runs.", "An animal moves.", "A dog sleeps.")


def test_bad_scored_pair_files_are_one_line_errors(tmp_path, capsys):
    (tmp_path / "noscore.tsv").write_text("sentence1\tsentence2\tlabel\na\tb\t1\n")
    (tmp_path / "badscore.tsv").write_text("sentence1\tsentence2\tscore\na\tb\thigh\n")
    model = ["--model_name_or_path", str(tmp_path)]
    assert cli(["evaluate-similarity", *model, "--file", str(tmp_path / "noscore.tsv")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--file" in err and "lacks the column(s) score" in err
    with pytest.raises(Exception, match="row 2 has score 'high', not a number"):
        load_scored_pairs(str(tmp_path / "badscore.tsv"))


# --------------------------------------------------------------------------------- evaluate-similarity
@pytest.fixture(scope="module")
def dev_pairs(tmp_path_factory) -> str:
    """The first 50 pairs of the STS-B dev excerpt."""
    path = tmp_path_factory.mktemp("stsb") / "dev.tsv"
    path.write_text("".join(Path(STSB_DEV).read_text().splitlines(keepends=True)[:51]))  # header + 50 pairs
    return str(path)


# Slow (a few seconds): the converted model and the original each embed 100 sentences; the one check that
# evaluate-similarity reports what sentence-transformers' own evaluator does.
@pytest.mark.slow
def test_evaluate_similarity_equals_sentence_transformers_evaluator(
    minilm_path, converted_minilm, dev_pairs, tmp_path
):
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.evaluation import EmbeddingSimilarityEvaluator

    cli(["evaluate-similarity", "--model_name_or_path", str(converted_minilm), "--file", dev_pairs,
         "--output_dir", str(tmp_path)])  # fmt: skip
    ours = json.loads((tmp_path / "similarity_metrics.json").read_text())
    pairs = load_scored_pairs(dev_pairs)
    columns = [p.sentence1 for p in pairs], [p.sentence2 for p in pairs], [p.score for p in pairs]
    evaluator = EmbeddingSimilarityEvaluator(*columns, write_csv=False)
    theirs = evaluator(SentenceTransformer(str(minilm_path), device="cpu"))
    assert ours["num_pairs"] == 50
    assert ours["spearman"] == pytest.approx(theirs["spearman_cosine"], abs=1e-5)  # in fact far closer
    assert ours["pearson"] == pytest.approx(theirs["pearson_cosine"], abs=1e-3)
    assert ours["spearman"] > 0.7  # all-MiniLM-L6-v2 scores about 0.87 on the whole dev set


# ----------------------------------------------------------------------------------- finetune-embeddings
@pytest.fixture(scope="module")
def tiny_encoder(tiny_model, tokenizer, tmp_path_factory) -> str:
    """A narrow bert-tiny encoder over the MiniLM vocabulary."""
    from briskbert.modeling import BriskBertModel

    folder = tmp_path_factory.mktemp("tiny-encoder")
    tiny_model(BriskBertModel, hidden_size=32, intermediate_size=64).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


# A short training of a tiny encoder: the loop's validation must be the metric evaluate-similarity computes for
# the saved model (cosine MSE, whose score range is read from the training scores; the losses' dispatch is
# checked in test_retrieval).
@pytest.mark.slow
def test_finetuning_on_scored_pairs_validates_with_spearman(tiny_encoder, dev_pairs, tmp_path):
    out = tmp_path / "sts"
    cli(
        ["finetune-embeddings", "--model_name_or_path", tiny_encoder, "--train_file", STSB_TRAIN,
         "--validation_file", dev_pairs, "--loss", "cosine_mse", "--max_train_steps", "4", "--logging_steps", "1",
         "--per_device_train_batch_size", "16", "--learning_rate", "5e-5", "--max_seq_length", "64",
         "--metric_for_best_model", "spearman", "--output_dir", str(out)]
    )  # fmt: skip
    history = [json.loads(line) for line in (out / "log_history.jsonl").read_text().splitlines()]
    last_eval = [entry for entry in history if "eval_spearman" in entry][-1]
    facts = json.loads((out / "final" / "training_facts.json").read_text())
    assert facts["details"]["loss"]["name"] == "cosine_mse" and facts["pipeline_tag"] == "sentence-similarity"
    assert facts["details"]["loss"]["score_range"] == [0.0, 5.0]  # read from the training scores
    cli(["evaluate-similarity", "--model_name_or_path", str(out / "final"), "--file", dev_pairs,
         "--output_dir", str(tmp_path / "eval")])  # fmt: skip
    evaluated = json.loads((tmp_path / "eval" / "similarity_metrics.json").read_text())
    assert last_eval["eval_spearman"] == pytest.approx(evaluated["spearman"], abs=1e-5)
    assert last_eval["eval_pearson"] == pytest.approx(evaluated["pearson"], abs=1e-5)
    assert (out / "best" / "config.json").is_file()


def test_a_loss_that_does_not_fit_the_data_is_a_one_line_error(minilm_path, tmp_path, capsys):
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text(json.dumps({"query": "q", "positive": "p"}) + "\n")
    output = ["--output_dir", str(tmp_path / "o")]
    common = ["--config_preset", "bert-tiny", "--tokenizer_name", str(minilm_path), *output]
    for argv, message in [
        (["--train_file", str(pairs), "--loss", "cosent"], "--loss cosent does not fit"),
        (["--train_file", STSB_TRAIN, "--loss", "multiple_negatives_ranking"], "holds scored pairs"),
        (["--train_file", STSB_TRAIN, "--mine_hard_negatives"], "--mine_hard_negatives needs"),
        (["--train_file", STSB_TRAIN, "--validation_file", str(pairs)], "hold different kinds of examples"),
        (["--train_file", STSB_TRAIN, "--loss", "cosine_mse", "--score_range", "5:0"], "LOW must be below"),
    ]:
        assert cli(["finetune-embeddings", *common, *argv]) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("error: ") and err.count("\n") == 1 and message in err, err
