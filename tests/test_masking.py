"""The MLM collator (``training/data/masking.py``), case by case, with a small hand-made vocabulary."""

import numpy as np
import pytest
import torch

from briskbert.training.data.masking import MaskingCollator, _uniforms, count_masked_tokens

PAD, UNK, CLS, SEP, MASK = 0, 1, 2, 3, 4
# splitmix64's first outputs from this state: the reference vector of rand_xoshiro (rust-random/rngs), made with
# Vigna's splitmix64.c.
SPLITMIX_KEY = np.asarray([1477776061723855037], dtype=np.uint64)
SPLITMIX_OUTPUTS = [1985237415132408290, 2979275885539914483, 13511426838097143398, 8488337342461049707]
SPLITMIX_OUTPUTS += [15141737807933549159, 17093170987380407015]
WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "play", "##ing", "##ed", "run", "fast", "##er", "the"]


class Tokenizer:
    """What the collator reads from a tokenizer: specials, the mask and pad ids, the tokens."""

    pad_token_id, mask_token_id = PAD, MASK

    def __init__(self, tokens=WORDS, special_ids=(PAD, UNK, CLS, SEP, MASK)):
        self.tokens = list(tokens)
        self.all_special_ids = list(special_ids)

    def __len__(self):
        return len(self.tokens)

    def convert_ids_to_tokens(self, ids):
        return [self.tokens[i] for i in ids]


def rows(collator, examples):
    batch = collator(examples)
    return batch, batch["labels"] != -100


def long_example(n=400, idx=0):
    rng = np.random.default_rng(idx)
    return {"input_ids": [CLS, *rng.integers(5, len(WORDS), n).tolist(), SEP], "idx": idx}


def test_a_tokenizer_without_a_pad_token_is_refused():
    tokenizer = Tokenizer()
    tokenizer.pad_token_id = None
    with pytest.raises(ValueError, match="needs a mask token and a pad token"):
        MaskingCollator(tokenizer)


def test_defaults_are_berts_15_percent_and_80_10_10():
    collator = MaskingCollator(Tokenizer())
    examples = [long_example(3000, idx=i) for i in range(4)]
    batch, selected = rows(collator, examples)
    assert selected.float().mean().item() == pytest.approx(0.15 * 3000 / 3002, abs=0.01)
    assert (batch["input_ids"][selected] == MASK).float().mean().item() == pytest.approx(0.8, abs=0.02)
    unchanged = (batch["input_ids"][selected] == batch["labels"][selected]).float().mean().item()
    assert unchanged == pytest.approx(0.1 + 0.1 / (len(WORDS) - 5), abs=0.02)  # a random id may be the same


def test_random_replacements_come_from_the_non_special_vocabulary_only():
    tokenizer = Tokenizer()
    collator = MaskingCollator(tokenizer, mlm_probability=0.9, mask_replace_prob=0.0, random_replace_prob=1.0)
    examples = [long_example(idx=i) for i in range(3)]
    batch, selected = rows(collator, examples)
    replaced = batch["input_ids"][selected]
    assert not (replaced == MASK).any()
    assert set(replaced.tolist()) == set(range(5, len(WORDS)))  # every ordinary id, no special one
    changed = (replaced != batch["labels"][selected]).float().mean().item()
    assert changed == pytest.approx(1 - 1 / (len(WORDS) - 5), abs=0.03)  # a random draw may repeat the id


def test_specials_and_out_of_vocabulary_special_ids_are_handled():
    # A tokenizer may list special ids beyond its vocabulary (added tokens) or None: they are ignored.
    tokenizer = Tokenizer(special_ids=(PAD, UNK, CLS, SEP, MASK, None, len(WORDS)))
    collator = MaskingCollator(tokenizer, mlm_probability=0.9)
    examples = [{"input_ids": [CLS, 5, UNK, 6, SEP, 7, SEP], "idx": idx} for idx in range(20)]
    batch, selected = rows(collator, examples)
    assert selected.any(dim=0).tolist() == [False, True, False, True, False, True, False]
    assert collator.random_pool.tolist() == list(range(5, len(WORDS)))


def test_at_least_one_token_is_selected_even_at_a_tiny_rate():
    collator = MaskingCollator(Tokenizer(), mlm_probability=1e-9)
    for idx in range(5):
        batch, selected = rows(collator, [{"input_ids": [CLS, 5, 8, 9, 11, SEP], "idx": idx}])
        assert selected.sum() == 1 and not selected[0, [0, 5]].any()
    only_specials = collator([{"input_ids": [CLS, SEP], "idx": 0}])
    assert (only_specials["labels"] == -100).all()


def test_whole_words_are_selected_together():
    tokenizer = Tokenizer()
    collator = MaskingCollator(tokenizer, mlm_probability=0.5, whole_word_mask=True)
    # play ##ing | run ##er | the | fast ##er ##ed, repeated: words of 1 to 3 pieces
    body = [5, 6, 8, 10, 11, 9, 10, 7] * 40
    batch, selected = rows(collator, [{"input_ids": [CLS, *body, SEP], "idx": 1}])
    chosen = selected[0, 1:-1].view(40, 8)
    for start, end in ((0, 2), (2, 4), (4, 5), (5, 8)):
        word = chosen[:, start:end]
        assert (word == word[:, :1]).all()  # every piece shares its word's fate
    words_chosen = torch.cat([chosen[:, s] for s in (0, 2, 4, 5)]).float().mean().item()
    assert 0.35 < words_chosen < 0.65


def test_whole_word_rate_adds_a_word_only_where_none_was_drawn():
    # 10 one-piece words per sequence at 15 %: 1.5 words on average, plus one more in the 0.85**10 of the
    # sequences where none was drawn: 1.5 + 0.197 = 1.697 words per sequence.
    collator = MaskingCollator(Tokenizer(), mlm_probability=0.15, whole_word_mask=True)
    examples = [{"input_ids": [CLS, *[5, 8, 9, 11, 5] * 2, SEP], "idx": i} for i in range(600)]
    _, selected = rows(collator, examples)
    assert selected.sum(dim=1).float().mean().item() == pytest.approx(1.5 + 0.85**10, abs=0.15)
    assert (selected.sum(dim=1) >= 1).all()


def test_a_leading_continuation_piece_belongs_to_no_word_and_a_word_may_start_the_sequence():
    # Each sequence holds one word, which is selected (at least one is): exactly its pieces, with or without [CLS].
    collator = MaskingCollator(Tokenizer(), whole_word_mask=True)
    for ids, word in (([CLS, 6, 7, 5, 6, SEP], [3, 4]), ([6, 5, 6, SEP], [1, 2]), ([5, 6, SEP], [0, 1])):
        _, selected = rows(collator, [{"input_ids": ids, "idx": 0}])
        assert torch.nonzero(selected[0]).ravel().tolist() == word


def test_draws_are_the_reference_splitmix64_outputs():
    # Position p's draw of stream s is output 3 p + s of the key's sequence, its top 53 bits as a float.
    positions = np.arange(2, dtype=np.uint64)
    draws = np.stack([_uniforms(SPLITMIX_KEY, positions, stream) for stream in range(3)], axis=1)
    assert draws.ravel().tolist() == [(x >> 11) * 2.0**-53 for x in SPLITMIX_OUTPUTS]


def test_a_positions_selection_action_and_random_id_are_its_three_draws_in_that_order():
    # From the outputs above: selection 0.108 and 0.460 (both under 0.5), action 0.162 and 0.821 (both random
    # replacements, in [0.1, 0.9)), random id 0.732 and 0.927 of the 7 ordinary ids: the 6th and the 7th.
    collator = MaskingCollator(
        Tokenizer(), mlm_probability=0.5, mask_replace_prob=0.1, random_replace_prob=0.8
    )
    ids, labels = collator.mask(np.array([[5, 5]]), np.ones((1, 2), dtype=bool), SPLITMIX_KEY)
    assert ids.tolist() == [[10, 11]] and labels.tolist() == [[5, 5]]


def test_the_draw_depends_on_seed_and_epoch():
    example = long_example(idx=7)
    draws = {}
    for seed in (0, 2):
        for epoch in (0, 2):
            collator = MaskingCollator(Tokenizer(), mlm_probability=0.3, seed=seed)
            collator.set_epoch(epoch)
            draws[seed, epoch] = collator([example])["labels"][0]
    assert len({tuple(d.tolist()) for d in draws.values()}) == 4


@pytest.mark.parametrize("whole_word_mask", [False, True])
def test_an_examples_mask_is_the_same_whatever_its_batch_row_padding_or_process(whole_word_mask):
    # What resumed and multi-process runs rely on: a mask depends on (seed, epoch, idx) alone, not on the
    # row, the other examples, the padded length, nor on the batches masked before.
    def collator():
        return MaskingCollator(Tokenizer(), 0.3, whole_word_mask=whole_word_mask, seed=5)

    examples = [long_example(n=40 + 37 * i, idx=100 + i) for i in range(6)]  # six lengths
    whole = collator()(examples)
    reversed_rows = collator()(examples[::-1])
    halves = collator()(examples[3:]), collator()(examples[:3])  # two processes, or a run resumed halfway
    for i, example in enumerate(examples):
        n = len(example["input_ids"])
        for batch, row in ((reversed_rows, 5 - i), (halves[i < 3], i % 3)):
            assert torch.equal(batch["input_ids"][row, :n], whole["input_ids"][i, :n])
            assert torch.equal(batch["labels"][row, :n], whole["labels"][i, :n])
    assert len({tuple((whole["labels"][i, :40] != -100).tolist()) for i in range(6)}) == 6  # each its own


def test_padding_attention_mask_labels_and_optional_fields():
    collator = MaskingCollator(Tokenizer(), mlm_probability=0.5)
    examples = [
        {"input_ids": [CLS, 5, 6, SEP], "token_type_ids": [0, 0, 1, 1], "next_sentence_label": 1, "idx": 0},
        {
            "input_ids": [CLS, 8, 9, 10, 11, SEP],
            "token_type_ids": [0, 0, 0, 1, 1, 1],
            "next_sentence_label": 0,
            "idx": 1,
        },
    ]
    batch = collator(examples)
    assert batch["input_ids"].shape == (2, 6) and batch["input_ids"].dtype == torch.int64
    assert batch["input_ids"][0, 4:].tolist() == [PAD] * 2
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 1, 0, 0], [1] * 6]
    assert (batch["labels"][0, 4:] == -100).all()
    assert batch["token_type_ids"].tolist() == [[0, 0, 1, 1, 0, 0], [0, 0, 0, 1, 1, 1]]
    assert batch["next_sentence_label"].tolist() == [1, 0]
    plain = MaskingCollator(Tokenizer())([{"input_ids": [CLS, 5, 6, SEP], "idx": 0}])
    assert set(plain) == {"input_ids", "attention_mask", "labels"} and plain["input_ids"].shape == (1, 4)
    assert count_masked_tokens(batch).item() == (batch["labels"] != -100).sum().item() > 0
