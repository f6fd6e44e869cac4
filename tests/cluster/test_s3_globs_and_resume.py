"""S3 beyond Snakemake storage, on the real S3 server: an `s3://` glob as the corpus,
and resume parts kept under the storage prefix when S3 is the default storage (the
eks profile, where a killed pod's working directory is gone with it)."""


import numpy as np
import pytest
import yaml

from shardflow.core import s3 as s3mod
from shardflow.core.parts import PartStore
from tests.helpers import SNAKEMAKE, assert_no_secrets
from tests.support.faults import kill_job_when

pytestmark = pytest.mark.cluster

DS = "globbed"
TARGETS = [f"results/{DS}/embeddings.npy", f"results/{DS}/ids.parquet"]


@pytest.fixture
def storage_env(s3, monkeypatch):
    """What a job sees: the storage settings as SNAKEMAKE_STORAGE_S3_* variables."""
    for name, value in (("ENDPOINT_URL", s3.endpoint_url), ("ACCESS_KEY", s3.access_key),
                        ("SECRET_KEY", s3.secret_key), ("REGION", s3.region)):
        monkeypatch.setenv(f"SNAKEMAKE_STORAGE_S3_{name}", value)


def test_s3_glob_lists_like_a_local_glob(s3, s3_prefix, storage_env):
    client = s3.client()
    keys = ["a/x.jsonl", "a/y.jsonl", "a/b/z.jsonl", "a/b/c/w.jsonl", "a/notes.txt", "a/x.jsonl.gz", "ab.jsonl"]
    for key in keys:
        client.put_object(Bucket=s3.bucket, Key=f"{s3_prefix}/{key}", Body=b"{}\n")
    base = f"s3://{s3.bucket}/{s3_prefix}"
    found = s3mod.expand(f"{base}/a/*.jsonl", s3mod.client())

    def rel(urls):
        return [u[len(base) + 1 :] for u in urls]

    assert rel(found) == ["a/x.jsonl", "a/y.jsonl"]  # `*` stays within one folder
    assert rel(s3mod.expand(f"{base}/a/**/*.jsonl", s3mod.client())) == [
        "a/b/c/w.jsonl", "a/b/z.jsonl", "a/x.jsonl", "a/y.jsonl"
    ]
    assert rel(s3mod.expand(f"{base}/a/[xy].json?", s3mod.client())) == ["a/x.jsonl", "a/y.jsonl"]
    assert s3mod.expand(f"{base}/a/x.jsonl", s3mod.client()) == [f"{base}/a/x.jsonl"]  # no glob: as is
    with pytest.raises(FileNotFoundError, match=r"matches no object"):
        s3mod.expand(f"{base}/a/*.parquet", s3mod.client())


def test_fetch_copies_an_object_says_when_there_is_none_and_raises_on_the_rest(s3, s3_prefix, tmp_path):
    """core.s3.fetch, as the report's landing page is fetched at parse time."""
    s3.client().put_object(Bucket=s3.bucket, Key=f"{s3_prefix}/results/report.rst", Body=b"shardflow run\n")
    dest = tmp_path / "cache" / "landing.rst"
    url = f"s3://{s3.bucket}/{s3_prefix}/results/report.rst"
    settings = {"endpoint_url": s3.endpoint_url, "access_key": s3.access_key, "secret_key": s3.secret_key,
                "region": s3.region}
    quick = s3mod.client(settings, attempts=1, connect_timeout=5)
    assert s3mod.fetch(url, dest, quick) and dest.read_bytes() == b"shardflow run\n"
    assert not s3mod.fetch(url + ".missing", dest, quick) and not dest.exists()  # no stale copy left
    denied = s3mod.client({**settings, "secret_key": "wrong"}, attempts=1, connect_timeout=5)
    with pytest.raises(Exception, match="SignatureDoesNotMatch|AccessDenied|InvalidAccessKeyId"):
        s3mod.fetch(url, dest, denied)


def test_parts_in_s3_resume_and_are_removed(s3, s3_prefix, storage_env):
    url = f"s3://{s3.bucket}/{s3_prefix}/resume/job"
    store = PartStore(url, {"n_texts": 4}).open()
    store.save_array(0, np.arange(6, dtype=np.float32).reshape(2, 3))
    store.save_records(1, [{"id": "a", "summary": "<b>"}])
    again = PartStore(url, {"n_texts": 4}).open()  # a rerun finds them
    np.testing.assert_array_equal(again.load_array(0, (2, 3), np.float32), np.arange(6).reshape(2, 3))
    assert again.load_array(0, (3, 3), np.float32) is None  # wrong shape: not this job's
    assert again.load_records(1, 1) == [{"id": "a", "summary": "<b>"}]
    assert again.load_array(2, (2, 3), np.float32) is None
    with pytest.raises(ValueError, match=r"belongs to another job \(differs in \['n_texts'\]\)"):
        PartStore(url, {"n_texts": 5}).open()
    again.remove()
    assert not s3.objects(f"{s3_prefix}/resume/")


def test_glob_corpus_and_a_killed_embed_job_resuming_from_parts_in_s3(
    s3, s3_prefix, corpus_file, tmp_path, sm
):
    """The corpus as two objects matched by a glob; S3 as the default storage. The embed
    job is SIGKILLed after some parts; its retry resumes from the parts under the storage
    prefix, and the outputs are byte-identical to a local run over the same records."""
    lines = corpus_file.read_text().splitlines(keepends=True)
    client = s3.client()
    for i, part in enumerate((lines[:12], lines[12:])):
        client.put_object(Bucket=s3.bucket, Key=f"{s3_prefix}/corpus/part-{i}.jsonl", Body="".join(part).encode())
    client.put_object(Bucket=s3.bucket, Key=f"{s3_prefix}/corpus/README.txt", Body=b"not a part\n")

    def config(path, corpus):
        cfg = {
            "dataset": DS, "n_chunks": 1, "input": {"path": corpus},
            "embedding": {"window": 1},  # one part per text: 30 parts
            "resources": {"embed": {"threads": 1}},
        }
        path.write_text(yaml.safe_dump(cfg, sort_keys=False))
        return path

    # The local run over the same records goes on beside the S3 run (one core each).
    ref = tmp_path / "ref"
    ref.mkdir()
    local_run = sm.start(ref, "-s", str(sm.REPO / "Snakefile"), "-d", str(ref), *TARGETS,
                         "--configfile", str(config(ref / "c.yaml", str(corpus_file))), "--cores", "1", timeout_s=300)

    run = tmp_path / "run"
    run.mkdir()
    cfg = config(run / "c.yaml", f"s3://{s3.bucket}/{s3_prefix}/corpus/part-*.jsonl")
    cmd = [
        SNAKEMAKE, "-s", str(sm.REPO / "Snakefile"), "-d", str(run), *TARGETS, "--configfile", str(cfg),
        "--cores", "1", "--default-storage-provider", "s3", "--default-storage-prefix", f"s3://{s3.bucket}/{s3_prefix}",
    ]
    # The S3 settings as environment variables, as on a real site: Snakemake prints its
    # whole command line into the run's log, so --storage-s3-secret-key would be kept there.
    env = sm.env(**{f"SNAKEMAKE_STORAGE_S3_{k}": v for k, v in (
        ("ENDPOINT_URL", s3.endpoint_url), ("ACCESS_KEY", s3.access_key),
        ("SECRET_KEY", s3.secret_key), ("REGION", s3.region))})
    parts = f"{s3_prefix}/results/{DS}/.resume/"
    try:
        out, returncode = kill_job_when(
            cmd, run, env, "embed", lambda: sum(k.endswith(".npy") for k in s3.objects(parts)) >= 2,
            what="second part in the bucket",
        )
    finally:
        local = local_run.finish()
    assert local.returncode == 0, sm.describe(local)
    assert returncode == 0, out[-4000:]
    assert "Error in rule embed" in out, out[-4000:]  # the first attempt died, the retry finished

    objects = s3.objects(f"{s3_prefix}/")
    log = objects[f"{s3_prefix}/logs/embed/{DS}/chunk_0.log"].decode()
    assert f"resuming from s3://{s3.bucket}/{parts}" in log, log[-3000:]
    for rel in TARGETS + [f"results/{DS}/chunks/chunk_0.jsonl"]:
        assert sm.sha256(objects[f"{s3_prefix}/{rel}"]) == sm.sha256((ref / rel).read_bytes()), rel
    assert not [k for k in objects if k.startswith(parts)]  # parts removed once the outputs were safe
    manifest = objects[f"{s3_prefix}/results/{DS}/chunks/manifest.json"].decode()
    assert "part-0.jsonl" in manifest and "part-1.jsonl" in manifest and "README" not in manifest
    # The keys reached the jobs (their parts went to the bucket) through the environment
    # only: no file of the run, no object it stored, nothing it printed holds them.
    files = assert_no_secrets(
        run, texts=(out, *(v.decode("latin-1") for v in objects.values())),
        secrets={"S3 access key": s3.access_key, "S3 secret key": s3.secret_key},
    )
    assert len(files) > 10
