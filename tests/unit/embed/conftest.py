"""Fixtures the embedding tests share: tiny random models (built once per test
process, offline) and sample texts."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import tiny_models


@pytest.fixture(scope="session")
def tiny(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tiny_models")
    return {
        "bert_mean": tiny_models.build_bert_mean(root),
        "bert_cls": tiny_models.build_bert_cls(root),
        "qwen_last": tiny_models.build_qwen_last(root),
    }


@pytest.fixture(scope="session")
def texts() -> list[str]:
    return tiny_models.sample_texts(40)
