# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""A faiss index over a passage collection (``flat``, ``hnsw`` or ``ivfpq``, inner product). Passages are embedded
a shard at a time into ``embeddings/NNNNN.npy``, so a re-run continues an interrupted build; ``index_config.json``,
written last, records the settings and the encoder's embeddings of probe sentences to check a query encoder."""

from __future__ import annotations

import json
import shutil
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from briskbert.errors import SettingError
from briskbert.files import LOCK_FILE, atomic_file, write_atomic
from briskbert.modeling.sentence_transformers_files import EmbeddingSpec
from briskbert.retrieval.dense import encode_texts, load_collection
from briskbert.retrieval.settings import CONFIG_FILE, IndexOutput, IndexSettings, PassageSource, check_faiss
from briskbert.training.data.task_data import DataError

INDEX_FILE = "index.faiss"
IDS_FILE = "ids.txt"
STATE_FILE = "build_state.json"  # what an unfinished build embeds: a re-run must match it to continue
SHARD_FOLDER = "embeddings"
PROBE_TEXTS = (
    "A man is playing a guitar on a stage.",
    "The capital of France is Paris.",
    "How do vaccines teach the immune system to recognise a virus?",
)
PROBE_MIN_COSINE = 0.999  # the same encoder on another device or thread count stays far above this


def iter_passages(source: PassageSource) -> Iterator[tuple[str, str]]:
    """``(id, text)`` of every passage, read lazily (ids: line numbers, or JSON lines' ``id``)."""
    if source.squad_file is not None:
        task = load_collection(source)
        yield from zip(task.corpus_ids, task.corpus_texts)
        return
    path = source.passages_file
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            if not path.endswith((".jsonl", ".json")):
                yield str(number), line.strip()
                continue
            try:
                row = json.loads(line)
                passage_id, text = str(row["id"]), row["text"]
            except (ValueError, TypeError, KeyError, IndexError):
                passage_id = text = None
            if not isinstance(text, str) or not passage_id.strip() or "\n" in passage_id:
                raise SettingError(
                    "passages_file",
                    f"{path} line {number}: expected an object with 'id' and 'text' (the id one non-empty line).",
                )
            yield passage_id, text


def encoder_facts(encoder, tokenizer, spec: EmbeddingSpec, name_or_path: str) -> dict:
    """What an index remembers of the encoder that built it, with its embeddings of ``PROBE_TEXTS``."""
    probe = encode_texts(encoder, tokenizer, list(PROBE_TEXTS), spec, len(PROBE_TEXTS), "probe")
    named = {"name_or_path": name_or_path, **asdict(spec)}
    return named | {"dimension": probe.shape[1], "probe": probe.tolist()}


def embedding_difference(built: dict, ours: dict) -> str | None:
    """How the encoder of :func:`encoder_facts` ``ours`` embeds otherwise than ``built`` (None: alike)."""
    pooled = [f"{f['pooling']}{'' if f['normalize'] else ', not normalised'}" for f in (ours, built)]
    if pooled[0] != pooled[1]:
        return f"pooling {pooled[0]} instead of {pooled[1]}"
    if built["dimension"] != ours["dimension"]:
        return f"{ours['dimension']}-dimensional embeddings instead of {built['dimension']}"
    probes = torch.tensor(built["probe"]), torch.tensor(ours["probe"])
    cosine = float(torch.nn.functional.cosine_similarity(*probes, dim=-1).min())
    if cosine < PROBE_MIN_COSINE:
        return f"other embeddings (cosine {cosine:.4f} with the index's encoder on probe sentences)"
    return None


def build_index(
    source: PassageSource,
    encoder,
    tokenizer,
    spec: EmbeddingSpec,
    encoder_name: str,
    settings: IndexSettings,
    output: IndexOutput,
    batch_size: int = 64,
) -> dict:
    """Embed ``source`` (resuming an interrupted build), index it, save the folder; returns its config."""
    check_faiss()
    import faiss

    start = time.perf_counter()
    folder, shard_folder = Path(output.output_dir), Path(output.output_dir) / SHARD_FOLDER
    facts = encoder_facts(encoder, tokenizer, spec, encoder_name)
    _prepare_folder(folder, source, facts, output)
    num_vectors = _embed_shards(source, encoder, tokenizer, spec, shard_folder, output.shard_size, batch_size)
    embedded = time.perf_counter()
    if num_vectors == 0:
        raise DataError("the passage source holds no passages.")
    settings = settings.resolved(num_vectors, facts["dimension"])
    shards = sorted(shard_folder.glob("*.npy"))
    index = _faiss_index(settings, facts["dimension"], shards, num_vectors)
    _write_ids(folder, shards)
    with atomic_file(folder / INDEX_FILE) as partial:
        faiss.write_index(index, str(partial))
    config = {
        "index_type": settings.index_type,
        "settings": asdict(settings),
        "num_passages": num_vectors,
        "dimension": facts["dimension"],
        "encoder": facts,
        "source": source.fingerprint(),
        "embedding_s": round(embedded - start, 2),
        "indexing_s": round(time.perf_counter() - embedded, 2),
        "index_bytes": (folder / INDEX_FILE).stat().st_size,
        "faiss_version": faiss.__version__,
    }
    write_atomic(folder / CONFIG_FILE, json.dumps(config, indent=2))
    if not output.keep_embeddings:
        shutil.rmtree(shard_folder)
    (folder / STATE_FILE).unlink()
    return config


def _prepare_folder(folder: Path, source: PassageSource, facts: dict, output: IndexOutput):
    """Start a build, or check that the unfinished one in ``folder`` embeds the same passages the same way."""
    state = {"source": source.fingerprint(), "encoder": facts, "shard_size": output.shard_size}
    state = json.loads(json.dumps(state))  # as the state file holds it: an articles range becomes a list
    own = {CONFIG_FILE, INDEX_FILE, IDS_FILE, STATE_FILE, SHARD_FOLDER}
    others = sorted(path.name for path in folder.glob("*") if path.name not in own | {LOCK_FILE})
    if others:
        raise SettingError(
            "output_dir", f"{folder} holds other files ({', '.join(others[:3])}); choose an empty folder."
        )
    if output.overwrite_output_dir:
        shutil.rmtree(folder / SHARD_FOLDER, ignore_errors=True)
        for name in own - {SHARD_FOLDER}:
            (folder / name).unlink(missing_ok=True)
    elif (folder / CONFIG_FILE).is_file():
        raise SettingError(
            "output_dir",
            f"{folder} already holds an index; choose another folder or set overwrite_output_dir.",
        )
    elif (folder / STATE_FILE).is_file():
        previous = json.loads((folder / STATE_FILE).read_text(encoding="utf-8"))
        built_with, mismatch = previous["encoder"], None
        if previous["source"] != state["source"]:
            mismatch = "other passages (or the files changed since)"
        elif previous["shard_size"] != output.shard_size:
            mismatch = f"shards of {previous['shard_size']} passages"
        elif built_with["name_or_path"] != facts["name_or_path"] or embedding_difference(built_with, facts):
            mismatch = f"the encoder {built_with['name_or_path']}"
        if mismatch:
            raise SettingError(
                "output_dir",
                f"{folder} holds an unfinished build of {mismatch}; run it with the same arguments to "
                "continue it, or set overwrite_output_dir to start over.",
            )
        return
    (folder / SHARD_FOLDER).mkdir(parents=True, exist_ok=True)
    write_atomic(folder / STATE_FILE, json.dumps(state, indent=2))


def _embed_shards(
    source, encoder, tokenizer, spec, shard_folder: Path, shard_size: int, batch_size: int
) -> int:
    """Embed the passages not yet in a shard; returns the number of passages embedded in all."""
    finished = sorted(shard_folder.glob("*.npy"))
    done, number = sum(np.load(path, mmap_mode="r").shape[0] for path in finished), len(finished)
    progress = tqdm(initial=done, desc="embedding passages", unit="passage")
    passages = iter_passages(source)
    for _ in range(done):  # what earlier runs embedded
        next(passages)
    while shard := [passage for _, passage in zip(range(shard_size), passages)]:
        ids, texts = zip(*shard)
        vectors = encode_texts(encoder, tokenizer, list(texts), spec, batch_size, f"shard {number}")
        stem = shard_folder / f"{number:05d}"
        write_atomic(stem.with_suffix(".ids"), "\n".join(ids) + "\n")
        # The .npy file is written last: a shard counts once its embeddings are on disk.
        with atomic_file(stem.with_suffix(".npy")) as partial, open(partial, "wb") as handle:
            np.save(handle, vectors.numpy().astype(np.float32))  # np.save(path) would add .npy to the name
        done, number = done + len(shard), number + 1
        progress.update(len(shard))
    progress.close()
    return done


def factory_string(settings: IndexSettings) -> str:
    ivfpq = f"IVF{settings.ivf_nlist},PQ{settings.pq_m}x{settings.pq_bits}"
    return {"flat": "Flat", "hnsw": f"HNSW{settings.hnsw_m},Flat", "ivfpq": ivfpq}[settings.index_type]


def _faiss_index(settings: IndexSettings, dimension: int, shards: list[Path], num_vectors: int):
    import faiss

    index = faiss.index_factory(dimension, factory_string(settings), faiss.METRIC_INNER_PRODUCT)
    if settings.index_type == "hnsw":
        index.hnsw.efConstruction = settings.hnsw_ef_construction
    if not index.is_trained:  # on a seeded uniform sample, read shard by shard
        size = min(settings.max_train_vectors, num_vectors)
        rows = np.sort(np.random.default_rng(0).choice(num_vectors, size=size, replace=False))
        pieces, offset = [], 0
        for path in shards:
            vectors = np.load(path, mmap_mode="r")
            pieces.append(
                np.asarray(vectors[rows[(rows >= offset) & (rows < offset + len(vectors))] - offset])
            )
            offset += len(vectors)
        index.train(np.ascontiguousarray(np.concatenate(pieces), dtype=np.float32))
    for path in tqdm(shards, desc=f"indexing ({settings.index_type})", unit="shard"):
        index.add(np.ascontiguousarray(np.load(path), dtype=np.float32))
    return index


def _write_ids(folder: Path, shards: list[Path]) -> None:
    ids = [
        line
        for shard in shards
        for line in shard.with_suffix(".ids").read_text(encoding="utf-8").splitlines()
    ]
    twice = [passage_id for passage_id, count in Counter(ids).items() if count > 1]
    if twice:
        raise DataError(f"the passage id {twice[0]!r} occurs twice; ids must be unique.")
    write_atomic(folder / IDS_FILE, "".join(passage_id + "\n" for passage_id in ids))


@dataclass
class LoadedIndex:
    index: object
    ids: list[str]
    config: dict

    def search(self, query_embeddings: torch.Tensor, k: int) -> tuple[list[list[str]], torch.Tensor]:
        """``(ids, scores)`` of the ``k`` passages with the highest inner product per query, best first (fewer
        ids where the index returns fewer; their scores ``-inf``)."""
        import faiss

        settings, parameters = self.config["settings"], faiss.ParameterSpace()
        if settings["index_type"] == "hnsw":
            parameters.set_index_parameter(self.index, "efSearch", max(settings["hnsw_ef_search"], k))
        if settings["index_type"] == "ivfpq":
            parameters.set_index_parameter(self.index, "nprobe", settings["ivf_nprobe"])
        queries = np.ascontiguousarray(query_embeddings.detach().float().cpu().numpy())
        scores, rows = self.index.search(queries, min(k, self.index.ntotal))
        ids = [[self.ids[row] for row in found if row >= 0] for found in rows]
        return ids, torch.from_numpy(np.where(rows >= 0, scores, -np.inf).astype(np.float32))


def load_index(index_dir: str) -> LoadedIndex:
    check_faiss()
    import faiss

    folder = Path(index_dir)
    index = faiss.read_index(str(folder / INDEX_FILE))
    ids = (folder / IDS_FILE).read_text(encoding="utf-8").splitlines()
    return LoadedIndex(index, ids, json.loads((folder / CONFIG_FILE).read_text(encoding="utf-8")))


def with_index(retriever, index_dir: str | None, corpus_ids: list[str], encoder_name: str):
    """``retriever``, searching ``index_dir`` when one is given: a :class:`SettingError` unless the index was
    built by an encoder that embeds like this one, over exactly the collection's passages (their ids)."""
    if not index_dir:
        return retriever
    loaded = load_index(index_dir)
    built_with, built_name = loaded.config["encoder"], loaded.config["encoder"]["name_or_path"]
    ours = encoder_facts(retriever.encoder, retriever.tokenizer, retriever.spec, encoder_name)
    if difference := embedding_difference(built_with, ours):
        raise SettingError(
            "index",
            f"{index_dir} was built with the encoder {built_name} ({built_with['pooling']} pooling); "
            f"{encoder_name} gives {difference}. Query it with {built_name}, or build an index "
            f"with this encoder (build-index, model_name_or_path {encoder_name}).",
        )
    indexed, collection = set(loaded.ids), set(corpus_ids)
    if indexed != collection:
        example = next(iter((indexed - collection) or (collection - indexed)))
        raise SettingError(
            "index",
            f"{index_dir} holds {len(indexed)} passages and the collection {len(collection)}, not the same "
            f"ones (e.g. {example!r}); build the index from this collection's passages (same settings).",
        )
    return replace(retriever, index=loaded)
