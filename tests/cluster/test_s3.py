"""S3 as Snakemake's default storage, on a real S3 server (SeaweedFS on loopback, with
credentials enforced): what the `eks` profile relies on, run here with local jobs."""

import logging

import pytest

pytestmark = pytest.mark.cluster


def test_outputs_land_in_the_bucket_identical_to_a_local_run_and_a_rerun_does_nothing(
    s3, s3_prefix, workflow_dir, local_hashes, sm
):
    args = ["--cores", "2", *s3.snakemake_args(s3_prefix)]
    first = sm.run(workflow_dir, *args)
    assert first.returncode == 0, sm.describe(first)

    objects = s3.objects(f"{s3_prefix}/")
    assert {rel: sm.sha256(objects[f"{s3_prefix}/{rel}"]) for rel in sm.OUTPUTS} == local_hashes
    assert f"{s3_prefix}/logs/embed/a.log" in objects  # logs are stored too
    # Nothing is left in the working directory: the bucket is the only copy.
    assert not (workflow_dir / "embeddings").exists() and not (workflow_dir / "merged").exists()

    def last_modified():
        listing = s3.client().list_objects_v2(Bucket=s3.bucket, Prefix=f"{s3_prefix}/")
        return {o["Key"]: o["LastModified"] for o in listing["Contents"]}

    before = last_modified()
    dry = sm.run(workflow_dir, *args, "--dry-run")
    assert dry.returncode == 0, sm.describe(dry)
    assert "Nothing to be done" in dry.output, sm.describe(dry)
    again = sm.run(workflow_dir, *args)
    assert again.returncode == 0, sm.describe(again)
    assert "Nothing to be done" in again.output, sm.describe(again)
    assert last_modified() == before


@pytest.mark.parametrize("dry_run", [False, True], ids=["run", "dry-run"])
def test_wrong_credentials_stop_the_run_with_a_clear_error(s3, s3_prefix, workflow_dir, sm, dry_run):
    args = ["--cores", "1", *s3.snakemake_args(s3_prefix)]
    args[args.index("--storage-s3-secret-key") + 1] = "not-the-secret-key"
    run = sm.run(workflow_dir, *args, *(["--dry-run"] if dry_run else []), timeout_s=120)
    assert run.returncode == 1, sm.describe(run)
    # Snakemake names the object it could not check and the server's refusal.
    assert f"Failed to check existence of s3://{s3.bucket}/{s3_prefix}/" in run.output, sm.describe(run)
    assert "(403)" in run.output and "Forbidden" in run.output, sm.describe(run)
    assert not s3.objects(f"{s3_prefix}/")


def test_storage_plugin_deletes_a_bucket_when_it_removes_the_last_object(s3, tmp_path):
    """snakemake-storage-plugin-s3 0.3.6 `remove()` deletes the bucket when it is empty
    afterwards. Snakemake removes objects (temp() outputs, outputs of failed jobs, the
    uploaded source archive at the end of a Kubernetes run), so a bucket holding nothing
    else disappears. Hence: keep a sentinel object at the bucket root and do not grant
    s3:DeleteBucket (profiles/README.md). If this test fails, the plugin changed: update
    that advice."""
    from snakemake_storage_plugin_s3 import StorageObject, StorageProvider, StorageProviderSettings

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
