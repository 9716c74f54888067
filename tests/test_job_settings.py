"""Job settings: the embedding and re-ranker jobs refuse contradictory settings before anything is loaded,
naming the field; the shared training defaults."""

import pytest

from briskbert.errors import SettingError
from briskbert.retrieval.settings import (
    EmbeddingData,
    EmbeddingSettings,
    RerankerData,
    RerankerValidation,
)


@pytest.mark.parametrize(
    "make, flag",
    [
        (lambda: EmbeddingData("train.tsv", max_train_samples=0), "--max_train_samples"),
        (lambda: EmbeddingData("train.tsv", max_query_length=3), "--max_query_length"),
        (lambda: EmbeddingSettings(loss="triplet_margin"), "--loss"),
        (lambda: EmbeddingSettings(mini_batch_size=0), "--mini_batch_size"),
        (lambda: EmbeddingSettings(scale=0.0), "--scale"),
        (lambda: RerankerData("train.json", num_negatives=0), "--num_negatives"),
        (lambda: RerankerData("train.json", loss="pairwise"), "--loss"),
        (lambda: RerankerValidation("dev.json", rerank_top_k=0), "--rerank_top_k"),
    ],
)
def test_a_contradictory_setting_is_refused_naming_its_flag(make, flag):
    with pytest.raises(SettingError) as error:
        make()
    assert f"--{error.value.field}" == flag


def test_the_negative_pool_defaults_to_three_times_the_negatives_behind_a_retriever():
    assert RerankerData("t.json", num_negatives=2).pool_size == 2
    assert RerankerData("t.json", num_negatives=2, negatives_from="runs/embed").pool_size == 6
    assert RerankerData("t.json", num_negatives=2, negative_pool_size=5).pool_size == 5


def test_warm_up_is_a_tenth_of_the_run_unless_a_step_count_overrides_it():
    """The shared defaults (docs/results.md): 1e-4 after 10% warm-up, or --num_warmup_steps as given."""
    from test_training_loop import config

    default = config("--output_dir", "x")
    assert (default.learning_rate, default.num_warmup_steps_for(38)) == (1e-4, 4)
    steps = config("--output_dir", "x", "--warmup_ratio", "0.5", "--num_warmup_steps", "0")
    none = config("--output_dir", "x", "--warmup_ratio", "0")
    assert steps.num_warmup_steps_for(38) == none.num_warmup_steps_for(38) == 0
