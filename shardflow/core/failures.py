"""A retry does not repeat a deterministic failure.

GPU rules are retried on any failure (`resources.<rule>.retries`, 2 by default), for
out-of-memory (mem_mb grows per attempt) and transient faults. A job that fails on its
input or config (a bad record, a ValueError naming a file and line) would fail the same
way on each retry, each one loading the model and, on SLURM, queueing again; Snakemake
cannot retry by error (snakemake issue #2441). So the job itself, from `start_gpu_job`:

- an attempt that fails with an error a rerun on the same inputs and params repeats
  (`deterministic`) leaves `<log>.failure.json` beside the job's log: the rule, the
  attempt, the error's type and message, and the signature of the job: its inputs
  (path, size, mtime_ns), its params (sha256) and the shardflow package's code (sha256
  of its .py files, `code_identity`);
- attempt > 1 finding such a record with the current signature stops at once, before
  GPUs are pinned or a model loads, with `RepeatedFailureError` naming the earlier
  attempt and its error; a record whose signature differs (an input fixed while the
  retry queued, a changed config, a fixed or upgraded package) is removed and the
  attempt runs;
- attempt 1 removes any record: a new Snakemake run starts at attempt 1, so a rerun
  after a fix runs the job again. Where attempt 1 never reached the job's start (a SLURM
  job preempted or its node lost before the script ran), attempt 2 of the new run still
  finds the old run's record: it stops only where the inputs, params and package code
  are all the same, that is, where the fix lay elsewhere (a script under scripts/, a
  model folder, an installed library): remove the record, or rerun.

The signature names no run: under the SLURM executor each job's name is the run's
uuid, but the slurm-jobstep executor (0.6.1) drops SLURM_JOB_NAME, with every SLURM_
variable but the allocation's ids, from the environment of the `srun` that runs the
job's Snakemake (srun sets it only for a new allocation), so a job cannot read it
without asking SLURM (`scontrol`); other executors have no run id at all.

The attempt reaches a script as the resource `attempt` (rules/common.smk,
`job_resources`): the Snakemake object of a `script:` has no attempt of its own. A job
without it records and checks nothing. The record is written by a `sys.excepthook`
chained in front of the rule log's (`runlog`; `Guard.record_uncaught`): Snakemake runs a
`script:` as `python .snakemake/scripts/tmp<random>.<name>.py`, so an uncaught exception ends
the process through that hook, and no script needs a `try`. The hook goes in once the
job's GPUs are pinned: pinning's errors (a pool smaller than the job's GPUs, a listed
pool outside CUDA_VISIBLE_DEVICES) are the host's state, never recorded; the train
launcher likewise records only what the trainer raised.

The train rule, a `shell:` rule whose command text must not change (a changed command
reruns every finished train job), guards itself in `python -m shardflow.train.launch`
with the same `Guard`: the attempt comes in the untracked `gpu_jobs` JSON, and the
record lies beside the job's resume folder (`<resume>.failure.json`), which every
attempt shares. Two differences, both from running outside a script:

- Snakemake evaluates a job's params once per run: a retry in place (locally, in a
  Kubernetes pod) keeps the first attempt's params, so the JSON says attempt 1 on every
  such retry, and only a job-mode Snakemake started per attempt (a SLURM resubmission,
  `--attempt N`) sees the true one. So the record also names the Snakemake process that
  ran the attempt (`run`: shardflow.core.controller, pid and start time), and a record of
  the same process is of an earlier attempt of this run, whatever the JSON says: this
  attempt is the one after it, and its own record and messages say so.
- The ranks torchrun starts fail in processes of their own: each writes how it ended
  (`reporting_rank_error`) to the folder the launcher names in SHARDFLOW_RANK_ERRORS,
  and the launcher records a failure only where those reports show a deterministic
  error that no other failure could have caused (`rank_failure`).

A train attempt that runs out of GPU memory in a training step (torch.OutOfMemoryError,
in the launcher's one process or in any rank) leaves a record too, of kind
`out_of_memory` (`mark_out_of_memory`: the trainer marks the error with the micro-batch
that did not fit, the GPU's name and memory, and the settings that decide a step's
memory; a rank's report carries them). It is no stop: the next attempt runs, and its
launcher passes the record to the trainer, which on the same GPU type with the same
settings trains with a smaller micro-batch and more micro-steps, the same global batch
(shardflow.train.trainer; an out-of-memory error without the mark, raised outside the
training steps, is retried as before). It also stays for later runs (attempt 1 keeps
it): a run on that GPU type starts from the micro-batch that fitted instead of spending
an attempt to learn it again; on another GPU type, or with another model, precision or
process count, the configured micro-batch runs. A deterministic failure after it keeps
it inside its own record (`earlier_out_of_memory`), put back when that record is
removed. Deleting the record starts again from the configured micro-batch.

Where a retry sees the record, which decides whether it stops:
- locally, the in-place retry: same working directory;
- on SLURM, the resubmission (`--attempt N`): same working directory, on the shared
  filesystem;
- on Kubernetes (the eks profile), the pod's own in-place retry (a rule's `retries:`),
  in the pod that wrote it. A job the controller resubmits after its pod failed (the
  profile's `retries: 2`: `--attempt N` in a new pod, shardflow.core.kube) does
  not see a script's `<log>.failure.json`, which stayed on the failed pod's disk: it
  runs again. The train job's record sits beside its resume folder: on a volume every
  pod mounts (`gpu_jobs.resume_dir`) the new pod sees it, and its params (evaluated in
  that pod, with `--attempt N`) say the true attempt, so it stops; on the pod's own
  disk it does not. The same holds for an out-of-memory record: where it is not seen,
  the attempt starts from the configured micro-batch.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import math
import os
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shardflow.core.atomic import write_json
from shardflow.core.hashing import digest, file_version, sha256_folder

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
# GPU, changes that). OSError covers DiskFullError, GpuSlotTimeout and ShardReadError.
# Errors in neither list are retried too: botocore's ClientError (an S3 refusal,
# throttling, a 5xx) and most BotoCoreErrors (EndpointConnectionError) derive from
# Exception alone, its connection and read timeouts from OSError (through requests);
# botocore's InvalidRegionError and UnknownEndpointError are ValueErrors, config errors.
TRANSIENT = (MemoryError, OSError, RuntimeError)
# An error message kept in the record (the full one is in the attempt's log).
MESSAGE_CHARS = 2000
# The folder where each rank torchrun starts for the train launcher writes how it ended
# (rank<RANK>.json): set by the launcher for its ranks only.
RANK_REPORTS_ENV = "SHARDFLOW_RANK_ERRORS"
# A record's `kind` where its attempt ran out of GPU memory with a micro-batch the next
# attempt can make smaller: not a stop, but what the trainer learned (see the docstring).
OUT_OF_MEMORY = "out_of_memory"
# The attribute of an exception that carries its out-of-memory details (`mark_out_of_memory`).
_DETAILS = "shardflow_out_of_memory"


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


def _files(inputs: Iterable[str]) -> Iterator[str]:
    """Each input, a folder (a `directory()` input: the train job's shards) as the files
    under it, in order."""
    for path in inputs:
        if os.path.isdir(path):
            for root, dirs, names in os.walk(path):
                dirs.sort()
                yield from (os.path.join(root, name) for name in sorted(names))
        else:
            yield str(path)


@functools.cache
def code_identity() -> str:
    """sha256 of the shardflow package's .py files (names and contents) as installed
    where this process imports it: a fixed or upgraded package signs its jobs
    differently, so a record written by other code never stops a retry. Computed once
    per process (about 3 ms for the package's 90 files)."""
    return sha256_folder(Path(__file__).resolve().parent.parent, (".py",))


def signature(inputs: Iterable[str], params: Any) -> dict:
    """What a rerun would read and run: each input file's path, size and mtime_ns (None
    where it is missing; a folder: every file under it), the sha256 of the params, and
    the package's code (`code_identity`)."""
    files = []
    for path in _files(inputs):
        try:
            files.append(file_version(path))
        except OSError:
            files.append([str(path), None, None])
    return {"inputs": files, "params": digest(params), "code": code_identity()}


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


def mark_out_of_memory(exc: BaseException, details: dict) -> BaseException:
    """`exc` (an out-of-memory error), carrying `details`: the micro-batch that did not fit
    (`micro_batch`), the one the next attempt takes (`next_micro_batch`, None at 1) and its
    `next_grad_accum`, the configured `batch_size` and `grad_accum`, the GPU (`device`,
    its name; `gpu_memory_mib`) and `settings` (what else decides the memory a
    micro-batch takes: the trainer's). Its record (`Guard.record_exception`, or a rank's
    report) is then an out-of-memory one."""
    setattr(exc, _DETAILS, details)
    return exc


def out_of_memory_details(exc: BaseException) -> dict | None:
    """The details `mark_out_of_memory` gave `exc`, or None."""
    details = getattr(exc, _DETAILS, None)
    return details if isinstance(details, dict) else None


def out_of_memory_next(details: dict, recorded: str) -> str:
    """What an out-of-memory record means for the next attempt, in words; `recorded`
    says where it was recorded ("recorded in <path>, so")."""
    d = details
    gpu = d.get("device", "?") + (f", {d['gpu_memory_mib']:,} MiB" if d.get("gpu_memory_mib") else "")
    head = f"out of memory at micro-batch {d.get('micro_batch')} ({gpu})"
    if d.get("next_micro_batch") is None:
        return (
            f"{head}: the model does not fit even at micro-batch 1; {recorded} the next attempt on that GPU type "
            "tries micro-batch 1 again (a GPU shared with another process may have room then)"
        )
    return (
        f"{head}: {recorded} the next attempt on that GPU type (a retry, and later runs) trains with micro-batch "
        f"{d['next_micro_batch']} x grad_accum {d.get('next_grad_accum')} (config {d.get('batch_size')} x "
        f"{d.get('grad_accum')}): the same windows per step, so the same global batch"
    )


def out_of_memory_record(record: dict | None) -> dict | None:
    """The out-of-memory record `record` is or keeps (a later deterministic failure's
    record keeps the one before it: `earlier_out_of_memory`), or None."""
    if not isinstance(record, dict):
        return None
    if record.get("kind") == OUT_OF_MEMORY:
        return record if isinstance(record.get(OUT_OF_MEMORY), dict) else None
    return out_of_memory_record(record.get("earlier_out_of_memory"))


def check_earlier(path: Path, attempt: int, sig: dict, job: str, log: logging.Logger, run: str | None = None) -> int:
    """Raise RepeatedFailureError where attempt > 1 and the record at `path` holds a
    deterministic failure of this job with signature `sig`; otherwise remove the record.
    `run`: the Snakemake process running this attempt; a record it wrote is of an
    earlier attempt, whatever `attempt` says (a retry in place keeps attempt 1's params).
    Returns the attempt this is: `attempt`, or the one after such a record's.

    An out-of-memory record (kind `out_of_memory`) never stops an attempt and stays, for
    later runs too: it says which micro-batch did not fit on which GPU type, which the
    trainer reads (`Guard.out_of_memory`). A removed deterministic record that kept one
    puts it back."""
    record = _read(path)
    if record is None:
        return attempt
    if run is not None and record.get("run") == run and isinstance(record.get("attempt"), int):
        attempt = max(attempt, record["attempt"] + 1)
    if record.get("kind") == OUT_OF_MEMORY:
        return attempt
    if attempt > 1 and record.get("signature") == sig:
        raise RepeatedFailureError(
            f"{job}: attempt {record.get('attempt')} failed with {record.get('error')}: {record.get('message')} -- "
            f"attempt {attempt} would read the same inputs with the same params and the same shardflow code and "
            f"fail the same way. That is an input or config error, which a retry only reads again: fix it and "
            f"rerun (a changed input, config or shardflow package runs the job again; after a fix elsewhere, a "
            f"script, a model folder or an installed library, remove {path})"
        )
    if record:
        why = "a new run" if attempt == 1 else "its inputs, params or code changed since"
        log.info(
            "%s: %s attempt %s's %s: running (removed %s)", job, why, record.get("attempt"), record.get("error"), path
        )
    kept = out_of_memory_record(record)
    if kept is None:
        _remove(path, log)
    else:
        try:
            write_json(path, kept)
        except Exception as exc:  # noqa: BLE001 - the record stays as it was: the guard below does not stop on it
            log.warning("cannot rewrite the failure record %s (%s): remove it, or a retry may stop on it", path, exc)
    return attempt


def write_record(
    path: Path,
    error: str,
    message: str,
    attempt: int,
    sig: dict,
    job: str,
    run: str | None = None,
    out_of_memory: dict | None = None,
    earlier: dict | None = None,
) -> None:
    """Write the record of a failed attempt: with `out_of_memory` (its details, from
    `mark_out_of_memory`), an out-of-memory record; else a deterministic failure's,
    keeping `earlier`, the out-of-memory record it replaces (check_earlier restores it)."""
    record = {"job": job, "attempt": attempt, "error": error, "message": message[:MESSAGE_CHARS], "signature": sig}
    if run is not None:
        record["run"] = run
    if out_of_memory is not None:
        record.update(kind=OUT_OF_MEMORY, out_of_memory=out_of_memory)
    elif earlier is not None:
        record["earlier_out_of_memory"] = earlier
    write_json(path, record)


@dataclass(frozen=True)
class Guard:
    """One attempt of one job as its failure record knows it (`start_guard`)."""

    path: Path  # the record
    attempt: int
    sig: dict
    job: str
    run: str | None = None  # the Snakemake process running the attempt, where known
    # The out-of-memory record an earlier attempt or run left (out_of_memory_record): its
    # `out_of_memory` details say which micro-batch did not fit on which GPU type.
    out_of_memory: dict | None = None

    def record(self, error: str, message: str, log: logging.Logger, out_of_memory: dict | None = None) -> bool:
        """Record a deterministic failure of this attempt (error class name, message), or
        with `out_of_memory` an out-of-memory one; False where the record cannot be written."""
        try:
            write_record(
                self.path, error, message, self.attempt, self.sig, self.job, self.run, out_of_memory, self.out_of_memory
            )
            return True
        except Exception as err:  # never hide the job's own error behind the record's
            log.warning("could not record the failure in %s: %s", self.path, err)
            return False

    def record_exception(self, exc: BaseException, log: logging.Logger) -> bool:
        """Record `exc` where a rerun on the same inputs and params repeats it, or where it
        ran out of memory with a micro-batch a retry can make smaller (`mark_out_of_memory`)."""
        if deterministic(exc):
            return self.record(type(exc).__name__, str(exc), log)
        details = out_of_memory_details(exc)
        return details is not None and self.record(type(exc).__name__, str(exc), log, details)

    def say_recorded(self, error: str, log: logging.Logger, out_of_memory: dict | None = None) -> None:
        if out_of_memory is not None:
            log.error("%s", out_of_memory_next(out_of_memory, f"recorded in {self.path}, so"))
            return
        log.error(
            "%s is an error a rerun on the same inputs and params repeats: recorded in %s, so a retry of this job "
            "(attempt %d on) that finds it there stops at once instead of loading the model to fail the same way: "
            "a retry in place, or a resubmission sharing this filesystem (SLURM); a resubmission to a new "
            "Kubernetes pod sees it only on a volume every pod mounts, and otherwise runs again",
            error,
            self.path,
            self.attempt + 1,
        )

    def record_uncaught(self, log: logging.Logger) -> None:
        """From now on, record an exception that ends this process (a script's: Snakemake
        runs it as a file, so it ends through `sys.excepthook`, chained in front of the
        rule log's). Install it only once the job's host is set up (its GPUs pinned):
        what fails before that (a pool smaller than the job's GPUs) is the host's state."""
        previous = sys.excepthook

        def hook(exc_type, exc, tb):
            recorded = self.record_exception(exc, log)
            previous(exc_type, exc, tb)
            if recorded:
                self.say_recorded(type(exc).__name__, log, out_of_memory_details(exc))

        sys.excepthook = hook


def start_guard(
    path: Path,
    attempt: int,
    inputs: Iterable[str],
    params: Any,
    job: str,
    log: logging.Logger,
    run: str | None = None,
) -> Guard | None:
    """The start of an attempt: stop it (RepeatedFailureError) where it repeats a
    recorded deterministic failure, else the Guard that records its own. None (and a
    warning) where the params give no signature: the job runs unguarded."""
    try:
        sig = signature(inputs, params)
    except Exception as exc:  # noqa: BLE001 - params JSON cannot order (mixed key types): run unguarded
        log.warning("%s: no failure record for this attempt (its params give no signature: %s)", job, exc)
        return None
    attempt = check_earlier(path, attempt, sig, job, log, run=run)
    return Guard(path, attempt, sig, job, run, out_of_memory_record(_read(path)))


def guard_retries(smk: Any, log: logging.Logger) -> Guard | None:
    """The start of a Snakemake job (`smk`: a script's `snakemake`): stop an attempt that
    repeats a recorded deterministic failure; else the Guard whose `record_uncaught`
    records this attempt's, should it end on one. None without the `attempt` resource or
    a log."""
    attempt = smk.resources.get("attempt")
    if attempt is None or not smk.log:
        return None
    job = f"rule {smk.rule} (log {smk.log[0]})"
    return start_guard(record_path(smk.log[0]), int(attempt), smk.input, smk.params, job, log)


# ------------------------------------------------------- ranks under torchrun


def in_collective(exc: BaseException) -> bool:
    """Whether `exc` came from torch.distributed (a DistError, or raised in one of its
    calls or in DistributedDataParallel): what a rank sees when its group breaks, another
    rank having failed (gloo: a RuntimeError 'Connection closed by peer'; NCCL errors)."""
    if any(c.__module__.startswith("torch.distributed") for c in type(exc).__mro__):
        return True
    tb = exc.__traceback__
    while tb is not None:
        name = tb.tb_frame.f_code.co_filename.replace(os.sep, "/")
        if "/torch/distributed/" in name or "/torch/nn/parallel/" in name:
            return True
        tb = tb.tb_next
    return False


@contextlib.contextmanager
def reporting_rank_error() -> Iterator[None]:
    """Around a rank's work: an exception that ends it is written, before it propagates,
    to `<SHARDFLOW_RANK_ERRORS>/rank<RANK>.json` (class, message, `deterministic`,
    `in_collective`, time). Nothing outside a rank the train launcher started."""
    folder = os.environ.get(RANK_REPORTS_ENV)
    try:
        yield
    except BaseException as exc:
        if folder:
            rank = os.environ.get("RANK", "0")
            report = {
                "rank": rank,
                "error": type(exc).__name__,
                "message": str(exc)[:MESSAGE_CHARS],
                "deterministic": deterministic(exc),
                "collective": in_collective(exc),
                "time": time.time(),
            }
            if (details := out_of_memory_details(exc)) is not None:
                report[OUT_OF_MEMORY] = details
            with contextlib.suppress(Exception):  # never hide the rank's own error
                write_json(Path(folder) / f"rank{rank}.json", report)
        raise


def rank_reports(folder: str | os.PathLike) -> list[dict]:
    """The reports the ranks left in `folder` (an unreadable one as {}: unknown)."""
    return [_read(path) or {} for path in sorted(Path(folder).glob("rank*.json"))]


def rank_failure(reports: list[dict]) -> dict | None:
    """The report to record after torchrun failed, or None: retry as before.

    A rank that reports an error in a collective was failed by its group (another rank
    stopped), a rank with no report was stopped by torchrun after the first failure or
    killed (a signal, the out-of-memory killer): neither is a cause. A failure is
    recorded only where some rank reported an error outside the collectives, every
    such error is deterministic, and the first report in time is one of them (a
    collective that broke first is a network or device fault). No report at all: unknown."""
    causes = [r for r in reports if not r.get("collective")]
    if not causes or not all(r.get("deterministic") is True for r in causes):
        return None
    if not all(isinstance(r.get("time"), (int, float)) for r in reports):
        return None
    first = min(reports, key=lambda r: r["time"])
    return first if not first.get("collective") else None


def rank_out_of_memory(reports: list[dict]) -> dict | None:
    """The first report in time of a rank that ran out of memory with a micro-batch a
    retry can make smaller (its `out_of_memory` details), or None. Any rank's counts, a
    collective's too (an out-of-memory in DistributedDataParallel's forward is raised
    in torch.distributed's frames): the next attempt takes a smaller micro-batch on every
    rank. Checked after `rank_failure`: a deterministic cause is recorded as such."""
    found = [r for r in reports if isinstance(r.get(OUT_OF_MEMORY), dict)]
    return min(
        found, key=lambda r: r.get("time") if isinstance(r.get("time"), (int, float)) else math.inf, default=None
    )
