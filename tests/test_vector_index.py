# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""build-index and ``--index``: flat, resumed and approximate indexes against exact search in torch, and the
refusal of an index that does not fit the encoder or the passages."""

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from briskbert.cli import main as cli
from briskbert.errors import UserError
from briskbert.retrieval import vector_index
from briskbert.retrieval.dense import encode_texts, exact_search, load_dual_encoder
from briskbert.retrieval.settings import IndexOutput, IndexSettings
from briskbert.retrieval.vector_index import PassageSource, build_index, load_index

faiss = pytest.importorskip("faiss")

ROOT = Path(__file__).resolve().parents[1]
XQUAD = str(ROOT / "data" / "xquad_en_excerpt.json")
WIKITEXT = str(ROOT / "data" / "wikitext2_excerpt.txt")


def _encoder_folder(folder: Path, tokenizer, seed: int) -> str:
    from briskbert.modeling import BriskBertConfig, BriskBertModel
    from briskbert.modeling.sentence_transformers_files import (
        EmbeddingSpec,
        write_sentence_transformers_files,
    )

    torch.manual_seed(seed)
    config = BriskBertConfig.from_preset("bert-tiny", vocab_size=len(tokenizer), max_position_embeddings=512)
    BriskBertModel(config).save_pretrained(folder)
    write_sentence_transformers_files(folder, EmbeddingSpec("mean", True, 128), config.hidden_size)
    tokenizer.save_pretrained(folder)
    return str(folder)


@pytest.fixture(scope="module")
def encoder_dir(tmp_path_factory, tokenizer):
    return _encoder_folder(tmp_path_factory.mktemp("encoder"), tokenizer, seed=0)


@pytest.fixture(scope="module")
def encoder(encoder_dir):
    model, tokenizer, spec = load_dual_encoder(encoder_dir)
    return model.eval(), tokenizer, spec


@pytest.fixture(scope="module")
def passages_file(tmp_path_factory):
    """160 WikiText lines, a few of them blank (skipped; ids stay line numbers)."""
    lines = [line for line in Path(WIKITEXT).read_text(encoding="utf-8").splitlines() if line.strip()][:160]
    lines[10:10] = ["", "   "]
    path = tmp_path_factory.mktemp("passages") / "passages.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


def _build(source, encoder, encoder_dir, folder, settings=IndexSettings("flat"), shard_size=64):
    return build_index(
        source, *encoder, encoder_dir, settings, IndexOutput(str(folder), shard_size=shard_size)
    )


def _search(folder, queries, k):
    return load_index(str(folder)).search(queries, k)


# ------------------------------------------------------------------------------------------------ building
def test_flat_index_returns_exactly_what_exact_search_returns(encoder, encoder_dir, passages_file, tmp_path):
    source = PassageSource(passages_file=passages_file)
    config = _build(source, encoder, encoder_dir, tmp_path / "index")
    assert config["num_passages"] == 160 and config["encoder"]["pooling"] == "mean"
    assert not (tmp_path / "index" / "embeddings").exists()  # shards go once indexed
    ids = (tmp_path / "index" / "ids.txt").read_text().splitlines()
    assert ids[:12] == [*map(str, range(1, 11)), "13", "14"]  # line numbers; blank lines 11-12 skipped

    model, tokenizer, spec = encoder
    ids, texts = zip(*vector_index.iter_passages(source))
    questions = ["When was the album released?", "Who commanded the army?", "What is the river's length?"]
    queries = encode_texts(model, tokenizer, questions, spec)
    found, scores = _search(tmp_path / "index", queries, k=10)
    expected_scores, rows = exact_search(queries, encode_texts(model, tokenizer, list(texts), spec), 10)
    assert found == [[ids[row] for row in hits] for hits in rows.tolist()]
    torch.testing.assert_close(scores, expected_scores, atol=1e-5, rtol=0)


class CountingEncoder:
    """``encode_texts`` that records each shard's size and stops (as Ctrl-C would) before shard ``stop_at``."""

    def __init__(self, stop_at: int | None = None):
        self.shards, self.stop_at = [], stop_at

    def __call__(self, model, tokenizer, texts, spec, batch_size=64, description=""):
        if description.startswith("shard"):
            if len(self.shards) == self.stop_at:
                raise KeyboardInterrupt
            self.shards.append(len(texts))
        return encode_texts(model, tokenizer, texts, spec, batch_size, description)


def test_an_interrupted_build_continues_from_its_last_shard(
    encoder, encoder_dir, passages_file, tmp_path, monkeypatch
):
    source = PassageSource(passages_file=passages_file)
    monkeypatch.setattr(vector_index, "encode_texts", CountingEncoder(stop_at=2))
    with pytest.raises(KeyboardInterrupt):
        _build(source, encoder, encoder_dir, tmp_path / "index")
    shards = sorted(p.name for p in (tmp_path / "index" / "embeddings").glob("*"))
    assert shards == ["00000.ids", "00000.npy", "00001.ids", "00001.npy"]
    assert not (tmp_path / "index" / "index_config.json").exists()

    # Other arguments must not continue it...
    with pytest.raises(UserError, match="unfinished build of shards of 64 passages"):
        _build(source, encoder, encoder_dir, tmp_path / "index", shard_size=32)
    # ...the same ones embed only what is left, and end with the index an uninterrupted build makes.
    resumed = CountingEncoder()
    monkeypatch.setattr(vector_index, "encode_texts", resumed)
    _build(source, encoder, encoder_dir, tmp_path / "index")
    assert resumed.shards == [32]  # 160 - 2 x 64 passages
    _build(source, encoder, encoder_dir, tmp_path / "whole")
    resumed_index, whole_index = load_index(str(tmp_path / "index")), load_index(str(tmp_path / "whole"))
    assert resumed_index.ids == whole_index.ids
    resumed_vectors = resumed_index.index.reconstruct_n(0, 160)
    np.testing.assert_allclose(resumed_vectors, whole_index.index.reconstruct_n(0, 160), atol=1e-6)


def test_hnsw_and_ivfpq_find_what_exact_search_finds(encoder, encoder_dir, passages_file, tmp_path):
    source = PassageSource(passages_file=passages_file)
    model, tokenizer, spec = encoder
    ids, texts = zip(*vector_index.iter_passages(source))
    passages = encode_texts(model, tokenizer, list(texts), spec)
    queries = passages[::8]  # each of these passages must find itself (or a passage as close) first
    exact_scores, exact_rows = exact_search(queries, passages, 10)
    expected = [[ids[row] for row in found] for found in exact_rows.tolist()]

    _build(source, encoder, encoder_dir, tmp_path / "hnsw", IndexSettings("hnsw", hnsw_m=16))
    hnsw, hnsw_scores = _search(tmp_path / "hnsw", queries, 10)
    assert np.mean([len(set(a) & set(b)) / 10 for a, b in zip(hnsw, expected)]) >= 0.95
    torch.testing.assert_close(hnsw_scores[:, 0], exact_scores[:, 0], atol=1e-5, rtol=0)

    # IVF-PQ's scores are approximations of the inner products of the passages it returns: close to them when
    # each id belongs to its vector (an untrained encoder's embeddings are too alike for a recall test).
    config = _build(source, encoder, encoder_dir, tmp_path / "ivfpq", IndexSettings("ivfpq", pq_bits=4))
    assert config["settings"]["ivf_nlist"] == 4 and config["settings"]["pq_m"] == 16  # 160 // 39; 128 / 8
    found, scores = _search(tmp_path / "ivfpq", queries, 10)
    row = {passage_id: index for index, passage_id in enumerate(ids)}
    found_passages = [passages[[row[i] for i in hits]] for hits in found]
    true_scores = torch.stack([scored @ query for scored, query in zip(found_passages, queries)])
    assert (scores - true_scores).abs().mean() < 0.03 < (true_scores - true_scores.mean()).abs().max()
    assert config["index_bytes"] < (tmp_path / "hnsw" / "index.faiss").stat().st_size / 4  # 8 bytes a vector


def test_json_lines_passages_keep_their_ids_and_bad_ones_are_named(encoder, encoder_dir, tmp_path):
    path = tmp_path / "corpus.jsonl"
    lines = [json.dumps({"id": f"doc-{i}", "text": f"passage number {i}"}) + "\n" for i in range(5)]
    path.write_text("".join(lines))
    _build(PassageSource(passages_file=str(path)), encoder, encoder_dir, tmp_path / "index", shard_size=2)
    assert (tmp_path / "index" / "ids.txt").read_text().split() == [f"doc-{i}" for i in range(5)]

    path.write_text(json.dumps({"id": 1, "body": "no text"}) + "\n")
    with pytest.raises(UserError, match="line 1: expected an object with 'id' and 'text'"):
        _build(PassageSource(passages_file=str(path)), encoder, encoder_dir, tmp_path / "other")
    path.write_text("".join(json.dumps({"id": "same", "text": t}) + "\n" for t in ("a b", "c d")))
    with pytest.raises(UserError, match="'same' occurs twice"):
        _build(PassageSource(passages_file=str(path)), encoder, encoder_dir, tmp_path / "twice")
    with pytest.raises(UserError, match="needs at least 256 passages to train on"):
        IndexSettings("ivfpq").resolved(num_vectors=2, dimension=128)


# ---------------------------------------------------------------------------------------------- commands
COLLECTION = ["--squad_file", XQUAD, "--articles", "3:4", "--extra_corpus_file", WIKITEXT, "--extra_corpus_min_words", "100"]  # fmt: skip


# Slow (about 20 s): two commands load models; the one check that --index changes nothing but the search (which
# open-domain-qa shares).
@pytest.mark.slow
def test_evaluate_retrieval_gives_the_same_results_with_a_flat_index(encoder_dir, tmp_path):
    assert cli(["build-index", "--model_name_or_path", encoder_dir, *COLLECTION, "--index_type", "flat",
                "--output_dir", str(tmp_path / "index")]) == 0  # fmt: skip
    for name, extra in (("exact", []), ("indexed", ["--index", str(tmp_path / "index")])):
        cli(["evaluate-retrieval", "--model_name_or_path", encoder_dir, *COLLECTION, *extra,
             "--output_dir", str(tmp_path / f"eval-{name}")])  # fmt: skip
    metrics = [tmp_path / f"eval-{name}" / "metrics.json" for name in ("exact", "indexed")]
    exact, indexed = (json.loads(path.read_text()) for path in metrics)
    assert indexed["index"] == str(tmp_path / "index") and indexed["num_passages"] > 100
    for metric, value in exact["retrieval"].items():
        assert indexed["retrieval"][metric] == pytest.approx(value, abs=1e-9), metric


def test_an_index_from_another_encoder_or_other_passages_is_refused(encoder_dir, tokenizer, tmp_path, capsys):
    cli(["build-index", "--model_name_or_path", encoder_dir, *COLLECTION, "--index_type", "flat",
         "--output_dir", str(tmp_path / "index")])  # fmt: skip
    capsys.readouterr()
    other = _encoder_folder(tmp_path / "other-encoder", tokenizer, seed=1)
    index = ["--index", str(tmp_path / "index")]
    built_with = f"was built with the encoder {encoder_dir} (mean pooling); {other} gives other embeddings"
    for model, argv, message in [
        (other, COLLECTION, built_with),
        (encoder_dir, [*COLLECTION, "--pooling", "cls"], "gives pooling cls instead of mean"),
        (encoder_dir, [*COLLECTION[:-1], "150"], "not the same ones"),  # fewer distractors
    ]:
        assert cli(["evaluate-retrieval", "--model_name_or_path", model, *argv, *index]) == 2
        err = capsys.readouterr().err  # progress bars (model loading, probe sentences), then one line
        assert err.count("error:") == 1 and err.endswith("\n") and message in err, err
        assert err.replace("\r", "\n").strip().splitlines()[-1].strip().startswith("error: --index"), err

    again = ["build-index", "--model_name_or_path", encoder_dir, *COLLECTION, "--output_dir", index[1]]
    assert cli(again) == 2 and "already holds an index" in capsys.readouterr().err


def test_an_unfinished_index_or_a_missing_faiss_is_one_line(tmp_path, capsys, monkeypatch):
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "build_state.json").write_text("{}")
    model = ["--model_name_or_path", str(tmp_path)]
    assert cli(["evaluate-retrieval", *model, *COLLECTION, "--index", str(tmp_path / "half")]) == 2
    assert "is not a finished index" in capsys.readouterr().err

    monkeypatch.setitem(sys.modules, "faiss", None)  # what importlib sees when faiss is not installed
    for argv in (
        ["build-index", *model, "--passages_file", WIKITEXT, "--output_dir", str(tmp_path / "i")],
        ["evaluate-retrieval", *model, *COLLECTION, "--index", str(tmp_path)],
    ):
        assert cli(argv) == 2
        err = capsys.readouterr().err
        assert err == "error: faiss is not installed; install the extra: pip install 'briskbert[faiss]'.\n"
    assert not (tmp_path / "i").exists()
