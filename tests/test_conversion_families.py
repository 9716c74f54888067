"""Every imported family against transformers' own implementation: random weights at a small size, each head, real
padded text through the source's own tokenizer kind (WordPiece, byte-level BPE, Unigram), eager and SDPA, padded,
unpadded fast path and no padding; the tokenizer carried over unchanged; bad sources refused with the field named."""

import csv
import json

import pytest
import torch
import transformers
from fresh_process import ROOT, run_without_project
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

from briskbert import cli
from briskbert.modeling.conversion import (
    FAMILIES,
    CheckpointMismatchError,
    UnsupportedCheckpointError,
    convert_checkpoint,
)

SENTENCES_FILE = ROOT / "data" / "sst2_validation_excerpt.tsv"
VOCAB = 300
SIZE = dict(num_hidden_layers=3, num_attention_heads=4, intermediate_size=37)


def sentences(count=40):
    with open(SENTENCES_FILE, newline="") as handle:
        return [row["sentence"] for row in csv.DictReader(handle, delimiter="\t")][:count]


def train_tokenizer(kind: str) -> transformers.PreTrainedTokenizerFast:
    """A small tokenizer of the kind each family ships: WordPiece (BERT-style), byte-level BPE (RoBERTa,
    ModernBERT) or Unigram (XLM-R's SentencePiece), with the family's special tokens."""
    if kind == "wordpiece":
        specials = dict(
            pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]"
        )
        tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
        tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
        tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        trainer = trainers.WordPieceTrainer(vocab_size=VOCAB, special_tokens=list(specials.values()))
    else:
        specials = dict(
            bos_token="<s>", pad_token="<pad>", eos_token="</s>", unk_token="<unk>", mask_token="<mask>"
        )
        specials.update(cls_token="<s>", sep_token="</s>")
        ordered = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
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


TOKENIZER_KIND = {
    "bert": "wordpiece",
    "distilbert": "wordpiece",
    "electra": "wordpiece",
    "roberta": "bpe",
    "modernbert": "bpe",
    "xlm-roberta": "unigram",
}
CLASS_PREFIX = {
    "bert": "Bert",
    "roberta": "Roberta",
    "xlm-roberta": "XLMRoberta",
    "distilbert": "DistilBert",
    "electra": "Electra",
    "modernbert": "ModernBert",
}
FAMILY_OF = {model_type: family for family in FAMILIES for model_type in family.model_types}
# One head per family that exercises what is its own runs by default; every other head is marked slow (about
# 3 s each): together they are the closing evidence that every head of every family imports exactly.
QUICK = {
    "RobertaForSequenceClassification",
    "XLMRobertaForMaskedLM",
    "DistilBertForMultipleChoice",
    "ElectraForPreTraining",
    "ModernBertForQuestionAnswering",
}
CASES = [
    pytest.param(model_type, name, id=name, marks=() if name in QUICK else pytest.mark.slow)
    for model_type, prefix in CLASS_PREFIX.items()
    if model_type != "bert"  # BERT's heads: tests/test_conversion.py
    for name in (f"{prefix}{suffix}" for suffix in FAMILY_OF[model_type].heads)
]


@pytest.fixture(scope="module")
def tokenizers_by_kind():
    return {kind: train_tokenizer(kind) for kind in set(TOKENIZER_KIND.values())}


@pytest.fixture(scope="module")
def text_batch(tokenizers_by_kind):
    """Per tokenizer kind: a padded batch of real sentences (about half padding) and an unpadded one."""
    batches = {}
    for kind, tokenizer in tokenizers_by_kind.items():
        padded = tokenizer(sentences(8), padding=True, truncation=True, max_length=60, return_tensors="pt")
        unpadded = tokenizer(sentences(2)[:1] * 2, return_tensors="pt")
        batches[kind] = [dict(padded), dict(unpadded)]
    return batches


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
    worst = 0.0
    for unpad in ("never", "always"):
        ours = ours_class.from_pretrained(tmp_path / "ours", unpad_inputs=unpad).eval()
        for attn in ("eager", "sdpa"):
            source.set_attn_implementation(attn)
            ours.set_attn_implementation(attn)
            for batch in text_batch[TOKENIZER_KIND[model_type]]:
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
    from transformers import AutoModel, AutoTokenizer
    results = {{}}
    for name, folder in {folders!r}.items():
        tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
        model = AutoModel.from_pretrained(folder, trust_remote_code=True).eval()
        batch = tokenizer({sentences!r}, padding=True, truncation=True, max_length=60, return_tensors="pt")
        with torch.no_grad():
            hidden = model(**batch).last_hidden_state
        torch.save(hidden, name + ".pt")
        results[name] = dict(ids=batch["input_ids"].tolist(), model=type(model).__module__)
    print(json.dumps(results))
"""


def test_tokenizer_and_model_load_where_briskbert_is_not_installed(tokenizers_by_kind, tmp_path):
    """The source tokenizer (byte-level BPE, Unigram, WordPiece) is carried over unchanged and, like the model,
    loads from the folder with plain transformers; the ids equal the source tokenizer's."""
    texts, folders, sources = sentences(6), {}, {}
    for model_type in ("roberta", "xlm-roberta", "modernbert", "distilbert"):
        tokenizer = tokenizers_by_kind[TOKENIZER_KIND[model_type]]
        sources[model_type] = build_source(
            model_type, f"{CLASS_PREFIX[model_type]}Model", tokenizer, tmp_path / model_type
        )
        folders[model_type] = str(tmp_path / f"{model_type}-briskbert")
        convert_checkpoint(tmp_path / model_type, folders[model_type])
    results = json.loads(
        run_without_project(FRESH_LOAD.format(folders=folders, sentences=texts), cwd=tmp_path).splitlines()[
            -1
        ]
    )
    for model_type, result in results.items():
        source_tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path / model_type)
        batch = source_tokenizer(texts, padding=True, truncation=True, max_length=60, return_tensors="pt")
        assert result["ids"] == batch["input_ids"].tolist(), model_type
        assert result["model"].startswith("transformers_modules")
        with torch.no_grad():
            expected = sources[model_type](**batch).last_hidden_state
        real = batch["attention_mask"].bool()
        got = torch.load(tmp_path / f"{model_type}.pt")
        torch.testing.assert_close(got[real], expected[real], atol=1e-5, rtol=0)


def convert_from_command_line(src, out, capsys) -> tuple[int, str]:
    capsys.readouterr()  # what saving the source printed
    code = cli.main(["convert", "--src", str(src), "--out", str(out)])
    return code, capsys.readouterr().err


def test_unsupported_architecture_is_refused_with_the_field_named(tmp_path, capsys):
    transformers.GPT2Model(transformers.GPT2Config(n_layer=1, n_embd=8, n_head=2)).save_pretrained(
        tmp_path / "gpt2"
    )
    code, err = convert_from_command_line(tmp_path / "gpt2", tmp_path / "out", capsys)
    assert code == 2 and err.count("\n") == 1 and err.startswith("error: ")
    assert "model_type='gpt2'" in err and "roberta" in err and not (tmp_path / "out").exists()

    config = source_config("roberta", train_tokenizer("bpe"))
    transformers.RobertaForCausalLM(config).save_pretrained(tmp_path / "causal")
    with pytest.raises(UnsupportedCheckpointError, match="architectures='RobertaForCausalLM'"):
        convert_checkpoint(tmp_path / "causal", tmp_path / "out")


def test_shape_mismatch_is_refused_with_the_field_named(tmp_path, capsys):
    config = transformers.DistilBertConfig(dim=32, n_layers=1, n_heads=4, hidden_dim=37, vocab_size=50)
    transformers.DistilBertModel(config).save_pretrained(tmp_path / "source")
    edited = json.loads((tmp_path / "source" / "config.json").read_text())
    edited["hidden_dim"] = 40
    (tmp_path / "source" / "config.json").write_text(json.dumps(edited))
    code, err = convert_from_command_line(tmp_path / "source", tmp_path / "out", capsys)
    assert code == 2 and "intermediate_size=40" in err and "ffn.lin1" in err
    assert not (tmp_path / "out").exists()


def test_irregular_local_global_pattern_is_refused(tmp_path):
    config = source_config("modernbert", train_tokenizer("bpe"))
    config.layer_types = ["full_attention", "full_attention", "sliding_attention", "full_attention"]
    transformers.ModernBertModel(config).save_pretrained(tmp_path / "source")
    with pytest.raises(UnsupportedCheckpointError, match="layer_types"):
        convert_checkpoint(tmp_path / "source", tmp_path / "out")
    assert issubclass(CheckpointMismatchError, ValueError)
