"""shardflow.core.s3 without a server (the server tests: tests/cluster/test_s3_globs_and_resume.py)."""

import pytest

from shardflow.core.s3 import (
    LOCAL_VARIABLE,
    PREFIX_VARIABLE,
    S3Url,
    export_settings,
    glob_regex,
    has_magic,
    logical_path,
    settings_from_env,
)


@pytest.mark.parametrize(
    "pattern, matches, misses",
    [
        ("c/*.jsonl", ["c/a.jsonl", "c/.jsonl"], ["c/d/a.jsonl", "c/a.jsonl.gz", "ca.jsonl"]),
        ("c/**/*.jsonl", ["c/a.jsonl", "c/d/a.jsonl", "c/d/e/a.jsonl"], ["c/a.json", "x/c/a.jsonl"]),
        ("c/part-?.txt", ["c/part-1.txt"], ["c/part-10.txt", "c/part-/.txt"]),
        ("c/[ab].txt", ["c/a.txt", "c/b.txt"], ["c/c.txt"]),
        ("c/[!ab].txt", ["c/c.txt"], ["c/a.txt"]),
        ("c/a+b(1).txt", ["c/a+b(1).txt"], ["c/aab(1).txt"]),
    ],
)
def test_glob_regex_means_what_a_local_recursive_glob_means(pattern, matches, misses):
    regex = glob_regex(pattern)
    assert all(regex.match(k) for k in matches), matches
    assert not any(regex.match(k) for k in misses), misses


def test_urls_and_settings():
    url = S3Url.parse("s3://bucket/runs/x/")
    assert (url.bucket, str(url.join("results", "a.npy"))) == ("bucket", "s3://bucket/runs/x/results/a.npy")
    assert has_magic("s3://b/c/*.jsonl") and not has_magic("s3://b/c/a.jsonl")
    with pytest.raises(ValueError, match="without a bucket"):
        S3Url.parse("s3:///key")
    env = {"SNAKEMAKE_STORAGE_S3_ENDPOINT_URL": "http://set"}
    export_settings({"endpoint_url": "http://other", "secret_key": "s", "token": None}, env)
    assert env == {"SNAKEMAKE_STORAGE_S3_ENDPOINT_URL": "http://set", "SNAKEMAKE_STORAGE_S3_SECRET_KEY": "s"}
    assert settings_from_env(env) == {"endpoint_url": "http://set", "secret_key": "s"}


@pytest.mark.parametrize(
    "path, prefix, name",
    [
        # under the run's default storage prefix: the workflow's own path
        (".snakemake/storage/s3/b/runs/x/results/d/a.json", "s3://b/runs/x", "results/d/a.json"),
        (".snakemake/storage/s3/b/runs/x/results/d/a.json", "s3://b/runs/x/", "results/d/a.json"),
        (".snakemake/storage/s3/b/runs/x/results/d/a.json", "s3://b/runs//x", "results/d/a.json"),
        ("/work/.snakemake/storage/s3/b/runs/x/logs/a.log", "s3://b/runs/x", "logs/a.log"),
        # elsewhere in storage (a corpus read from another folder): the object's URL
        (".snakemake/storage/s3/b/corpora/c.jsonl", "s3://b/runs/x", "s3://b/corpora/c.jsonl"),
        (".snakemake/storage/s3/b/runs/xy/a.json", "s3://b/runs/x", "s3://b/runs/xy/a.json"),
        (".snakemake/storage/s3/b/corpora/c.jsonl", "", "s3://b/corpora/c.jsonl"),
        # not a storage copy: as given
        ("results/d/a.json", "s3://b/runs/x", "results/d/a.json"),
        ("my.snakemake/storage/s3/b/a.json", "s3://b", "my.snakemake/storage/s3/b/a.json"),
    ],
)
def test_records_name_a_stored_file_as_the_workflow_does(path, prefix, name, monkeypatch):
    monkeypatch.delenv(LOCAL_VARIABLE, raising=False)
    assert logical_path(path, prefix) == name


def test_the_default_prefix_is_the_one_the_workflow_exported(monkeypatch):
    path = ".snakemake/storage/s3/b/runs/x/results/d/a.json"
    monkeypatch.delenv(PREFIX_VARIABLE, raising=False)
    monkeypatch.delenv(LOCAL_VARIABLE, raising=False)
    assert logical_path(path) == "s3://b/runs/x/results/d/a.json"
    monkeypatch.setenv(PREFIX_VARIABLE, "s3://b/runs/x")
    assert logical_path(path) == "results/d/a.json"


def test_a_local_storage_prefix_of_its_own_is_followed(monkeypatch):
    """Snakemake's --local-storage-prefix moves the local copies; the workflow exports
    the one its process uses ($SHARDFLOW_LOCAL_STORAGE)."""
    path = "/scratch/sm/s3/b/runs/x/results/d/a.json"
    assert logical_path(path, "s3://b/runs/x", "/scratch/sm") == "results/d/a.json"
    assert logical_path(path, "s3://b/runs/x", "/scratch/sm/") == "results/d/a.json"
    monkeypatch.setenv(LOCAL_VARIABLE, "/scratch/sm")
    assert logical_path(path, "s3://b/runs/x") == "results/d/a.json"
    assert logical_path(".snakemake/storage/s3/b/runs/x/a", "s3://b/runs/x") == ".snakemake/storage/s3/b/runs/x/a"
