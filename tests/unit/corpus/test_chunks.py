"""The chunk file format at its edges (test_split.py covers the usual records and errors)."""

from __future__ import annotations

import pytest

from shardflow.core.oom import TooLargeError
from shardflow.corpus.chunks import ChunkRecord, chunk_path, iter_chunk, naming_records, read_chunk, write_record


def test_an_empty_chunk_holds_no_records(tmp_path):
    path = chunk_path(tmp_path, 3)
    path.write_bytes(b"")
    assert path.name == "chunk_3.jsonl" and read_chunk(path) == ([], [])


def test_a_group_round_trips_and_an_empty_group_is_not_no_group(tmp_path):
    records = [ChunkRecord("a", "x", "g1"), ChunkRecord("b", "y", ""), ChunkRecord("c", "z")]
    path = chunk_path(tmp_path, 0)
    with open(path, "w", encoding="utf-8") as fh:
        for rec in records:
            write_record(fh, rec)
    assert list(iter_chunk(path)) == records


def test_write_record_counts_the_utf8_bytes_it_puts_on_disk(tmp_path):
    """The count is of bytes, not characters: 'é' is 2, '😀' 4, U+2028 (kept raw) 3."""
    path = chunk_path(tmp_path, 0)
    with open(path, "w", encoding="utf-8", newline="") as fh:
        written = [write_record(fh, ChunkRecord(i, t)) for i, t in [("é", "😀\u2028"), ("b", "plain")]]
    assert sum(written) == path.stat().st_size and written[0] == len('{"id":"","text":""}\n') + 2 + 4 + 3


@pytest.mark.parametrize("blank", ["\n", "   \n"])
def test_a_blank_line_inside_a_chunk_is_an_error_at_its_line_not_skipped(tmp_path, blank):
    """A chunk holds one record a line: a blank line is damage, and skipping it would hide
    a record the split counted."""
    path = chunk_path(tmp_path, 0)
    path.write_text('{"id":"a","text":"x"}\n' + blank + '{"id":"b","text":"y"}\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"chunk_0\.jsonl:2: not a shardflow chunk record"):
        read_chunk(path)


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ('{"id": 1, "text": null}', "field 'id' is a number, not a string; field 'text' is null, not a string"),
        ('{"id": "a", "text": 5}', "field 'text' is a number, not a string"),
        ('{"id": "a", "text": ["x"]}', "field 'text' is an array, not a string"),
        ('{"id": "a", "text": "x", "group": 3}', "field 'group' is a number, not a string"),
    ],
)
def test_a_field_that_is_not_a_string_is_an_error_at_its_line(tmp_path, line, why):
    """The split writes string ids, texts and groups: anything else is damage, named here
    with its file and line (read as it stood, a null text failed later, naming neither)."""
    path = chunk_path(tmp_path, 0)
    path.write_text('{"id":"a","text":"x"}\n' + line + "\n", encoding="utf-8")
    with pytest.raises(ValueError) as caught:
        read_chunk(path)
    assert str(caught.value) == f"{path}:2: not a shardflow chunk record ({why})"


def test_an_error_naming_a_row_is_raised_again_naming_the_chunk_and_id_keeping_its_type():
    """What a retry decides on (core.failures: the type, a ValueError's or not) and what the
    engines read back (row, n_tokens) stay as raised; only the message names the record."""
    with pytest.raises(TooLargeError) as caught:
        with naming_records("results/ds/chunks/chunk_3.jsonl", ["a", "b"], KeyError, TooLargeError):
            raise TooLargeError("text 1 does not fit", 1, 700)
    assert str(caught.value) == "results/ds/chunks/chunk_3.jsonl: id 'b': text 1 does not fit"
    assert (caught.value.row, caught.value.n_tokens) == (1, 700)
    with pytest.raises(ValueError, match="^text 0$"):  # not one of the errors named: as raised
        with naming_records("c.jsonl", ["a"], TooLargeError):
            raise ValueError("text 0")
