"""Bad input through the real workflow (docs/bad-input.md): config values out of range stop
the parse naming each key; the split rule names both places of a duplicate id and the
line a truncated gzip file ends on. The per-case unit tests: tests/unit/corpus/test_bad_input.py."""

import gzip
import json

import pytest

from tests.helpers import snakemake, write_config

pytestmark = pytest.mark.workflow


def test_config_out_of_range_stops_the_dry_run_naming_each_key(tmp_path):
    cfg = write_config(
        tmp_path / "c.yaml",
        n_chunks=0,
        embedding={"token_budget": -5},
        summarise={"token_budget": -1},
        input={"max_record_mb": 0},
    )
    proc = snakemake(tmp_path, "-n", "--configfile", str(cfg), check=False)
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    for line in (
        "config key 'n_chunks': 0 is less than the minimum of 1",
        "config key 'embedding.token_budget': -5 is less than the minimum of 1",
        "config key 'summarise.token_budget': -1 is less than the minimum of 1",
        "config key 'input.max_record_mb': 0 is less than or equal to the minimum of 0",
    ):
        assert f"  - {line}\n" in out, out[-3000:]
    assert not (tmp_path / "results").exists()


def test_duplicate_id_across_files_stops_the_split_naming_both(tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    a, b = folder / "a.jsonl", folder / "b.jsonl"
    a.write_text("".join(json.dumps({"id": f"a{i}", "text": f"text {i}"}) + "\n" for i in range(5)))
    b.write_text(json.dumps({"id": "b0", "text": "x"}) + "\n" + json.dumps({"id": "a3", "text": "again"}) + "\n")
    cfg = write_config(tmp_path / "c.yaml", dataset="dups", n_chunks=2, input={"path": str(folder / "*.jsonl")})
    proc = snakemake(tmp_path, "results/dups/chunks/manifest.json", "--cores", "1", "--configfile", str(cfg), check=False)
    assert proc.returncode != 0
    assert f"{b}:2: duplicate id 'a3' (first at {a}:4)" in (tmp_path / "logs/split/dups.log").read_text()
    assert not list((tmp_path / "results/dups/chunks").glob("chunk_*"))


def test_truncated_gzip_stops_the_split_even_when_skipping(tmp_path):
    corpus = tmp_path / "c.jsonl.gz"
    data = gzip.compress(b"".join(json.dumps({"id": i, "text": f"text {i} " * 20}).encode() + b"\n" for i in range(2000)))
    corpus.write_bytes(data[: len(data) // 2])
    cfg = write_config(
        tmp_path / "c.yaml", dataset="cut", n_chunks=2, input={"path": str(corpus), "on_bad_record": "skip"}
    )
    proc = snakemake(tmp_path, "results/cut/chunks/manifest.json", "--cores", "1", "--configfile", str(cfg), check=False)
    assert proc.returncode != 0
    log = (tmp_path / "logs/split/cut.log").read_text()
    assert f"{corpus}:" in log and ": gzip stream truncated (the compressed data ends before its end marker)" in log
    assert not (tmp_path / "results/cut/chunks/manifest.json").exists()
