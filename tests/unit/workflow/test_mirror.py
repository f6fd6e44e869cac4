"""What the local copy of a run in S3 holds of each object (shardflow.workflow.mirror).
The copy itself is tested against the real S3 server in tests/cluster/test_s3.py
(`check_status_from_the_bucket`)."""

import json
import os
from pathlib import Path

import pytest

from shardflow.cli import main
from shardflow.core.runlog import FAILED
from shardflow.workflow import mirror
from shardflow.workflow import status as st
from shardflow.workflow.mirror import SIZED, TAIL, WHOLE


@pytest.mark.parametrize(
    ("path", "size", "want"),
    [
        ("results/demo/embed/embed_3.stats.json", 900, WHOLE),
        ("logs/embed/demo_3.log", 2_000, WHOLE),
        ("benchmarks/embed/demo_3.tsv", 300, WHOLE),
        ("results/demo/chunks/manifest.json", 5 << 20, WHOLE),  # a manifest of many chunks
        ("logs/embed/demo_3.log", 5 << 20, WHOLE),  # status reads back up to LOG_SCAN of a log
        ("logs/embed/demo_3.log", (16 << 20) + 1, TAIL),  # its last LOG_SCAN bytes
        ("results/demo/embed/embed_3.npy", 5 << 20, SIZED),
        ("results/demo/chunks/chunk_3.jsonl", 5 << 20, SIZED),
        ("results/demo/huge.json", 100 << 20, SIZED),
        ("results/demo/embed/embed_3.npy", 1_000, SIZED),  # an output, however small: status never reads it
        ("results/demo/embed/embed_3.ids.parquet", 1_000, SIZED),
        ("results/demo/chunks/chunk_3.jsonl", 1_000, SIZED),
        ("benchmarks/embed/demo/chunk_3.tsv", 5 << 20, SIZED),
    ],
)
def test_what_the_copy_holds_of_an_object(path, size, want):
    assert mirror.how(path, size) == want


@pytest.mark.parametrize(
    ("key", "want"),
    [
        ("runs/a/logs/x.log", "logs/x.log"),
        ("runs/a/", None),  # the prefix's own folder marker
        ("runs/a/results/", None),  # a folder marker
        ("runs/a/results/../../x", None),  # would land outside the copy
        ("runs/a//x", None),
        ("runs/a/" + mirror.INDEX, None),  # would overwrite the copy's index
    ],
)
def test_keys_that_cannot_be_a_file_of_the_copy_are_passed_over(key, want):
    assert mirror._relative(key, "runs/a/") == want


def test_each_prefix_has_a_copy_of_its_own_that_no_other_copy_holds():
    folder = mirror.default_folder
    assert (
        folder("s3://bkt/runs/a/")
        == folder("s3://bkt/runs/a")
        == Path(".snakemake/shardflow-status/s3%3A%2F%2Fbkt%2Fruns%2Fa")
    )
    assert folder("s3://bkt").parent == folder("s3://bkt/runs/a").parent  # the bucket's root: beside, not above
    long_a, long_b = folder("s3://bkt/" + "a/" * 150 + "x"), folder("s3://bkt/" + "a/" * 150 + "y")
    assert len(long_a.name) == mirror.NAME_MAX and long_a != long_b  # a file name holds 255 bytes


def test_a_first_call_that_fails_leaves_no_copy_behind(tmp_path, monkeypatch, capsys):
    import socket

    with socket.socket() as closed:  # a port nothing listens on: connections refused
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SNAKEMAKE_STORAGE_S3_ENDPOINT_URL", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("SNAKEMAKE_STORAGE_S3_ACCESS_KEY", "k")
    monkeypatch.setenv("SNAKEMAKE_STORAGE_S3_SECRET_KEY", "s")
    monkeypatch.setattr(mirror, "ATTEMPTS", 1)
    config = tmp_path / "c.yaml"
    config.write_text("input: {path: corpus.jsonl}\n")
    (tmp_path / "corpus.jsonl").write_text('{"id": 1, "text": "a"}\n')
    assert main(["status", "--configfile", str(config), "--storage-prefix", "s3://bkt/runs/a"]) == 2
    assert "cannot list s3://bkt/runs/a/" in capsys.readouterr().err
    assert not mirror.default_folder("s3://bkt/runs/a").exists()


@pytest.mark.parametrize(
    ("given", "missing"),
    [
        ({}, "no S3 credentials found"),  # raised when the listing is signed
        ({"AWS_ACCESS_KEY_ID": "k"}, "missing: AWS_SECRET_ACCESS_KEY"),  # raised when the client is made
        ({"SNAKEMAKE_STORAGE_S3_ACCESS_KEY": "k"}, "SNAKEMAKE_STORAGE_S3_SECRET_KEY is not)"),
    ],
    ids=["none", "aws-key-alone", "storage-key-alone"],
)
def test_credentials_missing_are_one_error_naming_the_variables(tmp_path, monkeypatch, capsys, given, missing):
    """No credentials, or half of them, from a laptop: one line naming the prefix and the
    variables that give them, not botocore's traceback (a key without its secret) or its
    bare 'Unable to locate credentials'; and no copy left behind."""
    for name in list(os.environ):
        if name.startswith(("AWS_", "SNAKEMAKE_STORAGE_S3_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # no instance role to ask for
    monkeypatch.setenv("SNAKEMAKE_STORAGE_S3_ENDPOINT_URL", "http://127.0.0.1:9")  # never reached: unsigned
    for name, value in given.items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "c.yaml"
    config.write_text("input: {path: corpus.jsonl}\n")
    (tmp_path / "corpus.jsonl").write_text('{"id": 1, "text": "a"}\n')
    assert main(["status", "--configfile", str(config), "--storage-prefix", "s3://bkt/runs/a"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("status: cannot read s3://bkt/runs/a/: ") and err.count("\n") == 1, err
    assert missing in err, err
    for variable in (
        "SNAKEMAKE_STORAGE_S3_ACCESS_KEY",
        "SNAKEMAKE_STORAGE_S3_SECRET_KEY",
        "AWS_PROFILE",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
    ):
        assert variable in err, err
    assert not mirror.default_folder("s3://bkt/runs/a").exists()


def test_a_storage_prefix_that_is_no_s3_url_is_refused_by_name(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["status", "--storage-prefix", "/data/run"])
    assert stop.value.code == 2
    assert "expected s3://<bucket>/<prefix>" in capsys.readouterr().err


def test_the_note_says_what_the_bucket_cannot_show():
    note = mirror.Mirrored(prefix="s3://bkt/runs/a/", folder=Path("copy"), objects=3, fetched=1).note()
    assert (
        "A job's log reaches the bucket when the job ends, failed or not, and never where its pod was killed (out of "
        "memory, evicted, its node lost): until then a job shows from its resume parts (stalled once they stop "
        "coming), and as waiting where it has none there (train, or gpu_jobs.resume_dir on a volume)"
    ) in note, note


class _Bucket:
    """A stand-in S3 client: `objects` {key: bytes}; `vanish`: keys deleted between the
    listing and their fetch (a job that ends meanwhile removes its resume folder)."""

    def __init__(self, objects: dict[str, bytes], vanish=()):
        self.objects, self.vanish = dict(objects), set(vanish)
        self.ranges: list[tuple[str, str | None]] = []  # (key, Range) of each fetch

    def get_paginator(self, name):
        assert name == "list_objects_v2"
        bucket = self

        class Pages:
            def paginate(self, Bucket, Prefix):  # noqa: N803 (boto3's names)
                import datetime
                import hashlib

                when = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
                listed = [
                    {"Key": k, "Size": len(v), "ETag": hashlib.md5(v).hexdigest(), "LastModified": when}
                    for k, v in sorted(bucket.objects.items())
                    if k.startswith(Prefix)
                ]
                for key in bucket.vanish:
                    bucket.objects.pop(key, None)
                yield {"Contents": listed}

        return Pages()

    def get_object(self, Bucket, Key, Range=None):  # noqa: N803
        from botocore.exceptions import ClientError

        if Key not in self.objects:
            raise ClientError({"Error": {"Code": "NoSuchKey", "Message": "gone"}}, "GetObject")
        import io

        self.ranges.append((Key, Range))
        data = self.objects[Key]
        if Range is not None:  # the only form the mirror asks for: the last N bytes
            assert Range.startswith("bytes=-"), Range
            data = data[-int(Range[len("bytes=-") :]) :]
        return {"Body": io.BytesIO(data)}


def test_an_object_gone_between_the_listing_and_its_fetch_is_gone_from_the_copy(tmp_path):
    attempt = "runs/a/results/ds/.resume/f/attempt-1.json"
    bucket = _Bucket({attempt: b"{}", "runs/a/logs/x.log": b"ok\n"})
    first = mirror.mirror("s3://bkt/runs/a", tmp_path, client=bucket)
    assert (first.objects, first.fetched) == (2, 2) and (tmp_path / "results/ds/.resume/f/attempt-1.json").is_file()
    bucket.objects[attempt] = b'{"items_saved": 5}'  # changed, then gone before its fetch
    bucket.vanish = {attempt}
    second = mirror.mirror("s3://bkt/runs/a", tmp_path, client=bucket)  # raised OSError (NoSuchKey)
    assert (second.objects, second.fetched, second.removed) == (1, 0, 1)
    assert not (tmp_path / "results/ds/.resume").exists()
    assert (tmp_path / "logs/x.log").read_bytes() == b"ok\n"


def test_a_prefix_is_read_as_the_storage_plugin_reads_it(tmp_path):
    """The plugin normalises a key (posixpath.normpath): a run under `s3://bkt/runs//a`
    stored its files below runs/a/, where status must look too (it found nothing)."""
    bucket = _Bucket({"runs/a/logs/x.log": b"ok\n"})
    got = mirror.mirror("s3://bkt/runs//a/", tmp_path, client=bucket)
    assert (got.prefix, got.objects, got.fetched) == ("s3://bkt/runs/a/", 1, 1)
    assert mirror.default_folder("s3://bkt/runs//a/") == mirror.default_folder("s3://bkt/runs/a")


def test_a_server_that_does_not_answer_is_an_error_naming_the_prefix_soon(tmp_path, monkeypatch):
    """A listener that accepts and never answers: status fails after ATTEMPTS tries of
    its timeouts (here 1 s), not after core.s3.client's 9 tries of 60 s (it hung)."""
    import socket
    import threading

    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    monkeypatch.setenv("SNAKEMAKE_STORAGE_S3_ENDPOINT_URL", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("SNAKEMAKE_STORAGE_S3_ACCESS_KEY", "k")
    monkeypatch.setenv("SNAKEMAKE_STORAGE_S3_SECRET_KEY", "s")
    monkeypatch.setattr(mirror, "ATTEMPTS", 1)
    monkeypatch.setattr(mirror, "CONNECT_TIMEOUT_S", 1)
    monkeypatch.setattr(mirror, "READ_TIMEOUT_S", 1)
    raised = []

    def call():
        try:
            mirror.mirror("s3://bkt/runs/a", tmp_path)
        except OSError as exc:
            raised.append(str(exc))

    worker = threading.Thread(target=call, daemon=True)
    try:
        worker.start()
        worker.join(15)
        assert not worker.is_alive(), "mirror still waiting on a server that does not answer"
    finally:
        listener.close()
    assert raised and raised[0].startswith("cannot list s3://bkt/runs/a/: "), raised


def test_an_endpoint_that_is_no_url_is_an_error_naming_the_prefix_and_the_setting(tmp_path, monkeypatch):
    monkeypatch.setenv("SNAKEMAKE_STORAGE_S3_ENDPOINT_URL", "127.0.0.1:9")  # no scheme
    with pytest.raises(OSError, match=r"cannot read s3://bkt/runs/a/: Invalid endpoint: 127\.0\.0\.1:9 .*ENDPOINT_URL"):
        mirror.mirror("s3://bkt/runs/a", tmp_path / "copy")


def _failed_log(reason: str, before: int, after: int) -> bytes:
    """A long job's log: `before` bytes of records, core.runlog's failed line, then `after`
    bytes of traceback and output (a torchrun job's: every rank's, torchrun's summary)."""
    record = b"2026-01-01 00:00:01,000 INFO train: step 10 loss 3.2\n"
    frame = b'  File "/opt/venv/lib/python3.11/site-packages/torch/_dynamo/eval_frame.py", line 655, in _fn\n'
    failed = f"2026-01-01 00:00:09,000 CRITICAL train: {FAILED}{reason}\n".encode()
    return record * (before // len(record)) + failed + frame * (after // len(frame) + 1)


def test_a_long_logs_failed_line_behind_a_long_traceback_is_read_as_from_a_local_log(tmp_path):
    """Status reads back up to LOG_SCAN of a local log for its failed line; the copy of a
    log over 1 MiB held its last 64 KiB, so a failed line behind more traceback than that
    showed the job as killed without an error from S3 alone. The copy holds the last
    LOG_SCAN bytes now (one constant: core.runlog's), no more; a copy made before is
    fetched again, and so is a log that grows."""
    reason = "RuntimeError: NCCL error: unhandled system error"
    short = _failed_log(reason, 1 << 20, 200 << 10)  # over 1 MiB, 200 KiB after the line
    long = _failed_log(reason, 2 << 20, st.LOG_SCAN - (1 << 20))  # over LOG_SCAN: its tail alone
    bucket = _Bucket({"runs/a/logs/train/short.log": short, "runs/a/logs/train/long.log": long})
    got = mirror.mirror("s3://bkt/runs/a", tmp_path, client=bucket)
    assert (got.objects, got.fetched) == (2, 2)
    assert sorted(bucket.ranges) == [
        ("runs/a/logs/train/long.log", f"bytes=-{st.LOG_SCAN}"),  # bounded: LOG_SCAN, not the log
        ("runs/a/logs/train/short.log", None),
    ]
    assert (tmp_path / "logs/train/short.log").read_bytes() == short
    assert (tmp_path / "logs/train/long.log").read_bytes() == long[-st.LOG_SCAN :]
    for name in ("short", "long"):
        assert st.log_error(str(tmp_path / f"logs/train/{name}.log")) == reason, name

    # Copies made when a long log's was its last 64 KiB: fetched again, though the
    # objects are the same (their ETags and sizes unchanged).
    index = json.loads((tmp_path / mirror.INDEX).read_text())
    for name, log in (("short", short), ("long", long)):
        index[f"logs/train/{name}.log"][2] = "tail"
        (tmp_path / f"logs/train/{name}.log").write_bytes(log[-64 * 1024 :])
    (tmp_path / mirror.INDEX).write_text(json.dumps(index))
    bucket.ranges.clear()
    assert mirror.mirror("s3://bkt/runs/a", tmp_path, client=bucket).fetched == 2 and len(bucket.ranges) == 2
    for name in ("short", "long"):
        assert st.log_error(str(tmp_path / f"logs/train/{name}.log")) == reason, name

    # A log that grows (the job's next attempt appends to it): fetched again.
    bucket.objects["runs/a/logs/train/short.log"] = short + _failed_log("ValueError: rank 1", 0, 100 << 10)
    assert mirror.mirror("s3://bkt/runs/a", tmp_path, client=bucket).fetched == 1
    assert st.log_error(str(tmp_path / "logs/train/short.log")) == "ValueError: rank 1"
    assert mirror.LOG_SCAN is st.LOG_SCAN  # one number: the two cannot drift apart
