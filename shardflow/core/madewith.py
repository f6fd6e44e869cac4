"""What a job ran with, recorded by the job as it writes its outputs (`made_with`).

The provenance job (shardflow.workflow.provenance) runs after the others, on the CPU and,
under --use-conda, in another environment: what it finds then (the checkout, the
packages, the model folder, no GPU) need not be what made the outputs. So each job
records its own: the checkout (its commit, and a hash of the edits not committed), the
packages, its model's hash, the device (on a GPU its name, and the CUDA and cuDNN that
pick the kernels) and threads. It lives in core so that every stage can record it: the
train job (shardflow.train) may not import the workflow layer.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

from shardflow.core.hashing import model_files_state, model_sha256, sha256_file
from shardflow.core.models import hub_snapshot
from shardflow.core.parsecache import cached
from shardflow.core.runlog import package_versions

# This checkout (the package is installed from it in editable mode).
REPO = Path(__file__).resolve().parents[2]


# git_state hashes the files that differ from the commit, each by its content; every job
# records it, so the bytes read are bounded. A file above DIFF_FILE_BYTES, or one that
# would take the total past DIFF_TOTAL_BYTES (in path order), enters the hash by its size
# alone and is named in `diff_unhashed`: a data file left untracked in the checkout is
# not read whole by every chunk job. Source edits are far smaller.
DIFF_FILE_BYTES = 4 << 20
DIFF_TOTAL_BYTES = 64 << 20
# How many of the files entered by size `diff_unhashed` names (then a count of the rest).
DIFF_UNHASHED_NAMED = 10
# The files whose edits `dirty` and the hash follow: code a job runs (anything under the
# folders of code; at the top, the Snakefile and Python or rule files beside it). A config
# file, a corpus, notes, tests or benchmarks kept in the checkout are not: the config a job
# ran with is its params, recorded apart, and a config edited between two runs, or a corpus
# part added, made every earlier job "ran at another checkout".
CODE_FOLDERS = ("shardflow/", "scripts/", "rules/")
CODE_AT_TOP = ("Snakefile",)
CODE_SUFFIXES_AT_TOP = (".py", ".smk")


def is_code(path: str) -> bool:
    """Whether a path from the checkout's top is code whose edits git_state follows."""
    return path.startswith(CODE_FOLDERS) or (
        "/" not in path and (path in CODE_AT_TOP or path.endswith(CODE_SUFFIXES_AT_TOP))
    )


def git_state(repo: str | os.PathLike) -> dict:
    """The checkout at `repo`: `commit` (HEAD), `dirty` (a tracked file of code, `is_code`,
    differs from it) and, so that two runs from different uncommitted edits are told apart and a rerun can
    check it has the same ones, `diff_sha256`: one hash over every file of code (`is_code`)
    in the working tree that differs from HEAD, tracked (changed, added or deleted) or
    untracked and not ignored, each by its path from the checkout's top and its content (a
    link by its target, a deleted file as deleted), in path order; null where none
    differs, or git cannot say. Deterministic: the files' content, not their times, the index (what is
    staged) or git's diff settings. `diff_files` counts those files; `diff_unhashed` names
    those entered by size alone (DIFF_FILE_BYTES, DIFF_TOTAL_BYTES). An untracked file
    leaves `dirty` as it was (false), as before, but enters the hash: code the edits
    import may sit in one."""

    def git(*args: str, cwd: str | os.PathLike = repo, strip: bool = True) -> str | None:
        try:
            # Undecodable bytes of a file name kept as surrogates: os functions read them back.
            out = subprocess.run(
                ["git", "-C", str(cwd), *args],
                capture_output=True,
                encoding="utf-8",
                errors="surrogateescape",
                timeout=20,
                check=True,
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return out.stdout.strip() if strip else out.stdout

    commit = git("rev-parse", "HEAD")
    return {"commit": commit, **_working_tree_diff(git, commit)}


def _working_tree_diff(git, commit: str | None) -> dict:
    unknown = {"dirty": None, "diff_sha256": None, "diff_files": None, "diff_unhashed": []}
    top = git("rev-parse", "--show-toplevel") if commit else None
    if not top:
        return unknown
    # From the top, so both list paths from it; -z: names as they are, unquoted.
    tracked = git("diff", "--name-only", "-z", "--no-renames", "HEAD", cwd=top, strip=False)
    untracked = git("ls-files", "-z", "--others", "--exclude-standard", cwd=top, strip=False)
    if tracked is None or untracked is None:
        return unknown
    changed = [path for path in tracked.split("\0") if path and is_code(path)]
    # One set: whether an added file was staged (`git add`) changes no byte that ran.
    files = sorted({*changed, *(path for path in untracked.split("\0") if path and is_code(path))})
    h, total, unhashed = hashlib.sha256(), 0, []
    for path in files:
        full = os.path.join(top, path)
        if os.path.islink(full):
            content = f"link {os.readlink(full)}"
        elif not os.path.lexists(full):
            content = "deleted"
        elif os.path.isdir(full):  # a submodule whose commit moved: its own checkout
            content = "folder"
            unhashed.append(f"{path} (a folder)")
        else:
            size = os.path.getsize(full)
            if size > DIFF_FILE_BYTES or total + size > DIFF_TOTAL_BYTES:
                content = f"size {size}"
                unhashed.append(f"{path} ({size} bytes)")
            else:
                try:
                    content, total = f"sha256 {sha256_file(full)}", total + size
                except OSError as exc:
                    content = f"unreadable {exc.strerror}"
                    unhashed.append(f"{path} (unreadable: {exc.strerror})")
        h.update(f"{path}\0{content}\n".encode("utf-8", "surrogateescape"))
    if len(unhashed) > DIFF_UNHASHED_NAMED:
        unhashed = [*unhashed[:DIFF_UNHASHED_NAMED], f"and {len(unhashed) - DIFF_UNHASHED_NAMED} more"]
    return {
        "dirty": bool(changed),
        "diff_sha256": h.hexdigest() if files else None,
        "diff_files": len(files),
        "diff_unhashed": unhashed,
    }


def same_checkout(a: dict, b: dict) -> bool:
    """Whether two git_state records name the same checkout, by the keys both hold: a
    record from before `diff_sha256` was recorded is compared by commit and dirty flag."""
    return all(a[key] == b[key] for key in a.keys() & b.keys())


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
