"""Checkpoint conversion: every head of every family against transformers' own class on real padded text, the
real all-MiniLM-L6-v2 against sentence-transformers, and converted folders loading without briskbert."""

import csv
import json

import pytest
import torch
import transformers
from fresh_process import ROOT, run_without_project
from safetensors.torch import load_file, save_file
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

from briskbert import cli
from briskbert.modeling.conversion import (
    FAMILIES,
    CheckpointMismatchError,
    UnsupportedCheckpointError,
    convert_checkpoint,
)
from briskbert.training.engine.facts import base_model_id

SENTENCES_FILE = ROOT / "data" / "sst2_validation_excerpt.tsv"
VOCAB = 300
SIZE = dict(num_hidden_layers=3, num_attention_heads=4, intermediate_size=37)


def sentences(count=40):
    with open(SENTENCES_FILE, newline="") as handle:
        return [row["sentence"] for row in csv.DictReader(handle, delimiter="\t")][:count]


def train_tokenizer(kind: str) -> transformers.PreTrainedTokenizerFast:
    """A small WordPiece, byte-level BPE or Unigram tokenizer with its family's special tokens."""
    if kind == "wordpiece":
        specials = {f"{name}_token": f"[{name.upper()}]" for name in ("pad", "unk", "cls", "sep", "mask")}
        tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
        tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
        tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        trainer = trainers.WordPieceTrainer(vocab_size=VOCAB, special_tokens=list(specials.values()))
    else:
        ordered = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
        specials = dict(zip(("bos_token", "pad_token", "eos_token", "unk_token", "mask_token"), ordered))
        specials.update(cls_token="<s>", sep_token="</s>")
        if kind == "bpe":
            tokenizer = Tokenizer(models.BPE())
            tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
            tokenizer.decoder = decoders.ByteLevel()
            trainer = trainers.BpeTrainer(
                vocab_size=VOCAB, special_tokens=ordered, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
            )
        else:
            tokenizer = Tokenizer(models.Unigram())
            tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
            tokenizer.decoder = decoders.Metaspace()
            trainer = trainers.UnigramTrainer(vocab_size=VOCAB, special_tokens=ordered, unk_token="<unk>")
    tokenizer.train_from_iterator(sentences(400), trainer)
    first, last = specials["cls_token"], specials["sep_token"]
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{first} $A {last}",
        pair=f"{first} $A {last} $B {last}",
        special_tokens=[(t, tokenizer.token_to_id(t)) for t in (first, last)],
    )
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tokenizer, **specials)


def source_config(family: str, tokenizer) -> transformers.PretrainedConfig:
    ids = dict(pad_token_id=tokenizer.pad_token_id, vocab_size=len(tokenizer))
    if family == "bert":
        return transformers.BertConfig(hidden_size=32, max_position_embeddings=64, **SIZE, **ids)
    if family in ("roberta", "xlm-roberta"):
        config_class = transformers.RobertaConfig if family == "roberta" else transformers.XLMRobertaConfig
        return config_class(hidden_size=32, max_position_embeddings=66, type_vocab_size=1, **SIZE, **ids)
    if family == "distilbert":
        return transformers.DistilBertConfig(dim=32, n_layers=3, n_heads=4, hidden_dim=37, **ids)
    if family == "electra":
        return transformers.ElectraConfig(
            hidden_size=32, embedding_size=16, max_position_embeddings=64, **SIZE, **ids
        )
    specials = dict(bos_token_id=0, cls_token_id=0, eos_token_id=2, sep_token_id=2)
    # Four layers with a global layer every third and a short window, so local layers really are local.
    return transformers.ModernBertConfig(
        hidden_size=32, num_hidden_layers=4, num_attention_heads=4, intermediate_size=24, local_attention=8,
        global_attn_every_n_layers=3, **ids, **specials,
    )  # fmt: skip


# model_type -> the tokenizer kind the family ships
TOKENIZER_KIND = dict.fromkeys(("bert", "distilbert", "electra"), "wordpiece")
TOKENIZER_KIND.update({"roberta": "bpe", "modernbert": "bpe", "xlm-roberta": "unigram"})
FAMILY_OF = {model_type: family for family in FAMILIES for model_type in family.model_types}
CLASS_PREFIX = {model_type: family.prefixes[model_type] for model_type, family in FAMILY_OF.items()}
# One head per family that exercises what is its own runs by default; every other head is marked slow:
# together they are the closing evidence that every head of every family imports exactly.
QUICK = {"BertForTokenClassification", "RobertaForSequenceClassification", "XLMRobertaForMaskedLM"}
QUICK |= {"DistilBertForMultipleChoice", "ElectraForPreTraining", "ModernBertForQuestionAnswering"}
CASES = [
    pytest.param(model_type, name, id=name, marks=() if name in QUICK else pytest.mark.slow)
    for model_type, prefix in CLASS_PREFIX.items()
    for name in (f"{prefix}{suffix}" for suffix in FAMILY_OF[model_type].heads)
]


@pytest.fixture(scope="module")
def tokenizers_by_kind():
    return {kind: train_tokenizer(kind) for kind in set(TOKENIZER_KIND.values())}


@pytest.fixture(scope="module")
def text_batch(tokenizers_by_kind):
    """Per tokenizer kind: a padded batch of real sentences (about half padding) and an unpadded one."""
    return {
        kind: [
            tokenizer(sentences(8), padding=True, truncation=True, max_length=60, return_tensors="pt"),
            tokenizer(sentences(1) * 2, return_tensors="pt"),
        ]
        for kind, tokenizer in tokenizers_by_kind.items()
    }


def build_source(model_type, architecture, tokenizer, folder):
    torch.manual_seed(0)
    model = getattr(transformers, architecture)(source_config(model_type, tokenizer)).eval()
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return model


def model_inputs(batch, architecture):
    inputs = {key: value for key, value in batch.items() if key in ("input_ids", "attention_mask")}
    if architecture.endswith("ForMultipleChoice"):
        inputs = {key: value[None] for key, value in inputs.items()}  # one question, its rows as the choices
    return inputs


def worst_difference(expected, got, real):
    """Largest |difference| over every output tensor, at real tokens for per-token outputs."""
    worst = 0.0
    for name, want in expected.items():
        if not isinstance(want, torch.Tensor) or name == "pooler_output" and got.get(name) is None:
            continue
        have = got[name].reshape(want.shape)
        per_token = want.dim() >= 2 and want.shape[:2] == real.shape
        worst = max(worst, ((have - want)[real] if per_token else have - want).abs().max().item())
    return worst


@pytest.mark.parametrize("model_type, architecture", CASES)
def test_every_head_matches_transformers(model_type, architecture, tokenizers_by_kind, text_batch, tmp_path):
    tokenizer = tokenizers_by_kind[TOKENIZER_KIND[model_type]]
    source = build_source(model_type, architecture, tokenizer, tmp_path / "source")
    convert_checkpoint(tmp_path / "source", tmp_path / "ours")
    ours_class = auto_class_for(tmp_path / "ours")
    # The attention paths are the encoder's, shared by every head: the quick heads try them all, and the
    # others, whose weights are what differs, the padded batch through SDPA.
    full = architecture in QUICK
    worst = 0.0
    for unpad in ("never", "always") if full else ("never",):
        ours = ours_class.from_pretrained(tmp_path / "ours", unpad_inputs=unpad).eval()
        for attn in ("eager", "sdpa") if full else ("sdpa",):
            source.set_attn_implementation(attn)
            ours.set_attn_implementation(attn)
            for batch in text_batch[TOKENIZER_KIND[model_type]][: 2 if full else 1]:
                inputs = model_inputs(batch, architecture)
                with torch.no_grad():
                    expected, got = source(**inputs), ours(**inputs)
                real = inputs["attention_mask"].bool()
                worst = max(worst, worst_difference(expected, got, real.view(-1, real.shape[-1])))
    assert worst <= 1e-5, f"{architecture}: worst difference {worst:.2e}"


def auto_class_for(folder):
    """The Auto class the converted folder's own `auto_map` names for its architecture."""
    config = json.loads((folder / "config.json").read_text())
    auto_class_of = {reference.split(".")[1]: auto for auto, reference in config["auto_map"].items()}
    return getattr(transformers, auto_class_of[config["architectures"][0]])


FRESH_LOAD = """
    import json, torch
    from transformers import AutoConfig, AutoModel, AutoModelForMaskedLM, AutoModelForSequenceClassification
    from transformers import AutoTokenizer
    results = {{}}
    for name, folder in {folders!r}.items():
        config = AutoConfig.from_pretrained(folder, trust_remote_code=True)
        tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
        models = [
            auto.from_pretrained(folder, trust_remote_code=True).eval()
            for auto in (AutoModel, AutoModelForMaskedLM, AutoModelForSequenceClassification)
        ]
        batch = tokenizer({sentences!r}, padding=True, truncation=True, max_length=60, return_tensors="pt")
        with torch.no_grad():
            hidden = models[0](**batch).last_hidden_state
        torch.save(hidden, name + ".pt")
        classes = [type(item) for item in (config, tokenizer, *models)]
        results[name] = dict(ids=batch["input_ids"].tolist(), classes=[[c.__name__, c.__module__] for c in classes])
    print(json.dumps(results))
"""


def test_converted_folders_load_where_briskbert_is_not_installed(
    tokenizers_by_kind, minilm_path, converted_minilm, tmp_path
):
    """Tokenizer, model and heads load with plain transformers; ids and hidden states equal the source's."""
    texts, folders, sources = sentences(6), {"minilm": str(converted_minilm)}, {}
    sources["minilm"] = transformers.AutoModel.from_pretrained(minilm_path).eval()
    for model_type in ("roberta", "xlm-roberta"):  # byte-level BPE and Unigram; MiniLM brings WordPiece
        tokenizer = tokenizers_by_kind[TOKENIZER_KIND[model_type]]
        architecture = f"{CLASS_PREFIX[model_type]}Model"
        sources[model_type] = build_source(model_type, architecture, tokenizer, tmp_path / model_type)
        folders[model_type] = str(tmp_path / f"{model_type}-briskbert")
        convert_checkpoint(tmp_path / model_type, folders[model_type])
    stdout = run_without_project(FRESH_LOAD.format(folders=folders, sentences=texts), cwd=tmp_path)
    for name, result in json.loads(stdout.splitlines()[-1]).items():
        (config, config_module), tokenizer_class, *models = result["classes"]
        heads = [class_name for class_name, _ in models]
        assert config == "BriskBertConfig", name
        assert heads == ["BriskBertModel", "BriskBertForMaskedLM", "BriskBertForSequenceClassification"]
        remote = [config_module] + [module for _, module in models]
        if name == "minilm":  # a WordPiece source gets BriskBertTokenizer; others keep their own class
            remote.append(tokenizer_class[1])
        assert all(module.startswith("transformers_modules") for module in remote), name
        source_tokenizer = transformers.AutoTokenizer.from_pretrained(
            minilm_path if name == "minilm" else tmp_path / name
        )
        batch = source_tokenizer(texts, padding=True, truncation=True, max_length=60, return_tensors="pt")
        assert result["ids"] == batch["input_ids"].tolist(), name
        with torch.no_grad():
            expected = sources[name](**batch).last_hidden_state
        real = batch["attention_mask"].bool()
        got = torch.load(tmp_path / f"{name}.pt")
        torch.testing.assert_close(got[real], expected[real], atol=1e-5, rtol=0)


def convert_from_command_line(src, out, capsys) -> tuple[int, str]:
    capsys.readouterr()  # what saving the source printed
    code = cli.main(["convert", "--src", str(src), "--out", str(out)])
    return code, capsys.readouterr().err


def test_unsupported_sources_are_refused_with_the_field_named(tokenizers_by_kind, tmp_path, capsys):
    gpt2 = transformers.GPT2Model(transformers.GPT2Config(n_layer=1, n_embd=8, n_head=2))
    gpt2.save_pretrained(tmp_path / "gpt2")
    code, err = convert_from_command_line(tmp_path / "gpt2", tmp_path / "out", capsys)
    assert code == 2 and err.count("\n") == 1 and err.startswith("error: ")
    assert "model_type='gpt2'" in err and "roberta" in err and not (tmp_path / "out").exists()

    causal = transformers.RobertaForCausalLM(source_config("roberta", tokenizers_by_kind["bpe"]))
    causal.save_pretrained(tmp_path / "causal")
    with pytest.raises(UnsupportedCheckpointError, match="architectures='RobertaForCausalLM'"):
        convert_checkpoint(tmp_path / "causal", tmp_path / "out")
    # An irregular local/global layer pattern.
    config = source_config("modernbert", tokenizers_by_kind["bpe"])
    config.layer_types = ["full_attention", "full_attention", "sliding_attention", "full_attention"]
    transformers.ModernBertModel(config).save_pretrained(tmp_path / "irregular")
    with pytest.raises(UnsupportedCheckpointError, match="layer_types"):
        convert_checkpoint(tmp_path / "irregular", tmp_path / "out")


def test_shape_mismatch_is_refused_with_the_field_named(tmp_path, capsys):
    config = transformers.DistilBertConfig(dim=32, n_layers=1, n_heads=4, hidden_dim=37, vocab_size=50)
    transformers.DistilBertModel(config).save_pretrained(tmp_path / "source")
    edited = json.loads((tmp_path / "source" / "config.json").read_text())
    edited["hidden_dim"] = 40
    (tmp_path / "source" / "config.json").write_text(json.dumps(edited))
    code, err = convert_from_command_line(tmp_path / "source", tmp_path / "out", capsys)
    assert code == 2 and "intermediate_size=40" in err and "ffn.lin1" in err
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------------------------- the real checkpoint
def test_converted_folder_names_the_source_checkpoint_as_base_model(converted_minilm):
    """Models trained from the folder name the real checkpoint, not a local path, on their cards."""
    assert base_model_id(str(converted_minilm)) == "sentence-transformers/all-MiniLM-L6-v2"


def test_sentence_transformers_loads_the_converted_folder_with_the_same_embeddings(
    minilm_path, converted_minilm
):
    """modules.json, the pooling and normalisation folders and the 256-token limit travel with the folder."""
    sentence_transformers = pytest.importorskip("sentence_transformers")
    for name in (
        "modules.json",
        "sentence_bert_config.json",
        "config_sentence_transformers.json",
        "1_Pooling",
    ):
        assert (converted_minilm / name).exists() == (minilm_path / name).exists(), name
    original = sentence_transformers.SentenceTransformer(str(minilm_path), device="cpu")
    converted = sentence_transformers.SentenceTransformer(
        str(converted_minilm), device="cpu", trust_remote_code=True
    )
    assert converted.max_seq_length == original.max_seq_length
    texts = sentences(16)
    expected = original.encode(texts, convert_to_tensor=True)
    got = converted.encode(texts, convert_to_tensor=True)
    assert (got - expected).abs().max().item() <= 1e-5
    torch.testing.assert_close(got.norm(dim=-1), expected.norm(dim=-1), atol=1e-5, rtol=0)


def test_missing_and_unexpected_weights_are_listed(tmp_path):
    config = transformers.BertConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, vocab_size=99
    )
    transformers.BertForSequenceClassification(config).save_pretrained(tmp_path / "bert")
    weights = load_file(str(tmp_path / "bert" / "model.safetensors"))
    weights.pop("bert.encoder.layer.1.output.dense.weight")
    weights["bert.encoder.layer.1.adapter.weight"] = torch.zeros(2)
    save_file(weights, str(tmp_path / "bert" / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(CheckpointMismatchError) as error:
        convert_checkpoint(tmp_path / "bert", tmp_path / "ours", save_tokenizer=False)
    message = str(error.value)
    assert "model.layers.1.mlp.down.weight" in message and "bert.encoder.layer.1.adapter.weight" in message
    assert not (tmp_path / "ours").exists(), "a failed conversion must not leave a half-written folder"
