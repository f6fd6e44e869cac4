"""What the local copy of a run in S3 holds of each object (shardflow.workflow.mirror).
The copy itself is tested against the real S3 server in tests/cluster/test_s3.py
(`check_status_from_the_bucket`)."""

from pathlib import Path

import pytest

from shardflow.cli import main
from shardflow.workflow import mirror
from shardflow.workflow.mirror import SIZED, TAIL, WHOLE


@pytest.mark.parametrize(
    ("path", "size", "want"),
    [
        ("results/demo/embed/embed_3.stats.json", 900, WHOLE),
        ("logs/embed/demo_3.log", 2_000, WHOLE),
        ("benchmarks/embed/demo_3.tsv", 300, WHOLE),
        ("results/demo/chunks/manifest.json", 5 << 20, WHOLE),  # a manifest of many chunks
        ("logs/embed/demo_3.log", 5 << 20, TAIL),  # status reads a log's end only
        ("results/demo/embed/embed_3.npy", 5 << 20, SIZED),
        ("results/demo/chunks/chunk_3.jsonl", 5 << 20, SIZED),
        ("results/demo/huge.json", 100 << 20, SIZED),
        ("results/demo/embed/embed_3.npy", 1 << 20, WHOLE),
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


def test_the_copy_is_kept_by_bucket_and_prefix():
    assert mirror.default_folder("s3://bkt/runs/a/") == Path(".snakemake/shardflow-status/bkt/runs/a")


def test_a_storage_prefix_that_is_no_s3_url_is_refused_by_name(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["status", "--storage-prefix", "/data/run"])
    assert stop.value.code == 2
    assert "expected s3://<bucket>/<prefix>" in capsys.readouterr().err
