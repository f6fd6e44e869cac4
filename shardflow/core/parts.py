"""Resumable parts: a long job's finished pieces, kept in an undeclared side folder.

Snakemake deletes the declared outputs of a failed job, so a job that wants to
resume after SIGKILL keeps its progress elsewhere: a folder named by a hash of
everything that decides the output (see `resume_key`), holding

    manifest.json        what the parts belong to (sizes, fingerprints)
    part-000000.npy      an array part (embeddings of texts [0, window), ...)
    part-000001.jsonl    or a records part (one JSON object a line: summaries, ...)

Every file is written atomically, so a part that exists is complete. The manifest
double-checks the folder belongs to this job, for callers that pass their own
folder. The job removes the folder once its final outputs are written.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from shardflow.core.atomic import atomic_open, write_json
from shardflow.core.hashing import digest, sha256_file

# Bumped when the part layout changes: old folders then never match a new key.
FORMAT_VERSION = 1


def resume_key(input_path: str | Path, identity: dict[str, Any]) -> str:
    """Folder name for one input's resume state: hash of its bytes + the output identity."""
    return digest({"chunk": sha256_file(input_path), "identity": identity})[:24]


class PartStore:
    """The parts of one job. `open()` creates the folder or checks it is this job's."""

    def __init__(self, folder: str | Path, manifest: dict[str, Any]):
        self.folder = Path(folder)
        self.manifest = manifest

    def open(self) -> "PartStore":
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / "manifest.json"
        if path.is_file():
            with open(path, encoding="utf-8") as fh:
                found = json.load(fh)
            expected = json.loads(json.dumps(self.manifest, sort_keys=True, default=str))
            if found != expected:
                diff = sorted(k for k in set(found) | set(expected) if found.get(k) != expected.get(k))
                raise ValueError(
                    f"resume folder {self.folder} belongs to another job (differs in {diff}); "
                    "remove it or pass a different folder"
                )
        else:
            write_json(path, self.manifest)
        return self

    def path(self, index: int, suffix: str) -> Path:
        return self.folder / f"part-{index:06d}{suffix}"

    def load_array(self, index: int, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray | None:
        """A finished array part, or None if absent or not the expected shape/dtype."""
        path = self.path(index, ".npy")
        if not path.is_file():
            return None
        arr = np.load(path, allow_pickle=False)
        if arr.shape != tuple(shape) or arr.dtype != dtype:
            return None
        return arr

    def save_array(self, index: int, arr: np.ndarray) -> None:
        with atomic_open(self.path(index, ".npy"), "wb") as fh:
            np.save(fh, arr, allow_pickle=False)

    def load_records(self, index: int, count: int) -> list[dict] | None:
        """A finished records part, or None if absent or not `count` records."""
        path = self.path(index, ".jsonl")
        if not path.is_file():
            return None
        with open(path, encoding="utf-8") as fh:
            records = [json.loads(line) for line in fh]
        return records if len(records) == count else None

    def save_records(self, index: int, records: list[dict]) -> None:
        with atomic_open(self.path(index, ".jsonl"), "w", encoding="utf-8") as fh:
            for rec in records:
                fh.write(json.dumps(rec, ensure_ascii=False, sort_keys=True) + "\n")

    def remove(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)
