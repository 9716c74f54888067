"""Continued pretraining of an imported checkpoint and ``export-family``: every family round-trips to
transformers' own class within 1e-5; a configuration no family expresses is refused in one line."""

import pytest
import torch
import transformers
from test_conversion import CLASS_PREFIX, TOKENIZER_KIND, build_source, sentences, train_tokenizer

from briskbert import cli
from briskbert.modeling import BriskBertConfig, BriskBertForMaskedLM
from briskbert.training.tasks.pretraining import build_model, continued_on_briskbert
from briskbert.training.tasks.pretraining_settings import PretrainingModel

# The source head of each family: its MLM head where it has one, ELECTRA's discriminator (whose head is not an
# MLM head: the job starts a new one), the bare BERT encoder (as all-MiniLM-L6-v2 is).
SOURCES = {
    "bert": "BertModel",
    "roberta": "RobertaForMaskedLM",
    "xlm-roberta": "XLMRobertaForMaskedLM",
    "distilbert": "DistilBertForMaskedLM",
    "electra": "ElectraForPreTraining",
    "modernbert": "ModernBertForMaskedLM",
}


@pytest.fixture(scope="module")
def tokenizers():
    return {kind: train_tokenizer(kind) for kind in set(TOKENIZER_KIND.values())}


def continue_pretraining(tokenizer, tmp_path, log=lambda line: None):
    """The pretraining job's import of tmp_path/source, converted under tmp_path/run."""
    return continued_on_briskbert(str(tmp_path / "source"), str(tmp_path / "run"), tokenizer, False, log)


def mlm_steps(model, tokenizer, steps=3):
    """A few AdamW steps of masked-language modelling on real sentences (15% of real tokens masked)."""
    batch = tokenizer(sentences(16), padding=True, truncation=True, max_length=48, return_tensors="pt")
    generator = torch.Generator().manual_seed(0)
    real = batch["attention_mask"].bool() & (batch["input_ids"] != tokenizer.cls_token_id)
    masked = real & (torch.rand(batch["input_ids"].shape, generator=generator) < 0.15)
    labels = torch.where(masked, batch["input_ids"], -100)
    inputs = torch.where(masked, tokenizer.mask_token_id, batch["input_ids"])
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model.train()
    for _ in range(steps):
        loss = model(input_ids=inputs, attention_mask=batch["attention_mask"], labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    return model.eval()


def logits_at_real_tokens(model, tokenizer):
    batch = tokenizer(sentences(8), padding=True, truncation=True, max_length=48, return_tensors="pt")
    inputs = {name: batch[name] for name in ("input_ids", "attention_mask")}
    assert batch["attention_mask"].float().mean() < 0.8, "the batch should be padded"
    with torch.no_grad():
        return model.eval()(**inputs).logits[batch["attention_mask"].bool()]


@pytest.mark.parametrize("model_type", list(SOURCES))
def test_each_family_round_trips(model_type, tokenizers, tmp_path, capsys):
    tokenizer = tokenizers[TOKENIZER_KIND[model_type]]
    source = build_source(model_type, SOURCES[model_type], tokenizer, tmp_path / "source")
    lines = []
    model = continue_pretraining(tokenizer, tmp_path, lines.append)
    assert (
        type(model) is BriskBertForMaskedLM
        and (tmp_path / "run" / "converted_base" / "config.json").is_file()
    )
    compared = "masked-LM logits" if SOURCES[model_type].endswith("ForMaskedLM") else "hidden states"
    assert len(lines) == 1 and "Converted" in lines[0] and f"its {compared} match" in lines[0], lines

    mlm_steps(model, tokenizer)
    model.save_pretrained(tmp_path / "adapted")
    tokenizer.save_pretrained(tmp_path / "adapted")
    family = ["--family", model_type] if model_type == "xlm-roberta" else []
    argv = ["export-family", "--model_dir", str(tmp_path / "adapted"), "--output_dir", str(tmp_path / "back")]
    assert cli.main([*argv, *family]) == 0, capsys.readouterr().err

    # Plain transformers, no remote code: the family's own classes, no code files in the folder.
    assert not list((tmp_path / "back").glob("*.py"))
    exported = transformers.AutoModelForMaskedLM.from_pretrained(tmp_path / "back")
    plain_tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path / "back")
    assert type(exported).__name__ == f"{CLASS_PREFIX[model_type]}ForMaskedLM"
    assert type(plain_tokenizer).__module__.startswith("transformers.")
    texts = sentences(8)
    assert plain_tokenizer(texts)["input_ids"] == tokenizer(texts)["input_ids"]
    expected = logits_at_real_tokens(model, tokenizer)
    got = logits_at_real_tokens(exported, plain_tokenizer)
    assert (got - expected).abs().max().item() <= 1e-5
    if compared == "masked-LM logits":  # the steps trained what was exported: not the source's weights again
        assert (logits_at_real_tokens(source, tokenizer) - expected).abs().max().item() > 1e-3


@pytest.mark.parametrize(
    "model_type, architecture",
    [("bert", "BertForSequenceClassification"), ("modernbert", "ModernBertForTokenClassification")],
)
def test_a_fine_tuned_head_goes_back_to_the_family_head(model_type, architecture, tokenizers, tmp_path):
    """Imported and exported again, a head gives what transformers' own head gave before the round trip."""
    from briskbert.modeling.conversion import convert_checkpoint
    from briskbert.modeling.conversion.export_family import export_to_family

    tokenizer = tokenizers[TOKENIZER_KIND[model_type]]
    source = build_source(model_type, architecture, tokenizer, tmp_path / "source")
    convert_checkpoint(tmp_path / "source", tmp_path / "ours")
    assert export_to_family(tmp_path / "ours", tmp_path / "back")[0] == architecture
    exported = getattr(transformers, architecture).from_pretrained(tmp_path / "back")
    assert type(exported) is type(source) and exported.config.id2label == source.config.id2label
    # BERT folders import with briskbert's own tokenizer class; it goes back as transformers' BertTokenizer.
    plain_tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path / "back")
    assert type(plain_tokenizer).__module__.startswith("transformers.")
    batch = tokenizer(sentences(8), padding=True, return_tensors="pt")
    inputs = {name: batch[name] for name in ("input_ids", "attention_mask")}
    with torch.no_grad():
        expected, got = source(**inputs).logits, exported.eval()(**inputs).logits
    if expected.dim() == 3:
        expected, got = expected[batch["attention_mask"].bool()], got[batch["attention_mask"].bool()]
    assert (got - expected).abs().max().item() <= 1e-5


def test_a_new_mlm_head_is_one_line_and_a_stale_conversion_is_refused(tokenizers, tmp_path, capfd):
    """A bare encoder gets a new MLM head in one line; a stale converted_base stops the job."""
    from safetensors.torch import load_file, save_file

    from briskbert.training.tasks.pretraining import PretrainingInputError

    tokenizer = tokenizers["wordpiece"]
    build_source("bert", "BertModel", tokenizer, tmp_path / "source")
    continue_pretraining(tokenizer, tmp_path)
    out, err = capfd.readouterr()
    assert "LOAD REPORT" not in out + err and "\x1b[" not in out + err, out + err
    assert "New head (head.dense.weight" in out and "as expected for continued pretraining." in out

    weights = tmp_path / "run" / "converted_base" / "model.safetensors"
    state = load_file(str(weights))
    state["layers.1.mlp.down.weight"] = state["layers.1.mlp.down.weight"] * 1.01
    save_file(state, str(weights), metadata={"format": "pt"})
    with pytest.raises(
        PretrainingInputError, match="hidden states differ from BertModel's by .*keep_source_class"
    ):
        continue_pretraining(tokenizer, tmp_path)


def test_keep_source_class_trains_the_source_class(tokenizers, tmp_path):
    tokenizer = tokenizers["bpe"]
    build_source("modernbert", "ModernBertForMaskedLM", tokenizer, tmp_path / "source")
    settings = PretrainingModel(model_name_or_path=str(tmp_path / "source"), keep_source_class=True)
    lines = []
    model = build_model(settings, tokenizer, 64, False, str(tmp_path / "run"), lines.append)
    assert type(model) is transformers.ModernBertForMaskedLM and "its own class" in lines[0]
    assert not (tmp_path / "run" / "converted_base").exists()


def export_from_command_line(model_dir, out, capsys, *extra) -> tuple[int, str]:
    capsys.readouterr()
    code = cli.main(["export-family", "--model_dir", str(model_dir), "--output_dir", str(out), *extra])
    return code, capsys.readouterr().err


def test_a_configuration_no_family_expresses_is_refused(tokenizers, tmp_path, capsys):
    tokenizer = tokenizers["wordpiece"]
    torch.manual_seed(0)
    config = BriskBertConfig.from_preset("modern-tiny", vocab_size=len(tokenizer))  # RMSNorm, GQA, ...
    BriskBertForMaskedLM(config).save_pretrained(tmp_path / "modern")
    tokenizer.save_pretrained(tmp_path / "modern")
    code, err = export_from_command_line(tmp_path / "modern", tmp_path / "out", capsys)
    assert code == 2 and err.count("\n") == 1 and err.startswith("error: --model_dir ")
    assert "norm_type='rmsnorm' (ModernBERT: 'layernorm')" in err and "num_key_value_heads=2" in err
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out*"))

    # One option off a family's: named, with the family's value.
    config = BriskBertConfig.from_preset("bert-tiny", vocab_size=len(tokenizer), mlp_type="glu")
    BriskBertForMaskedLM(config).save_pretrained(tmp_path / "glu")
    tokenizer.save_pretrained(tmp_path / "glu")
    code, err = export_from_command_line(tmp_path / "glu", tmp_path / "out", capsys, "--family", "bert")
    assert code == 2 and err.startswith("error: --family ") and "mlp_type='glu' (BERT: 'mlp')" in err
    assert "cannot express this option" in err and not (tmp_path / "out").exists()
