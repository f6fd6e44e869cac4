"""Fixtures shared by the unit tests. Every file a test reads is written under tmp_path."""

from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def shipped_config() -> dict:
    """config/config.yaml as shipped (read once; tests get deep copies via `config`)."""
    return yaml.safe_load((REPO / "config" / "config.yaml").read_text())


@pytest.fixture
def config(shipped_config) -> dict:
    """A private copy of the shipped config, free to override key by key."""
    return copy.deepcopy(shipped_config)


@pytest.fixture
def write_jsonl():
    """write_jsonl(path, records) -> path: one JSON object a line (gzip when the name ends .gz)."""

    def write(path: Path, records: list[dict]) -> Path:
        data = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records).encode("utf-8")
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.name.endswith(".gz"):
            with gzip.open(path, "wb") as fh:
                fh.write(data)
        else:
            path.write_bytes(data)
        return path

    return write
