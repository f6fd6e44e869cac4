"""S3 on a real S3 server (SeaweedFS on loopback, with credentials enforced), with local
jobs: as Snakemake's default storage (what the `eks` profile relies on), and as the
place the corpus is read from (`input.path: s3://...`)."""

import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import threading
import time

import pytest
import yaml

from shardflow.core.runlog import LOG_SCAN
from shardflow.workflow import mirror
from tests.helpers import REPO, job_counts
from tests.support import s3server

pytestmark = pytest.mark.cluster


def test_real_workflow_outputs_land_in_the_bucket_identical_to_a_local_run_and_a_rerun_does_nothing(
    s3, s3_prefix, s3_corpus, real_local, tmp_path, sm
):
    """What the eks profile relies on, with local jobs: S3 as default storage, the corpus
    read from the bucket too (no shared filesystem at all)."""
    config = sm.real_config(tmp_path / "config.yaml", s3_corpus)
    args = ["--cores", "2", *s3.snakemake_args(s3_prefix)]
    first = sm.run_real(tmp_path, config, *args, timeout_s=300)
    assert first.returncode == 0, sm.describe(first)

    objects = s3.objects(f"{s3_prefix}/")
    sm.check_bucket_outputs(objects, s3_prefix, real_local.hashes)
    # Nothing but Snakemake's own state (and the embed jobs' empty resume folder) is left
    # in the working directory: the bucket is the only copy.
    left = [p for p in tmp_path.rglob("*") if p.is_file() and ".snakemake" not in p.parts and p != config]
    assert left == []

    def last_modified():
        listing = s3.client().list_objects_v2(Bucket=s3.bucket, Prefix=f"{s3_prefix}/")
        return {o["Key"]: o["LastModified"] for o in listing["Contents"]}

    before = last_modified()
    dry = sm.run_real(tmp_path, config, *args, "--dry-run")
    assert dry.returncode == 0, sm.describe(dry)
    assert "Nothing to be done" in dry.output, sm.describe(dry)
    again = sm.run_real(tmp_path, config, *args)
    assert again.returncode == 0, sm.describe(again)
    assert "Nothing to be done" in again.output, sm.describe(again)
    assert last_modified() == before

    # `make status STORAGE=...` sees the run in the bucket, through a local copy of what it reads.
    check_status_from_the_bucket(s3, s3_prefix, config, tmp_path, sm)


def check_status_from_the_bucket(s3, s3_prefix, config, workdir, sm):
    storage = f"s3://{s3.bucket}/{s3_prefix}"
    env = sm.env(
        SNAKEMAKE_STORAGE_S3_ENDPOINT_URL=s3.endpoint_url,
        SNAKEMAKE_STORAGE_S3_ACCESS_KEY=s3.access_key,
        SNAKEMAKE_STORAGE_S3_SECRET_KEY=s3.secret_key,
    )

    def status(*extra):
        cmd = [sys.executable, "-m", "shardflow.cli", "status", "--configfile", str(config), "--json", *extra]
        proc = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True, timeout=120, check=False)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        out = json.loads(proc.stdout)
        embed = next(st for st in out["stages"] if st["stage"] == "embed")
        return out, embed

    out, embed = status()  # without the prefix: nothing here, and it says where to look
    assert embed["done"] == 0 and any("make status STORAGE=s3://<bucket>/<prefix>" in n for n in out["notes"])

    out, embed = status("--storage-prefix", storage)
    assert (embed["done"], embed["jobs"], embed["records_done"]) == (sm.N_CHUNKS, sm.N_CHUNKS, sm.CORPUS_DOCS), out
    assert embed["rate_per_job"] > 0 and embed["gpus_per_job"] == 0, embed  # the jobs' stats, read whole: on the CPU
    note = next(n for n in out["notes"] if n.startswith(f"read from {storage}/"))
    objects = s3.client().list_objects_v2(Bucket=s3.bucket, Prefix=f"{s3_prefix}/")["Contents"]
    assert f": {len(objects)} objects, " in note, note
    copy = workdir / mirror.default_folder(storage)
    stats = f"results/{sm.DATASET}/embed/embed_0.stats.json"  # a record status reads: its bytes
    assert (copy / stats).read_bytes() == s3.objects(f"{s3_prefix}/{stats}")[f"{s3_prefix}/{stats}"]
    merged = (copy / sm.MERGED[0]).stat()  # an output: its size only (sparse: no bytes on this disk)
    size = next(o["Size"] for o in objects if o["Key"] == f"{s3_prefix}/{sm.MERGED[0]}")
    assert merged.st_size == size > 0 and merged.st_blocks == 0

    # Unchanged objects are not fetched again; a gone one is gone here too; a long log is
    # its tail; a new output is its size only.
    out, _ = status("--storage-prefix", storage)
    assert any(", 0 fetched now and 0 stood in for" in n for n in out["notes"]), out["notes"]
    gone = f"results/{sm.DATASET}/embed/embed_1.npy"
    assert (copy / gone).is_file()
    s3.client().delete_object(Bucket=s3.bucket, Key=f"{s3_prefix}/{gone}")
    # A log is fetched whole up to LOG_SCAN (status reads back that far for a failed line),
    # a longer one as its last LOG_SCAN bytes.
    log = b"".join(b"line %07d of a long log\n" % i for i in range(LOG_SCAN // 24 + 50_000))
    s3.client().put_object(Bucket=s3.bucket, Key=f"{s3_prefix}/logs/long.log", Body=log)
    s3.client().put_object(Bucket=s3.bucket, Key=f"{s3_prefix}/results/big.npy", Body=b"v" * (3 << 20))
    index = copy / ".shardflow-mirror.json"  # damaged: it names a file outside the copy, which stays
    outside = workdir / ".snakemake" / "keep.txt"
    outside.write_text("not the copy's")
    index.write_text(json.dumps({**json.loads(index.read_text()), os.path.relpath(outside, copy): ["x", 1, "whole"]}))
    out, embed = status("--storage-prefix", storage)
    assert outside.is_file()
    assert embed["done"] == sm.N_CHUNKS - 1, embed  # the other: its log, no output (stalled, status says)
    assert any(", 1 fetched now and 1 stood in for" in n and ", 1 gone" in n for n in out["notes"]), out["notes"]
    assert not (copy / gone).exists()
    tail = (copy / "logs" / "long.log").read_bytes()  # compared by hash: a failing == of MBs diffs for minutes
    assert len(log) > LOG_SCAN and hashlib.sha256(tail).digest() == hashlib.sha256(log[-LOG_SCAN:]).digest()
    assert (copy / "results" / "big.npy").stat().st_size == 3 << 20


@pytest.mark.parametrize("dry_run", [False, True], ids=["run", "dry-run"])
def test_wrong_credentials_stop_the_run_with_a_clear_error(s3, s3_prefix, s3_corpus, tmp_path, sm, dry_run):
    config = sm.real_config(tmp_path / "config.yaml", s3_corpus)
    args = ["--cores", "1", *s3.snakemake_args(s3_prefix)]
    args[args.index("--storage-s3-secret-key") + 1] = "not-the-secret-key"
    run = sm.run_real(tmp_path, config, *args, *(["--dry-run"] if dry_run else []), timeout_s=120)
    assert run.returncode == 1, sm.describe(run)
    # Snakemake names the object it could not check and the server's refusal.
    assert f"Failed to check existence of s3://{s3.bucket}/" in run.output, sm.describe(run)
    assert "(403)" in run.output and "Forbidden" in run.output, sm.describe(run)
    assert not s3.objects(f"{s3_prefix}/")


def test_auto_chunking_of_an_s3_corpus_needs_expected_records(s3, s3_corpus, tmp_path, sm):
    """An s3:// corpus cannot be counted at parse time: `n_chunks: auto` stops with a
    clear error unless chunking.expected_records is given, which then plans the chunks."""
    flags = s3.storage_args()
    config = sm.real_config(tmp_path / "config.yaml", s3_corpus)
    cfg = yaml.safe_load(config.read_text())
    config.write_text(yaml.safe_dump({**cfg, "n_chunks": "auto"}))
    refused = sm.run_real(tmp_path, config, *flags, "--dry-run", timeout_s=120)
    assert refused.returncode == 1, sm.describe(refused)
    assert "n_chunks: auto cannot count a corpus that does not exist yet (demo or s3://): " \
           "set chunking.expected_records or n_chunks" in refused.output, sm.describe(refused)

    config.write_text(yaml.safe_dump({**cfg, "n_chunks": "auto", "chunking": {"expected_records": 30, "items_per_chunk": 8}}))
    planned = sm.run_real(tmp_path, config, *flags, "--dry-run", timeout_s=120)
    assert planned.returncode == 0, sm.describe(planned)
    assert job_counts(planned.output)["embed"] == 4  # ceil(30 / 8)
    assert not (tmp_path / "results").exists()


def test_by_source_plans_one_split_job_per_object_of_an_s3_glob(s3, s3_prefix, tmp_path, sm):
    """chunking.by: source over an s3:// glob: the objects listed at parse time are the
    chunks, each split_source job fetching its one object through storage."""
    keys = [f"{s3_prefix}/parts/part-{i}.jsonl" for i in (1, 2, 3)]
    for i, key in enumerate(keys):
        s3.client().put_object(Bucket=s3.bucket, Key=key, Body=f'{{"id": "{i}", "text": "doc {i}"}}\n'.encode())
    config = sm.real_config(tmp_path / "config.yaml", f"s3://{s3.bucket}/{s3_prefix}/parts/*.jsonl")
    cfg = yaml.safe_load(config.read_text())
    config.write_text(yaml.safe_dump({**cfg, "n_chunks": "auto", "chunking": {"by": "source"}}))
    planned = sm.run_real(tmp_path, config, *s3.storage_args(), "--dry-run", timeout_s=120)
    assert planned.returncode == 0, sm.describe(planned)
    counts = job_counts(planned.output)
    assert counts["split_source"] == counts["embed"] == 3 and counts[f"split_{sm.DATASET}"] == 1, counts
    for key in keys:
        assert f"input: s3://{s3.bucket}/{key} (retrieve from storage)" in planned.output, sm.describe(planned)


def test_by_source_in_the_bucket_runs_only_a_new_objects_chunk(s3, s3_prefix, tmp_path, sm):
    """chunking.by: source with S3 as the default storage (the eks profile's, jobs local
    here) and the corpus parts in the bucket: an object added under the glob adds a
    chunk, and only its split and summarise jobs and the merge run; the finished chunks'
    summaries in the bucket are not written again, and the merged ones are in corpus
    order."""
    sentences = "It has a first sentence. Then a second one. A third comes last. And a fourth."

    def put(i: int, n: int) -> None:
        body = "".join(json.dumps({"id": f"p{i}-{j}", "text": f"Part {i} doc {j}. {sentences}"}) + "\n" for j in range(n))
        s3.client().put_object(Bucket=s3.bucket, Key=f"{s3_prefix}/parts/part-{i}.jsonl", Body=body.encode())

    put(1, 3)
    put(2, 2)
    config = tmp_path / "grow.yaml"
    config.write_text(yaml.safe_dump({
        "dataset": "grow", "n_chunks": "auto", "tasks": ["summarisation"], "summarise": {"method": "lead"},
        "chunking": {"by": "source"}, "input": {"path": f"s3://{s3.bucket}/{s3_prefix}/parts/*.jsonl"},
    }))
    run_prefix = f"{s3_prefix}/run"
    args = ["-s", str(sm.REPO / "Snakefile"), "-d", str(tmp_path), "results/grow/summaries.jsonl",
            "--configfile", str(config), "--cores", "2", *s3.snakemake_args(run_prefix)]
    first = sm.run(tmp_path, *args, timeout_s=300)
    assert first.returncode == 0, sm.describe(first)

    def modified() -> dict[str, object]:
        listing = s3.client().list_objects_v2(Bucket=s3.bucket, Prefix=f"{run_prefix}/results/grow/summarise/")
        return {o["Key"].rsplit("/", 1)[1]: o["LastModified"] for o in listing["Contents"]}

    finished = {k: v for k, v in modified().items() if k.startswith("summaries_")}
    assert sorted(finished) == [f"summaries_{i}.{ext}" for i in (0, 1) for ext in ("jsonl", "stats.json")]
    put(3, 2)
    again = sm.run(tmp_path, *args, timeout_s=300)
    assert again.returncode == 0, sm.describe(again)
    counts = job_counts(again.output)  # the jobs the run planned
    assert counts == {"split_source": 1, "split_grow": 1, "summarise": 1, "merge_summaries": 1, "total": 4}, counts
    assert {k: v for k, v in modified().items() if k in finished} == finished
    merged = s3.objects(f"{run_prefix}/results/grow/summaries.jsonl")[f"{run_prefix}/results/grow/summaries.jsonl"]
    assert [json.loads(line)["id"] for line in merged.decode().splitlines()] == [
        "p1-0", "p1-1", "p1-2", "p2-0", "p2-1", "p3-0", "p3-1"]


def test_storage_plugin_deletes_a_bucket_when_it_removes_the_last_object(s3, tmp_path):
    """snakemake-storage-plugin-s3 0.3.6 `remove()` deletes the bucket when it is empty
    afterwards. Snakemake removes objects (temp() outputs, outputs of failed jobs, the
    uploaded source archive at the end of a Kubernetes run), so a bucket holding nothing
    else disappears. Hence: keep a sentinel object at the bucket root and do not grant
    s3:DeleteBucket (profiles/README.md). If this test fails, the plugin changed: update
    that advice."""
    from snakemake_storage_plugin_s3 import (
        StorageObject,
        StorageProvider,
        StorageProviderSettings,
    )

    settings = StorageProviderSettings(
        endpoint_url=s3.endpoint_url, access_key=s3.access_key, secret_key=s3.secret_key, region=s3.region
    )
    provider = StorageProvider(local_prefix=tmp_path / "local", logger=logging.getLogger(__name__), settings=settings)
    client = s3.client()

    def bucket_names():
        return {b["Name"] for b in client.list_buckets()["Buckets"]}

    def remove(bucket, key):
        StorageObject(query=f"s3://{bucket}/{key}", keep_local=False, retrieve=True, provider=provider).remove()

    client.create_bucket(Bucket="shardflow-scratch")
    client.put_object(Bucket="shardflow-scratch", Key="run/out.txt", Body=b"x")
    remove("shardflow-scratch", "run/out.txt")
    assert "shardflow-scratch" not in bucket_names()

    # With a sentinel beside it, the same removal leaves the bucket alone.
    client.create_bucket(Bucket="shardflow-scratch")
    client.put_object(Bucket="shardflow-scratch", Key=".keep", Body=b"keep")
    client.put_object(Bucket="shardflow-scratch", Key="run/out.txt", Body=b"x")
    remove("shardflow-scratch", "run/out.txt")
    assert "shardflow-scratch" in bucket_names()


# ---- faults -------------------------------------------------------------------------------

OUTAGE_S = 2  # the server stays down this long before its restart (which takes ~3 s more)
# What Snakemake prints when a storage call fails for good (snakemake-interface-storage-plugins:
# managed_exists / store / retrieve), naming the object.
STORAGE_FAILURE = re.compile(
    r"Failed to (?:check existence of|store output in storage|retrieve storage object from) s3://\S+"
)


def eks_s3_retries() -> int:
    """`storage-s3-retries` as the eks profile sets it (the profile is a YTE template, and
    plain YAML to a reader: this key is a literal)."""
    profile = yaml.safe_load((REPO / "profiles" / "eks" / "config.yaml").read_text())
    return int(profile["storage-s3-retries"])


def test_s3_server_killed_and_restarted_mid_run_is_ridden_out_with_the_eks_profiles_retries(
    s3, s3_prefix, s3_corpus, real_local, tmp_path, sm
):
    """Fault: the S3 server (SeaweedFS, the session's) SIGKILLed while the split job of the
    real workflow runs -- corpus and results in the bucket -- kept down OUTAGE_S, then
    restarted on the same ports and data folder (it takes about 3 s more to take writes).

    With snakemake-storage-plugin-s3 0.3.6's default of 5 retries, boto3's backoff
    (standard mode: full jitter, 50 ms doubling for connection errors and 5xx) spans about
    a second, so the first storage call in the outage -- the upload of the job's outputs
    -- failed for good and the run stopped ("Failed to store output in storage s3://...",
    observed with Snakemake 9.27; a rerun then completed). With the eks profile's
    `storage-s3-retries` (its comment gives the backoff it buys), the run completes on
    its own, the bucket holds the reference's bytes, and a rerun has nothing to do.

    The target is the split (the real workflow's first job; its chunks are compared with
    the local reference run): a fault in a later job works the same way."""
    retries = eks_s3_retries()
    config = sm.real_config(tmp_path / "config.yaml", s3_corpus)
    manifest = f"results/{sm.DATASET}/chunks/manifest.json"
    args = [*sm.real_args(tmp_path, config, manifest), "--cores", "1", *s3.snakemake_args(s3_prefix)]
    args += ["--storage-s3-retries", str(retries)]
    # Snakemake writes the job's script just before running it (after checking the
    # outputs in storage): the server then dies with the job running, before its upload.
    scripts = tmp_path / ".snakemake" / "scripts"

    run = sm.start(tmp_path, *args, timeout_s=240)
    run.wait_until(lambda: list(scripts.glob("*.split.py")), "the split job to start")
    s3server.kill(s3)
    down = time.time()
    # When the job writes its last output (locally, before Snakemake uploads it; the local
    # copy's mtime is later set to the object's), seen from a thread.
    ended: list[float] = []
    storage = tmp_path / ".snakemake" / "storage"

    def watch():
        while not ended and time.time() < down + 120:
            if any(storage.rglob(f"*/{manifest}")):
                ended.append(time.time())
            time.sleep(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    time.sleep(OUTAGE_S)
    s3server.restart(s3)  # same endpoint and keys: `s3` stays valid
    back = time.time()  # the bucket takes writes again
    first = run.finish()
    watcher.join()
    print(f"S3 down {back - down:.1f} s mid-run, job's output written {ended[0] - down:.1f} s in, {retries} retries: "
          f"exit {first.returncode} after {first.seconds:.1f} s")

    assert not first.timed_out, sm.describe(first)
    # The job ended while the server was down, so its upload met the outage (the
    # retries rode it out); a job that outlasted the outage would prove nothing.
    assert down < ended[0] < back, (down, ended, back)
    assert first.returncode == 0, sm.describe(first)
    assert not STORAGE_FAILURE.search(first.output), sm.describe(first)
    objects = s3.objects(f"{s3_prefix}/")
    assert f"{s3_prefix}/{manifest}" in objects
    assert {rel: sm.sha256(objects[f"{s3_prefix}/{rel}"]) for rel in sm.CHUNKS} == {
        rel: real_local.hashes[rel] for rel in sm.CHUNKS
    }
    again = sm.run(tmp_path, *args, "--dry-run", timeout_s=120)
    assert again.returncode == 0 and "Nothing to be done" in again.output, sm.describe(again)


def test_the_test_server_refuses_a_disk_it_could_not_write_to_and_says_so(tmp_path, monkeypatch):
    """CI once failed 19 tests on "no volume server capacity registered yet", after a
    minute each, with a disk at 99% (weed's default floor is 1% of the disk): the floor is
    now absolute and a disk below it is named before weed starts."""
    free_mib = shutil.disk_usage(tmp_path).free // 2**20
    monkeypatch.setattr(s3server, "MIN_FREE_SPACE_BYTES", free_mib * 2**20)
    started = time.monotonic()
    with pytest.raises(s3server.S3ServerError, match=r"only \d+ MiB free on the disk of .*: SeaweedFS takes no writes"):
        s3server.start(tmp_path)
    assert time.monotonic() - started < 5
    assert not (tmp_path / s3server.PID_FILE).exists()
