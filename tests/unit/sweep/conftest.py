"""A small config and schema for the sweep tests, and the validator the workflow would pass."""

from __future__ import annotations

import copy

import pytest

from shardflow.core.config import validate_config
from shardflow.sweep.spec import parse_sweeps

CONFIG = {
    "train": {"lr": 0.001, "n_layer": 4, "dropout": 0.0, "dtype": "auto", "lr_decay_iters": None, "seed": 1337},
    "embedding": {"model": "default", "max_length": None, "seed": 0},
    "retrieval": {"top_k": 1000, "path": None},
    "summarise": {"k": 3, "seed": None, "method": "lead"},
    "report": {"map": "pca"},
}


def _section(**props) -> dict:
    return {"type": "object", "additionalProperties": False, "properties": props}


SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "train": _section(
            lr={"type": "number", "exclusiveMinimum": 0},
            n_layer={"type": "integer", "minimum": 1},
            dropout={"type": "number", "minimum": 0, "maximum": 1},
            dtype={"enum": ["auto", "float32", "bfloat16"]},
            lr_decay_iters={"type": ["integer", "null"]},
            seed={"type": "integer", "minimum": 0},
        ),
        "embedding": _section(
            model={"type": "string"},
            max_length={"type": ["integer", "null"], "minimum": 1},
            seed={"type": "integer"},
            keep_chunk_vectors={"type": "boolean"},
        ),
        "retrieval": _section(top_k={"type": "integer", "minimum": 1}, path={"type": ["string", "null"]}),
        "summarise": _section(k={"type": "integer"}, seed={"type": ["integer", "null"]}, method={"type": "string"}),
        "report": _section(map={"enum": ["pca", "umap"]}),
    },
}


def validate(config: dict) -> None:
    validate_config(config, SCHEMA)


def sweep(**overrides) -> dict:
    """A valid train sweep's section, with keys replaced (None removes a key)."""
    out = {
        "stage": "train",
        "grid": {"train.lr": [0.001, 0.0003], "train.n_layer": [2, 4]},
        "seeds": [0, 1],
        "metrics": {"best_val_loss": "min"},
    }
    out.update(overrides)
    return {k: v for k, v in out.items() if v is not None}


def parse(sweeps: dict, config: dict | None = None, **kwargs) -> dict:
    return parse_sweeps(sweeps, copy.deepcopy(config or CONFIG), validate, **kwargs)


@pytest.fixture
def spec():
    return parse({"lr-depth": sweep()})["lr-depth"]
