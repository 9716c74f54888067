"""Softmax vs CRF token classification on CoNLL-2003: the inference figures of docs/results.md ("NER: softmax vs
CRF").

Each fine-tuned folder tags the same development sentences (words given, as in training; batches of
``--batch_size`` in file order, padded to the longest): entity precision/recall/F1 (the project's conlleval
metric, checked against seqeval in tests/test_crf.py), the share of predicted sentences with a transition IOB2
forbids (``I-X`` after neither ``B-X`` nor ``I-X``), and real (non-padding) tokens per second, both for the
per-token scores alone (what an exported graph computes) and with the tags decoded (arg-max or Viterbi). The
models take turns, ``--repeats`` passes each; the median pass counts. A softmax model is also scored with
constrained Viterbi over its log-probabilities (zero transition scores, the BIO constraints only): what the
constraints alone give without CRF training. ``--bootstrap N`` adds, for each model against the first one, the F1
difference with a 95% interval from N paired resamples of the sentences. The head's own cost is timed apart from the encoder's, on the
saved per-token scores: decoding (arg-max or Viterbi) and the loss with its backward pass (cross-entropy or the
CRF's negative log-likelihood), the part of a training step that differs. Run from the project root:

    python docs/benchmarks/ner_crf.py --validation_file ../shared/data/conll2003/dev.txt --max_eval_samples 1000 \
        softmax=runs/ner-softmax/final crf=runs/ner-crf/final
"""

import argparse
import json
import statistics
import time

import numpy as np
import torch
from transformers import DataCollatorForTokenClassification

from briskbert.modeling import BriskBertForTokenClassification
from briskbert.modeling.crf import LinearChainCRF
from briskbert.tokenization import BriskBertTokenizer
from briskbert.training.data.task_data import load_conll
from briskbert.training.tasks.metrics import get_entities
from briskbert.training.tasks.ner import IGNORE_INDEX, NerEvaluator, ner_features, word_predictions


def parse_args():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("models", nargs="+", help="NAME=FOLDER of a fine-tuned token classifier")
    parser.add_argument("--validation_file", required=True)
    parser.add_argument("--max_eval_samples", type=int, default=None)
    parser.add_argument("--max_seq_length", type=int, default=128)
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--bootstrap", type=int, default=0, help="paired resamples for the F1 differences")
    return parser.parse_args()


def batches_of(folder: str, sentences, max_seq_length: int, batch_size: int):
    """The sentences tokenised for one model (its labels), in batches; and the evaluator of its predictions."""
    tokenizer = BriskBertTokenizer.from_pretrained(folder)
    model = BriskBertForTokenClassification.from_pretrained(folder, dtype=torch.float32).eval()
    features = ner_features(
        sentences.select_columns(["tokens"]),
        sentences["tags"],
        tokenizer,
        model.config.label2id,
        "tokens",
        max_seq_length,
        label_all_tokens=False,
    )
    evaluator = NerEvaluator(list(sentences["tags"]), features["word_ids"], model.config.id2label)
    collate = DataCollatorForTokenClassification(tokenizer)
    rows = [dict(row) for row in features.remove_columns("word_ids")]
    batches = [collate(rows[start : start + batch_size]) for start in range(0, len(rows), batch_size)]
    return model, batches, evaluator


def timed_pass(model, batches, decode: bool) -> tuple[float, list]:
    """Seconds for one pass over every batch, and the predicted tag ids (with ``decode``)."""
    predictions = []
    start = time.perf_counter()
    with torch.inference_mode():
        for batch in batches:
            inputs = {k: v for k, v in batch.items() if k != "labels"}
            if decode:
                # The tagged positions are each word's first sub-word, where the labels sit.
                outputs = model(**inputs, tag_mask=batch["labels"] != IGNORE_INDEX)
                predictions.extend(outputs.tags.tolist())
            else:
                model(**inputs)
    return time.perf_counter() - start, predictions


def constrained_viterbi_scores(model, batches, evaluator) -> tuple[dict, list]:
    """Quality of a softmax model decoded with Viterbi under the BIO constraints of its labels."""
    labels = [model.config.id2label[i] for i in range(model.config.num_labels)]
    crf = LinearChainCRF(labels)  # zero transition scores: the constraints alone
    predictions = []
    with torch.inference_mode():
        for batch in batches:
            logits = model(**{k: v for k, v in batch.items() if k != "labels"}).logits
            predictions.extend(crf.decode(logits.log_softmax(-1), batch["labels"] != IGNORE_INDEX).tolist())
    scores = evaluator(predictions)
    return {k: scores[k] for k in ("precision", "recall", "f1", "invalid_bio_share")}, predictions


def entity_counts(predicted_ids, evaluator: NerEvaluator) -> np.ndarray:
    """Per sentence: (correct, predicted, gold) entities, as conlleval counts them."""
    lengths = [len(tags) for tags in evaluator.gold_tags]
    predictions, _ = word_predictions(predicted_ids, evaluator.word_ids, evaluator.id2label, lengths)
    rows = []
    for predicted, gold in zip(predictions, evaluator.gold_tags):
        predicted, gold = set(get_entities(predicted)), set(get_entities(gold))
        rows.append((len(predicted & gold), len(predicted), len(gold)))
    return np.array(rows)


def bootstrap_f1_difference(counts: np.ndarray, reference: np.ndarray, resamples: int) -> dict:
    """F1(counts) - F1(reference) with a 95% interval from paired resamples of the sentences."""

    def f1(totals):  # 2 correct / (predicted + gold), per resample
        return 2 * totals[..., 0] / np.maximum(totals[..., 1] + totals[..., 2], 1)

    samples = np.random.default_rng(0).integers(0, len(counts), (resamples, len(counts)))
    differences = f1(counts[samples].sum(1)) - f1(reference[samples].sum(1))
    low, high = np.percentile(differences, [2.5, 97.5])
    difference = f1(counts.sum(0)) - f1(reference.sum(0))
    return {"f1_difference": round(float(difference), 4), "interval_95": [round(low, 4), round(high, 4)]}


def head_seconds(model, batches, repeats: int) -> dict:
    """Median seconds, over the whole set, of the head's decoding and of its loss + backward on fixed scores."""
    with torch.inference_mode():
        logits = [model(**{k: v for k, v in b.items() if k != "labels"}).logits.clone() for b in batches]
    decode, loss = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        for scores, batch in zip(logits, batches):
            model.decode(scores, batch["labels"] != IGNORE_INDEX)
        decode.append(time.perf_counter() - start)
        start = time.perf_counter()
        for scores, batch in zip(logits, batches):
            leaf = scores.clone().requires_grad_()
            model.tagger.loss(leaf, batch["labels"]).backward()
        loss.append(time.perf_counter() - start)
    return {
        "decode_s": round(statistics.median(decode), 3),
        "loss_backward_s": round(statistics.median(loss), 3),
    }


def main():
    args = parse_args()
    torch.set_num_threads(args.threads)
    sentences = load_conll(args.validation_file)
    if args.max_eval_samples is not None:
        sentences = sentences.select(range(min(args.max_eval_samples, len(sentences))))
    prepared = {}
    for spec in args.models:
        name, folder = spec.split("=", 1)
        prepared[name] = batches_of(folder, sentences, args.max_seq_length, args.batch_size)
    seconds = {(name, decode): [] for name in prepared for decode in (False, True)}
    results, counts = {}, {}
    for _ in range(args.repeats):
        for name, (model, batches, evaluator) in prepared.items():
            for decode in (False, True):
                elapsed, predictions = timed_pass(model, batches, decode)
                seconds[name, decode].append(elapsed)
                if decode:
                    scores = evaluator(predictions)
                    counts[name] = entity_counts(predictions, evaluator)
                    results[name] = {k: scores[k] for k in ("precision", "recall", "f1", "invalid_bio_share")}
    for name, (model, batches, _) in prepared.items():
        tokens = sum(int(batch["attention_mask"].sum()) for batch in batches)
        results[name]["real_tokens"] = tokens
        results[name]["emissions_tokens_per_s"] = round(tokens / statistics.median(seconds[name, False]))
        results[name]["tagged_tokens_per_s"] = round(tokens / statistics.median(seconds[name, True]))
        results[name]["use_crf"] = model.config.use_crf
        results[name]["emissions_s"] = round(statistics.median(seconds[name, False]), 3)
        results[name].update(head_seconds(model, batches, args.repeats))
    for name, (model, batches, evaluator) in list(prepared.items()):
        if not model.config.use_crf:
            variant = f"{name} + constrained Viterbi"
            results[variant], predictions = constrained_viterbi_scores(model, batches, evaluator)
            counts[variant] = entity_counts(predictions, evaluator)
    if args.bootstrap:
        reference = next(iter(counts))
        for name in list(counts)[1:]:
            difference = bootstrap_f1_difference(counts[name], counts[reference], args.bootstrap)
            results[name][f"vs_{reference}"] = difference
    print(json.dumps({"sentences": len(sentences), "threads": args.threads, "models": results}, indent=2))


if __name__ == "__main__":
    main()
