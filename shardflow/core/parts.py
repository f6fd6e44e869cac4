"""Resumable parts: a long job's finished pieces, kept in an undeclared side folder.

Snakemake deletes the declared outputs of a failed job, so a job that wants to
resume after SIGKILL keeps its progress elsewhere: a folder named by a hash of
everything that decides the output and of the input's path (see `resume_key`), holding

    manifest.json        what the parts belong to (sizes, fingerprints)
    part-000000.npy      an array part (embeddings of texts [0, window), ...)
    part-000001.jsonl    or a records part (one JSON object a line: summaries, ...)
    attempt-<host>-<pid>-<start ns>.json
                         one per attempt of the job (its start, the time of its last
                         saved part, the parts it saved and their records, its device,
                         and the job it works for, where given: its output's logical
                         path, and since 2026-11-29 the run that keeps it and a digest
                         of its settings, `JobIdentity`): written when it opens the
                         folder, again after each part it saves

Every file is written atomically, so a part that exists is complete. The manifest
double-checks the folder belongs to this job, for callers that pass their own
folder (the manifest alone: attempt records never make a folder look like another
job's). The job removes the folder once its final outputs are written, and with it
the folders above that this leaves empty, up to the top of the resume tree
(`remove_folder`): `results/<dataset>/.resume` goes with the data set's last job. Other
jobs of the data set may be creating their folders in it at that moment: they make
them with `make_folder`, which makes a parent removed under it again; an attempt whose
own folder another attempt at the job removed (a zombie beside its retry) makes it again
and goes on (`PartStore._write`). A path the job cannot remove is a warning in its log
naming the path and the error, as one the bucket will not delete is
(`ObjectFolder.remove`); the job goes on, its outputs written. A path already gone is no failure: another job removed it.

A job killed mid-way (a preempted spot pod, a SLURM timeout) leaves its attempt record
behind; the attempt that finishes reads the earlier ones (`attempt_totals`) into its
stats, so that the cost counts the device time the killed attempts spent. A killed
attempt retried on another node type (the folder's name hashes the hardware) left them
in a folder of its own: the finished job counts those too, found by their records
naming its output, its run and its settings, and removes their folders with its own
(`remove_job_parts`; another run's or another setting's folders are left). That time
is a lower bound: a record starts when its attempt opens the folder (model loading
before it is not known) and ends at its last saved part (work lost after it is not
known either). Folders from before attempt records hold none: nothing is counted.
The records name their job (`job`) and count the records of the parts they saved
(`items_saved`), so that `make status` (shardflow.workflow.status) tells which chunk a
folder belongs to, and how far it got, from these small files alone: a folder's name
is a hash of the chunk's bytes, its path and the model, which status cannot recompute
cheaply.

The folder is a local path, or an s3:// URL when no shared volume outlives the job
(EKS pods without one: the parts then live under the run's storage prefix and a
rerun pod finds them there; `shardflow.core.s3.ObjectFolder`).
"""

from __future__ import annotations

import errno
import glob
import io
import json
import logging
import os
import re
import shutil
import socket
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from shardflow.core.atomic import atomic_write_bytes
from shardflow.core.hashing import digest, sha256_file
from shardflow.core.s3 import logical_path, stored_place

log = logging.getLogger(__name__)

ATTEMPT_PREFIX = "attempt-"
MANIFEST = "manifest.json"
# Bumped when the part layout changes: old folders then never match a new key.
FORMAT_VERSION = 1


def resume_key(input_path: str | Path, identity: dict[str, Any]) -> str:
    """Folder name for one input's resume state: a hash of its bytes, its path and the
    output identity. The path keeps apart jobs whose inputs hold the same bytes under one
    resume root (the empty chunks of n_chunks over the records): sharing a folder, the
    first to finish removed it under the other (its saved parts; a write of it in flight
    then fails), and the other counted the first's attempt as its own. It is the path as
    the workflow names it (core.s3.logical_path), so that a retry, and an S3 run's job
    reading its local copy, find the folder a local run's job would."""
    return digest({"chunk": sha256_file(input_path), "path": logical_path(input_path), "identity": identity})[:24]


def resume_folder(root: str | Path, key: str) -> str:
    """`root`/`key`, for a local root or an s3:// one."""
    root = str(root)
    if root.startswith("s3://"):
        return root.rstrip("/") + "/" + key
    return os.path.join(root, key)


# How often make_folder tries: each further try needs another job to have emptied and
# removed a parent in the instant between two of its mkdirs.
MKDIR_ATTEMPTS = 20


def make_folder(folder: str | Path) -> None:
    """`mkdir -p folder`, made again where another job removed an empty parent of it
    meanwhile (`remove_folder`: mkdir of the parent, the other job's rmdir of it, then
    mkdir of the child fails with FileNotFoundError)."""
    for attempt in range(1, MKDIR_ATTEMPTS + 1):
        try:
            Path(folder).mkdir(parents=True, exist_ok=True)
            return
        except FileNotFoundError:
            if attempt == MKDIR_ATTEMPTS:
                raise


def resume_tree_top(root: str | Path) -> Path:
    """The highest folder of the resume tree that `root` (a job's resume root) is in:
    the `.resume` folder it lies in (results/<dataset>/.resume,
    results/sweeps/.resume/<sweep>/<point>/seed=N), else `root` itself (a data set's
    or a sweep job's folder in gpu_jobs.resume_dir: the folders above are the user's)."""
    root = Path(os.path.abspath(root))
    return next((p for p in (root, *root.parents) if p.name == ".resume"), root)


# What rmdir says of a folder that is not empty (POSIX allows either).
_NOT_EMPTY = frozenset({errno.ENOTEMPTY, errno.EEXIST})


def _rmtree(folder: Path) -> list[tuple[str, OSError]]:
    """`shutil.rmtree(folder)`, every path in it tried; return those it could not remove,
    each with its error. A path already gone is none (another job removed it), and a
    folder left not empty by a path below it that failed is not named again."""
    failed: list[tuple[str, OSError]] = []

    def onexc(function, path, exc: OSError) -> None:
        if isinstance(exc, FileNotFoundError):
            return
        if exc.errno in _NOT_EMPTY and any(Path(path) in Path(below).parents for below, _ in failed):
            return
        failed.append((str(path), exc))

    if sys.version_info >= (3, 12):
        shutil.rmtree(folder, onexc=onexc)
    else:  # onerror passes sys.exc_info() (deprecated from 3.12, for onexc)
        shutil.rmtree(folder, onerror=lambda function, path, info: onexc(function, path, info[1]))
    return failed


def _error(exc: OSError) -> str:
    """`EACCES: Permission denied`: the code, as a bucket's refusal names its own."""
    if exc.errno is None or not exc.strerror:
        return str(exc)
    return f"{errno.errorcode.get(exc.errno, exc.errno)}: {exc.strerror}"


def remove_folder(folder: str | Path, top: str | Path | None = None) -> str | None:
    """Remove `folder` and what it holds; then each folder above it that is left empty,
    up to and including `top` (None: none; see `resume_tree_top`). Removal stops at
    the first folder not empty: another job's parts are in it, or are about to be
    (`make_folder` makes it again if it goes between that job's mkdirs).

    Return None, or (and log as a warning) a line naming each path that could not be
    removed with its error, once every path was tried. It does not fail the job: its
    outputs are written by then, and parts left behind only cost disk (a folder is
    named by everything that decides its parts, so no other job reads them as its own)."""
    folder = Path(os.path.abspath(folder))
    failed = _rmtree(folder)
    if top is not None and not failed:  # a folder that failed is still there: none above is empty
        top = Path(os.path.abspath(top))
        for parent in folder.parents:
            if parent != top and top not in parent.parents:
                break  # above the resume tree
            try:
                os.rmdir(parent)
            except FileNotFoundError:  # another job removed it, and goes on above
                break
            except OSError as exc:
                if exc.errno not in _NOT_EMPTY:  # not empty: another job's parts are in it
                    failed.append((str(parent), exc))
                break
    if not failed:
        return None
    named = ", ".join(f"{path} ({_error(exc)})" for path, exc in failed)
    line = f"removing {folder} left on disk: {named}"  # the folder itself, or an emptied one above it
    log.warning(line)
    return line


class _LocalFolder:
    def __init__(self, folder: str | Path):
        self.folder = Path(folder)

    def __str__(self) -> str:
        return str(self.folder)

    def read(self, name: str) -> bytes | None:
        try:
            return (self.folder / name).read_bytes()
        except FileNotFoundError:
            return None

    def write(self, name: str, data: bytes) -> None:
        make_folder(self.folder)
        atomic_write_bytes(self.folder / name, data)

    def names(self, prefix: str) -> list[str]:
        """The names of the folder's files that start with `prefix` (no temporaries)."""
        return sorted(p.name for p in self.folder.glob(glob.escape(prefix) + "*") if ".tmp-" not in p.name)

    def folders(self) -> list[str]:
        """The names of the folders directly below this one (none where it is not there)."""
        try:
            return sorted(e.name for e in os.scandir(self.folder) if e.is_dir())
        except FileNotFoundError:
            return []

    def remove(self, root: str | Path | None = None) -> str | None:
        return remove_folder(self.folder, None if root is None else resume_tree_top(root))


def _backend(folder: str | Path):
    if str(folder).startswith("s3://"):
        from shardflow.core.s3 import ObjectFolder

        return ObjectFolder(str(folder))
    return _LocalFolder(folder)


def attempt_name(host: str, pid: int, start_ns: int) -> str:
    """The record file of one attempt: unique per host, process and start."""
    return f"{ATTEMPT_PREFIX}{re.sub(r'[^A-Za-z0-9._-]', '_', host)}-{pid}-{start_ns}.json"


def attempt_totals(records: list[dict]) -> dict[str, Any]:
    """What a job's stats say of its earlier attempts' records: how many
    (`earlier_attempts`), the seconds each spent from opening the folder to its last
    saved part, summed (`earlier_attempt_seconds`: a lower bound, see the module
    docstring; 0 for one that saved none) and by device (`earlier_attempt_devices`)."""
    devices: dict[str, float] = {}
    for rec in records:
        seconds = max(0.0, (rec.get("last_part_unix") or rec["start_unix"]) - rec["start_unix"])
        device = str(rec.get("device"))
        devices[device] = devices.get(device, 0.0) + seconds
    return {
        "earlier_attempts": len(records),
        "earlier_attempt_seconds": sum(devices.values()),
        "earlier_attempt_devices": dict(sorted(devices.items())),
    }


def _added(totals: dict[str, Any], more: dict[str, Any]) -> dict[str, Any]:
    """Two `attempt_totals` summed (`totals` may be a job's stats, holding them)."""
    devices = dict(totals.get("earlier_attempt_devices") or {})
    for device, seconds in more["earlier_attempt_devices"].items():
        devices[device] = devices.get(device, 0.0) + seconds
    return {
        "earlier_attempts": totals.get("earlier_attempts", 0) + more["earlier_attempts"],
        "earlier_attempt_seconds": totals.get("earlier_attempt_seconds", 0) + more["earlier_attempt_seconds"],
        "earlier_attempt_devices": dict(sorted(devices.items())),
    }


def _is_record(rec: Any) -> bool:
    """An attempt record whose times `attempt_totals` can count."""
    return (isinstance(rec, dict) and isinstance(rec.get("start_unix"), (int, float))
            and isinstance(rec.get("last_part_unix") or 0, (int, float)))


# Params left out of a job's settings: the device and thread count are the node's (the
# output identity holds what they resolve to), a model's path can differ from node to
# node (its identity stands for it), and the compile cache decides no output.
NOT_SETTINGS = ("model", "device", "threads", "compile_cache")


def configured(params: Any, model: Any) -> dict[str, Any]:
    """A job's settings as configured: its params (a dataclass) as given, before `auto`
    resolves per device (a dtype, a token budget, the speed-ups), without NOT_SETTINGS;
    and `model`, what names its model by content (core.hashing.model_identity; an
    extractive job's: its encoder's settings)."""
    return {"model": model, "params": {k: v for k, v in asdict(params).items() if k not in NOT_SETTINGS}}


@dataclass(frozen=True)
class JobIdentity:
    """The job a resume folder's attempts work for, as their records name it
    (`job_identity`): `job`, its output's logical path (core.s3.logical_path, which `make
    status` reads); `run`, where the run keeps that output (core.s3.stored_place: the
    absolute path, or in S3 storage the object's URL), which two runs sharing a resume
    root (two working directories of one host, two storage prefixes) never share, but
    two hosts' working directories at one path do (profiles/README.md, *Several hosts*:
    each keeps its own resume folder); `settings`, a
    digest of the chunk (its bytes and path) and the job's settings as configured
    (`configured`): the resume key's output identity less what the hardware decides."""

    job: str
    run: str
    settings: str

    def named_by(self, record: dict) -> bool:
        """Whether an attempt record names this job, run and settings (a record from
        before records named the run and the settings never does)."""
        return all(record.get(k) == v for k, v in asdict(self).items())


def job_identity(output: str | Path, chunk: str | Path, settings: dict[str, Any]) -> JobIdentity:
    """The `JobIdentity` of the job that writes `output` from `chunk` with `settings`
    (`configured`)."""
    return JobIdentity(logical_path(output), stored_place(output), resume_key(chunk, settings))


def remove_job_parts(
    folder: str | Path, root: str | Path, job: JobIdentity, since: float, earlier: dict[str, Any]
) -> dict[str, Any]:
    """Remove a finished job's resume `folder` (`resume_folder(root, key)`) and the job's
    other folders under `root`; return `earlier` (the `attempt_totals` of the folder's
    earlier attempts, or stats holding them) with those other folders' attempts added.

    A folder's name hashes the output identity, which holds the hardware (the GPU's
    model and SM count, the CPU's thread count, and what `auto` resolves to on them): a
    killed attempt retried on another node type (a partition of mixed GPUs or MIG
    slices, a spot replacement of another instance type) left its parts and record in a
    folder the retry never opens. Such a folder is told by its attempt records alone
    (one listing of `root`'s folders, then each one's small records; no part is read):
    every record names this `job` (`JobIdentity.named_by`: the same output, the same run,
    the same settings), and none shows work since `since` (this job's start): not
    opened, no part saved after it. Any other folder is left as it is, and none of its
    time counted: another chunk's or output's; another run's under a shared resume root
    (gpu_jobs.resume_dir on a volume two working directories use), which that run
    resumes; the same job's under other settings (another model, a changed setting:
    switched back, they resume); one with a record that names no run or settings
    (written before records did) or does not read back; one without records (train/'s
    checkpoints); and one an attempt at the job worked in after `since`, which still
    runs elsewhere (a zombie beside its retry) and removes it when it finishes.

    A live attempt is misjudged in one case: a zombie of this job (its node or its
    Snakemake lost, the job retried meanwhile) on another node type, that opened its
    folder before this job started and saved no part since (loading, compiling, or
    slower per part than this whole job), or whose node's clock runs behind enough to
    make it look so. It is taken as dead: counted here, its folder removed; it makes the
    folder again at its next part (`PartStore._write`) and goes on without the parts it
    had, as a zombie on the retry's own node type does in the folder it shares with the
    retry. A root that cannot be listed (a bucket's error) is a warning; the job's own
    folder still goes."""
    try:
        names = _backend(root).folders()
    except OSError as exc:
        log.warning("cannot list the resume folders in %s (%s): a killed attempt at %s in another of them, if any, "
                    "is not counted and stays", root, exc, job.job)
        names = []
    own = os.path.basename(str(folder).rstrip("/"))
    others: list[str] = []
    records: list[dict] = []
    for name in names:
        if name == own:
            continue
        other = resume_folder(root, name)
        try:
            found = PartStore(other, {}).earlier_attempts()
        except (OSError, ValueError, KeyError, TypeError):  # whose attempts these were is not known
            continue
        if not found or not all(_is_record(r) and job.named_by(r) for r in found):
            continue
        if any(max(r["start_unix"], r.get("last_part_unix") or 0) >= since for r in found):
            log.info("leaving %s: an attempt at %s opened it or saved a part there after this one started (still "
                     "running elsewhere, or a clock ahead); it removes its folder when it finishes", other, job.job)
            continue
        others.append(other)
        records += found
    for other in others:  # the job's own folder last: its removal takes the emptied folders above
        PartStore(other, {}).remove(root)
    PartStore(folder, {}).remove(root)
    return _added(earlier, attempt_totals(records))


class PartStore:
    """The parts of one job. `open()` creates the folder or checks it is this job's, and
    starts this attempt's record; `device` is what the attempt runs on ("cuda:0", "cpu"),
    `job` what the parts are for: a `JobIdentity` (its output, run and settings, which
    `remove_job_parts` matches), or the output's logical path alone (core.s3.logical_path;
    such records are never matched), both written into the attempt's record."""

    def __init__(
        self, folder: str | Path, manifest: dict[str, Any], device: str | None = None,
        job: JobIdentity | str | None = None,
    ):
        self.folder = str(folder)
        self.manifest = manifest
        self.device = device
        self.job = job
        self._files = _backend(folder)
        self._attempt: dict[str, Any] | None = None  # this attempt's record, once open
        self._attempt_name = ""

    def open(self) -> PartStore:
        raw = self._files.read(MANIFEST)
        expected = self._expected_manifest()
        if raw is not None:
            try:
                found = json.loads(raw)
            except ValueError as exc:  # damaged from outside: whose parts these are is not known
                raise ValueError(
                    f"resume folder {self.folder}: its {MANIFEST} does not read back ({exc}), so whose parts it "
                    "holds is not known; remove the folder"
                ) from exc
            if found != expected:
                diff = sorted(k for k in set(found) | set(expected) if found.get(k) != expected.get(k))
                raise ValueError(
                    f"resume folder {self.folder} belongs to another job (differs in {diff}); "
                    "remove it or pass a different folder"
                )
        else:
            self._write(MANIFEST, self._manifest_bytes())
        start_ns = time.time_ns()
        host, pid = socket.gethostname(), os.getpid()
        self._attempt_name = attempt_name(host, pid, start_ns)
        self._attempt = {"host": host, "pid": pid, "start_unix": start_ns / 1e9, "last_part_unix": None,
                         "parts_saved": 0, "items_saved": 0, "device": self.device}
        self._attempt.update(asdict(self.job) if isinstance(self.job, JobIdentity) else {"job": self.job})
        self._write_attempt()
        return self

    def _expected_manifest(self) -> dict[str, Any]:
        """The manifest as it reads back from manifest.json (tuples as lists, the rest str)."""
        return json.loads(json.dumps(self.manifest, sort_keys=True, default=str))

    def _manifest_bytes(self) -> bytes:
        return (json.dumps(self._expected_manifest(), indent=2, sort_keys=True) + "\n").encode()

    def _write(self, name: str, data: bytes) -> None:
        """Write one file of the folder. Another attempt at this job can remove the folder
        under this one: a zombie the scheduler gave up on (a lost node, a Snakemake
        restarted while its cluster jobs ran on), still running beside its retry, finished
        first. Its removal can land between this write's temporary and its rename
        (FileNotFoundError); the folder is then made again, with the manifest that guards
        it, and the file written, so that this attempt goes on. Local folders only: an S3
        PUT needs no folder."""
        for attempt in range(1, MKDIR_ATTEMPTS + 1):
            try:
                if attempt > 1 and name != MANIFEST:
                    self._files.write(MANIFEST, self._manifest_bytes())
                self._files.write(name, data)
                return
            except FileNotFoundError:
                if attempt == MKDIR_ATTEMPTS:
                    raise

    def _write_attempt(self) -> None:
        self._write(self._attempt_name, (json.dumps(self._attempt, sort_keys=True) + "\n").encode())

    def _saved_part(self, items: int) -> None:
        if self._attempt is not None:
            self._attempt["last_part_unix"] = time.time()
            self._attempt["parts_saved"] += 1
            self._attempt["items_saved"] += items
            self._write_attempt()

    def earlier_attempts(self) -> list[dict]:
        """The records of the other attempts at this job, oldest first (this one's left
        out; none in a folder from before attempt records)."""
        names = [n for n in self._files.names(ATTEMPT_PREFIX) if n != self._attempt_name]
        records = [json.loads(raw) for raw in map(self._files.read, names) if raw is not None]
        return sorted(records, key=lambda r: r["start_unix"])

    def attempt_totals(self) -> dict[str, Any]:
        """`attempt_totals` of the earlier attempts: the keys a finished job's stats carry."""
        return attempt_totals(self.earlier_attempts())

    @staticmethod
    def name(index: int, suffix: str) -> str:
        return f"part-{index:06d}{suffix}"

    def load_array(self, index: int, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray | None:
        """A finished array part, or None if absent or not the expected shape/dtype."""
        raw = self._files.read(self.name(index, ".npy"))
        if raw is None:
            return None
        try:
            arr = np.load(io.BytesIO(raw), allow_pickle=False)
        except (ValueError, OSError, EOFError) as exc:
            return self._damaged(self.name(index, ".npy"), exc)
        if arr.shape != tuple(shape) or arr.dtype != dtype:
            return None
        return arr

    def save_array(self, index: int, arr: np.ndarray) -> None:
        buf = io.BytesIO()
        np.save(buf, arr, allow_pickle=False)
        self._write(self.name(index, ".npy"), buf.getvalue())
        self._saved_part(len(arr))

    def load_records(self, index: int, count: int) -> list[dict] | None:
        """A finished records part, or None if absent or not `count` records."""
        raw = self._files.read(self.name(index, ".jsonl"))
        if raw is None:
            return None
        # One record a "\n"-ended line: not splitlines(), which also breaks at U+2028, NEL
        # and the like, left unescaped inside a JSON string (a summary may hold them).
        try:
            if raw and not raw.endswith(b"\n"):  # every record ends its line
                raise ValueError("cut short: the last line has no end")
            records = [json.loads(line) for line in raw.decode("utf-8").split("\n")[:-1]]
        except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
            return self._damaged(self.name(index, ".jsonl"), exc)
        return records if len(records) == count else None

    def _damaged(self, name: str, exc: Exception) -> None:
        """A part that does not read back: parts are written whole (a temporary, renamed;
        an S3 PUT), so the damage came from outside (a disk error, a copy cut short). It is
        computed again, as one of another shape is, and named: it raised a ValueError
        naming no file, which the job recorded as an input error, so each retry stopped."""
        log.warning("part %s/%s is damaged (%s: %s): computing it again", self.folder, name, type(exc).__name__, exc)
        return None

    def save_records(self, index: int, records: list[dict]) -> None:
        text = "".join(json.dumps(rec, ensure_ascii=False, sort_keys=True) + "\n" for rec in records)
        self._write(self.name(index, ".jsonl"), text.encode("utf-8"))
        self._saved_part(len(records))

    def remove(self, root: str | Path | None = None) -> str | None:
        """Remove the parts. `root`: the resume root the folder is named under
        (`resume_folder`); the local folders this leaves empty go too, up to the top of
        the resume tree (`remove_folder`). S3 has no folders: its keys go. Return None,
        or the warning naming what could not be removed (logged; the job goes on)."""
        if isinstance(self._files, _LocalFolder):
            return self._files.remove(root)
        return self._files.remove()
