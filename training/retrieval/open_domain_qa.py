# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""Open-domain question answering: retrieve passages with a dual encoder, optionally re-order them with a
cross-encoder, and extract the answer from the best ones with a reader (a QA model from ``finetune-qa``).

The reader reads each of a question's ``read_top_k`` passages in the windows ``finetune-qa`` evaluates with
(:func:`training.qa.prepare_eval_features` / :func:`training.qa.postprocess_qa_predictions`); the answer is
the span with the highest start + end logit over all of them, and the passage it came from is reported.
For a SQuAD-format collection, :func:`evaluate_open_domain_qa` reports exact match / F1 of these answers,
the share of questions whose own paragraph was among the passages read (the reader's ceiling) and the
time per question.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch

from briskbert.training.retrieval.dense import Reranker, RetrievalTask, encode_texts, exact_search
from briskbert.training.retrieval.reranking import rerank
from briskbert.training.retrieval.sentence_transformers_files import EmbeddingSpec
from briskbert.training.tasks.metrics import squad_metrics
from briskbert.training.tasks.qa import postprocess_qa_predictions, prepare_eval_features

_SEPARATOR = "\t"  # between question id and passage id in the reader's example ids


@dataclass
class Retriever:
    encoder: object
    tokenizer: object
    spec: EmbeddingSpec
    batch_size: int = 64


@dataclass
class Reader:
    model: object
    tokenizer: object
    max_seq_length: int = 384
    doc_stride: int = 128
    max_answer_length: int = 30
    batch_size: int = 32


@dataclass
class Answer:
    text: str
    score: float
    passage_id: str | None
    passages_read: list[str]


def load_reader(name_or_path: str, max_seq_length: int = 384, doc_stride: int = 128) -> Reader:
    from transformers import AutoModelForQuestionAnswering, AutoTokenizer

    model = AutoModelForQuestionAnswering.from_pretrained(name_or_path, trust_remote_code=True)
    tokenizer = AutoTokenizer.from_pretrained(name_or_path, trust_remote_code=True)
    return Reader(model.eval(), tokenizer, max_seq_length, doc_stride)


@torch.no_grad()
def read(
    reader: Reader, questions: dict[str, str], passages: dict[str, list[tuple[str, str]]]
) -> dict[str, Answer]:
    """The best span for each question over its ``(passage id, text)`` list."""
    examples = [
        {"id": f"{qid}{_SEPARATOR}{pid}", "question": questions[qid], "context": text}
        for qid, candidates in passages.items()
        for pid, text in candidates
    ]
    columns = {key: [example[key] for example in examples] for key in ("id", "question", "context")}
    features = prepare_eval_features(
        columns, reader.tokenizer, reader.max_seq_length, reader.doc_stride, max_query_length=64
    )
    starts, ends = [], []
    device = next(reader.model.parameters()).device
    names = [name for name in ("input_ids", "token_type_ids", "attention_mask") if name in features]
    for first in range(0, len(features["input_ids"]), reader.batch_size):
        rows = {name: features[name][first : first + reader.batch_size] for name in names}
        batch = reader.tokenizer.pad(rows, return_tensors="pt").to(device)
        outputs = reader.model(**batch)
        starts.extend(outputs.start_logits.float().cpu().numpy())
        ends.extend(outputs.end_logits.float().cpu().numpy())
    _, nbest = postprocess_qa_predictions(
        examples,
        {"example_id": features["example_id"], "offset_mapping": features["offset_mapping"]},
        starts,
        ends,
        max_answer_length=reader.max_answer_length,
    )
    answers = {
        qid: Answer("", -np.inf, None, [pid for pid, _ in candidates]) for qid, candidates in passages.items()
    }
    for example_id, candidates in nbest.items():
        qid, pid = example_id.split(_SEPARATOR, 1)
        if candidates and candidates[0]["score"] > answers[qid].score:
            answers[qid].text, answers[qid].score, answers[qid].passage_id = (
                candidates[0]["text"],
                candidates[0]["score"],
                pid,
            )
    return answers


def answer_questions(
    corpus: dict[str, str],
    questions: dict[str, str],
    retriever: Retriever,
    reader: Reader,
    reranker: Reranker | None = None,
    read_top_k: int = 5,
    chunk_size: int = 16,
) -> dict[str, Answer]:
    """Retrieve (then re-rank) passages of ``corpus`` (``{id: text}``) for each of ``questions`` (``{id: text}``)
    and read the first ``read_top_k``."""
    from tqdm.auto import tqdm

    passage_ids, query_ids = list(corpus), list(questions)
    encode = lambda texts, what: encode_texts(  # noqa: E731
        retriever.encoder,
        retriever.tokenizer,
        texts,
        retriever.spec,
        retriever.batch_size,
        f"encoding {what}",
    )
    depth = max(read_top_k, reranker.top_k if reranker else 0)
    _, indices = exact_search(
        encode(list(questions.values()), "questions"), encode(list(corpus.values()), "passages"), depth
    )
    rankings = {qid: [passage_ids[i] for i in row] for qid, row in zip(query_ids, indices.tolist())}
    if reranker is not None:
        rankings = rerank(
            reranker.model,
            reranker.tokenizer,
            questions,
            rankings,
            corpus,
            reranker.top_k,
            reranker.max_seq_length,
            reranker.batch_size,
        )
    answers = {}
    for first in tqdm(range(0, len(query_ids), chunk_size), desc="reading", leave=False):
        chunk = query_ids[first : first + chunk_size]
        answers.update(
            read(
                reader,
                questions,
                {qid: [(pid, corpus[pid]) for pid in rankings[qid][:read_top_k]] for qid in chunk},
            )
        )
    return answers


def evaluate_open_domain_qa(
    task: RetrievalTask,
    retriever: Retriever,
    reader: Reader,
    reranker: Reranker | None = None,
    read_top_k: int = 5,
) -> tuple[dict, dict[str, Answer]]:
    """Exact match / F1 (percent), recall of the gold passage among those read, and seconds per question."""
    if not task.answers:
        raise ValueError("open-domain QA evaluation needs gold answers: give a SQuAD-format collection.")
    start = time.perf_counter()
    corpus, questions = (
        dict(zip(task.corpus_ids, task.corpus_texts)),
        dict(zip(task.query_ids, task.query_texts)),
    )
    answers = answer_questions(corpus, questions, retriever, reader, reranker, read_top_k)
    elapsed = time.perf_counter() - start
    scores = squad_metrics({qid: answer.text for qid, answer in answers.items()}, task.answers)
    found = sum(
        any(pid in task.qrels[qid] for pid in answer.passages_read) for qid, answer in answers.items()
    )
    metrics = {
        "exact_match": scores["exact_match"],
        "f1": scores["f1"],
        f"recall@{read_top_k}": found / len(answers),
        "seconds_per_question": round(elapsed / len(answers), 4),
        "num_questions": len(answers),
        "num_passages": len(task.corpus_ids),
        "read_top_k": read_top_k,
        "reranked": reranker is not None,
    }
    return metrics, answers
