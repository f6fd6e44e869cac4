"""chunking.by: source: one chunk per source, each split alone, and the collector that
checks across sources what one split checks across its input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shardflow.corpus.by_source import collect_sources, split_source
from shardflow.corpus.chunks import read_chunk
from shardflow.corpus.readers import BadRecordError, ReaderOptions
from tests.unit.corpus.test_split import run_split


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def split_all(out: Path, sources: list[Path], opts: ReaderOptions) -> dict:
    """What the rules do: split_source per source, then the collector."""
    parts = {"part": [], "rejects": [], "keys": []}
    for i, src in enumerate(sources):
        names = {
            k: out / "sources" / f"chunk_{i}.{ext}"
            for k, ext in (("part", "json"), ("rejects", "rejects.jsonl"), ("keys", "keys.parquet"))
        }
        split_source(str(src), opts, 40.0, out / f"chunk_{i}.jsonl", names["part"], names["rejects"], names["keys"])
        for k, path in names.items():
            parts[k].append(path)
    return collect_sources(
        parts["part"], parts["rejects"], parts["keys"], opts, 40.0, out / "manifest.json", out / "rejects.jsonl"
    )


@pytest.fixture
def sources(tmp_path) -> list[Path]:
    a = write_jsonl(tmp_path / "a.jsonl", [{"id": "a1", "text": "one"}, {"id": "a2", "text": "two"}])
    b = write_jsonl(
        tmp_path / "b.jsonl", [{"id": "b1", "text": "three"}, {"id": "b2", "text": ""}, {"id": "b3", "text": "four"}]
    )
    return [a, b]


def test_each_source_is_one_chunk_byte_for_byte_what_a_split_of_it_alone_writes(tmp_path, sources):
    skip = ReaderOptions(on_bad_record="skip")
    manifest = split_all(tmp_path / "out", sources, skip)
    assert [read_chunk(c["path"])[0] for c in manifest["chunks"]] == [["a1", "a2"], ["b1", "b3"]]
    assert [(c["chunk"], c["source"], c["items"]) for c in manifest["chunks"]] == [
        (0, str(sources[0]), 2),
        (1, str(sources[1]), 2),
    ]
    assert manifest["by"] == "source" and manifest["n_chunks"] == 2
    assert (manifest["total_records"], manifest["rejected_records"]) == (4, 1)
    assert manifest["sources"] == [str(s) for s in sources] and manifest["source_sha256"].keys() == set(
        manifest["sources"]
    )
    rejects = [json.loads(line) for line in (tmp_path / "out/rejects.jsonl").read_text().splitlines()]
    assert [(r["source"], r["line"]) for r in rejects] == [(str(sources[1]), 2)]
    for i, src in enumerate(sources):  # the same bytes and digest as the source split alone
        alone = run_split(tmp_path / f"alone{i}", [src], 1, skip)["chunks"][0]
        assert Path(alone["path"]).read_bytes() == Path(manifest["chunks"][i]["path"]).read_bytes()
        assert alone["sha256"] == manifest["chunks"][i]["sha256"]


def test_an_id_in_two_sources_stops_the_collector_naming_both_places_even_under_skip(tmp_path, sources):
    c = write_jsonl(tmp_path / "c.jsonl", [{"id": "c1", "text": "x"}, {"id": "a2", "text": "again"}])
    with pytest.raises(
        BadRecordError, match=rf"{c}:2: duplicate id 'a2' \(first at {sources[0]}:2\).*cannot be set aside"
    ):
        split_all(tmp_path / "out", [*sources, c], ReaderOptions(on_bad_record="skip"))
    assert not (tmp_path / "out/manifest.json").exists()


def test_ids_from_positions_are_not_compared(tmp_path):
    a = tmp_path / "a.txt"
    a.write_text("same line\n")
    b = tmp_path / "b.txt"
    b.write_text("same line\n")
    manifest = split_all(tmp_path / "out", [a, b], ReaderOptions(id_field=None))
    assert manifest["total_records"] == 2


def test_a_group_across_two_sources_is_an_error_naming_the_sources(tmp_path):
    a = write_jsonl(
        tmp_path / "a.jsonl", [{"id": "1", "text": "x", "doc": "g1"}, {"id": "2", "text": "y", "doc": "g2"}]
    )
    b = write_jsonl(tmp_path / "b.jsonl", [{"id": "3", "text": "z", "doc": "g2"}])
    with pytest.raises(
        ValueError, match=rf"group 'g2' has records in {a}, {b}.*put each group's records in one source"
    ):
        split_all(tmp_path / "out", [a, b], ReaderOptions(group_field="doc"))
    ok = write_jsonl(tmp_path / "ok.jsonl", [{"id": "3", "text": "z", "doc": "g3"}])
    assert split_all(tmp_path / "out", [a, ok], ReaderOptions(group_field="doc"))["group_by"] == "doc"


def test_an_empty_source_is_an_empty_chunk_and_a_corpus_without_records_an_error(tmp_path, sources):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    manifest = split_all(tmp_path / "out", [sources[0], empty], ReaderOptions())
    assert [c["items"] for c in manifest["chunks"]] == [2, 0]
    assert Path(manifest["chunks"][1]["path"]).read_bytes() == b""
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"id": "x", "text": ""}])
    with pytest.raises(ValueError, match=r"no usable record in .*all 1 rejected \(listed in .*chunk_1.rejects.jsonl\)"):
        split_all(tmp_path / "out2", [empty, bad], ReaderOptions(on_bad_record="skip"))
    with pytest.raises(ValueError, match=r"the input holds no records \(empty\)"):
        split_all(tmp_path / "out3", [empty], ReaderOptions())


def test_ids_or_groups_that_share_a_hash_are_compared_as_text(tmp_path, monkeypatch):
    """The collector compares 64-bit hashes and reads the strings only where two are
    equal: with every hash equal, different ids and groups are still no repeat."""
    from shardflow.corpus import by_source

    monkeypatch.setattr(by_source, "stable_hash", lambda value: 7)
    a = write_jsonl(tmp_path / "a.jsonl", [{"id": "1", "text": "x", "doc": "g1"}])
    b = write_jsonl(
        tmp_path / "b.jsonl", [{"id": "2", "text": "y", "doc": "g2"}, {"id": "3", "text": "z", "doc": "g2"}]
    )
    assert split_all(tmp_path / "out", [a, b], ReaderOptions(group_field="doc"))["total_records"] == 3
    c = write_jsonl(tmp_path / "c.jsonl", [{"id": "2", "text": "again", "doc": "g3"}])
    with pytest.raises(BadRecordError, match=rf"{c}:1: duplicate id '2' \(first at {b}:1\)"):
        split_all(tmp_path / "out2", [a, b, c], ReaderOptions(group_field="doc"))


def test_keys_are_written_a_row_group_at_a_time(tmp_path, monkeypatch):
    import pyarrow.parquet as pq

    from shardflow.corpus import by_source

    monkeypatch.setattr(by_source, "KEYS_BATCH", 2)
    src = write_jsonl(tmp_path / "a.jsonl", [{"id": str(i), "text": "t"} for i in range(5)])
    split_source(
        str(src),
        ReaderOptions(),
        40.0,
        tmp_path / "c.jsonl",
        tmp_path / "p.json",
        tmp_path / "r.jsonl",
        tmp_path / "k.parquet",
    )
    keys = pq.ParquetFile(tmp_path / "k.parquet")
    assert keys.metadata.num_row_groups == 3
    table = keys.read()
    assert table["id"].to_pylist() == ["0", "1", "2", "3", "4"] and table["line"].to_pylist() == [1, 2, 3, 4, 5]
    assert table["id_hash"].to_pylist() == [by_source.stable_hash(str(i)) for i in range(5)]


@pytest.mark.parametrize("id_field", ["id", None])
def test_two_chunks_split_from_one_source_stop_the_collector_naming_both(tmp_path, sources, id_field):
    """A chunk left from another list of sources (a source inserted before it renumbered
    it, and Snakemake did not split it again: `--rerun-triggers mtime`, or no metadata)
    holds the source the next chunk holds. With ids from a field that read as a duplicate
    id at one and the same place, "remove one"; with ids from positions it passed, the
    source's records merged twice and the source that chunk should hold left out."""
    a, b = sources
    with pytest.raises(ValueError, match=r"chunk_2\.json: chunk 2 was split from .*b\.jsonl, as chunk 1 was") as err:
        split_all(tmp_path / "out", [a, b, b], ReaderOptions(id_field=id_field, on_bad_record="skip"))
    assert "duplicate id" not in str(err.value) and "--rerun-triggers" in str(err.value)
    assert not (tmp_path / "out/manifest.json").exists()
