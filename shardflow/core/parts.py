"""Resume state for one chunk: finished windows as part files in an undeclared side folder.

Layout of a resume folder (`<resume_root>/<resume_key>`):

    manifest.json        what the parts belong to (text count, window, fingerprints)
    part-000000.npy      embeddings of texts [0, window), input order
    part-000001.npy      ...

Every file is written atomically, so a part that exists is complete. The folder
name is a hash of everything that decides the output bytes, so a changed chunk,
model or parameter never picks up stale parts; the manifest double-checks this
for callers that pass their own folder to `Encoder.encode`.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from shardflow.core.atomic import atomic_open, write_json

FORMAT_VERSION = 1
# Files above this size (weights) enter the model fingerprint by name and size only.
_HASH_CONTENT_BELOW = 4 << 20


def sha256_file(path: str | os.PathLike, block: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(block):
            h.update(chunk)
    return h.hexdigest()


def texts_fingerprint(texts: list[str]) -> str:
    """sha256 over the texts, length-prefixed so ["ab", "c"] != ["a", "bc"]."""
    h = hashlib.sha256()
    for text in texts:
        data = text.encode("utf-8", "surrogatepass")
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


def model_fingerprint(folder: Path) -> list[list[Any]]:
    """Cheap identity of a model folder: small files by content, large ones by name and size."""
    entries: list[list[Any]] = []
    for path in sorted(p for p in Path(folder).rglob("*") if p.is_file()):
        rel = path.relative_to(folder).as_posix()
        if rel.startswith(".") or "/." in rel or rel.endswith(".md"):
            continue  # .git, .cache, READMEs: no effect on the output
        size = path.stat().st_size
        digest = sha256_file(path) if size < _HASH_CONTENT_BELOW else None
        entries.append([rel, size, digest])
    return entries


def digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def part_path(folder: Path, index: int) -> Path:
    return folder / f"part-{index:06d}.npy"


def open_resume_dir(folder: Path, manifest: dict[str, Any]) -> None:
    """Create `folder` with `manifest`, or check that an existing one belongs to the same job."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "manifest.json"
    if path.is_file():
        with open(path, encoding="utf-8") as fh:
            found = json.load(fh)
        if found != json.loads(json.dumps(manifest, sort_keys=True, default=str)):
            diff = sorted(k for k in set(found) | set(manifest) if found.get(k) != manifest.get(k))
            raise ValueError(
                f"resume folder {folder} belongs to another job (differs in {diff}); "
                "remove it or pass a different folder"
            )
        return
    write_json(path, manifest)


def load_part(folder: Path, index: int, rows: int, dim: int, dtype: np.dtype) -> np.ndarray | None:
    """A finished part, or None if absent or not the expected shape/dtype."""
    path = part_path(folder, index)
    if not path.is_file():
        return None
    arr = np.load(path, allow_pickle=False)
    if arr.shape != (rows, dim) or arr.dtype != dtype:
        return None
    return arr


def save_part(folder: Path, index: int, arr: np.ndarray) -> None:
    with atomic_open(part_path(folder, index), "wb") as fh:
        np.save(fh, arr, allow_pickle=False)
