"""shardflow.core.s3 without a server (the server tests: tests/cluster/test_s3_globs_and_resume.py)."""

import pytest

from shardflow.core.s3 import S3Url, export_settings, glob_regex, has_magic, settings_from_env


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
