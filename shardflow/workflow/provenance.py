"""Provenance: what produced a result, so a rerun months later can be compared.

A manifest records the git commit (and whether the tree was dirty), a hash of
the resolved config, package versions, Python, CUDA and GPU model, checksums
of inputs and outputs, and per-job timings from Snakemake's benchmark files.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import time

from shardflow.core.hashing import config_sha256, model_sha256, sha256_file
from shardflow.core.runlog import package_versions


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


def build_manifest(
    repo: str,
    config: dict,
    input_sha256: dict[str, str],
    outputs: list[str],
    timings: dict[str, dict],
    model_paths: dict[str, str],
) -> dict:
    """`input_sha256` and `timings` come from records the stages already wrote (the
    split manifest, the job table); outputs are hashed here. `model_paths`: the models
    the data set's jobs ran, by role (tasks.models); `model` is the first of them (the
    embedding model where the data set is embedded), which reproduce.expect.model_sha256
    is checked against, null where none ran (training, lead summaries)."""
    models = {role: model_sha256(path) for role, path in model_paths.items()}
    return {
        "format": "shardflow.provenance/1",
        "created_unix": time.time(),
        "git": git_state(repo),
        "config_sha256": config_sha256(config),
        "config": config,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "packages": package_versions(),
        "accelerator": accelerator_info(),
        "model": next(iter(models.values()), None),
        "models": models,
        "inputs": dict(input_sha256),
        "outputs": {p: sha256_file(p) for p in outputs},
        "timings": timings,
    }
