"""What a job ran with, recorded by the job as it writes its outputs (`made_with`).

The provenance job (shardflow.workflow.provenance) runs after the others, on the CPU and,
under --use-conda, in another environment: what it finds then (the checkout, the
packages, the model folder, no GPU) need not be what made the outputs. So each job
records its own: the checkout (its commit, and whether it has edits not committed), the
packages, its model's hash, the device (on a GPU its name, and the CUDA and cuDNN that
pick the kernels) and threads. It lives in core so that every stage can record it: the
train job (shardflow.train) may not import the workflow layer.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from shardflow.core.hashing import model_files_state, model_sha256
from shardflow.core.models import hub_snapshot
from shardflow.core.parsecache import cached
from shardflow.core.runlog import package_versions

# This checkout (the package is installed from it in editable mode).
REPO = Path(__file__).resolve().parents[2]


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


def model_sha256_kept(model_path: str) -> dict:
    """model_sha256, computed once per version of the model's files: every job records
    it, and hashing a large model in each would cost seconds to minutes. A version is
    each file's path, size, mtime, change time and inode (hashing.model_files_state):
    path, size and mtime alone were kept by a same-architecture model copied over this
    one with its times (`cp -a`, `rsync -a`), which got the former model's hash, in the
    jobs' made_with and in plan.changed_model. A chmod or a remount of a filesystem that
    numbers inodes per mount hashes the model again, for the same hash. A hub name's
    hash is kept likewise, per snapshot its ref names and version of that snapshot's
    files (before, each job hashed the snapshot again). The version is read again after
    the hash, and the hash kept only where it is the same (core.parsecache.cached): a
    model swapped while it was hashed (a link to the folder repointed and put back, a
    ref moved) was kept against the files read before, and given for them since."""
    folder = Path(model_path)
    if folder.is_dir():
        return cached(
            "model-sha256", [], lambda: [str(folder), model_files_state(folder)], lambda: model_sha256(model_path)
        )
    try:  # a hub name: kept per snapshot (the one its ref names now) and version of its files
        hub_snapshot(model_path)
    except FileNotFoundError:
        return model_sha256(model_path)  # not in the cache: no hash to keep

    def version() -> list:
        snapshot = hub_snapshot(model_path)
        return [model_path, str(snapshot), model_files_state(snapshot)]

    return cached("model-sha256", [], version, lambda: model_sha256(model_path))


def made_with(role: str, model_path: str | None, device: str, threads: int | None) -> dict:
    """What a job ran with, as it writes its outputs: the checkout, the packages, the hash
    of its model (`role`: as tasks.models names it, e.g. embedding, summarise; `train`
    for the train job, whose model is its output), the device it ran on (and on a GPU its
    name, and the CUDA and cuDNN versions torch runs, which pick the kernels) and threads.
    Recorded here, by the job: the provenance job runs on the CPU, on a cluster where no
    GPU is, so its own `accelerator` says nothing of them."""
    gpu = cuda = cudnn = None
    if device.startswith("cuda"):
        import torch

        gpu = torch.cuda.get_device_name(torch.device(device) if ":" in device else torch.cuda.current_device())
        cuda, cudnn = torch.version.cuda, torch.backends.cudnn.version()
    return {
        "git": git_state(REPO),
        "packages": package_versions(),
        "role": role,
        "model": model_sha256_kept(model_path) if model_path else None,
        "device": device,
        "gpu": gpu,
        "cuda": cuda,
        "cudnn": cudnn,
        "threads": threads,
    }
