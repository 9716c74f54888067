# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""How much of exact search the faiss indexes of ``build-index`` keep, how fast they answer, what they cost.

    # a real collection, embedded by a dual encoder (the same flags as evaluate-retrieval)
    python docs/benchmarks/index_benchmark.py --model_name_or_path M --squad_file xquad-en.json \
        --articles 24:36 --extra_corpus_file wikitext-2/valid.txt --extra_corpus_min_words 40 --output_dir runs/ix
    # synthetic unit vectors: a Gaussian mixture (clusters of related passages), queries drawn like them
    python docs/benchmarks/index_benchmark.py --synthetic 1000000 --dimension 384 --output_dir runs/ix-1m

For each index type (flat = exact, HNSW, IVF-PQ), built with the settings ``build-index`` uses: the build time
(training included; the embeddings are already computed), the size of the serialised index (what it holds in
memory), the process's resident memory after building it, queries per second (all queries in one batched
search, faiss on every core it is given) and Recall@10 against exact search (the share of the exact 10 nearest
passages it returns). With a collection that has relevance judgements, Recall@1/10 and MRR@10 of each
ranking too. Writes ``index_benchmark.json``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from briskbert.retrieval.settings import IndexSettings


def synthetic_vectors(count: int, queries: int, dimension: int, clusters: int, seed: int = 0):
    """``(passages, queries)``: unit vectors around ``clusters`` random centres (noise of the centre's size
    spread over all dimensions), in chunks so memory stays at the result's size."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, dimension)).astype(np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)

    noise_scale = np.float32(1 / np.sqrt(dimension))  # noise as long as a centre: cosine ~0.7 to its centre

    def draw(n: int) -> np.ndarray:
        out = np.empty((n, dimension), dtype=np.float32)
        for start in range(0, n, 100_000):
            size = min(100_000, n - start)
            noise = rng.standard_normal((size, dimension), dtype=np.float32) * noise_scale
            chunk = centres[rng.integers(0, clusters, size)] + noise
            out[start : start + size] = chunk / np.linalg.norm(chunk, axis=1, keepdims=True)
        return out

    return draw(count), draw(queries)


def exact_top_k(passages: np.ndarray, queries: np.ndarray, k: int) -> tuple[np.ndarray, float]:
    """Indices of the exact ``k`` best passages per query (faiss' flat index) and its queries/s."""
    import faiss

    index = faiss.IndexFlatIP(passages.shape[1])
    index.add(passages)
    start = time.perf_counter()
    _, rows = index.search(queries, k)
    return rows, len(queries) / (time.perf_counter() - start)


def measure(settings: IndexSettings, passages: np.ndarray, queries: np.ndarray, exact: np.ndarray) -> dict:
    import faiss
    import psutil

    from briskbert.retrieval.vector_index import factory_string

    settings = settings.resolved(len(passages), passages.shape[1])
    start = time.perf_counter()
    index = faiss.index_factory(passages.shape[1], factory_string(settings), faiss.METRIC_INNER_PRODUCT)
    if settings.index_type == "hnsw":
        index.hnsw.efConstruction = settings.hnsw_ef_construction
    if not index.is_trained:
        sample = np.random.default_rng(0).choice(
            len(passages), min(len(passages), settings.max_train_vectors), False
        )
        index.train(passages[np.sort(sample)])
    for first in range(0, len(passages), 100_000):
        index.add(passages[first : first + 100_000])
    build_s = time.perf_counter() - start
    parameters = faiss.ParameterSpace()
    if settings.index_type == "hnsw":
        parameters.set_index_parameter(index, "efSearch", settings.hnsw_ef_search)
    if settings.index_type == "ivfpq":
        parameters.set_index_parameter(index, "nprobe", settings.ivf_nprobe)
    start = time.perf_counter()
    _, rows = index.search(queries, exact.shape[1])
    search_s = time.perf_counter() - start
    recall = np.mean([len(set(found) & set(truth)) / len(truth) for found, truth in zip(rows, exact)])
    report = {
        "index": factory_string(settings),
        "settings": _search_settings(settings),
        "build_s": round(build_s, 2),
        "index_mib": round(faiss.serialize_index(index).nbytes / 2**20, 1),
        "process_rss_mib": round(psutil.Process().memory_info().rss / 2**20),
        "queries_per_s": round(len(queries) / search_s, 1),
        "recall@10_vs_exact": round(float(recall), 4),
    }
    return report, rows


def _search_settings(settings: IndexSettings) -> dict:
    if settings.index_type == "hnsw":
        return {
            "M": settings.hnsw_m,
            "efConstruction": settings.hnsw_ef_construction,
            "efSearch": settings.hnsw_ef_search,
        }
    if settings.index_type == "ivfpq":
        return {
            "nlist": settings.ivf_nlist,
            "nprobe": settings.ivf_nprobe,
            "pq_m": settings.pq_m,
            "pq_bits": settings.pq_bits,
            "train_vectors": settings.max_train_vectors,
        }
    return {}


def _collection_vectors(args):
    from briskbert.retrieval.dense import encode_texts, load_collection, load_dual_encoder
    from briskbert.retrieval.settings import CollectionSource

    task = load_collection(
        CollectionSource(
            squad_file=args.squad_file,
            articles=tuple(int(x) for x in args.articles.split(":")) if args.articles else None,
            extra_corpus_file=args.extra_corpus_file,
            extra_corpus_min_words=args.extra_corpus_min_words,
        )
    )
    encoder, tokenizer, spec = load_dual_encoder(args.model_name_or_path)
    passages = encode_texts(encoder, tokenizer, task.corpus_texts, spec, 64, "passages").numpy()
    queries = encode_texts(encoder, tokenizer, task.query_texts, spec, 64, "queries").numpy()
    return task, np.ascontiguousarray(passages), np.ascontiguousarray(queries)


def _relevance(task, rows: np.ndarray) -> dict:
    from briskbert.retrieval.dense import retrieval_metrics

    rankings = {qid: [task.corpus_ids[i] for i in row if i >= 0] for qid, row in zip(task.query_ids, rows)}
    metrics = retrieval_metrics(rankings, task.qrels)
    return {name: round(100 * metrics[name], 1) for name in ("recall@1", "recall@10", "mrr@10")}


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model_name_or_path", default=None)
    parser.add_argument("--squad_file", default=None)
    parser.add_argument("--articles", default=None)
    parser.add_argument("--extra_corpus_file", default=None)
    parser.add_argument("--extra_corpus_min_words", type=int, default=0)
    parser.add_argument("--synthetic", type=int, default=0, help="Number of synthetic passages (instead).")
    parser.add_argument("--synthetic_queries", type=int, default=1000)
    parser.add_argument("--dimension", type=int, default=384)
    parser.add_argument("--clusters", type=int, default=10_000)
    parser.add_argument("--hnsw_ef_construction", type=int, default=200)
    parser.add_argument("--ivf_nlist", type=int, default=0)
    parser.add_argument("--max_train_vectors", type=int, default=100_000)
    parser.add_argument("--output_dir", required=True)
    args = parser.parse_args(argv)
    import faiss

    task = None
    if args.synthetic:
        passages, queries = synthetic_vectors(
            args.synthetic, args.synthetic_queries, args.dimension, args.clusters
        )
    else:
        task, passages, queries = _collection_vectors(args)
    exact, exact_qps = exact_top_k(passages, queries, 10)
    report = {
        "passages": len(passages),
        "queries": len(queries),
        "dimension": passages.shape[1],
        "faiss_threads": faiss.omp_get_max_threads(),
        "source": f"synthetic, {args.clusters} clusters" if args.synthetic else args.squad_file,
        "results": [],
    }
    report["exact"] = {"relevance": _relevance(task, exact)} if task is not None else {}
    common = {"max_train_vectors": args.max_train_vectors}
    for settings in (
        IndexSettings("flat"),
        IndexSettings("hnsw", hnsw_ef_construction=args.hnsw_ef_construction, **common),
        IndexSettings("ivfpq", ivf_nlist=args.ivf_nlist, **common),
    ):
        result, rows = measure(settings, passages, queries, exact)
        if task is not None:
            result["relevance"] = _relevance(task, rows)
        print(json.dumps(result), flush=True)
        report["results"].append(result)
    report["exact_queries_per_s"] = round(exact_qps, 1)
    Path(args.output_dir).mkdir(parents=True, exist_ok=True)
    (Path(args.output_dir) / "index_benchmark.json").write_text(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    main()
