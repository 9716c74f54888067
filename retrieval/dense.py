# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""Dense retrieval: a passage collection with relevance judgements, sentence embeddings from a dual
encoder, exact nearest neighbours and the standard metrics.

* :class:`RetrievalTask` is a corpus, queries and ``qrels`` (``{query id: {passage id: relevance}}``), read
  from a SQuAD-format file (every paragraph is a passage, each question's own paragraph its relevant one;
  optional distractor passages, one per line) or from JSON lines (``id``/``text`` corpus and queries,
  ``query_id``/``passage_id``[/``relevance``] qrels).
* :func:`encode_texts` embeds texts in length-sorted batches (little padding; the model's unpadded path
  skips the rest) with mean or CLS pooling and optional normalisation, as the saved sentence-transformers
  modules do.
* :func:`exact_search` is a blocked matrix product and ``topk`` in torch: exact, and fast enough for
  collections that fit in memory (a million 384-wide passages is 1.5 GB in fp32). Larger collections
  use a faiss index from ``briskbert build-index`` (:mod:`training.vector_index`; ``index_dir``).
* :func:`retrieval_metrics`: Recall@1/5/10/100 (share of a query's relevant passages in the top k), MRR@10
  (reciprocal rank of the first relevant passage, 0 beyond 10) and nDCG@10 (graded relevance, log2
  discount, normalised by the ideal ranking), averaged over queries.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import torch

from briskbert.modeling.sentence_transformers_files import EmbeddingSpec
from briskbert.training.data.task_data import DataError, load_squad

RECALL_DEPTHS = (1, 5, 10, 100)
RANK_DEPTH = 10  # MRR@10 and nDCG@10


@dataclass
class RetrievalTask:
    corpus_ids: list[str]
    corpus_texts: list[str]
    query_ids: list[str]
    query_texts: list[str]
    qrels: dict[str, dict[str, float]]
    answers: dict[str, list[str]] = field(default_factory=dict)  # SQuAD only: gold answers per query

    def __post_init__(self):
        if not self.corpus_ids or not self.query_ids:
            raise DataError("a retrieval task needs at least one passage and one query.")
        known = set(self.corpus_ids)
        for query_id in self.query_ids:
            relevant = self.qrels.get(query_id, {})
            if not any(passage_id in known for passage_id in relevant):
                raise DataError(
                    f"query {query_id!r} has no relevant passage in the corpus (check the qrels)."
                )

    @property
    def corpus(self) -> dict[str, str]:
        return dict(zip(self.corpus_ids, self.corpus_texts))

    @property
    def queries(self) -> dict[str, str]:
        return dict(zip(self.query_ids, self.query_texts))


# ------------------------------------------------------------------------------------------------ loading
def read_passages(path: str | None, min_words: int = 0) -> list[str]:
    """One passage per line (none without a ``path``); blank lines, WikiText headings (`` = Title = ``) and
    lines under ``min_words`` words are left out."""
    if path is None:
        return []
    if not Path(path).is_file():
        raise DataError(f"passage file {path!r} does not exist.")
    passages = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        text = line.strip()
        if not text or (text.startswith("= ") and text.endswith(" =")) or len(text.split()) < min_words:
            continue
        passages.append(text)
    return passages


def load_squad_retrieval(
    path: str,
    articles: tuple[int, int] | None = None,
    extra_passages: list[str] = (),
) -> RetrievalTask:
    """Every distinct paragraph of ``path`` (articles ``start..stop-1``) is a passage ``p<n>``; each question's
    relevant passage is its own paragraph. ``extra_passages`` join the corpus as distractors ``x<n>``."""
    questions, _ = load_squad(path, articles)
    passage_ids: dict[str, str] = {}
    qrels, answers = {}, {}
    for row in questions:
        passage_id = passage_ids.setdefault(row["context"], f"p{len(passage_ids)}")
        qrels[row["id"]] = {passage_id: 1.0}
        answers[row["id"]] = list(row["answers"]["text"])
    corpus_texts = list(passage_ids) + list(extra_passages)
    corpus_ids = list(passage_ids.values()) + [f"x{i}" for i in range(len(extra_passages))]
    return RetrievalTask(
        corpus_ids, corpus_texts, list(questions["id"]), list(questions["question"]), qrels, answers
    )


def read_json_lines(path: str) -> list[tuple[int, object]]:
    """``(line number, value)`` of each non-blank line of a JSON lines file."""
    rows = []
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        if line.strip():
            try:
                rows.append((number, json.loads(line)))
            except json.JSONDecodeError as error:
                raise DataError(f"{path} line {number} is not JSON ({error}).") from None
    return rows


def _read_jsonl(path: str, required: tuple[str, ...]) -> list[dict]:
    if not Path(path).is_file():
        raise DataError(f"{path!r} does not exist.")
    rows = read_json_lines(path)
    for number, row in rows:
        missing = [key for key in required if key not in row]
        if missing:
            raise DataError(
                f"{path} line {number} lacks {', '.join(missing)}; expected keys {', '.join(required)}."
            )
    return [row for _, row in rows]


def load_jsonl_retrieval(corpus_file: str, queries_file: str, qrels_file: str) -> RetrievalTask:
    corpus = _read_jsonl(corpus_file, ("id", "text"))
    queries = _read_jsonl(queries_file, ("id", "text"))
    qrels: dict[str, dict[str, float]] = {}
    for row in _read_jsonl(qrels_file, ("query_id", "passage_id")):
        qrels.setdefault(str(row["query_id"]), {})[str(row["passage_id"])] = float(row.get("relevance", 1.0))
    queries = [row for row in queries if str(row["id"]) in qrels]
    return RetrievalTask(
        [str(row["id"]) for row in corpus],
        [row["text"] for row in corpus],
        [str(row["id"]) for row in queries],
        [row["text"] for row in queries],
        qrels,
    )


def load_collection(source) -> RetrievalTask:
    """The collection a ``CollectionSource`` (or the SQuAD part of a ``PassageSource``) names: a SQuAD file
    with its distractor passages, else JSON lines corpus, queries and qrels."""
    if source.squad_file is None:
        return load_jsonl_retrieval(source.corpus_file, source.queries_file, source.qrels_file)
    extra = read_passages(source.extra_corpus_file, source.extra_corpus_min_words)
    return load_squad_retrieval(source.squad_file, source.articles, extra)


# ------------------------------------------------------------------------------------------ embeddings
def pool(last_hidden_state: torch.Tensor, attention_mask: torch.Tensor, spec: EmbeddingSpec) -> torch.Tensor:
    """One vector per sequence: the mean of the real tokens or the first ([CLS]) token, then optionally
    scaled to unit length (what sentence-transformers' Pooling and Normalize modules do)."""
    if spec.pooling == "cls":
        embeddings = last_hidden_state[:, 0]
    else:
        weights = attention_mask.to(last_hidden_state.dtype).unsqueeze(-1)
        embeddings = (last_hidden_state * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1e-9)
    return torch.nn.functional.normalize(embeddings, dim=-1) if spec.normalize else embeddings


def embed_batch(encoder, input_ids, attention_mask, spec: EmbeddingSpec) -> torch.Tensor:
    outputs = encoder(input_ids=input_ids, attention_mask=attention_mask)
    return pool(outputs.last_hidden_state, attention_mask, spec)


@torch.no_grad()
def encode_texts(
    encoder,
    tokenizer,
    texts: list[str],
    spec: EmbeddingSpec,
    batch_size: int = 64,
    description: str = "encoding",
) -> torch.Tensor:
    """Embeddings of ``texts`` (rows in input order, on the CPU, fp32). Batches hold texts of similar length."""
    from tqdm.auto import tqdm

    was_training = encoder.training
    encoder.eval()
    device = next(encoder.parameters()).device
    lengths = [
        len(ids) for ids in tokenizer(texts, truncation=True, max_length=spec.max_seq_length)["input_ids"]
    ]
    order = sorted(range(len(texts)), key=lambda index: -lengths[index])
    embeddings = [None] * len(texts)
    for start in tqdm(range(0, len(order), batch_size), desc=description, leave=False):
        chunk = order[start : start + batch_size]
        batch = tokenizer(
            [texts[index] for index in chunk],
            truncation=True,
            max_length=spec.max_seq_length,
            padding=True,
            return_tensors="pt",
        ).to(device)
        vectors = embed_batch(encoder, batch["input_ids"], batch["attention_mask"], spec).float().cpu()
        for index, vector in zip(chunk, vectors):
            embeddings[index] = vector
    encoder.train(was_training)
    return torch.stack(embeddings)


def exact_search(
    queries: torch.Tensor, passages: torch.Tensor, top_k: int, block_size: int = 1024
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(scores, indices)`` of the ``top_k`` passages with the highest dot product for each query (cosine
    similarity when both are normalised), best first. Queries go in blocks to bound memory."""
    top_k = min(top_k, passages.shape[0])
    scores, indices = [], []
    for start in range(0, queries.shape[0], block_size):
        block_scores = queries[start : start + block_size] @ passages.T
        top = torch.topk(block_scores, top_k, dim=1)
        scores.append(top.values)
        indices.append(top.indices)
    return torch.cat(scores), torch.cat(indices)


# --------------------------------------------------------------------------------------------- metrics
def retrieval_metrics(rankings: dict[str, list[str]], qrels: dict[str, dict[str, float]]) -> dict[str, float]:
    """Recall@1/5/10/100, MRR@10 and nDCG@10 (in [0, 1]) of ``rankings`` (``{query id: passage ids, best
    first}``) against ``qrels``; a passage counts as relevant when its relevance is above 0."""
    # Kept here: scikit-learn's ndcg_score wants a score for every passage, not rankings, and the libraries
    # that read rankings (ranx, pytrec_eval) would each be a dependency for these few lines.
    totals = {f"recall@{k}": 0.0 for k in RECALL_DEPTHS}
    totals.update({f"mrr@{RANK_DEPTH}": 0.0, f"ndcg@{RANK_DEPTH}": 0.0})
    for query_id, ranking in rankings.items():
        graded = {passage: grade for passage, grade in qrels.get(query_id, {}).items() if grade > 0}
        if not graded:
            raise ValueError(f"query {query_id!r} has no relevant passage in the qrels.")
        for k in RECALL_DEPTHS:
            totals[f"recall@{k}"] += sum(passage in graded for passage in ranking[:k]) / len(graded)
        first = next(
            (rank for rank, passage in enumerate(ranking[:RANK_DEPTH], 1) if passage in graded), None
        )
        totals[f"mrr@{RANK_DEPTH}"] += 1.0 / first if first else 0.0
        dcg = sum(
            graded.get(passage, 0.0) / math.log2(rank + 1)
            for rank, passage in enumerate(ranking[:RANK_DEPTH], 1)
        )
        ideal = sorted(graded.values(), reverse=True)[:RANK_DEPTH]
        idcg = sum(grade / math.log2(rank + 1) for rank, grade in enumerate(ideal, 1))
        totals[f"ndcg@{RANK_DEPTH}"] += dcg / idcg
    return {name: value / max(len(rankings), 1) for name, value in totals.items()}


def ranking_shortfall(baseline: dict[str, float], ranked: dict[str, float]) -> list[str]:
    """The headline metrics (Recall@1, MRR@10) on which ``ranked`` scores below ``baseline``, as
    ``"Recall@1 0.829 -> 0.805"`` strings."""
    shortfalls = []
    for key, name in ((f"recall@{RECALL_DEPTHS[0]}", "Recall@1"), (f"mrr@{RANK_DEPTH}", "MRR@10")):
        if ranked[key] < baseline[key] - 1e-12:
            shortfalls.append(f"{name} {baseline[key]:.3f} -> {ranked[key]:.3f}")
    return shortfalls


def rankings_from_indices(task: RetrievalTask, indices: torch.Tensor) -> dict[str, list[str]]:
    return {
        query_id: [task.corpus_ids[index] for index in row]
        for query_id, row in zip(task.query_ids, indices.tolist())
    }


# ------------------------------------------------------------------------------------------------ models
DEFAULT_SIMILARITY_SCALE = 20.0  # the multiple-negatives ranking loss's default (sentence-transformers' too)


@dataclass
class Retriever:
    """A dual encoder ready to search: the encoder, its tokenizer and pooling, and ``scale``, the 1/temperature
    it was trained with, which turns its similarity scores into logits of a distribution over passages."""

    encoder: object
    tokenizer: object
    spec: EmbeddingSpec
    batch_size: int = 64
    scale: float = DEFAULT_SIMILARITY_SCALE
    # a faiss index over the corpus (briskbert build-index) to search instead of the exact search
    index_dir: str | None = None


def load_dual_encoder(
    name_or_path: str, pooling: str | None = None, normalize: bool | None = None, max_seq_length=None
):
    """``(encoder, tokenizer, spec)``: any encoder ``AutoModel`` loads (briskbert folders with their remote
    code, plain BERT checkpoints), with the pooling and normalisation its sentence-transformers files
    declare unless given (default: mean pooling, normalised)."""
    from transformers import AutoModel, AutoTokenizer

    from briskbert.modeling.sentence_transformers_files import read_embedding_spec

    declared = read_embedding_spec(name_or_path) or EmbeddingSpec()
    spec = EmbeddingSpec(
        pooling=pooling or declared.pooling,
        normalize=declared.normalize if normalize is None else normalize,
        max_seq_length=max_seq_length or declared.max_seq_length,
    )
    encoder = AutoModel.from_pretrained(name_or_path, trust_remote_code=True)
    tokenizer = AutoTokenizer.from_pretrained(name_or_path, trust_remote_code=True)
    return encoder, tokenizer, spec


def load_retriever(
    name_or_path: str,
    pooling: str | None = None,
    normalize: bool | None = None,
    max_seq_length: int | None = None,
    batch_size: int = 64,
) -> Retriever:
    """:func:`load_dual_encoder` in eval mode, with the similarity scale its ``training_facts.json`` records
    (``finetune-embeddings`` writes it), else the default 20."""
    from briskbert.training.engine.facts import read_training_facts

    encoder, tokenizer, spec = load_dual_encoder(name_or_path, pooling, normalize, max_seq_length)
    loss = read_training_facts(name_or_path).job.details.get("loss")
    scale = loss.get("scale") if isinstance(loss, dict) else None
    scale = float(scale) if isinstance(scale, (int, float)) and scale > 0 else DEFAULT_SIMILARITY_SCALE
    return Retriever(encoder.eval(), tokenizer, spec, batch_size, scale)
