# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""Open-domain question answering: retrieve passages, optionally re-rank them, and extract the answer with a reader
(a ``finetune-qa`` model). Start and end logits are normalised jointly over every context token of every passage
read (shared normalisation, Clark & Gardner 2018), plus the passage's log-probability under the ranking::

    score(span in p) = log P_reader(start) + log P_reader(end) + log P_ranking(p)
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import torch
from scipy.special import logsumexp
from tqdm.auto import tqdm
from transformers import AutoModelForQuestionAnswering, AutoTokenizer

from briskbert.errors import SettingError
from briskbert.retrieval.dense import RECALL_DEPTHS, batches_by_length, retrieval_metrics, retrieve
from briskbert.retrieval.fusion import fuse, shortfall_warning
from briskbert.training.tasks.metrics import squad_metrics
from briskbert.training.tasks.qa import postprocess_qa_predictions, prepare_eval_features

_SEPARATOR = "\t"  # between question id and passage id in the reader's example ids
READ_DEPTHS = (1, 3, 5)
TARGET_SHARE = 0.9  # EM reading the top k should keep this share of (EM on gold) x (gold-in-read-set rate)


@dataclass
class Reader:
    model: object
    tokenizer: object
    max_seq_length: int = 384
    doc_stride: int = 128
    max_answer_length: int = 30
    batch_size: int = 32


class PassageReading(NamedTuple):
    spans: list[dict]  # the passage's best spans
    start_logsumexp: float  # of its start logits over its context tokens, in every window
    end_logsumexp: float


@dataclass
class Answer:
    text: str
    score: float  # log-probability: shared-normalised span + the passage's ranking log-probability
    passage_id: str | None
    passages_read: list[str]
    passage_probabilities: list[float] = field(default_factory=list)  # the ranking's, over passages_read


def load_reader(name_or_path: str, max_seq_length: int, doc_stride: int, batch_size: int) -> Reader:
    model = AutoModelForQuestionAnswering.from_pretrained(name_or_path, trust_remote_code=True)
    tokenizer = AutoTokenizer.from_pretrained(name_or_path, trust_remote_code=True)
    return Reader(model.eval(), tokenizer, max_seq_length, doc_stride, batch_size=batch_size)


def rank_passages(corpus, questions, retriever, reranker=None, depth: int = 5):
    """``(retrieved, ranked)``: retrieval (at least 100 deep, for the metrics) and the order the reader gets, with
    its logits."""
    retrieved = retrieve(corpus, questions, retriever, top_k=max(depth, RECALL_DEPTHS[-1]))
    if reranker is None:
        return retrieved, fuse(retrieved, {q: [0.0] * depth for q in questions}, 0.0, retriever.scale)
    _, ranked = reranker.rerank(questions, retrieved, corpus, retriever.scale, max(depth, reranker.top_k))
    return retrieved, ranked


@torch.no_grad()
def read_passages(
    reader: Reader, questions: dict[str, str], read: dict[str, list[str]], corpus: dict[str, str]
):
    """``{question id: {passage id: PassageReading}}`` for the passages of ``corpus`` each question ``read``s."""
    examples = [
        {"id": f"{qid}{_SEPARATOR}{pid}", "question": questions[qid], "context": corpus[pid]}
        for qid, pids in read.items()
        for pid in pids
    ]
    readings: dict[str, dict[str, PassageReading]] = {qid: {} for qid in read}
    if not examples:
        return readings
    columns = {key: [example[key] for example in examples] for key in ("id", "question", "context")}
    features = prepare_eval_features(columns, reader.tokenizer, reader.max_seq_length, reader.doc_stride, 64)
    starts, ends = _reader_logits(reader, features)
    offsets = features["offset_mapping"]
    _, nbest = postprocess_qa_predictions(
        examples,
        {"example_id": features["example_id"], "offset_mapping": offsets},
        starts,
        ends,
        max_answer_length=reader.max_answer_length,
    )
    context_starts, context_ends = {}, {}
    for index, example_id in enumerate(features["example_id"]):
        in_context = np.array([offset is not None for offset in offsets[index]])
        context_starts.setdefault(example_id, []).append(starts[index][: len(in_context)][in_context])
        context_ends.setdefault(example_id, []).append(ends[index][: len(in_context)][in_context])
    for example_id in context_starts:
        qid, pid = example_id.split(_SEPARATOR, 1)
        readings[qid][pid] = PassageReading(
            nbest[example_id],
            logsumexp(np.concatenate(context_starts[example_id])),
            logsumexp(np.concatenate(context_ends[example_id])),
        )
    return readings


def _reader_logits(reader: Reader, features) -> tuple[list[np.ndarray], list[np.ndarray]]:
    device = next(reader.model.parameters()).device
    names = [name for name in ("input_ids", "token_type_ids", "attention_mask") if name in features]
    lengths = [len(ids) for ids in features["input_ids"]]
    starts, ends = [None] * len(lengths), [None] * len(lengths)
    for chunk in tqdm(batches_by_length(lengths, reader.batch_size), desc="reading", leave=False):
        rows = {name: [features[name][index] for index in chunk] for name in names}
        outputs = reader.model(**reader.tokenizer.pad(rows, return_tensors="pt").to(device))
        for row, index in enumerate(chunk):
            starts[index] = outputs.start_logits[row, : lengths[index]].double().cpu().numpy()
            ends[index] = outputs.end_logits[row, : lengths[index]].double().cpu().numpy()
    return starts, ends


def select_answer(readings: dict[str, PassageReading], read: list[str], ranking_logits=None) -> Answer:
    """The best span over the passages ``read``, plus each passage's log-probability under ``ranking_logits``
    (aligned with ``read``; ``None``: the reader alone decides)."""
    start_norm = logsumexp([readings[pid].start_logsumexp for pid in read])
    end_norm = logsumexp([readings[pid].end_logsumexp for pid in read])
    log_priors = [0.0] * len(read)
    if ranking_logits is not None:
        log_priors = torch.tensor(ranking_logits, dtype=torch.float64).log_softmax(0).tolist()
    answer = Answer("", -math.inf, None, list(read), [math.exp(value) for value in log_priors])
    for pid, log_prior in zip(read, log_priors):
        for span in readings[pid].spans:
            score = span["start_logit"] - start_norm + span["end_logit"] - end_norm + log_prior
            if score > answer.score:
                answer.text, answer.score, answer.passage_id = span["text"], score, pid
    return answer


def answer_questions(
    corpus, questions, retriever, reader: Reader, reranker=None, read_top_k=3
) -> dict[str, Answer]:
    """Retrieve (and re-rank) passages for each question and answer from the first ``read_top_k``."""
    _, ranked = rank_passages(corpus, questions, retriever, reranker, read_top_k)
    read = {qid: ranking[:read_top_k] for qid, ranking in ranked.rankings.items()}
    readings = read_passages(reader, questions, read, corpus)
    return {
        qid: select_answer(readings[qid], read[qid], ranked.scores[qid][: len(read[qid])])
        for qid in questions
    }


def evaluate_open_domain_qa(task, retriever, reader: Reader, reranker=None, read_depths=READ_DEPTHS):
    """``(metrics, {depth: answers})``: EM / F1 reading the top k for each of ``read_depths`` (one reader pass over
    their union and the gold paragraph), the reader's on the gold paragraph, the gold-read rate, the target
    ``0.9 x EM(gold) x gold-read rate`` and the ranking's metrics (a ``"warning"`` when re-ranking hurts)."""
    if not task.answers:
        raise SettingError(
            "squad_file",
            "is needed to evaluate open-domain QA (a JSON lines collection has no gold answers).",
        )
    start = time.perf_counter()
    corpus, questions, deepest = task.corpus, task.queries, max(read_depths)
    retrieved, ranked = rank_passages(corpus, questions, retriever, reranker, deepest)
    gold = {qid: next(iter(task.qrels[qid])) for qid in task.query_ids}
    union = {qid: list(dict.fromkeys(ranked.rankings[qid][:deepest] + [gold[qid]])) for qid in task.query_ids}
    readings = read_passages(reader, questions, union, corpus)
    elapsed = time.perf_counter() - start

    def scored(answers: dict[str, Answer]) -> dict:
        scores = squad_metrics({qid: answer.text for qid, answer in answers.items()}, task.answers)
        return {"exact_match": scores["exact_match"], "f1": scores["f1"]}

    on_gold = scored({qid: select_answer(readings[qid], [gold[qid]]) for qid in task.query_ids})
    metrics = {
        "num_questions": len(task.query_ids),
        "num_passages": len(task.corpus_ids),
        "reranked": reranker is not None,
        "fusion_weight": reranker.fusion_weight if reranker else None,
        "lexical_weight": reranker.lexical_weight if reranker else 0.0,
        "reader_on_gold_paragraph": on_gold,
        "seconds_per_question": round(elapsed / len(task.query_ids), 4),
        "retrieval": retrieval_metrics(retrieved.rankings, task.qrels),
    }
    if reranker is not None:
        metrics["ranking"] = retrieval_metrics(ranked.rankings, task.qrels)
        metrics |= shortfall_warning(metrics["retrieval"], metrics["ranking"], reranker.fusion_weight)
    all_answers = {}
    for depth in read_depths:
        read = {qid: ranked.rankings[qid][:depth] for qid in task.query_ids}
        answers = {qid: select_answer(readings[qid], read[qid], ranked.scores[qid][:depth]) for qid in read}
        reader_alone = {qid: select_answer(readings[qid], read[qid]) for qid in read}
        rate = sum(gold[qid] in read[qid] for qid in read) / len(read)
        metrics[f"read_top_{depth}"] = {
            **scored(answers),
            "gold_in_read_set": rate,
            "target_exact_match": TARGET_SHARE * on_gold["exact_match"] * rate,
            "exact_match_reader_scores_only": scored(reader_alone)["exact_match"],
        }
        all_answers[depth] = answers
    return metrics, all_answers
