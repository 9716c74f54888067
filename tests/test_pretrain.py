"""Pretraining on the bundled WikiText-2 excerpt: bad input, the final folder, and a 2-process run."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from fresh_process import run_without_project
from pretraining_oracle import read_documents

from briskbert import cli
from briskbert.commands.pretrain import main
from briskbert.tokenization import BriskBertTokenizer, train_wordpiece_tokenizer
from briskbert.training.engine.facts import read_training_facts

ROOT = Path(__file__).resolve().parents[1]
EXCERPT = ROOT / "data" / "wikitext2_excerpt.txt"
SCRIPT = ROOT / "scripts" / "pretrain.py"


@pytest.fixture(autouse=True)
def data_cache(tmp_path, monkeypatch):
    """Prepared corpora go to a per-test cache, never the user's."""
    monkeypatch.setenv("BRISKBERT_CACHE", str(tmp_path / "briskbert_cache"))


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tokenizer")
    options = dict(round_to_multiple_of=None, output_dir=folder, show_progress=False)
    train_wordpiece_tokenizer(files=[str(EXCERPT)], vocab_size=600, **options)
    return BriskBertTokenizer.from_pretrained(folder)  # name_or_path = the folder


# ------------------------------------------------------------------------------------------ bad input
def base_args(tmp_path, tokenizer_dir, *extra):
    paths = ["--train_file", str(EXCERPT), "--tokenizer_name", str(tokenizer_dir)]
    paths += ["--output_dir", str(tmp_path / "out")]
    return [*paths, "--config_name", "bert-tiny", "--max_train_steps", "2", *extra]


BAD_INPUT = {  # flags (with the paths the test writes in {tmp}), what the one error line says
    "missing": ("--train_file {tmp}/nope.txt", "no such file"),
    "column": ("--train_file {tmp}/c.jsonl --text_column body", "no text column 'body'"),
    "too_small": ("--train_file {tmp}/small.txt --per_device_train_batch_size 64", "fewer than one batch"),
    "nsp_one_document": (
        "--train_file {tmp}/one.txt --nsp --validation_file {tmp}/one.txt",
        "--nsp needs a corpus with several documents",
    ),
    "nsp_packing": ("--nsp --packing", "cannot be combined with packing."),
    "both_model_sources": ("--model_name_or_path {tmp}", "drop config_name"),
    "vocab_and_tokenizer": ("--vocab_size 500", "--vocab_size trains a new tokenizer"),
    "mlm_probability": ("--mlm_probability 1.5", "--mlm_probability must be in"),
    "split": ("--mask_replace_prob 0.9 --random_replace_prob 0.2", "must be within"),
}


@pytest.mark.parametrize("case", BAD_INPUT)
def test_bad_input_fails_before_training(tmp_path, tokenizer, case, capsys):
    flags, message = BAD_INPUT[case]
    (tmp_path / "one.txt").write_text("A first sentence. A second one follows.\nAnd a third line.\n")
    (tmp_path / "c.jsonl").write_text(json.dumps({"text": "hello"}) + "\n")
    (tmp_path / "small.txt").write_text("one short document.\n\nanother short one.\n")
    cache = ["--data_cache_dir", str(tmp_path / "cache")]
    argv = base_args(tmp_path, tokenizer.name_or_path, *flags.format(tmp=tmp_path).split(), *cache)
    assert cli.main(["pretrain", *argv]) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]  # after any progress bar
    assert error.startswith("error: ") and message in error
    assert not (tmp_path / "out" / "log_history.jsonl").exists()  # no training started


# -------------------------------------------------------------------------------- end to end + loading
def test_pretrain_end_to_end_and_final_folder_loads_with_remote_code(tmp_path, tokenizer, monkeypatch):
    """MLM+NSP from JSON lines; the final folder loads without briskbert in a fresh process, same logits."""
    from briskbert.training.tasks import pretraining

    seeds = []

    class RecordingCollator(pretraining.MaskingCollator):
        def __init__(self, *args, seed, **kwargs):
            seeds.append(seed)
            super().__init__(*args, seed=seed, **kwargs)

    monkeypatch.setattr(pretraining, "MaskingCollator", RecordingCollator)
    rows = [{"text": "\n".join(doc)} for doc in read_documents(str(EXCERPT))]
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows))
    paths = ["--train_file", str(corpus), "--tokenizer_name", tokenizer.name_or_path]
    paths += ["--output_dir", str(tmp_path / "run")]
    result = main(
        [*paths, "--config_name", "bert-tiny", "--config_overrides", "hidden_size=64,intermediate_size=128"]
        + "--nsp --whole_word_mask --max_seq_length 64 --per_device_train_batch_size 8".split()
        + "--gradient_accumulation_steps 2 --max_train_steps 4 --eval_steps 2 --logging_steps 1".split()
        + "--license mit --language de --eval_mask_seed 5".split()
    )
    assert seeds == [42, 5]  # training masks with --seed, evaluation with --eval_mask_seed
    assert {"eval_loss", "eval_accuracy", "eval_perplexity", "eval_nsp_accuracy"} <= set(result.metrics)
    assert result.metrics["eval_perplexity"] == pytest.approx(np.exp(result.metrics["eval_loss"]))
    final = tmp_path / "run" / "final"
    facts = read_training_facts(final)
    assert facts == result.facts and facts.job.pipeline_tag == "fill-mask"
    assert facts.job.datasets == ("corpus.jsonl",) and facts.job.config_preset == "bert-tiny"
    assert (facts.job.license, facts.job.language) == ("mit", "de")
    assert facts.job.details["objective"]["nsp"] is True
    assert facts.job.task.endswith("next-sentence-prediction")
    assert facts.run.train_steps == 4 and facts.run.tokens_seen > 0
    assert (tmp_path / "run" / "training_curves.png").stat().st_size > 1000

    code = f"""
        import json, torch
        from transformers import AutoModelForMaskedLM, AutoTokenizer
        model = AutoModelForMaskedLM.from_pretrained({str(final)!r}, trust_remote_code=True).eval()
        enc = AutoTokenizer.from_pretrained({str(final)!r}, trust_remote_code=True)("the lobster is a [MASK] .", return_tensors="pt")
        with torch.no_grad():
            print(json.dumps({{"cls": type(model).__name__, "logits": model(**enc).logits[0, 5, :5].tolist()}}))
    """
    loaded = json.loads(run_without_project(code, tmp_path).strip().splitlines()[-1])
    assert loaded["cls"] == "BriskBertForMaskedLM"
    from transformers import AutoModelForMaskedLM

    model = AutoModelForMaskedLM.from_pretrained(final, trust_remote_code=True).eval()
    enc = tokenizer("the lobster is a [MASK] .", return_tensors="pt")
    with torch.no_grad():
        expected = model(**enc).logits[0, 5, :5]
    torch.testing.assert_close(torch.tensor(loaded["logits"]), expected, rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_two_process_gloo_run_matches_one_process(tmp_path, tokenizer):
    """Slow (~1 min), the only check of sharding, item-count all-reduce and DDP: 2x4 sequences equal 1x8."""
    overrides = "hidden_size=64,intermediate_size=128,hidden_dropout_prob=0.0,attention_probs_dropout_prob=0"
    common = ["--train_file", str(EXCERPT), "--tokenizer_name", tokenizer.name_or_path]
    common += ["--config_overrides", overrides, "--config_name", "bert-tiny", "--max_seq_length", "64"]
    common += "--packing --max_train_steps 4 --logging_steps 1 --learning_rate 1e-3 --seed 3".split()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}

    def train(launcher: list[str], batch_size: int, name: str):
        argv = [*launcher, str(SCRIPT), *common, "--per_device_train_batch_size", str(batch_size)]
        argv += ["--output_dir", str(tmp_path / name)]
        run = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
        assert run.returncode == 0, run.stderr[-3000:]

    train([sys.executable], 8, "one")
    # --multi_gpu selects the torchrun launcher; without a GPU the loop runs it as multi-CPU (gloo).
    launch = "-m accelerate.commands.launch --multi_gpu --num_processes 2 --num_machines 1"
    train([sys.executable, *launch.split(), "--mixed_precision", "no", "--dynamo_backend", "no"], 4, "two")

    def history(name):
        lines = (tmp_path / name / "log_history.jsonl").read_text().splitlines()
        return [json.loads(line) for line in lines]

    h1, h2 = history("one"), history("two")
    loss1 = [e["loss"] for e in h1 if "loss" in e]
    loss2 = [e["loss"] for e in h2 if "loss" in e]
    assert len(loss1) == len(loss2) == 4
    np.testing.assert_allclose(loss2, loss1, rtol=2e-4)
    assert [e["tokens_seen"] for e in h1 if "loss" in e] == [e["tokens_seen"] for e in h2 if "loss" in e]
    r1 = json.loads((tmp_path / "one" / "all_results.json").read_text())
    r2 = json.loads((tmp_path / "two" / "all_results.json").read_text())
    assert r2["eval_loss"] == pytest.approx(r1["eval_loss"], rel=2e-4)
    assert json.loads((tmp_path / "two" / "final" / "training_facts.json").read_text())["num_processes"] == 2


def test_a_tokenizer_trained_for_the_run_samples_the_paragraphs_it_is_told(tmp_path, monkeypatch):
    import briskbert.tokenization

    class Trained(Exception):
        pass

    def train(**kwargs):
        raise Trained(kwargs["max_lines"])

    monkeypatch.setattr(briskbert.tokenization, "train_wordpiece_tokenizer", train)
    argv = ["--train_file", str(EXCERPT), "--config_name", "bert-tiny", "--vocab_size", "300"]
    with pytest.raises(Trained, match="^5$"):
        main([*argv, "--tokenizer_train_max_lines", "5", "--output_dir", str(tmp_path / "run")])
