"""Corpus readers: every format, ids, globbing, format detection, and bad records."""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import os
import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from shardflow.corpus.readers import (
    BadRecordError,
    ReaderOptions,
    Record,
    Rejected,
    count_records_cheap,
    detect_format,
    expand_inputs,
    iter_records,
    malformed_json,
    open_reader,
)

DOCS = [{"id": "a", "text": "alpha one"}, {"id": "b", "text": "beta two"}, {"id": "c", "text": "gamma three"}]


def read(path, **opts) -> list:
    return list(open_reader(str(path), ReaderOptions(**opts)))


def ids_texts(items) -> list[tuple[str, str]]:
    return [(r.id, r.text) for r in items]


# --- one test per format -------------------------------------------------------------


def test_jsonl_yields_records_in_file_order(tmp_path, write_jsonl):
    path = write_jsonl(tmp_path / "c.jsonl", DOCS)
    items = read(path)
    assert all(isinstance(r, Record) for r in items)
    assert ids_texts(items) == [("a", "alpha one"), ("b", "beta two"), ("c", "gamma three")]
    assert [r.line for r in items] == [1, 2, 3]


def test_jsonl_gz_reads_like_plain(tmp_path, write_jsonl):
    path = write_jsonl(tmp_path / "c.jsonl.gz", DOCS)
    assert path.read_bytes()[:2] == b"\x1f\x8b"  # really compressed
    assert ids_texts(read(path)) == ids_texts(read(write_jsonl(tmp_path / "p.jsonl", DOCS)))


def test_jsonl_blank_lines_are_not_records(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text('{"id": "a", "text": "x y"}\n\n{"id": "b", "text": "z"}\n')
    items = read(path)
    assert [(r.id, r.line) for r in items] == [("a", 1), ("b", 3)]


def test_parquet(tmp_path):
    path = tmp_path / "c.parquet"
    pq.write_table(pa.table({"id": [1, 2, 3], "text": ["x", "y", "z"], "other": [0, 0, 0]}), path)
    items = read(path)
    assert ids_texts(items) == [("1", "x"), ("2", "y"), ("3", "z")]  # integer ids become strings
    assert [r.line for r in items] == [1, 2, 3]


def test_csv_with_quoted_multiline_field(tmp_path):
    path = tmp_path / "c.csv"
    path.write_bytes(b'id,text\n1,"first, with comma"\n2,"spans\ntwo lines"\n3,plain\n')
    items = read(path)
    assert ids_texts(items) == [("1", "first, with comma"), ("2", "spans\ntwo lines"), ("3", "plain")]
    assert [r.line for r in items] == [2, 3, 5]  # the physical line each row starts on


def test_tsv(tmp_path):
    path = tmp_path / "c.tsv"
    path.write_bytes(b"text\tid\nhello, world\tx1\nsecond\tx2\n")
    assert ids_texts(read(path)) == [("x1", "hello, world"), ("x2", "second")]


def test_csv_gz(tmp_path):
    path = tmp_path / "c.csv.gz"
    path.write_bytes(gzip.compress(b"id,text\n1,one\n"))
    assert ids_texts(read(path)) == [("1", "one")]


def test_text_one_document_per_line_ids_are_positions(tmp_path):
    path = tmp_path / "c.txt"
    path.write_text("first doc\nsecond doc\n")
    items = read(path)
    assert ids_texts(items) == [(f"{path}:1", "first doc"), (f"{path}:2", "second doc")]


def test_text_one_document_per_file_id_is_path(tmp_path):
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("whole\nfile one\n")
    b.write_text("file two")
    items = list(iter_records([str(a), str(b)], ReaderOptions(text_mode="files")))
    assert ids_texts(items) == [(str(a), "whole\nfile one\n"), (str(b), "file two")]


# --- ids and fields --------------------------------------------------------------------


def test_configurable_id_and_text_fields(tmp_path, write_jsonl):
    path = write_jsonl(tmp_path / "c.jsonl", [{"doc_id": 7, "body": "text here", "text": "not this"}])
    items = read(path, id_field="doc_id", text_field="body")
    assert ids_texts(items) == [("7", "text here")]


def test_id_field_none_gives_source_positions(tmp_path, write_jsonl):
    path = write_jsonl(tmp_path / "c.jsonl", [{"text": "x"}, {"text": "y"}])
    assert [r.id for r in read(path, id_field=None)] == [f"{path}:1", f"{path}:2"]


def test_id_field_none_csv_positions_are_physical_lines(tmp_path):
    path = tmp_path / "c.csv"
    path.write_text("text\nx\ny\n")
    assert [r.id for r in read(path, id_field=None)] == [f"{path}:2", f"{path}:3"]


def test_group_field_is_read_as_string(tmp_path, write_jsonl):
    path = write_jsonl(tmp_path / "c.jsonl", [{"id": "a", "text": "x", "g": 3}])
    assert read(path, group_field="g")[0].group == "3"


def test_missing_group_field_is_a_bad_record(tmp_path, write_jsonl):
    path = write_jsonl(tmp_path / "c.jsonl", [{"id": "a", "text": "x"}])
    with pytest.raises(BadRecordError, match="group field 'g'"):
        read(path, group_field="g")


SUGGEST_NULL = "or input.id_field: null to use source positions"


@pytest.mark.parametrize(
    "record, reason",
    [
        (
            {"doc_id": "a", "text": "x"},
            "missing id field 'id' (the record's keys: ['doc_id', 'text']): "
            f"set input.id_field: doc_id if that key holds the ids, {SUGGEST_NULL}",
        ),
        (
            {"title": "t", "_id": 7, "docId": "d", "text": "x"},
            "missing id field 'id' (the record's keys: ['title', '_id', 'docId', 'text']): "
            f"set input.id_field: _id if that key holds the ids, {SUGGEST_NULL}",
        ),
        (  # an id-like key whose value is no id here is passed over; a name YAML must quote is quoted
            {"doc_id": "", "doc id": "d1", "text": "x"},
            "missing id field 'id' (the record's keys: ['doc_id', 'doc id', 'text']): "
            f'set input.id_field: "doc id" if that key holds the ids, {SUGGEST_NULL}',
        ),
        (  # "paid" ends in "id" but names no id
            {"paid": "yes", "text": "x"},
            "missing id field 'id' (the record's keys: ['paid', 'text']): "
            f"set input.id_field to the key that holds the ids, {SUGGEST_NULL}",
        ),
        (  # the longest string, not an id-like one
            {"id": "a", "doc_id": "a-long-id-string", "lang": "en", "body": "the text of it", "n": 3},
            "missing text field 'text' (the record's keys: ['id', 'doc_id', 'lang', 'body', 'n']): "
            "set input.text_field: body if that key holds the text",
        ),
        ({"id": "a", "n": 3}, "missing text field 'text' (the record's keys: ['id', 'n'])"),
    ],
)
def test_a_record_without_the_id_or_text_field_lists_its_keys_and_names_a_likely_one(
    tmp_path, write_jsonl, record, reason
):
    """Until 2026-11-29 the message said only "set input.id_field: null": a user whose ids
    were under doc_id, following it, dropped them. CSV and Parquet name their columns."""
    path = write_jsonl(tmp_path / "c.jsonl", [record])
    with pytest.raises(BadRecordError, match="^" + re.escape(f"{path}:1: {reason}") + "$"):
        read(path)
    assert [r.reason for r in read(path, on_bad_record="skip")] == [reason]


def test_the_keys_a_missing_field_lists_are_few_and_cut_short(tmp_path, write_jsonl):
    record = {"k" * 5000: "v", **{f"key{i}": i for i in range(30)}, "text": "x"}
    path = write_jsonl(tmp_path / "c.jsonl", [record])
    (reject,) = read(path, on_bad_record="skip")
    shown = ["k" * 40 + "..."] + [f"key{i}" for i in range(9)]
    assert reject.reason == (
        f"missing id field 'id' (the record's keys: [{', '.join(map(repr, shown))}, ... 32 keys in all]): "
        f"set input.id_field to the key that holds the ids, {SUGGEST_NULL}"
    )


def test_an_empty_or_null_id_is_named_so_not_missing(tmp_path):
    """The id column or key is there, its value empty: until 2026-11-29 "missing id field
    'id' (set input.id_field: null ...)", which sent the user to drop the ids they have."""
    csv_path = tmp_path / "c.csv"
    csv_path.write_text("id,text\n,hello\nb,x\n")
    with pytest.raises(BadRecordError, match="^" + re.escape(f"{csv_path}:2: empty id in field 'id'") + "$"):
        read(csv_path)
    jsonl = tmp_path / "c.jsonl"
    jsonl.write_text('{"id": "", "text": "t"}\n{"id": null, "text": "t"}\n{"id": "c", "text": "t"}\n')
    parquet = tmp_path / "c.parquet"
    pq.write_table(pa.table({"id": [None, "b"], "text": ["t", "u"]}), parquet)
    assert [(r.line, r.reason) for r in read(jsonl, on_bad_record="skip")[:2]] == [
        (1, "empty id in field 'id'"),
        (2, "null id in field 'id'"),
    ]
    assert [(r.line, r.reason) for r in read(parquet, on_bad_record="skip")[:1]] == [(1, "null id in field 'id'")]


# --- inputs and formats ----------------------------------------------------------------


def test_glob_expands_sorted(tmp_path):
    for name in ("b.jsonl", "a.jsonl", "c.jsonl"):
        (tmp_path / name).write_text("")
    assert expand_inputs(str(tmp_path / "*.jsonl")) == [str(tmp_path / n) for n in ("a.jsonl", "b.jsonl", "c.jsonl")]


def test_overlapping_patterns_are_deduplicated(tmp_path):
    for name in ("a.jsonl", "b.jsonl"):
        (tmp_path / name).write_text("")
    found = expand_inputs([str(tmp_path / "b.jsonl"), str(tmp_path / "*.jsonl"), f"{tmp_path}/./a.jsonl"])
    assert found == [str(tmp_path / "b.jsonl"), str(tmp_path / "a.jsonl")]


def test_a_file_named_by_two_paths_or_through_a_link_is_read_once(tmp_path, monkeypatch, write_jsonl):
    """Named by a relative and an absolute path, or matched by a glob both as itself and
    as a `latest` link to it, the file was read twice: with ids from positions its records
    were in the corpus twice, under two ids each, and nothing said so."""
    write_jsonl(tmp_path / "data" / "2026-11-28.jsonl", DOCS[:2])
    (tmp_path / "data" / "latest.jsonl").symlink_to("2026-11-28.jsonl")
    monkeypatch.chdir(tmp_path)
    found = expand_inputs(["data/*.jsonl", str(tmp_path / "data" / "2026-11-28.jsonl")])
    assert found == [os.path.join("data", "2026-11-28.jsonl")]
    records = list(iter_records(found, ReaderOptions(id_field=None)))
    assert [r.id for r in records] == ["data/2026-11-28.jsonl:1", "data/2026-11-28.jsonl:2"]


def test_a_file_is_resolved_once_and_its_folder_once_for_all_its_files(tmp_path, monkeypatch):
    """expand_inputs runs at every parse. Resolving each file's real path looked at every
    component of it, one lstat each (20,000 files five folders deep: 0.6 s, not 0.14);
    now each file is looked at once (is it a link?) and each folder resolved once. A
    folder reached through a link is still the same folder: its files are read once."""
    deep = tmp_path.joinpath(*"abcdefgh")
    deep.mkdir(parents=True)
    for i in range(40):
        (deep / f"{i:02}.jsonl").write_text("")
    (tmp_path / "link").symlink_to(deep)
    looked_at = []
    lstat = os.lstat
    monkeypatch.setattr(os, "lstat", lambda path, *a, **kw: looked_at.append(path) or lstat(path, *a, **kw))
    found = expand_inputs([str(deep / "*.jsonl"), str(tmp_path / "link" / "*.jsonl")])
    assert found == sorted(str(p) for p in deep.glob("*.jsonl"))
    assert len(looked_at) <= 80 + 4 * len(deep.parts)  # one a file, and the two folders' components


def test_glob_skips_directories(tmp_path):
    (tmp_path / "a.jsonl").write_text("")
    (tmp_path / "dir.jsonl").mkdir()
    assert expand_inputs(str(tmp_path / "*.jsonl")) == [str(tmp_path / "a.jsonl")]


def test_recursive_glob(tmp_path):
    (tmp_path / "x" / "y").mkdir(parents=True)
    (tmp_path / "x" / "y" / "deep.jsonl").write_text("")
    assert expand_inputs(str(tmp_path / "**" / "*.jsonl")) == [str(tmp_path / "x" / "y" / "deep.jsonl")]


@pytest.mark.parametrize(
    "pattern, message", [("nothing-*.jsonl", "matches no file"), ("absent.jsonl", "does not exist")]
)
def test_unmatched_input_raises(tmp_path, pattern, message):
    with pytest.raises(FileNotFoundError, match=message):
        expand_inputs(str(tmp_path / pattern))


def test_input_of_only_directories_raises(tmp_path):
    (tmp_path / "d.jsonl").mkdir()
    with pytest.raises(FileNotFoundError, match="names no regular file"):
        expand_inputs(str(tmp_path / "*.jsonl"))



@pytest.mark.parametrize("alone", [True, False], ids=["alone", "in a list"])
def test_a_folder_named_as_a_path_is_an_error_naming_it(tmp_path, alone):
    (tmp_path / "good.jsonl").write_text("")
    (tmp_path / "more").mkdir()
    (tmp_path / "more" / "b.jsonl").write_text("")
    folder = str(tmp_path / "more")
    message = f"input path '{folder}' is a folder; name its files or a glob such as '{folder}/*.jsonl'"
    with pytest.raises(FileNotFoundError, match=re.escape(message)):
        expand_inputs(folder if alone else [str(tmp_path / "good.jsonl"), folder])

@pytest.mark.parametrize(
    "name, fmt",
    [
        ("c.jsonl", "jsonl"),
        ("c.JSONL.GZ", "jsonl"),
        ("c.ndjson", "jsonl"),
        ("c.parquet", "parquet"),
        ("c.csv", "csv"),
        ("c.tsv.gz", "tsv"),
        ("c.txt", "text"),
        ("c.md", "text"),
    ],
)
def test_format_detected_from_name(name, fmt):
    assert detect_format(name, ReaderOptions()) == fmt


def test_undetectable_format_raises_naming_the_file():
    with pytest.raises(ValueError, match=r"corpus\.dat.*input\.format"):
        detect_format("corpus.dat", ReaderOptions())


def test_explicit_format_overrides_the_name(tmp_path, write_jsonl):
    path = write_jsonl(tmp_path / "corpus.dat", DOCS[:1])
    assert ids_texts(read(path, format="jsonl")) == [("a", "alpha one")]


@pytest.mark.parametrize("opts", [{"format": "xml"}, {"text_mode": "paragraphs"}, {"on_bad_record": "ignore"}])
def test_invalid_reader_options_raise(opts):
    with pytest.raises(ValueError):
        ReaderOptions(**opts)


# --- bad records -----------------------------------------------------------------------

GOOD = b'{"id": "ok1", "text": "fine"}\n'
BAD_LINES = {
    "malformed JSON": (b'{"id": "x", "text": \n', "malformed JSON"),
    "missing text": (b'{"id": "x"}\n', "missing text field 'text'"),
    "null text": (b'{"id": "x", "text": null}\n', "null text in field 'text'"),
    "empty text": (b'{"id": "x", "text": "  "}\n', "empty text"),
    "invalid UTF-8": (b'{"id": "x", "text": "caf\xe9"}\n', "invalid UTF-8"),
    "non-string text": (b'{"id": "x", "text": 42}\n', "is int, not a string"),
    "missing id": (b'{"text": "no id"}\n', "missing id field 'id'"),
    "empty id": (b'{"id": "", "text": "t"}\n', "empty id in field 'id'"),
    "null id": (b'{"id": null, "text": "t"}\n', "null id in field 'id'"),
    "float id": (b'{"id": 1.5, "text": "t"}\n', "is float"),
    "not an object": (b'["id", "text"]\n', "not an object"),
    "unpaired surrogate": (b'{"id": "x", "text": "bad \\ud800 escape"}\n', "surrogate"),
    "text key twice": (b'{"id": "x", "text": "first", "text": "second"}\n', "key 'text' is repeated"),
    "id key twice": (b'{"id": "x", "text": "t", "id": "y"}\n', "key 'id' is repeated"),
    # json decodes by recursion: this raised a bare RecursionError, naming no file or line.
    "nested too deeply": (
        b'{"id": "x", "text": "t", "n": ' + b"[" * 100_000 + b"\n",
        "malformed JSON (arrays or objects nested deeper than",
    ),
}


def corpus_with_bad_second_line(tmp_path, bad: bytes):
    path = tmp_path / "c.jsonl"
    path.write_bytes(GOOD + bad + b'{"id": "ok3", "text": "also fine"}\n')
    return path


def test_an_empty_text_is_kept_where_asked_as_it_is(tmp_path):
    """keep_empty_text: the retrieval corpus's empty documents are records, unchanged."""
    path = corpus_with_bad_second_line(tmp_path, BAD_LINES["empty text"][0])
    items = read(path, keep_empty_text=True)
    assert [(r.id, r.text) for r in items] == [("ok1", "fine"), ("x", "  "), ("ok3", "also fine")]
    with pytest.raises(BadRecordError, match="empty text"):  # kept only where asked
        read(path)


def test_malformed_json_reason_reads_once():
    """json's message for a raw control character ends in " at": no "at at column"."""
    with pytest.raises(json.JSONDecodeError) as err:
        json.loads('{"text": "a\tb"}')
    assert malformed_json(err.value) == "malformed JSON (Invalid control character at column 12)"



def test_a_key_read_twice_in_one_jsonl_line_is_a_bad_record_naming_it(tmp_path):
    """json keeps the last value of a repeated key: the first text was dropped, silently,
    and the record read with the second. Which one the writer meant is a guess."""
    path = corpus_with_bad_second_line(tmp_path, b'{"id": "b", "text": "first", "note": 1, "text": "second"}\n')
    message = f"{path}:2: key 'text' is repeated (keys 2, 4 of the object): which one to read is ambiguous"
    with pytest.raises(BadRecordError, match=re.escape(message)):
        read(path)
    items = read(path, on_bad_record="skip")
    assert [type(r) for r in items] == [Record, Rejected, Record]
    assert items[1].line == 2 and items[1].raw == '{"id": "b", "text": "first", "note": 1, "text": "second"}'
    path.write_text('{"id": "a", "text": "t", "g": "first", "g": "second"}\n')
    with pytest.raises(BadRecordError, match=re.escape(f"{path}:1: key 'g' is repeated (keys 3, 4 of the object)")):
        read(path, group_field="g")


def test_a_repeated_key_not_read_or_nested_and_a_value_named_like_a_key_are_no_matter(tmp_path):
    path = tmp_path / "c.jsonl"
    lines = [
        '{"id": "a", "text": "one", "note": 1, "note": 2}',  # not read
        '{"id": "b", "text": "two", "meta": {"text": "x", "id": "y"}}',  # nested
        '{"id": "text", "text": "text", "said": "\\"text\\": \\"id\\""}',  # values, and a key quoted in a text
    ]
    path.write_text("\n".join(lines) + "\n")
    assert ids_texts(read(path)) == [("a", "one"), ("b", "two"), ("text", "text")]


def test_json_line_cut_short_is_malformed_at_its_end_not_at_column_1(tmp_path):
    """json reads the line's newline too and places the error after it (line 2, column 1)."""
    path = corpus_with_bad_second_line(tmp_path, b'{"id": "b", "text": "broken"\n')
    message = f"{path}:2: malformed JSON (Expecting ',' delimiter at the end of the line)"
    with pytest.raises(BadRecordError, match=re.escape(message)):
        read(path)


TO_JSON_LINES = "JSON Lines (one object a line) is read here; convert it"


@pytest.mark.parametrize(
    "data, line, reason",
    [
        (
            b'[\n  {"id": "a", "text": "x"}\n]\n',
            1,
            "malformed JSON (Expecting value at the end of the line); the file opens with '[', as one JSON array "
            f"does: {TO_JSON_LINES} (jq -c '.[]' in.json > out.jsonl)",
        ),
        (
            b'[{"id": "a", "text": "x"}, {"id": "b", "text": "y"}]\n',
            1,
            "JSON value is list, not an object; the file opens with '[', as one JSON array "
            f"does: {TO_JSON_LINES} (jq -c '.[]' in.json > out.jsonl)",
        ),
        (
            b'\n  {"id": "a",\n   "text": "x"}\n',
            2,
            "malformed JSON (Expecting property name enclosed in double quotes at the end of the line); "
            f"an object written over several lines? {TO_JSON_LINES} (jq -c . in.json > out.jsonl)",
        ),
    ],
)
def test_one_json_document_rather_than_json_lines_says_so_and_how_to_convert(tmp_path, data, line, reason):
    """A .json file holding one array or one object over several lines was "malformed JSON"
    at line 1, with no word that one object a line is read."""
    path = tmp_path / "c.json"
    path.write_bytes(data)
    with pytest.raises(BadRecordError, match="^" + re.escape(f"{path}:{line}: {reason}") + "$"):
        read(path)


def test_one_json_array_over_the_record_limit_says_how_to_convert(tmp_path):
    """A .json file holding one big array is one line over max_record_mb: that was all the
    message said, and raising the limit to the file's size is the wrong fix."""
    path = tmp_path / "c.json"
    path.write_bytes(b"[" + b", ".join(b'{"id": "%d", "text": "some text"}' % i for i in range(20)) + b"]\n")
    size = path.stat().st_size - 1
    reason = (
        f"record too large: {size:,} bytes, over input.max_record_mb (100 bytes); not read; the file opens with '[', "
        f"as one JSON array does: {TO_JSON_LINES} (jq -c '.[]' in.json > out.jsonl)"
    )
    with pytest.raises(BadRecordError, match="^" + re.escape(f"{path}:1: {reason}") + "$"):
        read(path, max_record_bytes=100)
    # Only the file's first line is looked at: a later long line is only too large.
    path.write_bytes(b'{"id": "a", "text": "x"}\n[' + b"0, " * 60 + b"0]\n")
    with pytest.raises(BadRecordError, match=r"not read$"):
        read(path, max_record_bytes=100)


@pytest.mark.parametrize(
    "data, line",
    [
        (b'["a", "alpha"]\n["b", "beta"]\n', 1),  # JSON lines of arrays: no records, but no JSON array either
        (b'{"id": "a", "text": "x"}\n[{"id": "b", "text": "y"}]\n', 2),  # only the first line is looked at
        (b'{"id": "a", "text": "x"}\n{"id": "b",\n', 2),
    ],
)
def test_a_bad_line_that_opens_no_json_document_has_no_word_of_one(tmp_path, data, line):
    path = tmp_path / "c.jsonl"
    path.write_bytes(data)
    with pytest.raises(BadRecordError) as err:
        read(path)
    assert err.value.line == line and "JSON Lines" not in str(err.value)

@pytest.mark.parametrize("case", BAD_LINES)
def test_bad_record_error_names_file_and_line(tmp_path, case):
    bad, reason = BAD_LINES[case]
    path = corpus_with_bad_second_line(tmp_path, bad)
    with pytest.raises(BadRecordError) as err:
        read(path)
    assert f"{path}:2:" in str(err.value)
    assert reason in str(err.value)
    assert (err.value.source, err.value.line) == (str(path), 2)


@pytest.mark.parametrize("case", BAD_LINES)
def test_bad_record_skipped_comes_out_as_rejected(tmp_path, case):
    bad, reason = BAD_LINES[case]
    items = read(corpus_with_bad_second_line(tmp_path, bad), on_bad_record="skip")
    assert [type(r) for r in items] == [Record, Rejected, Record]
    rejected = items[1]
    assert rejected.line == 2 and reason in rejected.reason
    assert rejected.raw == bad.decode("utf-8", errors="backslashreplace").rstrip("\n")


def test_rejected_as_json_is_serialisable(tmp_path):
    items = read(corpus_with_bad_second_line(tmp_path, BAD_LINES["invalid UTF-8"][0]), on_bad_record="skip")
    assert set(items[1].as_json()) == {"source", "line", "reason", "raw"}
    assert "\\xe9" in items[1].as_json()["raw"]  # the undecodable byte is shown, not lost


def test_csv_wrong_field_count_is_bad(tmp_path):
    path = tmp_path / "c.csv"
    path.write_text("id,text\n1,one\n2,two,extra\n")
    with pytest.raises(BadRecordError, match=r"c\.csv:3: 3 fields where the header has 2"):
        read(path)


@pytest.mark.parametrize("sep", [",", "\t"], ids=["csv", "tsv"])
def test_a_blank_line_in_a_one_column_csv_is_a_row_with_an_empty_text(tmp_path, sep):
    """With one column a blank line is a row whose one field is empty, as a blank line of a
    text file is a line without text: a bad record, counted under skip. It was passed over
    without a count, while a line of spaces was a bad record. With more columns a blank
    line holds no row (a row writes its delimiters) and separates rows, as in JSONL."""
    suffix = ".csv" if sep == "," else ".tsv"
    path = tmp_path / f"c{suffix}"
    path.write_text("text\nhello\n\nworld\n")
    with pytest.raises(BadRecordError, match=re.escape(f"{path}:3: empty text in field 'text'")):
        read(path, id_field=None)
    items = read(path, id_field=None, on_bad_record="skip")
    assert [(type(r), r.line) for r in items] == [(Record, 2), (Rejected, 3), (Record, 4)]
    assert (items[1].reason, items[1].raw) == ("empty text in field 'text'", "")
    two = tmp_path / f"two{suffix}"
    two.write_text(f"id{sep}text\n1{sep}hello\n\n2{sep}world\n")
    assert [(r.id, r.line) for r in read(two)] == [("1", 2), ("2", 4)]


def test_csv_invalid_utf8_row_is_rejected_with_its_line(tmp_path):
    path = tmp_path / "c.csv"
    path.write_bytes(b"id,text\n1,one\n2,caf\xe9\n3,three\n")
    items = read(path, on_bad_record="skip")
    assert [type(r) for r in items] == [Record, Rejected, Record]
    assert items[1].line == 3 and "invalid UTF-8" in items[1].reason


def test_csv_unclosed_quote_does_not_swallow_later_rows(tmp_path):
    # Lenient parsing would make row 3 part of row 2's text: a silent loss.
    path = tmp_path / "c.csv"
    path.write_text('id,text\n1,one\n2,"never closed\n3,three\n')
    with pytest.raises(BadRecordError, match=r"c\.csv:3: malformed CSV"):
        read(path)



def positions(items) -> list[tuple[str, int, str]]:
    return [(type(r).__name__, r.line, r.text if isinstance(r, Record) else r.raw) for r in items]


# An unclosed quote in row 1: the strict parser notices at row 4's quote ("fine"), or at
# the end of the file; a quoted newline after it (row 2) is text again once row 1 is out.
UNCLOSED = {
    "at a later quote": (
        '1,"unclosed text\n2,next row\n3,third\n4,"fine"\n5,more\n',
        5,
        [(3, "next row"), (4, "third"), (5, "fine"), (6, "more")],
    ),
    "at the end": ('1,"unclosed text\n2,next row\n3,third\n', 4, [(3, "next row"), (4, "third")]),
    "before a quoted newline": ('1,"unclosed text\n2,"two\nlines"\n3,third\n', 3, [(3, "two\nlines"), (5, "third")]),
}


@pytest.mark.parametrize("sep", [",", "\t"], ids=["csv", "tsv"])
@pytest.mark.parametrize("case", UNCLOSED)
def test_csv_unclosed_quote_skipped_is_its_line_alone_and_the_rows_after_it_are_read(tmp_path, sep, case):
    body, error_line, records = UNCLOSED[case]
    path = tmp_path / ("c.csv" if sep == "," else "c.tsv")
    path.write_text(("id,text\n" + body).replace(",", sep))
    items = read(path, on_bad_record="skip")
    assert positions(items) == [("Rejected", 2, f'1{sep}"unclosed text')] + [("Record", *r) for r in records]
    assert f"on line {error_line}" in items[0].reason
    with pytest.raises(BadRecordError, match=rf"c\.[ct]sv:2: malformed [CT]SV \(.* on line {error_line}\)"):
        read(path)


def test_csv_unclosed_quote_over_the_size_limit_reads_the_rows_after_it_again(tmp_path):
    """The quote swallows more than max_record_bytes, so the row keeps only a preview of
    its lines: the rows after its first line are read again from the (gzip) file."""
    rows = "".join(f"{i},row {i} {'y' * 30}\n" for i in range(2, 8))
    path = tmp_path / "c.csv.gz"
    path.write_bytes(gzip.compress(f'id,text\n1,"unclosed {"x" * 50}\n{rows}'.encode()))
    items = read(path, on_bad_record="skip", max_record_bytes=100)
    assert positions(items) == [("Rejected", 2, f'1,"unclosed {"x" * 50}')] + [
        ("Record", i + 1, f"row {i} {'y' * 30}") for i in range(2, 8)
    ]
    assert "unexpected end of data on line 8" in items[0].reason


@pytest.mark.parametrize("name", ["c.csv", "c.csv.gz"])
def test_csv_unclosed_quote_on_a_long_crlf_line_reads_again_after_its_line_break(tmp_path, name):
    """The rows after a too-large first line are read again from the end of its CRLF: a
    read from its LF would be one blank line more, in a one-column file a row of its own."""
    body = 'text\r\n"unclosed ' + "x" * 150 + "\r\n" + "".join(f"row {i}\r\n" for i in range(3, 6))
    path = tmp_path / name
    path.write_bytes(gzip.compress(body.encode()) if name.endswith(".gz") else body.encode())
    items = read(path, id_field=None, on_bad_record="skip", max_record_bytes=100)
    assert [(type(r).__name__, r.line) for r in items] == [("Rejected", 2), ("Record", 3), ("Record", 4), ("Record", 5)]
    assert items[0].reason.startswith("record too large: 160 bytes") and items[1].text == "row 3"


@pytest.mark.parametrize("mode", ["error", "skip"])
def test_csv_header_repeating_a_column_read_is_an_error_naming_it(tmp_path, mode):
    path = tmp_path / "c.csv"
    path.write_text("id,text,text\n1,first,second\n")
    message = "c.csv:1: header: column 'text' is repeated (columns 2, 3): which one to read is ambiguous"
    with pytest.raises(BadRecordError, match=re.escape(message)):
        read(path, on_bad_record=mode)


def test_csv_header_repeating_a_column_not_read_is_no_matter(tmp_path):
    path = tmp_path / "c.csv"
    path.write_text("id,note,text,note\n1,a,first,b\n")
    assert ids_texts(read(path)) == [("1", "first")]


@pytest.mark.parametrize("mode", ["error", "skip"])
@pytest.mark.parametrize(
    ("header", "opts", "column"),
    [("id,body", {}, "text"), ("key\ttext", {"format": "tsv"}, "id"), ("id,text", {"group_field": "topic"}, "topic")],
)
def test_csv_header_without_a_column_read_is_an_error_for_the_file(tmp_path, mode, header, opts, column):
    # Every row would lack the field: under skip the whole file went to the rejects, row by
    # row, while the files beside it were read (Parquet stops, naming the column).
    path = tmp_path / "c.csv"
    sep = "\t" if "\t" in header else ","
    path.write_text(f"{header}\n1{sep}one\n2{sep}two\n")
    columns = header.split(sep)
    message = f"c.csv:1: header: no column {column!r} (columns: {columns})"
    with pytest.raises(BadRecordError, match=re.escape(message)) as caught:
        read(path, on_bad_record=mode, **opts)
    assert not caught.value.skippable


def test_csv_field_over_128_kib_is_read(tmp_path):
    long_text = "word " * 40_000  # 200 KB, over the csv module's default field limit
    path = tmp_path / "c.csv"
    path.write_text(f"id,text\n1,{long_text}\n2,short\n")
    assert [len(r.text) for r in read(path)] == [len(long_text), 5]


def test_csv_byte_order_mark_is_not_part_of_the_header(tmp_path):
    path = tmp_path / "c.csv"
    path.write_text("id,text\n1,one\n", encoding="utf-8-sig")
    assert ids_texts(read(path)) == [("1", "one")]


def test_jsonl_byte_order_mark_is_accepted(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + GOOD)
    assert ids_texts(read(path)) == [("ok1", "fine")]


@pytest.mark.parametrize("blank", [b"\n", b"  \r\n"], ids=["alone", "with white space"])
def test_a_first_line_holding_only_a_byte_order_mark_is_a_blank_line(tmp_path, blank):
    """The mark opens the file, not a record: the line it leaves is blank and passed over, as
    any blank line is. It was "malformed JSON" at line 1 (the blank test saw the mark)."""
    path = tmp_path / "c.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + blank + GOOD)
    for mode in ("error", "skip"):
        assert [(type(r), r.id, r.line) for r in read(path, on_bad_record=mode)] == [(Record, "ok1", 2)]


def test_invalid_utf8_after_a_byte_order_mark_is_named_at_its_byte_in_the_line(tmp_path):
    path = tmp_path / "c.txt"
    path.write_bytes(b"\xef\xbb\xbfcaf\xe9\n")
    (bad,) = read(path, on_bad_record="skip")
    assert bad.reason == "invalid UTF-8 at byte 6"  # the mark's 3 bytes, then 'caf'


def test_a_text_file_read_whole_names_invalid_utf8_after_a_byte_order_mark_as_the_lines_reader_does(tmp_path):
    """`text_mode: files` decoded with "utf-8-sig", which counts from after the mark: the
    same file's bad byte was 3 short of what the lines reader named, and a newline in
    those 3 bytes put it on the line before."""
    path = tmp_path / "c.txt"
    path.write_bytes(b"\xef\xbb\xbfcaf\xe9\n")
    (lines,) = read(path, on_bad_record="skip")
    (whole,) = read(path, on_bad_record="skip", text_mode="files")
    assert (whole.line, whole.reason) == (lines.line, lines.reason) == (1, "invalid UTF-8 at byte 6")
    path.write_bytes(b"\xef\xbb\xbfa\n\xe9\n")  # byte 5 of the file: line 2's first
    (whole,) = read(path, on_bad_record="skip", text_mode="files")
    assert (whole.line, whole.reason) == (2, "invalid UTF-8 at byte 5")
    path.write_bytes(b"\xef\xbb\xbfcaf\xc3\xa9\n")
    assert [r.text for r in read(path, text_mode="files")] == ["caf\u00e9\n"]  # the mark is still dropped


def test_parquet_long_texts_are_read_in_batches_of_fewer_rows(tmp_path, monkeypatch):
    """8,192 rows a batch whatever their length held 656 MB more for 4 MB texts: a batch
    now holds about PARQUET_BATCH_BYTES of the columns read, by the row groups' metadata."""
    import random

    from shardflow.corpus import readers

    rng = random.Random(0)  # incompressible-ish text: the metadata's uncompressed size is what counts
    long = ["".join(rng.choice("abcdefghij ") for _ in range(200_000)) for _ in range(6)]
    path = tmp_path / "long.parquet"
    pq.write_table(pa.table({"id": [str(i) for i in range(6)], "text": long, "blob": ["-"] * 6}), path)
    short = tmp_path / "short.parquet"
    pq.write_table(pa.table({"id": ["a"], "text": ["x"], "blob": ["b" * 10_000_000]}), short)
    monkeypatch.setattr(readers, "PARQUET_BATCH_BYTES", 1 << 20)
    assert readers.parquet_batch_rows(pq.ParquetFile(path).metadata, ["id", "text"]) == 5  # 1 MiB / 200 kB rows
    # a long column not read does not count
    assert readers.parquet_batch_rows(pq.ParquetFile(short).metadata, ["id", "text"]) == readers.PARQUET_BATCH_ROWS
    seen = []
    real = pq.ParquetFile.iter_batches
    monkeypatch.setattr(pq.ParquetFile, "iter_batches", lambda self, **kw: seen.append(kw["batch_size"]) or real(self, **kw))
    assert [r.text for r in read(path)] == long and seen == [5]


def test_parquet_missing_column_names_it(tmp_path):
    path = tmp_path / "c.parquet"
    pq.write_table(pa.table({"id": ["1"], "body": ["x"]}), path)
    with pytest.raises(BadRecordError, match="no column 'text'"):
        read(path)



@pytest.mark.parametrize("mode", ["error", "skip"])
def test_parquet_repeating_a_column_read_is_an_error_naming_it(tmp_path, mode):
    path = tmp_path / "c.parquet"
    columns = [pa.array(["1"]), pa.array(["first"]), pa.array(["x"]), pa.array(["second"])]
    pq.write_table(pa.Table.from_arrays(columns, names=["id", "text", "note", "text"]), path)
    message = f"{path}: column 'text' is repeated (columns 2, 4): which one to read is ambiguous"
    with pytest.raises(BadRecordError, match=re.escape(message)):
        read(path, on_bad_record=mode)


def test_parquet_repeating_a_column_not_read_is_no_matter(tmp_path):
    path = tmp_path / "c.parquet"
    columns = [pa.array(["1"]), pa.array(["a"]), pa.array(["first"]), pa.array(["b"])]
    pq.write_table(pa.Table.from_arrays(columns, names=["id", "note", "text", "note"]), path)
    assert ids_texts(read(path)) == [("1", "first")]

def test_parquet_null_and_non_string_text_are_rejected(tmp_path):
    path = tmp_path / "c.parquet"
    pq.write_table(pa.table({"id": ["1", "2", "3"], "text": ["ok", None, ""]}), path)
    items = read(path, on_bad_record="skip")
    assert [type(r) for r in items] == [Record, Rejected, Rejected]
    assert [r.line for r in items[1:]] == [2, 3]
    # A null is told from a schema without the column (which stops the read: row 5 of
    # docs/bad-input.md) and from an empty text.
    assert [r.reason for r in items[1:]] == ["null text in field 'text'", "empty text in field 'text'"]


def not_utf8_strings(values: list[bytes]) -> pa.Array:
    """A string array holding the bytes as they are: pyarrow writes a string column
    without checking its UTF-8 (as Spark and from_pylist of surrogate-escaped text do)."""
    return pa.array(values, pa.binary()).view(pa.string())


@pytest.mark.parametrize("dictionary", [False, True], ids=["plain", "dictionary"])
def test_parquet_string_that_is_not_utf8_is_a_bad_record_at_its_row(tmp_path, dictionary):
    """Reading such a value raised the codec's UnicodeDecodeError, naming neither file nor
    row, in both modes: skip could not set the row aside, and the split stopped."""
    path = tmp_path / "c.parquet"
    text = not_utf8_strings([b"one", b"caf\xe9", b"three"])
    ids = not_utf8_strings([b"a", b"b", b"\xffc"])
    pq.write_table(pa.table({"id": ids, "text": text.dictionary_encode() if dictionary else text}), path)
    message = f"{path}:2: field 'text' holds invalid UTF-8 at byte 3 of its value"
    with pytest.raises(BadRecordError, match=re.escape(message)) as caught:
        read(path)
    assert caught.value.skippable
    items = read(path, on_bad_record="skip")
    assert [type(r) for r in items] == [Record, Rejected, Rejected]
    assert ids_texts(items[:1]) == [("a", "one")]
    assert [(r.line, r.reason) for r in items[1:]] == [
        (2, "field 'text' holds invalid UTF-8 at byte 3 of its value"),
        (3, "field 'id' holds invalid UTF-8 at byte 0 of its value"),
    ]
    assert json.loads(items[1].raw) == {"id": "b", "text": "caf\\xe9"}


def test_text_empty_line_is_a_bad_record(tmp_path):
    path = tmp_path / "c.txt"
    path.write_text("one\n\nthree\n")
    with pytest.raises(BadRecordError, match=r"c\.txt:2: empty line"):
        read(path)
    assert [type(r) for r in read(path, on_bad_record="skip")] == [Record, Rejected, Record]


def test_text_invalid_utf8_line_is_bad(tmp_path):
    path = tmp_path / "c.txt"
    path.write_bytes(b"one\n\xff\xfe\n")
    with pytest.raises(BadRecordError, match=r"c\.txt:2: invalid UTF-8"):
        read(path)


def test_text_file_invalid_utf8_names_the_line(tmp_path):
    path = tmp_path / "c.txt"
    path.write_bytes(b"fine\nstill fine\nbad \xff here\n")
    with pytest.raises(BadRecordError, match=r"c\.txt:3: invalid UTF-8"):
        read(path, text_mode="files")


def test_empty_text_file_is_bad(tmp_path):
    path = tmp_path / "c.txt"
    path.write_text(" \n")
    with pytest.raises(BadRecordError, match="empty file"):
        read(path, text_mode="files")


# --- encodings and compressions not read: one error for the file ---------------------------

CONTENT = {
    "jsonl": '{"id": "a", "text": "caf\u00e9 one"}\n{"id": "b", "text": "two"}\n',
    "csv": "id,text\na,caf\u00e9 one\nb,two\n",
    "text": "caf\u00e9 one\ntwo\n",
}
FOREIGN = {
    # Windows PowerShell 5's `>` writes UTF-16 LE with its mark; Excel's "Unicode Text" too.
    "UTF-16 LE": (lambda text: ("\ufeff" + text).encode("utf-16-le"), b"\xff\xfe", "UTF-16 (byte-order mark FF FE)"),
    "UTF-16 BE": (lambda text: ("\ufeff" + text).encode("utf-16-be"), b"\xfe\xff", "UTF-16 (byte-order mark FE FF)"),
    "UTF-32 LE": (lambda text: ("\ufeff" + text).encode("utf-32-le"), b"\xff\xfe\x00\x00", "UTF-32 (byte-order mark FF FE 00 00)"),
    "bzip2": (lambda text: bz2.compress(text.encode()), b"", "bzip2-compressed (magic bytes 'BZh')"),
    "xz": (lambda text: lzma.compress(text.encode()), b"", "xz-compressed (magic bytes FD 37 7A 58 5A 00)"),
    # No zstd module here: its frame magic and a few bytes are what the reader looks at.
    "zstd": (lambda text: b"\x28\xb5\x2f\xfd\x04\x58\x00\x0a" + text.encode()[::-1], b"", "zstd-compressed (magic bytes 28 B5 2F FD)"),
}


@pytest.mark.parametrize("gzipped", [False, True], ids=["plain", "gzipped"])
@pytest.mark.parametrize("on_bad_record", ["error", "skip"])
@pytest.mark.parametrize("fmt, text_mode", [("jsonl", "lines"), ("csv", "lines"), ("text", "lines")])
@pytest.mark.parametrize("kind", FOREIGN)
def test_a_file_in_an_encoding_or_compression_not_read_is_one_error_naming_it(
    tmp_path, kind, fmt, text_mode, on_bad_record, gzipped
):
    """Read as UTF-8 such a file failed line by line as "binary data" (NUL bytes, invalid
    UTF-8), and under skip its records were rejects counted by the wrong lines; now the
    file is one error naming it and what it is, in both modes, as the parse-time count
    finds it (lines). The names pass format detection (`.jsonl.zst`); the content decides."""
    encode, mark, what = FOREIGN[kind]
    data = encode(CONTENT[fmt])
    assert data.startswith(mark)
    suffix = {"jsonl": ".jsonl", "csv": ".csv", "text": ".txt"}[fmt] + {"bzip2": ".bz2", "xz": ".xz", "zstd": ".zst"}.get(kind, "")
    path = tmp_path / f"corpus{suffix}"
    path.write_bytes(gzip.compress(data, mtime=0) if gzipped else data)
    message = f"{path}: {what}, not UTF-8 text: not read; "
    with pytest.raises(BadRecordError, match=re.escape(message)) as caught:
        read(path, text_mode=text_mode, on_bad_record=on_bad_record)
    assert caught.value.line is None and not caught.value.skippable
    with pytest.raises(BadRecordError, match=re.escape(message)):
        count_records_cheap([str(path)], ReaderOptions())


@pytest.mark.parametrize("gzipped", [False, True], ids=["plain", "gzipped"])
@pytest.mark.parametrize("kind", FOREIGN)
def test_a_text_file_in_an_encoding_or_compression_not_read_is_one_bad_record(tmp_path, kind, gzipped):
    """With text_mode: files the file is one document, so what it is decides one record:
    a bad record naming the file in error mode, one reject under skip (as a binary file
    is, docs/bad-input.md row 4), not an error stopping every other document's split."""
    encode, _, what = FOREIGN[kind]
    path = tmp_path / "doc.txt"
    path.write_bytes(gzip.compress(encode(CONTENT["text"]), mtime=0) if gzipped else encode(CONTENT["text"]))
    reason = f"{what}, not UTF-8 text: not read; "
    with pytest.raises(BadRecordError, match=re.escape(f"{path}: {reason}")) as caught:
        read(path, text_mode="files")
    assert caught.value.skippable
    (item,) = read(path, text_mode="files", on_bad_record="skip")
    assert isinstance(item, Rejected) and item.line is None and item.reason.startswith(reason)


@pytest.mark.parametrize("on_bad_record", ["error", "skip"])
@pytest.mark.parametrize("fmt", ["jsonl", "csv", "text"])
def test_a_file_gzipped_twice_is_one_error_naming_it(tmp_path, fmt, on_bad_record):
    """A .gz gzipped again (`gzip -f`, a download that kept its transfer encoding) read as
    text once gunzipped failed line by line as binary data: under skip, 3,000 records
    became a few rejects at lines the inner stream's bytes made, and their count was
    wrong. It is one error for the file, as the parse-time count finds it."""
    lines = ["id,text\n"] if fmt == "csv" else []
    for i in range(3000):
        doc = json.dumps({"id": str(i), "text": f"doc {i}"}) if fmt == "jsonl" else f"{i},doc {i}"
        lines.append((f"doc {i}" if fmt == "text" else doc) + "\n")
    path = tmp_path / f"corpus.{'txt' if fmt == 'text' else fmt}.gz"
    path.write_bytes(gzip.compress(gzip.compress("".join(lines).encode(), mtime=0), mtime=0))
    reason = "gzip-compressed twice (magic bytes 1F 8B once gunzipped), not UTF-8 text: not read; "
    message = f"{path}: {reason}"
    with pytest.raises(BadRecordError, match=re.escape(message)) as caught:
        read(path, id_field=None if fmt == "text" else "id", on_bad_record=on_bad_record)
    assert caught.value.line is None and not caught.value.skippable
    with pytest.raises(BadRecordError, match=re.escape(message)):
        count_records_cheap([str(path)], ReaderOptions())
    (item,) = read(path, format="text", text_mode="files", on_bad_record="skip")  # one document: one reject
    assert isinstance(item, Rejected) and item.reason.startswith(reason)


def test_a_text_that_begins_with_bzip2s_letters_is_read(tmp_path):
    path = tmp_path / "c.txt"
    path.write_text("BZh9 is how a bzip2 stream begins\n")
    assert [r.text for r in read(path)] == ["BZh9 is how a bzip2 stream begins"]


def test_a_utf8_byte_order_mark_is_still_dropped(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"id": "a", "text": "t"}\n')
    assert ids_texts(read(path)) == [("a", "t")]


# --- cheap counts (used by n_chunks: auto) ---------------------------------------------


def test_cheap_count_jsonl_without_final_newline(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text('{"id": 1, "text": "a"}\n{"id": 2, "text": "b"}')
    assert count_records_cheap([str(path)], ReaderOptions()) == 2


def test_cheap_count_gz_counts_decompressed_lines(tmp_path, write_jsonl):
    path = write_jsonl(tmp_path / "c.jsonl.gz", DOCS)
    assert count_records_cheap([str(path)], ReaderOptions()) == 3


def test_cheap_count_csv_excludes_header(tmp_path):
    path = tmp_path / "c.csv"
    path.write_text("id,text\n1,a\n2,b\n")
    assert count_records_cheap([str(path)], ReaderOptions()) == 2


def test_cheap_count_parquet_uses_metadata(tmp_path):
    path = tmp_path / "c.parquet"
    pq.write_table(pa.table({"id": list(range(11)), "text": ["t"] * 11}), path)
    assert count_records_cheap([str(path)], ReaderOptions()) == 11


def test_cheap_count_sums_files_and_counts_text_files_as_one(tmp_path):
    paths = []
    for i in range(3):
        p = tmp_path / f"{i}.txt"
        p.write_text("line\n" * 5)
        paths.append(str(p))
    assert count_records_cheap(paths, ReaderOptions(text_mode="files")) == 3
    assert count_records_cheap(paths, ReaderOptions(text_mode="lines")) == 15


def test_iter_records_reads_files_in_given_order(tmp_path, write_jsonl):
    a = write_jsonl(tmp_path / "a.jsonl", [{"id": "a1", "text": "x"}])
    b = write_jsonl(tmp_path / "b.jsonl", [{"id": "b1", "text": "y"}])
    items = list(iter_records([str(b), str(a)], ReaderOptions()))
    assert [(r.id, os.path.basename(r.source)) for r in items] == [("b1", "b.jsonl"), ("a1", "a.jsonl")]


def test_positions_of_a_stored_copy_name_the_object(tmp_path, monkeypatch):
    """A job reads an S3 object from Snakemake's local copy; ids from positions, sources
    and rejects name the object's URL (core.s3.logical_path), as every pod of a run does."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SHARDFLOW_LOCAL_STORAGE", raising=False)
    monkeypatch.delenv("SHARDFLOW_STORAGE_PREFIX", raising=False)
    copy = tmp_path / ".snakemake/storage/s3/bucket/corpora/c.txt"
    copy.parent.mkdir(parents=True)
    copy.write_text("one\n\ntwo\n")
    items = list(iter_records([".snakemake/storage/s3/bucket/corpora/c.txt"], ReaderOptions(format="text", id_field=None,
                                                                                             on_bad_record="skip")))
    assert [(i.id, i.source) for i in items if isinstance(i, Record)] == [
        ("s3://bucket/corpora/c.txt:1", "s3://bucket/corpora/c.txt"), ("s3://bucket/corpora/c.txt:3", "s3://bucket/corpora/c.txt")]
    assert [(i.source, i.line) for i in items if isinstance(i, Rejected)] == [("s3://bucket/corpora/c.txt", 2)]
