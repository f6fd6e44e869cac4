"""Provenance: what produced a result, so a rerun months later can be compared.

A manifest records the git commit (and whether the tree was dirty), a hash of
the resolved config, package versions, Python, CUDA and GPU model, checksums
of inputs and outputs, and per-job timings from Snakemake's benchmark files.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

from shardflow.core.runlog import package_versions

CHECKSUM_BLOCK = 1 << 22


def sha256_file(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(CHECKSUM_BLOCK), b""):
            h.update(block)
    return h.hexdigest()


def sha256_folder(folder: str | os.PathLike, suffixes: tuple[str, ...] | None = None) -> str:
    """One hash over the relative names and contents of the files in a folder, sorted."""
    folder = Path(folder)
    h = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        if suffixes and not path.name.endswith(suffixes):
            continue
        h.update(str(path.relative_to(folder)).encode() + b"\0" + sha256_file(path).encode() + b"\n")
    return h.hexdigest()


WEIGHT_SUFFIXES = (".safetensors", ".bin", ".json", ".txt", ".model")


def model_fingerprint(model_path: str) -> dict:
    """Hash of a local model folder's weights, tokenizer and configs (None for hub names)."""
    if not os.path.isdir(model_path):
        return {"path": model_path, "sha256": None, "note": "not a local folder"}
    return {"path": model_path, "sha256": sha256_folder(model_path, WEIGHT_SUFFIXES)}


def config_hash(config: dict) -> str:
    canonical = json.dumps(config, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


def git_state(repo: str | os.PathLike) -> dict:
    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(
                ["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=20, check=True
            )
            return out.stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return None

    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "dirty": None if status is None else bool(status)}


def accelerator_info() -> dict:
    try:
        import torch
    except ImportError:
        return {"torch": None, "cuda": None, "gpus": []}
    info = {"torch": torch.__version__, "cuda": torch.version.cuda, "gpus": []}
    if torch.cuda.is_available():
        info["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        info["cudnn"] = torch.backends.cudnn.version()
    return info


def read_benchmarks(paths: list[str]) -> dict:
    from shardflow.embed.report import read_benchmark

    return {p: {k: read_benchmark(p).get(k) for k in ("s", "max_rss", "cpu_time")} for p in paths}


def build_manifest(
    repo: str,
    config: dict,
    inputs: list[str],
    outputs: list[str],
    benchmarks: list[str],
    model_path: str | None,
) -> dict:
    return {
        "format": "shardflow.workflow.provenance/1",
        "created_unix": time.time(),
        "git": git_state(repo),
        "config_sha256": config_hash(config),
        "config": config,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "packages": package_versions(),
        "accelerator": accelerator_info(),
        "model": model_fingerprint(model_path) if model_path else None,
        "inputs": {p: sha256_file(p) for p in inputs},
        "outputs": {p: sha256_file(p) for p in outputs},
        "timings": read_benchmarks(benchmarks),
    }
