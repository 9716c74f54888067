"""QA windows and answer spans (``training/tasks/qa.py``) against brute-force enumeration and hand-made
cases, on the real all-MiniLM-L6-v2 tokenizer."""

import itertools

import numpy as np
import pytest

from briskbert.training.tasks import qa

WORDS = 12
CONTEXT = " ".join(f"w{k:02d}" for k in range(WORDS))  # word k spans characters 4k .. 4k + 3
OFFSETS = [None, None, None] + [(4 * k, 4 * k + 3) for k in range(WORDS)] + [None]  # [CLS] q [SEP] ... [SEP]


def brute_force(starts, ends, n_best_size, max_answer_length):
    """SQuAD's spans: best starts x best ends inside the context, in order, within the limit, best first."""
    best_starts = sorted(range(len(OFFSETS)), key=lambda k: -starts[k])[:n_best_size]
    best_ends = sorted(range(len(OFFSETS)), key=lambda k: -ends[k])[:n_best_size]
    spans = [
        (starts[s] + ends[e], CONTEXT[OFFSETS[s][0] : OFFSETS[e][1]])
        for s, e in itertools.product(best_starts, best_ends)
        if OFFSETS[s] is not None and OFFSETS[e] is not None and s <= e < s + max_answer_length
    ]
    return sorted(spans, reverse=True)[:n_best_size]


def squad(question, context, answer=None):
    """One example as datasets batches it; ``answer`` (its first occurrence in ``context``) or none."""
    answers = {"text": [], "answer_start": []}
    if answer:
        answers = {"text": [answer], "answer_start": [context.index(answer)]}
    return {"id": ["q"], "question": [question], "context": [context], "answers": [answers]}


def postprocess(starts, ends, **options):
    examples = [{"id": "q", "context": CONTEXT}]
    features = {"example_id": ["q"], "offset_mapping": [OFFSETS]}
    starts, ends = np.atleast_2d(starts), np.atleast_2d(ends)
    return qa.postprocess_qa_predictions(examples, features, starts, ends, **options)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize(("n_best_size", "max_answer_length"), [(1, 30), (3, 1), (5, 3), (20, 30)])
def test_the_best_spans_are_those_of_brute_force_enumeration(seed, n_best_size, max_answer_length):
    generator = np.random.default_rng(seed)
    starts, ends = generator.normal(size=len(OFFSETS)), generator.normal(size=len(OFFSETS))
    limits = dict(n_best_size=n_best_size, max_answer_length=max_answer_length)
    predictions, nbest = postprocess(starts, ends, **limits)
    expected = brute_force(starts, ends, n_best_size, max_answer_length)
    assert [c["text"] for c in nbest["q"]] == [text for _, text in expected]
    assert [c["score"] for c in nbest["q"]] == pytest.approx([score for score, _ in expected])
    assert predictions["q"] == (expected[0][1] if expected else "")


def test_an_answer_of_exactly_the_maximum_length_is_allowed_and_one_token_more_is_not():
    starts, ends = np.full(len(OFFSETS), -5.0), np.full(len(OFFSETS), -5.0)
    starts[4], ends[6] = 10.0, 10.0  # words 1..3: three tokens
    assert postprocess(starts, ends, max_answer_length=3)[0]["q"] == "w01 w02 w03"
    assert postprocess(starts, ends, max_answer_length=2)[0]["q"] != "w01 w02 w03"


def test_the_null_answer_wins_only_by_more_than_the_threshold():
    starts, ends = np.zeros(len(OFFSETS)), np.zeros(len(OFFSETS))
    starts[4], ends[4] = 2.0, 1.0  # best span "w01": 3.0
    for null, threshold, answer in [
        (3.0, 0.0, "w01"),  # a tie keeps the span
        (3.5, 0.0, ""),  # null ahead by 0.5
        (3.5, 1.0, "w01"),  # ... but not by more than the threshold
        (-1.0, 0.0, "w01"),  # null far behind
        (0.5, 0.0, "w01"),  # a positive null below the span
    ]:
        starts[0] = ends[0] = null / 2
        predictions, nbest = postprocess(starts, ends, version_2=True, null_score_diff_threshold=threshold)
        assert predictions["q"] == answer, (null, threshold)
        assert (nbest["q"][0]["text"] == "") == (null > 3.0)  # the null answer is ranked with the spans


def test_when_the_null_leads_the_list_the_answer_is_the_best_non_empty_span():
    starts, ends = np.zeros(len(OFFSETS)), np.zeros(len(OFFSETS))
    starts[0] = ends[0] = 2.0  # null 4.0 ...
    starts[5], ends[5] = 2.0, 1.5  # ... above "w02" at 3.5, but within the threshold
    predictions, nbest = postprocess(starts, ends, version_2=True, null_score_diff_threshold=1.0)
    assert nbest["q"][0]["text"] == "" and predictions["q"] == "w02"


def test_one_row_of_logits_per_window_is_required():
    one, two = np.zeros((1, len(OFFSETS))), np.zeros((2, len(OFFSETS)))
    for starts, ends in [(one, two), (two, one)]:
        with pytest.raises(ValueError, match="one row per window"):
            postprocess(starts, ends)


@pytest.mark.parametrize("answer", ["Lisbon", "The"])  # the context's last word, its first
def test_an_answer_at_either_end_of_the_context_is_found_in_its_window(tokenizer, answer):
    context = "The treaty was signed in the old harbour town of Lisbon"
    examples = squad("Where was the treaty signed?", context, answer)
    features = qa.prepare_train_features(examples, tokenizer, max_seq_length=64, doc_stride=16)
    start, end = features["start_positions"][0], features["end_positions"][0]
    assert tokenizer.decode(features["input_ids"][0][start : end + 1]) == answer.lower()


def test_a_long_context_is_answered_from_the_window_that_holds_the_answer(tokenizer):
    filler = " ".join(f"Sentence {i} talks about nothing in particular." for i in range(60))
    context = f"{filler} The treasure is buried under the old oak tree. {filler}"
    examples = squad("Where is the treasure buried?", context, "under the old oak tree")
    features = qa.prepare_train_features(examples, tokenizer, max_seq_length=96, doc_stride=32)
    answered = [i for i, start in enumerate(features["start_positions"]) if start != 0]
    assert len(features["input_ids"]) > 5 and answered  # many windows, some holding the whole answer
    for i, (start, end) in enumerate(zip(features["start_positions"], features["end_positions"])):
        span = tokenizer.decode(features["input_ids"][i][start : end + 1])
        assert (span == "under the old oak tree") if i in answered else (end == 0)  # else [CLS]
    # oracle logits in the last answering window decode back to the answer, picked over all windows
    windows = qa.prepare_eval_features(examples, tokenizer, max_seq_length=96, doc_stride=32)
    starts, ends = np.zeros((len(windows["input_ids"]), 96)), np.zeros((len(windows["input_ids"]), 96))
    starts[answered[-1], features["start_positions"][answered[-1]]] = 10
    ends[answered[-1], features["end_positions"][answered[-1]]] = 10
    examples = [{"id": "q", "context": context}]
    options = dict(n_best_size=5, max_answer_length=10)
    predictions, nbest = qa.postprocess_qa_predictions(examples, windows, starts, ends, **options)
    assert predictions == {"q": "under the old oak tree"} and nbest["q"][0]["probability"] > 0.5
    assert nbest["q"][0]["answer_start"] == context.index("under the old oak tree")


def test_questions_are_cut_to_64_tokens_by_default_and_right_padding_is_required(tokenizer):
    examples = squad(" ".join(["why"] * 80) + "?", "Because.")
    for prepare in (qa.prepare_train_features, qa.prepare_eval_features):
        assert prepare(examples, tokenizer).sequence_ids(0).count(0) == 64
    tokenizer.padding_side = "left"
    try:
        with pytest.raises(ValueError, match="pads on the right"):
            qa.prepare_train_features(examples, tokenizer)
    finally:
        tokenizer.padding_side = "right"


def test_windows_overlap_by_128_tokens_by_default_and_every_window_is_labelled(tokenizer):
    context = " ".join(f"word{k % 50} stands here." for k in range(200))  # far longer than one window
    examples = squad("Which word?", context)
    features = qa.prepare_train_features(examples, tokenizer)
    windows = len(features["input_ids"])
    assert windows > 2 and features["start_positions"] == features["end_positions"] == [0] * windows
    contexts = [
        [token for token, part in zip(features["input_ids"][i], features.sequence_ids(i)) if part == 1]
        for i in range(2)
    ]
    assert contexts[0][-128:] == contexts[1][:128] != contexts[0][-129:-1]  # 128 tokens shared, no more
    evaluation = qa.prepare_eval_features(examples, tokenizer)
    first, second = ({tuple(o) for o in evaluation["offset_mapping"][i] if o is not None} for i in range(2))
    assert len(evaluation["input_ids"]) == windows and len(first & second) == 128


def test_answerless_training_windows_are_kept_at_the_given_rate_and_answered_ones_always():
    from datasets import Dataset

    features = Dataset.from_dict({"start_positions": [7] * 20 + [0] * 2000})
    for fraction, low, high in [(0.0, 0, 0), (0.2, 340, 460), (1.0, 2000, 2000)]:
        kept = qa.keep_some_answerless_windows(features, fraction, seed=0)["start_positions"]
        assert kept.count(7) == 20 and low <= kept.count(0) <= high, (fraction, kept.count(0))
