"""A retry does not repeat a deterministic failure.

GPU rules are retried on any failure (`resources.<rule>.retries`, 2 by default), for
out-of-memory (mem_mb grows per attempt) and transient faults. A job that fails on its
input or config (a bad record, a ValueError naming a file and line) would fail the same
way on each retry, each one loading the model and, on SLURM, queueing again; Snakemake
cannot retry by error (snakemake issue #2441). So the job itself, from `start_gpu_job`:

- an attempt that fails with an error a rerun on the same inputs and params repeats
  (`deterministic`) leaves `<log>.failure.json` beside the job's log: the rule, the
  attempt, the error's type and message, and the signature of the job's inputs (path,
  size, mtime_ns) and params (sha256);
- attempt > 1 finding such a record with the current signature stops at once, before
  GPUs are pinned or a model loads, with `RepeatedFailureError` naming the earlier
  attempt and its error; a record whose signature differs (an input fixed while the
  retry queued) is removed and the attempt runs;
- attempt 1 removes any record: every Snakemake run starts at attempt 1, so a rerun after
  a fix (of the input, the config or the code) runs the job again.

The attempt reaches a script as the resource `attempt` (rules/common.smk,
`job_resources`): the Snakemake object of a `script:` has no attempt of its own. A job
without it records and checks nothing. The record is written by a `sys.excepthook`
chained in front of the rule log's (`runlog`): Snakemake runs a `script:` as
`python .snakemake/scripts/tmpXXX.<name>.py`, so an uncaught exception ends the process
through that hook, and no script needs a `try`.

Where a retry sees the record: locally, in place; on SLURM the retry is a resubmission in
the same working directory on the shared filesystem; on EKS the pod's own Snakemake
retries in place, in the pod where the record was written (a fresh pod is a new run:
attempt 1).
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from shardflow.core.atomic import write_json
from shardflow.core.hashing import digest

# Errors a rerun on the same inputs and params repeats: ValueError (UnicodeDecodeError,
# json.JSONDecodeError and the readers' BadRecordError among them), TypeError, LookupError
# (KeyError, IndexError). What the package raises for bad input derives from ValueError:
# BadRecordError, ConfigError, RetrievalDataError, SummariesError, ShardFormatError,
# UnknownCharacterError, UnsupportedModelError, MissingReferenceError, SweepError.
DETERMINISTIC = (ValueError, TypeError, LookupError)
# Errors a retry can cure; they win where an error is both, or was raised from one.
# RuntimeError covers torch's OutOfMemoryError and CUDA and NCCL errors, and the
# package's TooLargeError / TextTooLargeError (one text does not fit in the device memory
# free at that moment: another process on a shared GPU, or a retry placed on a larger
# GPU, changes that). OSError covers DiskFullError, GpuSlotTimeout and S3 failures.
TRANSIENT = (MemoryError, OSError, RuntimeError)
# An error message kept in the record (the full one is in the attempt's log).
MESSAGE_CHARS = 2000


class RepeatedFailureError(Exception):
    """An attempt > 1 that would repeat the earlier attempt's deterministic failure."""


def deterministic(exc: BaseException) -> bool:
    """Whether a rerun on the same inputs and params would fail with `exc` again.

    Conservative: True only for DETERMINISTIC errors that are no TRANSIENT error and were
    not raised from one (the cause, or the context Python shows, all the way down: a
    BadRecordError raised from an OSError may be a failing disk). KeyboardInterrupt,
    SystemExit and other BaseExceptions (signals), and errors of any other class, are
    retried as before.
    """
    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        if isinstance(link, TRANSIENT) or not isinstance(link, Exception):
            return False
        link = link.__cause__ or (None if link.__suppress_context__ else link.__context__)
    return isinstance(exc, DETERMINISTIC)


def signature(inputs: Iterable[str], params: Any) -> dict:
    """What a rerun would read: each input's path, size and mtime_ns (None where it is
    missing), and the sha256 of the params."""
    files = []
    for path in inputs:
        try:
            st = os.stat(path)
            files.append([str(path), st.st_size, st.st_mtime_ns])
        except OSError:
            files.append([str(path), None, None])
    return {"inputs": files, "params": digest(params)}


def record_path(log: str | os.PathLike) -> Path:
    """The failure record of the job whose log is `log`."""
    return Path(f"{os.fspath(log)}.failure.json")


def _read(path: Path) -> dict | None:
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError):  # unreadable: no record that could stop a job
        return {}
    return record if isinstance(record, dict) else {}


def _remove(path: Path, log: logging.Logger) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass
    except OSError as exc:  # the job runs; a retry after a transient failure may stop on the record
        log.warning("cannot remove the failure record %s (%s): remove it, or a retry may stop on it", path, exc)


def check_earlier(path: Path, attempt: int, sig: dict, job: str, log: logging.Logger) -> None:
    """Raise RepeatedFailureError where attempt > 1 and the record at `path` holds a
    deterministic failure of this job with signature `sig`; otherwise remove the record."""
    record = _read(path)
    if record is None:
        return
    if attempt > 1 and record.get("signature") == sig:
        raise RepeatedFailureError(
            f"{job}: attempt {record.get('attempt')} failed with {record.get('error')}: {record.get('message')} -- "
            f"attempt {attempt} would read the same inputs with the same params and fail the same way. That is an "
            f"input or config error, which a retry only reads again: fix it and rerun (a new run starts at "
            f"attempt 1 and removes {path})"
        )
    if record:
        why = "a new run" if attempt == 1 else "its inputs or params changed since"
        log.info(
            "%s: %s attempt %s's %s: running (removed %s)", job, why, record.get("attempt"), record.get("error"), path
        )
    _remove(path, log)


def write_record(path: Path, exc: BaseException, attempt: int, sig: dict, job: str) -> None:
    write_json(
        path,
        {
            "job": job,
            "attempt": attempt,
            "error": type(exc).__name__,
            "message": str(exc)[:MESSAGE_CHARS],
            "signature": sig,
        },
    )


def guard_retries(smk: Any, log: logging.Logger) -> None:
    """The start of a Snakemake job (`smk`: a script's `snakemake`): stop an attempt that
    repeats a recorded deterministic failure, then record this attempt's, should it end on
    one. Nothing without the `attempt` resource or a log."""
    attempt = smk.resources.get("attempt")
    if attempt is None or not smk.log:
        return
    attempt = int(attempt)
    job = f"rule {smk.rule} (log {smk.log[0]})"
    path = record_path(smk.log[0])
    try:
        sig = signature(smk.input, smk.params)
    except Exception as exc:  # noqa: BLE001 - params JSON cannot order (mixed key types): run unguarded
        log.warning("%s: no failure record for this attempt (its params give no signature: %s)", job, exc)
        return
    check_earlier(path, attempt, sig, job, log)
    previous = sys.excepthook

    def hook(exc_type, exc, tb):
        recorded = False
        if deterministic(exc):
            try:
                write_record(path, exc, attempt, sig, job)
                recorded = True
            except Exception as err:  # never hide the job's own error behind the record's
                log.warning("could not record the failure in %s: %s", path, err)
        previous(exc_type, exc, tb)
        if recorded:
            log.error(
                "%s is an error a rerun on the same inputs and params repeats: recorded in %s, so a retry of this "
                "job (attempt %d on) stops at once instead of loading the model to fail the same way",
                type(exc).__name__,
                path,
                attempt + 1,
            )

    sys.excepthook = hook
