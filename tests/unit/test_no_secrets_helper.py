"""tests.helpers.assert_no_secrets, which the workflow tests run over every file of their
runs: it finds a fake credential written plainly, inside base64 (report.html embeds
results as data URIs) at any alignment, URL-quoted, gzipped or in a Parquet column."""

import base64
import gzip
import json
import urllib.parse

import pandas as pd
import pytest

from tests.helpers import FAKE_SECRETS, assert_no_secrets, offline_env

SECRET = FAKE_SECRETS["AWS_SECRET_ACCESS_KEY"]


def test_offline_env_carries_the_fake_credentials_unless_the_caller_brings_its_own(monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "a-real-one")
    env = offline_env(SHARDFLOW_GPU_LOCK_DIR="/tmp/x")
    assert all(env[name] == value for name, value in FAKE_SECRETS.items())
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    s3 = offline_env(AWS_ENDPOINT_URL="http://127.0.0.1:1", AWS_ACCESS_KEY_ID="k", AWS_SECRET_ACCESS_KEY="s")
    assert s3["AWS_ACCESS_KEY_ID"] == "k" and not set(s3.values()) & set(FAKE_SECRETS.values())


def test_clean_files_pass_and_are_listed(tmp_path):
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "a.log").write_text("nothing to see\n")
    (tmp_path / ".snakemake").mkdir()
    (tmp_path / ".snakemake" / "meta").write_text(json.dumps({"env": "AWS_SECRET_ACCESS_KEY"}))
    assert [p.name for p in assert_no_secrets(tmp_path)] == ["meta", "a.log"]


@pytest.mark.parametrize("prefix", ["", "a", "ab"])
def test_base64_inside_a_data_uri_at_any_alignment(tmp_path, prefix):
    payload = base64.b64encode(f'{prefix}{{"key": "{SECRET}"}}'.encode()).decode()
    (tmp_path / "report.html").write_text(f'<a href="data:application/json;base64,{payload}">x</a>')
    with pytest.raises(AssertionError, match="report.html: AWS_SECRET_ACCESS_KEY"):
        assert_no_secrets(tmp_path)


def test_plain_quoted_gzipped_parquet_and_output_text(tmp_path):
    cases = {
        "plain.json": json.dumps({"token": FAKE_SECRETS["HF_TOKEN"]}).encode(),
        "quoted.txt": urllib.parse.quote(SECRET, safe="").encode(),
        "rows.jsonl.gz": gzip.compress(FAKE_SECRETS["GITHUB_TOKEN"].encode()),
    }
    for name, data in cases.items():
        folder = tmp_path / name
        folder.mkdir()
        (folder / name).write_bytes(data)
        with pytest.raises(AssertionError, match=name):
            assert_no_secrets(folder)
    folder = tmp_path / "parquet"
    folder.mkdir()
    pd.DataFrame({"id": [FAKE_SECRETS["AWS_SESSION_TOKEN"]] * 50}).to_parquet(folder / "ids.parquet")
    with pytest.raises(AssertionError, match="AWS_SESSION_TOKEN"):
        assert_no_secrets(folder)
    with pytest.raises(AssertionError, match="text 0: SNAKEMAKE_STORAGE_S3_SECRET_KEY"):
        assert_no_secrets(tmp_path / "parquet" / "none", texts=(FAKE_SECRETS["SNAKEMAKE_STORAGE_S3_SECRET_KEY"],))
