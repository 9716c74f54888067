# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""The CRF head: its algorithms against enumerating every tag path, the tag schemes, the NER glue, and its
pipeline, also served by plain transformers in a process without briskbert."""

import importlib
import itertools
import json
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from fresh_process import run_without_project
from safetensors.torch import load_file
from transformers import DataCollatorForTokenClassification

from briskbert.modeling import BriskBertConfig, BriskBertForMaskedLM, BriskBertForTokenClassification
from briskbert.modeling.crf import IGNORE_INDEX, LinearChainCRF, allowed_transitions, split_tag
from briskbert.training.data.task_data import DataError, load_conll
from briskbert.training.tasks import metrics
from briskbert.training.tasks.ner import bio_violations, crf_training_tags, invalid_bio_share

DATA = Path(__file__).resolve().parents[1] / "data"
BIO = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
CONLL_TAGS = ["O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC"]


def valid_bio(tags: list[str]) -> bool:
    """IOB2 by its definition, independent of the code under test: the tag before an I-X is B-X or I-X."""
    return all(
        not tag.startswith("I-") or (i > 0 and tags[i - 1] in ("B-" + tag[2:], tag))
        for i, tag in enumerate(tags)
    )


def random_crf(labels, constrained: bool, seed: int) -> LinearChainCRF:
    # LABEL_i tags (the IO scheme) forbid nothing.
    crf = LinearChainCRF(labels if constrained else [f"LABEL_{i}" for i in range(len(labels))])
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in crf.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator))
    return crf.double()


def enumerate_paths(crf: LinearChainCRF, words: torch.Tensor, labels, constrained: bool):
    """Every tag path of ``(n, tags)`` emissions (only valid_bio ones if constrained), scored term by term."""
    paths = np.array(list(itertools.product(range(len(labels)), repeat=len(words))))
    if constrained:
        paths = paths[[valid_bio([labels[tag] for tag in path]) for path in paths]]
    start, transitions, end = (
        p.detach().numpy() for p in (crf.start_transitions, crf.transitions, crf.end_transitions)
    )
    steps = np.arange(len(words))
    scores = start[paths[:, 0]] + end[paths[:, -1]] + words.numpy()[steps, paths].sum(1)
    scores += transitions[paths[:, :-1], paths[:, 1:]].sum(1)
    return paths, scores


# Rows of every shape the algorithms must handle: full, a prefix, gaps (sub-words and special tokens between
# words), one word, and none.
MASK = torch.tensor(
    [[flag == "1" for flag in row] for row in ("111111", "111000", "010110", "000010", "000000")]
)


@pytest.mark.parametrize("constrained", [True, False], ids=["bio-constraints", "unconstrained"])
def test_crf_is_exact_against_enumeration_of_every_tag_path(constrained):
    crf = random_crf(BIO, constrained, seed=1)
    generator = torch.Generator().manual_seed(2)
    emissions = torch.randn(*MASK.shape, len(BIO), generator=generator, dtype=torch.float64)
    gold = torch.randint(0, len(BIO), MASK.shape, generator=torch.Generator().manual_seed(3))
    gold[0] = torch.tensor([1, 2, 0, 3, 4, 4])  # an allowed path (random ones rarely are)

    nll = crf.neg_log_likelihood(emissions, gold, MASK)
    decoded = crf.decode(emissions, MASK)
    marginals = crf.marginals(emissions, MASK)
    for row, mask in enumerate(MASK):
        words = emissions[row][mask]
        if not mask.any():  # no tagged position: nothing to score or decode
            assert nll[row] == 0 and marginals[row].abs().sum() == 0
            assert (decoded[row] == IGNORE_INDEX).all()
            continue
        paths, path_scores = enumerate_paths(crf, words, BIO, constrained)
        log_z = np.logaddexp.reduce(path_scores)
        assert decoded[row][mask].tolist() == paths[path_scores.argmax()].tolist()
        assert (decoded[row][~mask] == IGNORE_INDEX).all()
        probabilities = np.exp(path_scores - log_z)
        expected_marginals = np.stack([(probabilities[:, None] * (paths == t)).sum(0) for t in range(5)], 1)
        np.testing.assert_allclose(marginals[row][mask].numpy(), expected_marginals, rtol=1e-10, atol=1e-12)
        assert marginals[row][~mask].abs().sum() == 0
    # log Z minus the score of one given path, read term by term (an allowed path, so present either way).
    paths, path_scores = enumerate_paths(crf, emissions[0], BIO, constrained)
    expected_gold = path_scores[(paths == gold[0].numpy()).all(1)].item()
    assert nll[0].item() == pytest.approx(np.logaddexp.reduce(path_scores) - expected_gold, rel=1e-10)


def test_gradient_of_the_negative_log_likelihood_is_marginals_minus_the_gold_tags():
    """Autograd through the forward algorithm equals the forward-backward marginals minus the gold one-hot."""
    crf = random_crf(BIO, True, seed=4)
    emissions = torch.randn(*MASK.shape, len(BIO), dtype=torch.float64, requires_grad=True)
    gold = torch.tensor([[1, 2, 2, 0, 3, 4]] * len(MASK))
    (gradient,) = torch.autograd.grad(crf.neg_log_likelihood(emissions, gold, MASK).sum(), emissions)
    one_hot = torch.nn.functional.one_hot(gold, len(BIO)) * MASK.unsqueeze(-1)
    torch.testing.assert_close(gradient, crf.marginals(emissions, MASK) - one_hot, rtol=1e-10, atol=1e-12)


def test_marginals_stay_probabilities_on_long_rows_in_float32():
    """Large scores over hundreds of words: float32 rounding must not push a probability past 1."""
    crf = random_crf(CONLL_TAGS, True, seed=9).float()
    with torch.no_grad():
        crf.transitions.mul_(10)
    emissions = 10 * torch.randn(4, 400, len(CONLL_TAGS), generator=torch.Generator().manual_seed(10))
    marginals = crf.marginals(emissions, torch.ones(4, 400, dtype=torch.bool))
    assert marginals.max() <= 1.0 and marginals.min() >= 0.0
    exact = crf.double().marginals(emissions.double(), torch.ones(4, 400, dtype=torch.bool))
    torch.testing.assert_close(marginals.double(), exact, atol=1e-6, rtol=0)


def test_transition_tables_of_each_tag_scheme():
    """BIO's table is checked by the enumeration above (valid_bio); BIOES and IO here."""
    tags = ("O", "S-PER", "PER", "B-", "X-PER")  # tags after "O" in sort order too
    split = [("O", ""), ("S", "PER"), ("I", "PER"), ("I", "B-"), ("I", "X-PER")]
    assert [split_tag(tag) for tag in tags] == split
    bioes = ["O", "B-PER", "I-PER", "E-PER", "S-PER"]
    table = allowed_transitions(bioes)
    allowed = {(bioes[a], bioes[b]) for a in range(5) for b in range(5) if table.transitions[a][b]}
    closed = ("O", "E-PER", "S-PER")  # after these, only a new entity or O
    assert allowed == {(a, b) for a in closed for b in ("O", "B-PER", "S-PER")} | {
        ("B-PER", "I-PER"), ("B-PER", "E-PER"), ("I-PER", "I-PER"), ("I-PER", "E-PER"),
    }  # fmt: skip
    assert table.start == [True, True, False, False, True] and table.end == [True, False, False, True, True]

    # IO tagging, plain labels and a type without B- tags start entities with I-: nothing to forbid there.
    for labels in (["O", "I-PER", "I-LOC"], ["LABEL_0", "LABEL_1"], ["NN", "VB", "DT"]):
        table = allowed_transitions(labels)
        assert all(table.start) and all(all(row) for row in table.transitions) and all(table.end)
    mixed = allowed_transitions(["O", "B-PER", "I-PER", "I-MISC"])
    assert mixed.start == [True, True, False, True] and mixed.transitions[0] == [True, True, False, True]


def test_viterbi_never_decodes_an_invalid_sequence_on_random_emissions():
    """Emissions favour I- tags so that arg-max breaks BIO in most sentences; Viterbi's path never does."""
    generator = torch.Generator().manual_seed(5)
    crf = LinearChainCRF(CONLL_TAGS)
    lengths = torch.randint(1, 40, (150,), generator=generator)
    mask = torch.arange(40) < lengths.unsqueeze(1)
    inside = torch.tensor([tag.startswith("I-") for tag in CONLL_TAGS])
    argmax_invalid = viterbi_invalid = 0
    for scale in (1.0, 10.0, 1000.0):  # 1000: scores far beyond any trained model's
        with torch.no_grad():
            for parameter in crf.parameters():
                parameter.copy_(scale * torch.randn(parameter.shape, generator=generator))
        emissions = scale * (torch.randn(150, 40, len(CONLL_TAGS), generator=generator) + 3.0 * inside)
        for dtype in (torch.float32, torch.bfloat16):
            decoded = crf.decode(emissions.to(dtype), mask)
            for row in range(150):
                n = int(lengths[row])
                viterbi_invalid += not valid_bio([CONLL_TAGS[t] for t in decoded[row, :n].tolist()])
                argmax_tags = emissions[row, :n].argmax(-1).tolist()
                argmax_invalid += not valid_bio([CONLL_TAGS[t] for t in argmax_tags])
    assert viterbi_invalid == 0
    assert argmax_invalid > 450  # of 900 sentences: the emissions really do tempt


# ---------------------------------------------------------------------------------------------- the head
def tiny_config(labels=BIO, vocab_size=120, **overrides) -> BriskBertConfig:
    label2id = {label: i for i, label in enumerate(labels)}
    return BriskBertConfig.from_preset(
        "bert-tiny", vocab_size=vocab_size, id2label=dict(enumerate(labels)), label2id=label2id, **overrides
    )


def test_head_returns_emissions_the_crf_loss_per_tagged_word_and_viterbi_tags():
    torch.manual_seed(0)
    model = BriskBertForTokenClassification(tiny_config(use_crf=True)).eval()
    input_ids = torch.randint(5, 120, (3, 10))
    labels = torch.full((3, 10), IGNORE_INDEX)
    labels[:, 1:9:2] = torch.tensor([[1, 2, 0, 3], [0, 0, 1, 0], [3, 4, 4, 0]])  # first sub-words of words
    labels[2, 7] = IGNORE_INDEX
    outputs = model(input_ids=input_ids, labels=labels)
    tagged = labels != IGNORE_INDEX
    nll = model.tagger.neg_log_likelihood(outputs.logits, labels, tagged)
    assert outputs.loss.item() == pytest.approx((nll.sum() / tagged.sum()).item(), rel=1e-6)
    assert torch.equal(outputs.tags, model.decode(outputs.logits, tagged))
    # The mean over a single tagged word is its row's NLL; nothing tagged is a loss of 0, not NaN.
    one_word = torch.full((1, 10), IGNORE_INDEX)
    one_word[0, 1] = 1
    single = model.tagger.neg_log_likelihood(outputs.logits[:1], one_word, one_word != IGNORE_INDEX)
    assert model.tagger.loss(outputs.logits[:1], one_word).item() == pytest.approx(single.item())
    assert model.tagger.loss(outputs.logits, torch.full_like(labels, IGNORE_INDEX)) == 0
    outputs.loss.backward()  # the transition scores train with the encoder
    assert all(parameter.grad.abs().sum() > 0 for parameter in model.tagger.parameters())
    # Without labels or tag_mask (pipelines, ONNX export) the outputs are the emissions alone.
    plain = model(input_ids=input_ids)
    assert plain.tags is None and plain.loss is None and list(plain.keys()) == ["logits"]
    torch.testing.assert_close(plain.logits, outputs.logits)
    assert torch.equal(model(input_ids=input_ids, tag_mask=tagged).tags, outputs.tags)

    softmax = BriskBertForTokenClassification(tiny_config()).eval()
    outputs = softmax(input_ids=input_ids, labels=labels)
    expected = torch.nn.functional.cross_entropy(outputs.logits.reshape(-1, 5), labels.reshape(-1))
    assert outputs.loss.item() == pytest.approx(expected.item(), rel=1e-6)
    assert torch.equal(outputs.tags, outputs.logits.argmax(-1).masked_fill(~tagged, IGNORE_INDEX))
    assert not any("tagger" in name for name in softmax.state_dict())  # softmax checkpoints are unchanged


def test_crf_weights_save_load_and_start_at_zero_from_a_checkpoint_without_them(tmp_path):
    torch.manual_seed(0)
    BriskBertForMaskedLM(tiny_config()).save_pretrained(tmp_path / "mlm")
    config = tiny_config(use_crf=True)
    model = BriskBertForTokenClassification.from_pretrained(tmp_path / "mlm", config=config)
    for parameter in model.tagger.parameters():  # not left as the uninitialised memory loading allocates
        assert torch.equal(parameter, torch.zeros_like(parameter))

    with torch.no_grad():
        for parameter in model.tagger.parameters():
            parameter.normal_()
    model.save_pretrained(tmp_path / "crf")
    reloaded = BriskBertForTokenClassification.from_pretrained(tmp_path / "crf")
    assert reloaded.config.use_crf
    for name, parameter in model.tagger.named_parameters():
        assert torch.equal(parameter, dict(reloaded.tagger.named_parameters())[name])
    assert reloaded.tagger.constraints == allowed_transitions(BIO)


# ------------------------------------------------------------------------------------------- NER glue
def test_crf_training_tags_turn_entity_starting_inside_tags_into_begin_tags():
    sentences = [["I-PER", "I-PER", "O", "I-LOC"], ["B-PER", "I-LOC"], ["O", "B-LOC", "I-LOC"]]
    tags, changed = crf_training_tags(sentences, BIO, "train.txt")
    assert tags == [["B-PER", "I-PER", "O", "B-LOC"], ["B-PER", "B-LOC"], ["O", "B-LOC", "I-LOC"]]
    assert changed == 2
    for before, after in zip(sentences, tags):  # the same entities as conlleval reads them
        assert metrics.get_entities(before) == metrics.get_entities(after)
    for broken in (["B-PER", "O"], ["O", "B-PER"]):  # BIOES: a forbidden step; an entity left open at the end
        with pytest.raises(DataError, match="sentence 1 .*breaks the tag scheme"):
            crf_training_tags([broken], ["O", "B-PER", "I-PER", "E-PER", "S-PER"], "train.txt")


def test_invalid_bio_share_counts_sentences_breaking_iob2():
    assert bio_violations(["O", "I-PER", "I-PER", "B-LOC", "I-PER"]) == 2
    assert bio_violations(["I-LOC"]) == 1 and bio_violations(["B-LOC", "I-LOC", "O"]) == 0
    sentences = [["O", "I-PER"], ["B-PER", "I-PER"], ["B-PER", "I-LOC"], ["I-MISC", "O"]]
    assert invalid_bio_share(sentences, BIO + ["I-MISC"]) == pytest.approx(2 / 4)  # MISC has no B- tag: IO


@pytest.mark.parametrize("use_crf", [True, False], ids=["crf", "softmax"])
def test_ner_evaluation_scores_what_the_head_decodes(tokenizer, use_crf):
    """Every token favours I-PER (forbidden first): the evaluation scores the head's own decoding."""
    from accelerate import Accelerator
    from torch.utils.data import DataLoader

    from briskbert.training.tasks.ner import NerEvaluator, ner_features

    sentences = load_conll(str(DATA / "conll2003_dev_excerpt.txt")).select(range(12))
    config = tiny_config(CONLL_TAGS, len(tokenizer), use_crf=use_crf)
    features = ner_features(sentences, sentences["tags"], tokenizer, config.label2id, "tokens", 64, False)
    evaluator = NerEvaluator(list(sentences["tags"]), features["word_ids"], dict(enumerate(CONLL_TAGS)))
    rows = [dict(row) for row in features.remove_columns("word_ids")]
    loader = DataLoader(rows, batch_size=5, collate_fn=DataCollatorForTokenClassification(tokenizer))
    torch.manual_seed(0)
    model = BriskBertForTokenClassification(config).eval()
    with torch.no_grad():
        model.classifier.weight.zero_()
        model.classifier.bias.copy_(torch.tensor([0.0, 1.0, 3.0, 0, 0, 0, 0, 0, 0]))  # I-PER, then B-PER
    result = evaluator.evaluate(model, loader, Accelerator(cpu=True))
    # Viterbi: B-PER I-PER I-PER ...: each sentence one PER entity; arg-max: I-PER everywhere, invalid throughout.
    assert result["invalid_bio_share"] == (0.0 if use_crf else 1.0)
    assert result["num_predicted_entities"] == len(sentences)


def test_finetune_ner_with_crf_end_to_end(tmp_path, tokenizer, tiny_model):
    folder = tmp_path / "tiny"
    tiny_model(BriskBertForMaskedLM).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    train, dev = (str(DATA / f"conll2003_{part}_excerpt.txt") for part in ("train", "dev"))
    sizes = "--max_train_samples 48 --max_eval_samples 40 --max_train_steps 3 --learning_rate 1e-3"
    sizes += " --per_device_train_batch_size 8 --per_device_eval_batch_size 32 --crf"
    argv = ["--model_name_or_path", str(folder), "--train_file", train, "--validation_file", dev]
    finetune_ner = importlib.import_module("briskbert.commands.finetune_ner").main
    result = finetune_ner([*argv, "--output_dir", str(tmp_path / "ner"), *sizes.split()])
    assert result.metrics["eval_invalid_bio_share"] == 0.0
    assert {"eval_f1", "eval_precision", "eval_recall", "eval_loss"} <= set(result.metrics)
    assert result.metrics["eval_loss"] < 100  # the NLL of repaired gold tags, no forbidden-transition penalty
    saved = json.loads((result.final_dir / "config.json").read_text())
    assert saved["use_crf"] is True
    pipeline = "pipeline_token_classification.BriskBertTokenClassificationPipeline"
    assert saved["custom_pipelines"]["token-classification"]["impl"] == pipeline
    assert {"crf.py", "pipeline_token_classification.py"} <= {p.name for p in result.final_dir.iterdir()}
    assert "tagger.transitions" in load_file(result.final_dir / "model.safetensors")
    facts = json.loads((result.final_dir / "training_facts.json").read_text())
    assert facts["details"]["crf"] is True


# ------------------------------------------------------------------------------------- served by transformers
TEXT = "Merkel met Gdansk's mayor."


def served_model(tokenizer, folder: Path) -> BriskBertForTokenClassification:
    """A tiny CRF model with large random weights (varied emissions and transitions), saved with its tokenizer."""
    torch.manual_seed(8)
    model = BriskBertForTokenClassification(tiny_config(vocab_size=len(tokenizer), use_crf=True)).eval()
    with torch.no_grad():
        model.classifier.weight.normal_(0, 0.5)
        model.classifier.bias.copy_(torch.tensor([0.0, 1.0, 1.0, 1.0, 1.0]))
        for parameter in model.tagger.parameters():
            parameter.normal_(0, 2.0)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return model


def expected_entities(model, tokenizer, text: str) -> tuple[list[dict], list[str]]:
    """Entities (scored by their words' mean marginal) and word tags of the best path, by enumeration."""
    encoded = tokenizer(text, return_offsets_mapping=True, return_tensors="pt")
    offsets = encoded.pop("offset_mapping")[0].tolist()
    with torch.no_grad():
        logits = model(**encoded).logits[0].double()
    tokens = tokenizer.convert_ids_to_tokens(encoded["input_ids"][0])
    starts = [i for i, token in enumerate(tokens[1:-1], 1) if not token.startswith("##")]
    ends = [end - 1 for end in starts[1:]] + [len(tokens) - 2]
    paths, scores = enumerate_paths(model.tagger.double(), logits[starts], BIO, constrained=True)
    probabilities = np.exp(scores - np.logaddexp.reduce(scores))
    best = paths[scores.argmax()]
    marginal = [probabilities[paths[:, t] == best[t]].sum() for t in range(len(best))]
    best_tags = [BIO[tag] for tag in best]
    entities = []
    for entity_type, first, last in metrics.get_entities(best_tags):
        start, end = offsets[starts[first]][0], offsets[ends[last]][1]
        score = sum(marginal[first : last + 1]) / (last + 1 - first)
        word = text[start:end].lower()
        entities.append(dict(entity_group=entity_type, score=score, word=word, start=start, end=end))
    return entities, best_tags


def test_pipeline_decodes_the_best_path_of_words_with_each_strategy_and_input(tokenizer, tmp_path):
    from transformers import pipeline

    model = served_model(tokenizer, tmp_path / "ner-crf")
    expected, word_tags = expected_entities(model, tokenizer, TEXT)
    tagger = pipeline("token-classification", model=str(tmp_path / "ner-crf"), trust_remote_code=True)
    words = tagger(TEXT, ignore_labels=[])
    assert [w["word"] for w in words] == ["merkel", "met", "gdansk", "'", "s", "mayor", "."]
    assert [w["index"] for w in words] == [1, 3, 4, 5, 6, 7, 8]  # each word's first token (mer ##kel)
    assert [w["entity"] for w in words] == word_tags
    entities = tagger(TEXT, aggregation_strategy="simple")
    assert tagger(TEXT, aggregation_strategy="first") == entities
    assert entities == [{**entity, "score": pytest.approx(entity["score"], abs=1e-5)} for entity in expected]
    # Pre-split words are the CRF's words.
    (split,) = tagger(TEXT.split(), is_split_into_words=True, ignore_labels=[])  # a batch of one, as upstream
    assert [w["word"] for w in split] == ["merkel", "met", "gdansk ' s", "mayor."]  # decoded as upstream
    with pytest.raises(ValueError, match="aggregation_strategy='max'.*'simple'"):
        tagger(TEXT, aggregation_strategy="max")
    # A text longer than the model's window, in overlapping chunks.
    tagger.tokenizer.model_max_length = 64
    long_text = " ".join([TEXT] * 30)
    entities = tagger(long_text, aggregation_strategy="simple", stride=16)
    assert len(entities) > 30 and entities[-1]["end"] > len(long_text) - 30
    for entity in entities:
        found = long_text[entity["start"] : entity["end"]].lower()
        assert 0.0 < entity["score"] <= 1.0 and found.replace(" ", "") == entity["word"].replace(" ", "")


SERVE = """
    import json
    from transformers import pipeline

    tagger = pipeline("token-classification", model=MODEL, trust_remote_code=True, aggregation_strategy="simple")
    words = pipeline(model=MODEL, trust_remote_code=True)(TEXT, ignore_labels=[])  # the task from the config
    print(json.dumps({
        "module": type(tagger.model).__module__,
        "pipeline": type(tagger).__name__,
        "entities": [{k: (float(v) if k == "score" else v) for k, v in e.items()} for e in tagger(TEXT)],
        "word_tags": [w["entity"] for w in words],
    }))
"""


@pytest.mark.slow  # a fresh interpreter imports torch and transformers (~10 s): the only check users rely on
def test_saved_crf_model_serves_viterbi_entities_with_plain_transformers(tokenizer, tmp_path):
    folder = tmp_path / "ner-crf"
    model = served_model(tokenizer, folder)
    expected, word_tags = expected_entities(model, tokenizer, TEXT)
    assert expected  # the random weights do tag entities

    code = f"MODEL = {str(folder)!r}\nTEXT = {TEXT!r}\n" + textwrap.dedent(SERVE)
    served = json.loads(run_without_project(code, tmp_path).strip().splitlines()[-1])

    assert served["module"].startswith("transformers_modules")
    assert served["pipeline"] == "BriskBertTokenClassificationPipeline"
    assert served["word_tags"] == word_tags
    assert served["entities"] == [{**e, "score": pytest.approx(e["score"], abs=1e-5)} for e in expected]
