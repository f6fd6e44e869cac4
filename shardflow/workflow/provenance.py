"""Provenance: what produced a result, so a rerun months later can be compared.

A manifest records the git commit (and whether the tree was dirty), a hash of
the resolved config, package versions, Python, CUDA and GPU model, checksums
of inputs and outputs, and per-job timings from Snakemake's benchmark files.

The provenance job runs after the others, and again whenever the config changes (a
report setting included): what it finds then (the checkout, the packages, the model
folder) may no longer be what made the outputs. So each GPU job records what it ran
with when it writes its outputs (`made_with`, in its stats), and the manifest takes
the model hash from there, lists what the jobs ran with (`jobs_made_with`), and warns
where that differs from what is there now.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import time
from pathlib import Path

from shardflow.core.hashing import config_sha256, model_files_state, model_sha256, sha256_file
from shardflow.core.models import hub_snapshot
from shardflow.core.parsecache import cached
from shardflow.core.runlog import package_versions

# This checkout (the package is installed from it in editable mode).
REPO = Path(__file__).resolve().parents[2]
# The record's layout: a reader (reproduce.read_provenance) refuses any other.
FORMAT = "shardflow.provenance/1"


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
        return cached("model-sha256", [], lambda: [str(folder), model_files_state(folder)],
                      lambda: model_sha256(model_path))
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
    of its model (`role`: as tasks.models names it, e.g. embedding, summarise), the device
    it ran on (and on a GPU its name, and the CUDA and cuDNN versions torch runs, which
    pick the kernels) and threads. Recorded here, by the job: the provenance job runs on
    the CPU, on a cluster where no GPU is, so its own `accelerator` says nothing of them."""
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


def summarise_made_with(records: list[dict]) -> dict:
    """The distinct values the jobs recorded (one each where they agree)."""
    def distinct(get, among=records) -> list:
        out = []
        for r in among:
            value = get(r)
            if value not in out:
                out.append(value)
        return out

    models: dict[str, list] = {}
    for r in records:
        if r["model"] is not None and r["model"] not in models.setdefault(r["role"], []):
            models[r["role"]].append(r["model"])
    return {
        "jobs": len(records),
        "git": distinct(lambda r: r["git"]),
        "packages": distinct(lambda r: r["packages"]),
        "models": models,  # by role: one each where the jobs agree
        "devices": distinct(lambda r: [r["device"], r["gpu"]]),
        # [CUDA, cuDNN] of the GPU jobs; [null, null] for one from before jobs recorded them
        "cuda": distinct(lambda r: [r.get("cuda"), r.get("cudnn")], [r for r in records if r["device"].startswith("cuda")]),
        "threads": distinct(lambda r: r["threads"]),
    }


def model_versions(records: list[dict]) -> list[dict]:
    """The distinct versions among the distinct model records of one role's jobs (as
    summarise_made_with lists them): one a hash, the first record of it kept. The same
    bytes loaded from two folders are one version: `default` resolves into each
    environment's own copy, `~/models/x` into each user's home, a relative path into the
    checkout's folder. A record without a hash (a hub name not in the cache) is a version
    of its own: nothing says it is another's."""
    versions, hashes = [], set()
    for record in records:
        sha = record.get("sha256")
        if sha is None or sha not in hashes:
            versions.append(record)
            hashes.add(sha)
    return versions


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


def output_sha256(paths: list[str]) -> dict[str, str]:
    """sha256 of each output file; a folder output (the shard folder) by each file in it,
    by relative path (not Snakemake's `.snakemake_timestamp` marker)."""
    hashes = {}
    for path in paths:
        if os.path.isdir(path):
            for file in sorted(p for p in Path(path).rglob("*") if p.is_file()):
                if file.name != ".snakemake_timestamp":
                    hashes[f"{path}/{file.relative_to(path).as_posix()}"] = sha256_file(file)
        else:
            hashes[path] = sha256_file(path)
    return hashes


def build_manifest(
    repo: str,
    config: dict,
    input_sha256: dict[str, str],
    outputs: list[str],
    timings: dict[str, dict],
    model_paths: dict[str, str],
    jobs_made_with: list[dict] | None = None,
    name=None,
) -> dict:
    """`input_sha256` and `timings` come from records the stages already wrote (the
    split manifest, the job table); outputs are hashed here (output_sha256). `name`: how
    the record names a file the job got (default: as given; the workflow passes
    shardflow.core.s3.logical_path, so an S3 run names files like a local one). `model_paths`: the models
    the data set's jobs ran, by role (tasks.models); `model` is the first of them (the
    embedding model where the data set is embedded), which reproduce.expect.model_sha256
    is checked against, null where none ran (training, lead summaries).
    `jobs_made_with`: the `made_with` records of the data set's GPU jobs (jobs from before
    they were recorded have none): the model hash the jobs ran is taken from there, and
    none (sha256 null, a note) where they ran more than one version of a model (by its
    hash: model_versions)."""
    models = {role: model_sha256(path) for role, path in model_paths.items()}
    name = name or str

    def named(mapping: dict) -> dict:
        return {name(path): value for path, value in mapping.items()}

    git = git_state(repo)
    warnings = []
    made = summarise_made_with(jobs_made_with) if jobs_made_with else None
    if made is not None:
        for role, recorded in made["models"].items():
            ran = model_versions(recorded)
            if len(ran) > 1:
                warnings.append(f"the {role} jobs ran with {len(ran)} different model versions: {ran}")
                if role in models:
                    # No one model made these outputs: the record names none, so a pinned
                    # reproduce.expect.model_sha256 fails instead of matching whichever
                    # version the folder holds now.
                    models[role] = {"path": models[role]["path"], "sha256": None,
                                    "note": f"the jobs ran with {len(ran)} different versions (jobs_made_with.models)"}
            elif role in models:
                # The jobs' model made the outputs, wherever the config's name points now
                # (another environment's bundled model, a folder renamed since).
                now = models[role]
                if ran[0].get("sha256") != now.get("sha256"):
                    moved = "" if ran[0].get("path") == now.get("path") else f" (the config names {now['path']} now)"
                    warnings.append(f"the {role} model at {ran[0]['path']} changed since its jobs ran{moved}: they used "
                                    f"sha256 {ran[0]['sha256']}, it is now {now['sha256']} (the jobs' is recorded)")
                models[role] = ran[0]
        if len(made["git"]) > 1 or made["git"][0] != git:
            warnings.append(f"the jobs ran at git {made['git']}, this record is written at {git}")
    return {
        "format": FORMAT,
        "created_unix": time.time(),
        "git": git,
        "jobs_made_with": made,
        "warnings": warnings,
        "config_sha256": config_sha256(config),
        "config": config,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "packages": package_versions(),
        "accelerator": accelerator_info(),
        "model": next(iter(models.values()), None),
        "models": models,
        "inputs": named(input_sha256),
        "outputs": named(output_sha256(outputs)),
        "timings": named(timings),
    }
