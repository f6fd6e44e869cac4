"""Provenance: what produced a result, so a rerun months later can be compared.

A manifest records the git commit (whether the tree was dirty, and a hash of its
uncommitted edits: core.madewith.git_state), a hash of
the resolved config, package versions, Python, CUDA and GPU model, checksums
of inputs and outputs, and per-job timings from Snakemake's benchmark files.

The provenance job runs after the others, and again whenever the config changes (a
report setting included): what it finds then (the checkout, the packages, the model
folder) may no longer be what made the outputs. So each GPU job records what it ran
with when it writes its outputs (`made_with`, core.madewith: in its stats; the train
job in its metrics.json), and the manifest takes the model hash from there, lists what
the jobs ran with (`jobs_made_with`), and warns where that differs from what is there
now.
"""

from __future__ import annotations

import os
import platform
import sys
import time
from pathlib import Path

from shardflow.core.files import read_json
from shardflow.core.hashing import config_sha256, model_sha256, sha256_file

# What a job ran with: in core, where every stage's job can record it (the scripts import
# made_with from here).
from shardflow.core.madewith import git_state, made_with, model_sha256_kept, same_checkout  # noqa: F401
from shardflow.core.runlog import package_versions

# The record's layout: a reader (reproduce.read_provenance) refuses any other.
FORMAT = "shardflow.provenance/1"


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


def made_with_in(paths: list[str]) -> list[dict]:
    """The `made_with` records in JSON files: a single-job stage whose job writes no
    stats for a job table records what it ran with in its stats (embed_queries, in
    queries.stats.json; retrieval_evaluate, in evaluate.stats.json) or in its JSON output (the train job, in train/metrics.json: its
    GPU, torch, CUDA), which provenance hashes, so reads. A file not named `.json` (a
    Parquet output), or JSON that is not an object or holds no such record, gives none;
    JSON that does not parse is an error naming the file and line."""
    found = []
    for path in paths:
        if path.endswith(".json") and os.path.isfile(path):
            record = read_json(path)  # invalid JSON: an error naming the file and line
            if isinstance(record, dict) and isinstance(record.get("made_with"), dict):
                found.append(record["made_with"])
    return found


def build_manifest(
    repo: str,
    config: dict,
    input_sha256: dict[str, str],
    outputs: list[str],
    timings: dict[str, dict],
    model_paths: dict[str, str],
    jobs_made_with: list[dict] | None = None,
    name=None,
    stats: list[str] | None = None,
) -> dict:
    """`input_sha256` and `timings` come from records the stages already wrote (the
    split manifest, the job table); outputs are hashed here (output_sha256). `name`: how
    the record names a file the job got (default: as given; the workflow passes
    shardflow.core.s3.logical_path, so an S3 run names files like a local one). `model_paths`: the models
    the data set's jobs ran, by role (tasks.models); `model` is the first of them (the
    embedding model where the data set is embedded), which reproduce.expect.model_sha256
    is checked against, null where none ran (training, lead summaries).
    `jobs_made_with`: the `made_with` records of the data set's GPU jobs (jobs from before
    they were recorded have none), with those in `stats` (single jobs' stats, not
    hashed: embed_queries', retrieval_evaluate's) and those the outputs hold (the train job's; made_with_in):
    the model hash the jobs ran is taken from there, and none (sha256 null, a note)
    where they ran more than one version of a model (by its hash: model_versions)."""
    models = {role: model_sha256(path) for role, path in model_paths.items()}
    jobs_made_with = [*(jobs_made_with or []), *made_with_in(stats or []), *made_with_in(outputs)]
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
        # By the keys both records hold: a job's from before diff_sha256 was recorded
        # is the same checkout where its commit and dirty flag are.
        if any(not same_checkout(ran, git) for ran in made["git"]):
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
