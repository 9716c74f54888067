# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""Retrieve, re-rank and read: answer questions over a passage collection.

    briskbert open-domain-qa --retriever_model_name_or_path runs/embeddings/final \
        --reranker_model_name_or_path runs/reranker/final --reader_model_name_or_path runs/qa/final \
        --squad_file xquad-en.json --articles 24:36 --output_dir runs/odqa

The optional re-ranker re-orders the first ``--rerank_top_k`` passages (fused as in ``evaluate-retrieval``) and the
reader (``finetune-qa``) reads the first ``--read_top_k``. ``--question "..."`` answers one question; without it,
every question of a SQuAD-format collection is answered reading the top 1, 3, 5 and ``--read_top_k`` passages, its
metrics written to ``metrics.json`` and the answers to ``predictions.json``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from briskbert.commands.arguments import parse
from briskbert.commands.evaluate_retrieval import RETRIEVAL_ARGUMENTS
from briskbert.training.tasks.settings import check_at_least, helped


@dataclass(frozen=True)
class ModelArguments:
    _argument_group_name = "models"

    retriever_model_name_or_path: str = field(metadata={"help": "The dual encoder."})
    reader_model_name_or_path: str = field(metadata={"help": "An extractive QA model (finetune-qa)."})
    read_top_k: int = helped("Passages the reader reads per question.", 3)
    reader_max_seq_length: int = 384
    doc_stride: int = 128
    batch_size: int = helped("Sequences per forward pass.", 32)

    def __post_init__(self):
        check_at_least(self, 1, "read_top_k", "batch_size")


@dataclass(frozen=True)
class QuestionArguments:
    question: str | None = helped("Answer this one question and show the passages read.")
    output_dir: str | None = helped("Where metrics.json and predictions.json go.")


def main(argv=None):
    models, reranking, embedding, source, index, run = parse(
        __doc__, ModelArguments, *RETRIEVAL_ARGUMENTS, QuestionArguments, argv=argv
    )
    from briskbert.commands.evaluate_retrieval import load_models, write_outputs
    from briskbert.retrieval import open_domain_qa

    name, batch_size = models.retriever_model_name_or_path, models.batch_size
    task, retriever, reranker = load_models(source, embedding, index, reranking, name, batch_size)
    reader = open_domain_qa.load_reader(
        models.reader_model_name_or_path, models.reader_max_seq_length, models.doc_stride, batch_size
    )
    if run.question:
        texts = task.corpus
        (answer,) = open_domain_qa.answer_questions(
            texts, {"q": run.question}, retriever, reader, reranker, models.read_top_k
        ).values()
        print(
            f"answer: {answer.text}   (log-probability {answer.score:.2f}, from passage {answer.passage_id})"
        )
        read = zip(answer.passages_read, answer.passage_probabilities)
        for rank, (passage_id, probability) in enumerate(read, 1):
            print(f"  {rank}. [{passage_id}] p={probability:.2f}  {texts[passage_id][:200]}")
        return answer

    depths = tuple(sorted({*open_domain_qa.READ_DEPTHS, models.read_top_k}))
    metrics, answers = open_domain_qa.evaluate_open_domain_qa(task, retriever, reader, reranker, depths)
    metrics["read_top_k"] = models.read_top_k
    print(format_metrics(metrics, depths))
    predictions = {
        qid: {"answer": a.text, "passage_id": a.passage_id, "score": a.score}
        for qid, a in answers[models.read_top_k].items()
    }
    write_outputs(run.output_dir, {"metrics.json": metrics, "predictions.json": predictions})
    return metrics


def format_metrics(metrics: dict, depths) -> str:
    gold = metrics["reader_on_gold_paragraph"]
    weights = f"; re-ranked (fusion weight {metrics['fusion_weight']}, BM25 {metrics['lexical_weight']:g})"
    lines = [
        f"{metrics['num_questions']} questions, {metrics['num_passages']} passages"
        + (weights if metrics["reranked"] else ""),
        f"reader on the gold paragraph: EM {gold['exact_match']:.3f}  F1 {gold['f1']:.3f}",
        f"{'read top':>8} {'gold read':>10} {'EM':>6} {'F1':>6} {'target EM':>10} {'EM, reader scores only':>23}",
    ]
    for depth in depths:
        row = metrics[f"read_top_{depth}"]
        lines.append(
            f"{depth:>8} {row['gold_in_read_set']:>10.3f} {row['exact_match']:>6.3f} {row['f1']:>6.3f} "
            f"{row['target_exact_match']:>10.3f} {row['exact_match_reader_scores_only']:>23.3f}"
        )
    return "\n".join(lines)
