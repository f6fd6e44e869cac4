"""Fixtures shared by the unit tests. Every file a test reads is written under tmp_path."""

from __future__ import annotations

import copy
import gzip
import json
import os
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]

# Idle OpenMP threads (torch's intra-op pool) sleep until there is work instead of
# spinning for it (libgomp's default spins a while after each parallel region). Set here,
# before any test imports torch, it holds for the tests' own torch and for every job the
# workflow and cluster tests run (their environments are copies of this one; pods of the
# Kubernetes stand-in inherit nothing). It changes how a thread waits, not what any job
# computes or the threads it uses; on the 2-core CI machine the two pytest workers' jobs
# share the cores, and a spinning thread burns CPU the other worker's jobs are waiting
# for (test_retrieval_e2e.py and test_embedding_e2e.py run side by side, twice each way:
# 218 and 224 s of CPU with spinning, 197 and 202 s without). A value already in the
# environment is kept.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

# The longest test files (seconds on the 2-core CI machine, `pytest -n 2 --dist loadfile
# --durations=0`, 2026-11-26: 252, 191, 133, 116, 87, 85, 71, 65), collected first.
# pytest-xdist hands each worker whole files in collection order, one queued ahead, so a
# long file collected last keeps one worker busy while the other has nothing left; with
# the long ones first, the short unit files even out the end. Only the order changes: a
# file missing here runs after these, as collected.
LONGEST_FIRST = (
    "tests/cluster/test_slurm.py",
    "tests/cluster/test_kubernetes.py",
    "tests/faults/test_fault_matrix.py",
    "tests/cluster/test_s3.py",
    "tests/workflow/test_retrieval_e2e.py",
    "tests/workflow/test_embedding_e2e.py",
    "tests/workflow/test_sweep_e2e.py",
    "tests/workflow/test_train_e2e.py",
)


def pytest_collection_modifyitems(config, items):
    rank = {REPO / name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path, len(rank)))  # stable: within a file, and among the rest, the collected order stays


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
