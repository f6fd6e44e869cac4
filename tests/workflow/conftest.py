import json

import pytest

from shardflow.corpus.demo import DemoParams, build_demo_corpus


@pytest.fixture(scope="session")
def demo_texts(tmp_path_factory):
    """90 real documents (stdlib docstrings) as a JSONL corpus; returns (path, records)."""
    path = tmp_path_factory.mktemp("corpus") / "corpus.jsonl"
    build_demo_corpus(str(path), DemoParams(max_docs=90, min_words=20))
    records = [json.loads(line) for line in path.read_text().splitlines()]
    return path, records
