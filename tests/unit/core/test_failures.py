"""A retry does not repeat a deterministic failure (shardflow.core.failures, through
start_gpu_job): the classification, the record a failed attempt leaves beside its log,
and the retry that stops at once on it."""

import json
import logging
import os
import subprocess
import sys
import textwrap
import types

import pytest
import torch

from shardflow.core import failures, gpu_slots
from shardflow.core.atomic import DiskFullError
from shardflow.core.config import ConfigError
from shardflow.core.failures import (
    RANK_REPORTS_ENV,
    RepeatedFailureError,
    check_earlier,
    code_identity,
    deterministic,
    in_collective,
    rank_failure,
    rank_reports,
    record_path,
    reporting_rank_error,
    signature,
    start_guard,
    write_record,
)
from shardflow.core.gpujob import start_gpu_job
from shardflow.core.hashing import file_version, sha256_folder
from shardflow.core.oom import TooLargeError
from shardflow.corpus.readers import BadRecordError
from shardflow.embed.stconfig import UnsupportedModelError
from shardflow.train.shards import ShardFormatError


def raised(
    exc: BaseException, cause: BaseException | None = None, context: BaseException | None = None, suppress: bool = False
) -> BaseException:
    """`exc` as a `raise exc from cause` (or raised while handling `context`) leaves it."""
    exc.__cause__, exc.__context__, exc.__suppress_context__ = cause, context, suppress or cause is not None
    return exc


class ValueAndOSError(ValueError, OSError):
    pass


CLASSIFIED = [
    # deterministic: a rerun on the same inputs and params fails the same way
    (ValueError("chunk_0.jsonl:3: not a shardflow chunk record"), True),
    (UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte"), True),
    (json.JSONDecodeError("Expecting value", "{", 1), True),
    (TypeError("EmbedParams.__init__() got an unexpected keyword argument 'windw'"), True),
    (KeyError("text"), True),
    (IndexError("list index out of range"), True),
    (BadRecordError("chunk_0.jsonl", 3, "empty text"), True),
    (ConfigError("embedding.window: -1 is less than the minimum of 1"), True),
    (UnsupportedModelError("pooling 'weightedmean' is not supported"), True),
    (raised(ValueError("bad header"), context=OSError("EIO"), suppress=True), True),  # raise ... from None
    (raised(BadRecordError("c.jsonl", 2, "malformed"), cause=json.JSONDecodeError("x", "{", 1)), True),
    # retried: a retry (more memory, another GPU, the fault gone) can cure it
    (torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"), False),
    (MemoryError(), False),
    (TooLargeError("one row does not fit, even alone", row=4, n_tokens=8192), False),
    (RuntimeError("CUDA error: an illegal memory access was encountered"), False),
    (RuntimeError("NCCL error: unhandled system error"), False),
    (OSError(5, "Input/output error"), False),
    (FileNotFoundError(2, "No such file or directory"), False),
    (TimeoutError("GPU slot"), False),
    (DiskFullError(__import__("pathlib").Path("/tmp/x.npy"), OSError(28, "No space left on device")), False),
    (KeyboardInterrupt(), False),
    (SystemExit(1), False),
    (ValueAndOSError("both"), False),  # transient wins
    (raised(BadRecordError("c.jsonl", 2, "read error (EIO)"), cause=OSError(5, "EIO")), False),  # maybe a disk
    (raised(ValueError("x"), context=torch.OutOfMemoryError("oom")), False),  # raised while handling an OOM
    (AssertionError("unexpected"), False),  # neither list: retried, as before
    (ZeroDivisionError(), False),
    (RepeatedFailureError("earlier attempt"), False),
]
try:  # S3 errors derive from neither list (an S3 refusal, throttling, a 5xx): retried
    from botocore.exceptions import ClientError, EndpointConnectionError

    CLASSIFIED += [
        (ClientError({"Error": {"Code": "SlowDown", "Message": "Reduce your request rate"}}, "PutObject"), False),
        (EndpointConnectionError(endpoint_url="http://s3:8333"), False),
    ]
except ImportError:  # no botocore here: nothing of it to classify
    pass


@pytest.mark.parametrize(
    "exc, expected", CLASSIFIED, ids=lambda v: type(v).__name__ if isinstance(v, BaseException) else ""
)
def test_which_errors_a_retry_would_repeat(exc, expected):
    assert deterministic(exc) is expected


def fake_smk(tmp_path, attempt, text="x\n"):
    """A GPU script's `snakemake` as start_gpu_job reads it (as tests/unit/core/test_gpujob.py)."""
    chunk = tmp_path / "chunk_0.jsonl"
    if not chunk.exists():
        chunk.write_text(text)
    return types.SimpleNamespace(
        rule="embed",
        params=types.SimpleNamespace(
            gpu_jobs={"device": "cpu", "pinning": "slots", "devices": "0"}, embedding={"w": 1}
        ),
        resources={"attempt": attempt},
        log=[str(tmp_path / "logs" / "chunk_0.log")],
        input=[str(chunk)],
        threads=1,
    )


@pytest.fixture
def hooks(monkeypatch, tmp_path):
    """sys.excepthook and pinning as they were after the test."""
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)
    monkeypatch.setattr(gpu_slots, "_pinned", None)
    monkeypatch.setenv("SHARDFLOW_GPU_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    yield
    os.environ.pop("CUDA_VISIBLE_DEVICES", None)


def fail(exc: BaseException) -> None:
    """End the script with `exc`, as the interpreter does with an uncaught exception."""
    sys.excepthook(type(exc), exc, None)


def test_a_failed_attempt_records_its_error_and_the_retry_stops_at_once(tmp_path, hooks):
    smk = fake_smk(tmp_path, attempt=1)
    start_gpu_job(smk, "embed", {"w": 1})
    fail(ValueError(f"{smk.input[0]}:1: not a shardflow chunk record"))
    record = json.loads(record_path(smk.log[0]).read_text())
    assert (record["attempt"], record["error"], record["job"]) == (1, "ValueError", f"rule embed (log {smk.log[0]})")
    assert record["message"] == f"{smk.input[0]}:1: not a shardflow chunk record"
    st = os.stat(smk.input[0])
    assert record["signature"]["inputs"] == [[smk.input[0], st.st_size, st.st_mtime_ns]]
    log = open(smk.log[0]).read()
    assert "failed: ValueError" in log and "a retry of this job (attempt 2 on) that finds it there stops" in log
    assert "a resubmission to a new Kubernetes pod sees it only on a volume every pod mounts" in log

    retry = fake_smk(tmp_path, attempt=2)
    with pytest.raises(RepeatedFailureError) as err:
        start_gpu_job(retry, "embed", {"w": 1})
    message = str(err.value)
    assert message.startswith(
        f"rule embed (log {smk.log[0]}): attempt 1 failed with ValueError: {smk.input[0]}:1: "
        "not a shardflow chunk record -- attempt 2 would read the same inputs"
    )
    assert "an input or config error, which a retry only reads again: fix it and rerun" in message
    assert not (tmp_path / "locks").exists() and "CUDA_VISIBLE_DEVICES" not in os.environ  # before pinning
    assert record_path(smk.log[0]).exists()  # attempt 3 stops too


@pytest.mark.parametrize("change", ["mtime", "size", "params"])
def test_a_retry_after_the_input_or_params_changed_runs(tmp_path, hooks, change):
    smk = fake_smk(tmp_path, attempt=1)
    start_gpu_job(smk, "embed", {"w": 1})
    fail(BadRecordError(smk.input[0], 1, "empty text"))
    assert record_path(smk.log[0]).exists()
    retry = fake_smk(tmp_path, attempt=2)
    if change == "mtime":  # same bytes, rewritten while the retry queued
        st = os.stat(retry.input[0])
        os.utime(retry.input[0], ns=(st.st_atime_ns, st.st_mtime_ns + 1))
    elif change == "size":
        with open(retry.input[0], "a") as fh:
            fh.write("y\n")
    else:  # a SLURM resubmission parses the config again
        retry.params.embedding = {"w": 2}
    job = start_gpu_job(retry, "embed", {"w": 1})
    assert job.device == "cpu"
    assert not record_path(smk.log[0]).exists()  # the old record is gone
    assert "its inputs, params or code changed since attempt 1's BadRecordError: running" in open(smk.log[0]).read()


def test_a_record_of_other_shardflow_code_never_stops_a_retry(tmp_path, hooks, monkeypatch):
    """Run 1 fails on a bug in the package (a KeyError); the code is fixed; run 2's
    attempt 1 dies before its script starts (a preempted SLURM job), so attempt 2 is
    the first to find run 1's record, with the same inputs and params: it runs."""
    smk = fake_smk(tmp_path, attempt=1)
    start_gpu_job(smk, "embed", {"w": 1})
    fail(KeyError("text"))
    assert json.loads(record_path(smk.log[0]).read_text())["signature"]["code"] == code_identity()
    monkeypatch.setattr(failures, "code_identity", lambda: "the fixed package")
    job = start_gpu_job(fake_smk(tmp_path, attempt=2), "embed", {"w": 1})
    assert job.device == "cpu" and not record_path(smk.log[0]).exists()


def test_the_code_identity_is_the_packages_py_files_hashed_once_per_process(monkeypatch):
    package = os.path.dirname(os.path.dirname(os.path.abspath(failures.__file__)))
    assert code_identity() == sha256_folder(package, (".py",))
    monkeypatch.setattr(failures, "sha256_folder", lambda *a: pytest.fail("hashed the package again"))
    assert code_identity() == code_identity()


def test_a_signature_holds_each_inputs_file_version(tmp_path):
    """One (path, size, mtime_ns) for the failure records and the parse cache."""
    (tmp_path / "a.jsonl").write_text("x\n")
    sig = signature([str(tmp_path / "a.jsonl"), str(tmp_path / "gone.jsonl")], {})
    assert sig["inputs"] == [file_version(tmp_path / "a.jsonl"), [str(tmp_path / "gone.jsonl"), None, None]]


def test_a_pinning_error_is_the_hosts_state_and_is_not_recorded(tmp_path, hooks):
    """A job asking for more GPUs than the host's pool fails in pinning with a
    ValueError: the host's state, which a retry elsewhere (another node) may not meet."""
    smk = fake_smk(tmp_path, attempt=1)
    smk.resources["gpu"] = 2
    smk.params.gpu_jobs = {"device": "auto", "pinning": "slots", "devices": "0"}
    with pytest.raises(ValueError, match="a job asks for 2 GPUs but the pool has 1") as err:
        start_gpu_job(smk, "embed", {"w": 1})
    fail(err.value)  # how the script ends
    assert not record_path(smk.log[0]).exists()


def test_attempt_1_removes_a_record_left_by_an_earlier_run(tmp_path, hooks):
    smk = fake_smk(tmp_path, attempt=2)
    start_gpu_job(smk, "embed", {"w": 1})
    fail(KeyError("text"))
    assert record_path(smk.log[0]).exists()
    start_gpu_job(fake_smk(tmp_path, attempt=1), "embed", {"w": 1})  # a new run: the input may have been fixed
    assert not record_path(smk.log[0]).exists()
    start_gpu_job(fake_smk(tmp_path, attempt=2), "embed", {"w": 1})  # so its retry runs too


@pytest.mark.parametrize(
    "exc",
    [
        OSError(5, "Input/output error"),
        torch.OutOfMemoryError("CUDA out of memory"),
        MemoryError(),
        RuntimeError("CUDA error: unspecified launch failure"),
    ],
)
def test_a_transient_failure_is_retried_as_before(tmp_path, hooks, exc):
    smk = fake_smk(tmp_path, attempt=1)
    start_gpu_job(smk, "embed", {"w": 1})
    fail(exc)
    assert not record_path(smk.log[0]).exists()
    start_gpu_job(fake_smk(tmp_path, attempt=2), "embed", {"w": 1})


def test_a_job_without_the_attempt_resource_records_nothing(tmp_path, hooks):
    smk = fake_smk(tmp_path, attempt=1)
    del smk.resources["attempt"]
    start_gpu_job(smk, "embed", {"w": 1})
    fail(ValueError("bad"))
    assert not record_path(smk.log[0]).exists()


def test_params_without_a_signature_run_the_job_unguarded(tmp_path, hooks):
    """Params that JSON cannot put in order (keys of mixed types) give no signature: the
    job runs as before, and says so, instead of failing on its guard."""
    from snakemake.iocontainers import Params  # what a script's snakemake.params is

    smk = fake_smk(tmp_path, attempt=2)
    smk.params = Params(fromdict={"gpu_jobs": vars(smk.params)["gpu_jobs"], "embedding": {1: "a", "b": 2}})
    job = start_gpu_job(smk, "embed", {"w": 1})
    assert job.device == "cpu"
    fail(ValueError("bad"))
    assert not record_path(smk.log[0]).exists()
    assert "no failure record for this attempt (its params give no signature" in open(smk.log[0]).read()


SCRIPT = """
import sys, types
snakemake = types.SimpleNamespace(  # as Snakemake's preamble unpickles it
    rule="embed", params=types.SimpleNamespace(gpu_jobs={"device": "cpu", "pinning": "off", "devices": "0"}),
    resources={"attempt": int(sys.argv[1])}, log=[sys.argv[2]], input=[sys.argv[3]], threads=1,
)
from shardflow.core.gpujob import start_gpu_job
job = start_gpu_job(snakemake, "embed", {})
open(sys.argv[2] + ".body", "a").write(sys.argv[1] + "\\n")  # the model would load here
raise ValueError(sys.argv[3] + ":1: empty text")
"""


def test_a_script_ending_on_an_error_records_it_and_its_retry_stops_before_the_body(tmp_path):
    """The excepthook path end to end: a script run as Snakemake runs one (python file)."""
    script = tmp_path / "tmp_embed.py"
    script.write_text(textwrap.dedent(SCRIPT))
    log, chunk = tmp_path / "chunk_0.log", tmp_path / "chunk_0.jsonl"
    chunk.write_text("{}\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}

    def attempt(n):
        return subprocess.run(
            [sys.executable, str(script), str(n), str(log), str(chunk)],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )

    first = attempt(1)
    assert first.returncode == 1 and f"ValueError: {chunk}:1: empty text" in first.stderr, first.stderr
    assert json.loads(record_path(log).read_text())["error"] == "ValueError"
    second = attempt(2)
    assert second.returncode == 1 and "RepeatedFailureError" in second.stderr, second.stderr
    assert "attempt 1 failed with ValueError" in log.read_text()  # this attempt's log says why
    assert (tmp_path / "chunk_0.log.body").read_text() == "1\n"  # attempt 2 never reached the body


# ------------------------------------------------- jobs that are not scripts (train)


def test_a_folder_input_is_signed_by_every_file_under_it(tmp_path):
    """The train job's input is a folder (its shards): a shard rewritten while the retry
    queued changes the signature, as a changed file input does."""
    shards = tmp_path / "shards"
    (shards / "sub").mkdir(parents=True)
    (shards / "metadata.json").write_text("{}")
    (shards / "sub" / "train_0.bin").write_bytes(b"\0" * 8)
    sig = signature([str(shards)], ["--params", "{}"])
    assert [row[0] for row in sig["inputs"]] == [str(shards / "metadata.json"), str(shards / "sub" / "train_0.bin")]
    (shards / "sub" / "train_0.bin").write_bytes(b"\0" * 9)
    assert signature([str(shards)], ["--params", "{}"]) != sig


def test_a_retry_in_place_is_known_by_its_snakemake_process(tmp_path):
    """Snakemake evaluates a job's params once per run: a retry in place still says
    attempt 1 in them. A record written under the same Snakemake process is of an
    earlier attempt of this run; one of another process is of an earlier run."""
    log = logging.getLogger("test")
    path, sig = tmp_path / "train.failure.json", {"inputs": [], "params": "x"}
    write_record(path, "ShardFormatError", "shard_0.bin: bad magic", 1, sig, "train out", run="41:900")
    with pytest.raises(RepeatedFailureError, match=r"^train out: attempt 1 failed with ShardFormatError: shard_0"):
        check_earlier(path, 1, sig, "train out", log, run="41:900")
    assert path.exists()
    check_earlier(path, 1, sig, "train out", log, run="52:100")  # a new run (another Snakemake)
    assert not path.exists()
    write_record(path, "ShardFormatError", "bad magic", 2, sig, "train out")  # a SLURM resubmission's: no run
    with pytest.raises(RepeatedFailureError):
        check_earlier(path, 3, sig, "train out", log, run="63:200")  # its attempt comes in the params


def test_a_retry_in_place_records_and_names_its_true_attempt(tmp_path, caplog):
    """Attempt 2 in place (its params still say 1) runs after an input changed, and fails
    again: its record says attempt 2, and attempt 3 (params: 1) stops naming both."""
    log = logging.getLogger("test")
    path, data = tmp_path / "train.failure.json", tmp_path / "shard_0.bin"
    data.write_bytes(b"\0" * 8)
    first = start_guard(path, 1, [str(data)], ["--params", "{}"], "train out", log, run="41:900")
    first.record("ShardFormatError", "shard_0.bin: bad magic", log)
    data.write_bytes(b"\0" * 9)  # rewritten while the retry waited
    second = start_guard(path, 1, [str(data)], ["--params", "{}"], "train out", log, run="41:900")
    assert second.attempt == 2
    second.record("ShardFormatError", "shard_0.bin: truncated", log)
    assert json.loads(path.read_text())["attempt"] == 2
    with caplog.at_level(logging.ERROR):
        second.say_recorded("ShardFormatError", log)
    assert "(attempt 3 on)" in caplog.text
    with pytest.raises(RepeatedFailureError, match=r"^train out: attempt 2 failed with .* -- attempt 3 would read"):
        start_guard(path, 1, [str(data)], ["--params", "{}"], "train out", log, run="41:900")


def distributed_error() -> BaseException:
    """An error raised inside torch.distributed (a collective without a group), as caught."""
    import torch.distributed as dist

    try:
        dist.all_reduce(torch.ones(1))
    except Exception as exc:  # noqa: BLE001 - whatever torch raises for it
        return exc
    raise AssertionError("all_reduce without a process group raised nothing")


def test_errors_from_torch_distributed_are_the_groups_not_a_cause():
    assert in_collective(distributed_error())  # a ValueError from inside torch.distributed, by its frames
    assert in_collective(torch.distributed.DistNetworkError("Connection reset by peer"))  # by its class
    assert not in_collective(ValueError("shard_0.bin: bad magic"))


def report(rank, error, deterministic, collective=False, at=0.0):
    return {
        "rank": str(rank),
        "error": error,
        "message": "m",
        "deterministic": deterministic,
        "collective": collective,
        "time": at,
    }


@pytest.mark.parametrize(
    "reports, recorded",
    [
        # rank 0 read a bad shard; rank 1 lost its peer (gloo) or was stopped by torchrun (no report)
        ([report(0, "ShardFormatError", True), report(1, "RuntimeError", False, collective=True, at=1)], "0"),
        ([report(0, "ShardFormatError", True)], "0"),
        ([report(1, "ValueError", True, at=2), report(0, "ValueError", True, at=1)], "0"),  # both read it
        ([report(0, "ValueError", True), report(1, "OutOfMemoryError", False, at=1)], None),  # an OOM too: retry
        (
            [report(0, "RuntimeError", False, collective=True), report(1, "ValueError", True, at=1)],
            None,
        ),  # group broke first
        ([report(0, "DistBackendError", False, collective=True)], None),  # NCCL alone
        ([report(0, "SystemExit", False)], None),
        ([report(0, "ValueError", True), {}], None),  # an unreadable report: unknown
        ([], None),  # every rank killed (a signal, the OOM killer)
    ],
)
def test_ranks_failure_is_recorded_only_where_a_deterministic_error_caused_it(reports, recorded):
    found = rank_failure(reports)
    assert (found and found["rank"]) == recorded


def test_a_rank_reports_the_error_that_ends_it_where_the_launcher_said(tmp_path, monkeypatch):
    with pytest.raises(ValueError), reporting_rank_error():  # outside a launcher's rank: nothing written
        raise ValueError("bad")
    monkeypatch.setenv(RANK_REPORTS_ENV, str(tmp_path))
    monkeypatch.setenv("RANK", "3")
    with pytest.raises(ShardFormatError), reporting_rank_error():
        raise ShardFormatError("shard_0.bin: not an llm.c shard")
    (got,) = rank_reports(tmp_path)
    assert {k: got[k] for k in ("rank", "error", "message", "deterministic", "collective")} == {
        "rank": "3",
        "error": "ShardFormatError",
        "message": "shard_0.bin: not an llm.c shard",
        "deterministic": True,
        "collective": False,
    }


# ------------------------------------------------ out of memory: a smaller micro-batch


def test_an_out_of_memory_record_stops_no_retry_and_stays_for_later_runs(tmp_path):
    """The record of an attempt that ran out of memory says which micro-batch did not fit
    on which GPU: a retry with the same signature runs (with a smaller one), and so does
    a new run, which finds it still there. A deterministic failure after it keeps it,
    and a new run that clears that failure puts it back."""
    log = logging.getLogger("test")
    path, sig = tmp_path / "train.failure.json", signature([], "x")  # what start_guard signs (no inputs, params "x")
    details = {"micro_batch": 32, "next_micro_batch": 16, "device": "Tesla T4", "settings": "s"}
    guard = failures.Guard(path, 1, sig, "train out", run="41:900")
    exc = failures.mark_out_of_memory(torch.OutOfMemoryError("CUDA out of memory"), details)
    assert guard.record_exception(exc, log)
    assert not guard.record_exception(torch.OutOfMemoryError("CUDA out of memory"), log)  # not marked: as before
    record = json.loads(path.read_text())
    assert (record["kind"], record["out_of_memory"], record["attempt"]) == ("out_of_memory", details, 1)

    retry = start_guard(path, 2, [], "x", "train out", log, run="41:900")
    assert retry.attempt == 2 and retry.out_of_memory["out_of_memory"] == details
    later = start_guard(path, 1, [], "x", "train out", log, run="52:100")  # a new run
    assert later.out_of_memory == record and path.exists()

    assert later.record("ShardFormatError", "shard_0.bin: bad magic", log)
    assert json.loads(path.read_text())["earlier_out_of_memory"] == record
    with pytest.raises(RepeatedFailureError):
        start_guard(path, 2, [], "x", "train out", log, run="52:100")
    fixed = start_guard(path, 1, [], "x", "train out", log, run="63:200")  # the input fixed: a new run
    assert fixed.out_of_memory == record and json.loads(path.read_text()) == record


def test_a_rank_out_of_memory_is_reported_with_its_micro_batch(tmp_path, monkeypatch):
    monkeypatch.setenv(RANK_REPORTS_ENV, str(tmp_path))
    for rank, exc in (
        (1, failures.mark_out_of_memory(torch.OutOfMemoryError("oom"), {"micro_batch": 8})),
        (0, RuntimeError("Connection closed by peer")),
    ):
        monkeypatch.setenv("RANK", str(rank))
        with pytest.raises(type(exc)), reporting_rank_error():
            raise exc
    reports = rank_reports(tmp_path)
    assert rank_failure(reports) is None
    oom = failures.rank_out_of_memory(reports)
    assert (oom["rank"], oom["out_of_memory"]) == ("1", {"micro_batch": 8})
    assert failures.rank_out_of_memory([r for r in reports if r["rank"] == "0"]) is None
