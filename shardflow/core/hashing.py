"""Content hashes: files, folders, text lists, model folders, JSON-able objects.

Two identities of a model folder serve two purposes:
- `model_identity`: cheap (small files by content, large ones by name, size and
  modification time), for resume keys that are computed at the start of every job;
- `model_sha256`: every weight, tokenizer and config byte, for provenance and
  reproduction checks that must notice a changed weight file.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

BLOCK = 1 << 22
# model_identity: files above this size (weights) enter by name, size and mtime only.
HASH_CONTENT_BELOW = 4 << 20
# model_sha256: the files that decide a model's output (.jinja: the chat template
# transformers 5 saves beside the tokenizer, which a generator's prompts go through).
MODEL_SUFFIXES = (".safetensors", ".bin", ".json", ".txt", ".model", ".jinja")


def sha256_file(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(BLOCK):
            h.update(block)
    return h.hexdigest()


def file_version(path: str | os.PathLike) -> list[Any]:
    """[path, size, mtime_ns]: a file's version as the cheap checks see it (the parse
    cache's keys, a failure record's inputs); a rewrite changes it without reading a
    byte. OSError where the file cannot be stat'ed."""
    st = os.stat(path)
    return [str(path), st.st_size, st.st_mtime_ns]


def file_state(path: str | os.PathLike) -> list[Any]:
    """[path, size, mtime_ns, ctime_ns, inode]: file_version, plus what a replacement
    that keeps size and mtime (`cp -a` or `rsync -a` of a file of the same size, a
    folder put in place with `mv`) cannot keep. The kernel sets a file's change time to
    its clock at every write, utime, chmod or rename of it, and no call sets it back; a
    file moved or renamed into place is another inode than the one it replaces. Some
    network and FUSE filesystems number inodes anew per mount: there a check keyed by
    this repeats its work after a remount, and misses no change. OSError where the file
    cannot be stat'ed."""
    st = os.stat(path)
    return [str(path), st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


def model_files_state(folder: str | os.PathLike) -> list[list[Any]]:
    """file_state of each file model_sha256 hashes in a local model folder, by path: the
    version of the model a hash or a verdict about it is kept for."""
    files = sorted(str(p) for p in Path(folder).rglob("*") if p.is_file() and p.name.endswith(MODEL_SUFFIXES))
    return [file_state(p) for p in files]


def sha256_folder(folder: str | os.PathLike, suffixes: tuple[str, ...] | None = None) -> str:
    """One hash over the relative names and contents of the files in a folder, sorted."""
    folder = Path(folder)
    h = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        if suffixes and not path.name.endswith(suffixes):
            continue
        h.update(str(path.relative_to(folder)).encode() + b"\0" + sha256_file(path).encode() + b"\n")
    return h.hexdigest()


def digest(obj: Any, compact: bool = False) -> str:
    """sha256 of an object's canonical JSON: sorted keys, values JSON cannot hold as
    their str(); `compact` without spaces after ',' and ':'. Both spellings are kept:
    each is recorded somewhere (resume keys and ids hash the spaced one, provenance's
    config_sha256 the compact one), and a changed hash would rerun finished work."""
    separators = (",", ":") if compact else (", ", ": ")
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=separators, default=str).encode()).hexdigest()


def config_sha256(config: dict) -> str:
    """The hash provenance records for a run's whole config."""
    return digest(config, compact=True)


def texts_fingerprint(texts: list[str]) -> str:
    """sha256 over the texts, length-prefixed so ["ab", "c"] != ["a", "bc"]."""
    h = hashlib.sha256()
    for text in texts:
        data = text.encode("utf-8", "surrogatepass")
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


def model_identity(folder: str | os.PathLike) -> list[list[Any]]:
    """Cheap identity of a model folder: small files by content, large ones (weights) by
    name, size and modification time. Weights re-saved in place (a fine-tune of the same
    shape: same names, same sizes) get a new identity, so a killed job's parts made with
    the old ones are not resumed; a copied folder (new mtimes) only loses those parts."""
    folder = Path(folder)
    entries: list[list[Any]] = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        rel = path.relative_to(folder).as_posix()
        if rel.startswith(".") or "/." in rel or rel.endswith(".md"):
            continue  # .git, .cache, READMEs: no effect on the output
        st = path.stat()
        if st.st_size < HASH_CONTENT_BELOW:
            entries.append([rel, st.st_size, sha256_file(path)])
        else:
            entries.append([rel, st.st_size, None, st.st_mtime_ns])
    return entries


def model_sha256(model_path: str) -> dict:
    """Hash of a local model folder's weights, tokenizer and configs. A hub name is looked
    up in the local Hugging Face cache (never downloaded): its snapshot is hashed and its
    revision recorded; a name not in the cache gets no hash."""
    if os.path.isdir(model_path):
        return {"path": model_path, "sha256": sha256_folder(model_path, MODEL_SUFFIXES)}
    from shardflow.core.models import hub_snapshot

    try:
        snapshot = hub_snapshot(model_path)
    except FileNotFoundError:  # not a repo id, not cached: no snapshot
        return {"path": model_path, "sha256": None, "note": "not a local folder, nor in the Hugging Face cache"}
    return {"path": model_path, "sha256": sha256_folder(snapshot, MODEL_SUFFIXES), "revision": Path(snapshot).name}
