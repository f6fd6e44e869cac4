"""merge_summaries at its edges: no chunks, an empty chunk, chunks past nine, ids repeated
within one chunk. (test_stage covers the count, duplicates across chunks and bad lines.)"""

from __future__ import annotations

import pytest

from shardflow.summarise.merge import SummariesCheckError, merge_summaries
from shardflow.summarise.records import write_summaries

REC = {"summary": "s", "input_tokens": 3, "output_tokens": 1, "truncated": False}


def chunk(path, ids):
    write_summaries(path, ids, [REC] * len(ids))
    return str(path)


def test_no_chunks_merge_to_an_empty_file(tmp_path):
    out = tmp_path / "all.jsonl"
    assert merge_summaries([], out, 0)["records"] == 0
    assert out.read_bytes() == b""


def test_chunks_are_merged_in_the_order_given_not_by_name(tmp_path):
    parts = [chunk(tmp_path / f"summaries_{i}.jsonl", [f"c{i}"] if i != 3 else []) for i in range(12)]
    out = tmp_path / "all.jsonl"
    merge_summaries(parts, out, 11)  # chunk 3 is empty: it adds nothing
    assert out.read_bytes() == b"".join(open(p, "rb").read() for p in parts)
    assert out.read_text().index('"c9"') < out.read_text().index('"c10"')


def test_a_chunk_without_its_summaries_fails_the_count_and_writes_nothing(tmp_path):
    parts = [chunk(tmp_path / "a.jsonl", ["x", "y"]), chunk(tmp_path / "b.jsonl", [])]
    with pytest.raises(SummariesCheckError, match=r"summaries of 2 chunks .*\n  - count: .*'records': 2, 'expected': 3"):
        merge_summaries(parts, tmp_path / "all.jsonl", 3)
    assert not (tmp_path / "all.jsonl").exists()


def test_ids_repeated_within_one_chunk_are_counted_and_ten_named(tmp_path):
    ids = [f"d{i:02d}" for i in range(12)]
    part = chunk(tmp_path / "a.jsonl", ids + ids[::-1] + ["cafe\u0301", "caf\u00e9"])  # two spellings: two ids
    with pytest.raises(SummariesCheckError) as err:
        merge_summaries([part], tmp_path / "all.jsonl", 26)
    assert "'duplicates': 12, 'examples': " + repr(ids[:10]) in str(err.value)


def test_a_chunk_whose_last_line_lacks_its_newline_keeps_its_records_apart(tmp_path):
    """Read record by record, such a part passed the checks; copied as it was, the next
    part's first record shared its last line, and the merged file held one bad line."""
    from shardflow.summarise.records import iter_summaries

    cut = tmp_path / "a.jsonl"
    cut.write_bytes(open(chunk(tmp_path / "a0.jsonl", ["x", "y"]), "rb").read().rstrip(b"\n"))
    out = tmp_path / "all.jsonl"
    merge_summaries([str(cut), chunk(tmp_path / "b.jsonl", ["z"])], out, 3)
    assert [r["id"] for r in iter_summaries(out)] == ["x", "y", "z"]
