"""The speed paths (unpadded work, the sparse MLM decoder, bf16) give the plain padded model's answers; speed
itself is measured by docs/benchmarks/speed.py, never by timed tests."""

import json
import runpy
from pathlib import Path

import pytest
import torch
from test_modeling import build, padded_batch, tiny_config

from briskbert.modeling import BriskBertConfig, BriskBertForMaskedLM, BriskBertModel
from briskbert.modeling.modeling_briskbert import PADDED, UnpaddedLayout, VarlenLayout

ROOT = Path(__file__).resolve().parents[1]

ATOL = 1e-5
# (position, norm position, window, padding side): every pair of values in some row. Left-padded rows feed
# inputs_embeds, which the unpadded path gathers like the token ids.
MATRIX = [
    ("absolute", "post", None, "right"),
    ("absolute", "pre", 3, "left"),
    ("sinusoidal", "post", 3, "left"),
    ("sinusoidal", "pre", None, "right"),
    ("rope", "post", None, "left"),
    ("rope", "pre", 3, "right"),
    ("alibi", "post", 3, "right"),
    ("alibi", "pre", None, "left"),
]


def twin_models(model_class, *options, attn_implementation="sdpa", sparse_prediction=False, **fields):
    """The same weights twice: one never unpads, one unpads every padded batch (and may decode sparsely)."""
    never = build(model_class, tiny_config(*options, **fields, unpad_inputs="never"), attn_implementation)
    fields = dict(fields, sparse_prediction=sparse_prediction)
    always_config = tiny_config(*options, **fields, unpad_inputs="always")
    always = build(model_class, always_config, attn_implementation)
    always.load_state_dict(never.state_dict())
    return never, always


@pytest.mark.parametrize("combo", MATRIX, ids=lambda combo: "-".join(map(str, combo)))
def test_unpadded_path_equals_padded_path_with_gradients(combo):
    position, norm_position, window, side = combo
    norm = "rmsnorm" if norm_position == "pre" else "layernorm"
    pooling = "mean" if side == "left" else "cls"  # with left padding, [CLS]'s position is padding
    options = (position, norm, norm_position, "gqa", "mlp", window)
    never, always = twin_models(BriskBertModel, *options, classifier_pooling=pooling)
    input_ids, attention_mask = padded_batch()
    if side == "left":
        input_ids, attention_mask = input_ids.flip(1), attention_mask.flip(1)
    token_type_ids = (torch.arange(input_ids.shape[1]) >= 4).long().expand_as(input_ids)
    real = attention_mask.bool()
    grads = []
    for model in (never, always):
        model.train()  # dropout is 0 in the tiny configs; train mode exercises the autograd path
        tokens = {"input_ids": input_ids}
        if side == "left":
            tokens = {"inputs_embeds": model.embeddings.word_embeddings(input_ids)}
        out = model(**tokens, attention_mask=attention_mask, token_type_ids=token_type_ids)
        (out.last_hidden_state[real].pow(2).mean() + out.pooler_output.pow(2).mean()).backward()
        grads.append({name: param.grad for name, param in model.named_parameters()})
        if model is never:
            reference = out
    expected = reference.last_hidden_state[real]
    torch.testing.assert_close(out.last_hidden_state[real], expected, atol=ATOL, rtol=0)
    torch.testing.assert_close(out.pooler_output, reference.pooler_output, atol=ATOL, rtol=0)
    assert not out.last_hidden_state[~real].any(), "padding positions of the unpadded path are zeros"
    for name, grad in grads[0].items():
        torch.testing.assert_close(grads[1][name], grad, atol=ATOL, rtol=1e-4, msg=name)


def test_sparse_mlm_on_unpadded_batch_matches_dense_padded_training_step():
    options = dict(sparse_prediction=True, position="rope", norm_position="pre")
    never, always = twin_models(BriskBertForMaskedLM, **options)
    input_ids, attention_mask = padded_batch()
    labels = torch.full_like(input_ids, -100)
    labels[0, 3], labels[1, 5], labels[2, 6], labels[0, 19] = 7, 11, 13, 17
    losses, grads = [], []
    for model in (never.train(), always.train()):
        out = model(input_ids, attention_mask=attention_mask, labels=labels)
        out.loss.backward()
        losses.append(out.loss.detach())
        grads.append({name: param.grad for name, param in model.named_parameters()})
    assert out.logits.shape == (4, 97), "one row of logits per labelled position"
    with torch.no_grad():  # without labels (fill-mask pipelines), every position
        assert always(input_ids, attention_mask=attention_mask).logits.shape == (3, 20, 97)
    torch.testing.assert_close(losses[1], losses[0], atol=ATOL, rtol=0)
    for name, grad in grads[0].items():
        torch.testing.assert_close(grads[1][name], grad, atol=ATOL, rtol=1e-4, msg=name)


# ------------------------------------------------------------------------------------------ when to unpad
def test_auto_unpads_only_when_the_skipped_work_pays_for_the_gathers():
    small = BriskBertModel(tiny_config())  # 32 wide: a few padding tokens are not worth gathering around
    _, attention_mask = padded_batch()
    assert small.choose_layout(attention_mask, "sdpa") is PADDED
    base = BriskBertModel(BriskBertConfig.from_preset("bert-tiny"))
    lengths = torch.tensor([30, 60, 128, 90])
    attention_mask = (torch.arange(128)[None] < lengths[:, None]).long()
    assert isinstance(base.choose_layout(attention_mask, "sdpa"), UnpaddedLayout)
    assert isinstance(base.choose_layout(attention_mask, "flash_attention_2"), VarlenLayout)
    assert base.choose_layout(torch.ones(4, 128, dtype=torch.long), "sdpa") is PADDED, "nothing to skip"
    assert base.choose_layout(None, "sdpa") is PADDED
    assert base.choose_layout(attention_mask[:, None, None, :], "sdpa") is PADDED  # a custom 4-D mask
    assert base.choose_layout(attention_mask, "sdpa", keep_grid=True) is PADDED
    never = BriskBertModel(BriskBertConfig.from_preset("bert-tiny", unpad_inputs="never"))
    assert never.choose_layout(attention_mask, "sdpa") is PADDED


# ------------------------------------------------------------------------------------------ bf16
def test_bf16_inference_stays_close_to_fp32():
    fp32 = build(BriskBertModel, tiny_config("rope", norm_position="pre", unpad_inputs="always"), "sdpa")
    input_ids, attention_mask = padded_batch()
    real = attention_mask.bool()
    with torch.no_grad():
        expected = fp32(input_ids, attention_mask=attention_mask).last_hidden_state[real]
        got = fp32.to(torch.bfloat16)(input_ids, attention_mask=attention_mask).last_hidden_state[real]
    assert got.dtype == torch.bfloat16
    # bf16 keeps 8 bits of mantissa: relative error of a few 1e-3 per op, a few 1e-2 after two layers.
    assert (got.float() - expected).abs().max() < 0.1 * expected.abs().max()


def test_the_speed_benchmark_times_each_model_against_the_reference_and_writes_its_report(tmp_path, capsys):
    """`docs/benchmarks/speed.py` at a toy size times every model against bert-sdpa and writes its report."""
    main = runpy.run_path(str(ROOT / "docs" / "benchmarks" / "speed.py"), run_name="speed")["main"]
    sizes = "--hidden_size 64 --num_hidden_layers 2 --num_attention_heads 2 --intermediate_size 128"
    runs = "--batch_size 4 --num_batches 2 --rounds 1 --tasks infer --dtypes fp32 --weights random"
    main([*sizes.split(), *runs.split(), "--models", "bert-sdpa", "briskbert", "--out", str(tmp_path)])
    report = json.loads((tmp_path / "benchmark.json").read_text())
    speed = {row["model"]: row for row in report["results"]}
    assert set(speed) == {"bert-sdpa", "briskbert"} and speed["bert-sdpa"]["vs_reference_fp32"] == 1.0
    assert speed["briskbert"]["tokens_per_s"] > 0 and (tmp_path / "benchmark.png").stat().st_size > 0
    assert (tmp_path / "benchmark.csv").read_text().startswith("task,dtype,model,tokens_per_s")
    assert "| infer | fp32 | briskbert |" in capsys.readouterr().out


# ------------------------------------------------------------------------------ the GPU pretraining benchmark
@pytest.mark.slow  # two short pretraining runs and three plain loops at toy size: about a minute on two cores
def test_the_pretraining_benchmark_runs_every_row_at_toy_size_on_cpu(tmp_path, monkeypatch):
    from briskbert.tokenization import train_wordpiece_tokenizer

    monkeypatch.setenv("BRISKBERT_CACHE", str(tmp_path / "cache"))
    excerpt = ROOT / "data" / "wikitext2_excerpt.txt"
    options = dict(vocab_size=600, output_dir=tmp_path / "tok", show_progress=False)
    train_wordpiece_tokenizer([str(excerpt)], **options)
    benchmark = runpy.run_path(str(ROOT / "docs" / "benchmarks" / "pretrain_gpu.py"), run_name="pretrain_gpu")
    main = benchmark["main"]
    argv = ["--corpus", str(excerpt), "--tokenizer", str(tmp_path / "tok"), "--out", str(tmp_path / "runs")]
    results = main([*argv, "--device", "cpu", "--size", "tiny"])
    rows = {row["row"]: row for row in results}
    assert list(rows) == ["job, 0 workers", "job, defaults", "hf-bert", "hf-modernbert", "briskbert"]
    for row in results:
        names = ("tokens_per_s", "whole_run_tokens_per_s", "first_interval_tokens_per_s")
        speeds = [row[name] for name in names]
        assert min(speeds) > 0 and 0 < row["mfu"] < 1 and row["peak_GiB"] > 0
    assert 0 < rows["job, defaults"]["estimate_GiB"] < 1
