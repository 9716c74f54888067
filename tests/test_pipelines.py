# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""``transformers.pipeline()`` on saved folders against the model run directly; ``transformers.Trainer``."""

import torch
from transformers import pipeline

from briskbert.modeling import (
    BriskBertForMaskedLM,
    BriskBertForQuestionAnswering,
    BriskBertForSequenceClassification,
)


def _save(model, tokenizer, folder):
    model.eval()
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def test_question_answering_pipeline_covers_long_contexts(tokenizer, tmp_path, tiny_model):
    from briskbert.modeling.pipeline_question_answering import register_question_answering_pipeline

    model = tiny_model(BriskBertForQuestionAnswering)
    with torch.no_grad():  # decisive start and end logits from an untrained model
        model.qa_outputs.weight.normal_(0, 1.0)
    register_question_answering_pipeline(model.config)  # transformers 5 has no question-answering pipeline
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
    inputs = {k: features[k] for k in ("input_ids", "token_type_ids", "attention_mask")}
    with torch.no_grad():
        outputs = model(**tokenizer.pad(inputs, return_tensors="pt"))
    width = outputs.start_logits.shape[1]
    rows = features["offset_mapping"]
    mask = torch.tensor([[o is not None for o in row] + [False] * (width - len(row)) for row in rows])
    # per-window log-softmax over the context makes window scores comparable, as the pipeline's probabilities do
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


def test_trains_with_transformers_trainer(tokenizer, tmp_path, tiny_model):
    from datasets import Dataset
    from transformers import DataCollatorWithPadding, Trainer, TrainingArguments

    model = tiny_model(BriskBertForSequenceClassification, num_labels=2)
    texts = ["good film", "bad film", "great acting", "awful plot"] * 8
    dataset = Dataset.from_dict({"text": texts, "label": [1, 0, 1, 0] * 8}).map(
        lambda batch: tokenizer(batch["text"]), batched=True, remove_columns=["text"]
    )
    before = model.classifier.weight.detach().clone()
    options = dict(max_steps=4, learning_rate=1e-3, report_to=[], save_strategy="no", use_cpu=True)
    args = TrainingArguments(output_dir=str(tmp_path), **options)
    trainer = Trainer(model, args, train_dataset=dataset, data_collator=DataCollatorWithPadding(tokenizer))
    result = trainer.train()
    assert result.global_step == 4 and torch.isfinite(torch.tensor(result.training_loss))
    assert not torch.equal(before, model.classifier.weight.detach())
