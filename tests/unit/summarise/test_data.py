"""The summarisation readers at their edges: a byte-order mark, a record exactly at the
size limit, a gzip file cut in its header, ids that are numbers or differ only in their
Unicode form, system names with a dot. (test_score_jsonl covers the bad lines one by one.)"""

from __future__ import annotations

import gzip
import json
import re

import pytest

from shardflow.summarise.data import BadRecordError, load_documents, read_references, read_summaries


def write(path, *records, raw=b""):
    path.write_bytes(raw + b"".join(json.dumps(r, ensure_ascii=False).encode() + b"\n" for r in records))
    return str(path)


def test_a_byte_order_mark_is_no_part_of_the_first_id(tmp_path):
    rec = {"id": "a", "article": "x", "highlights": "h"}
    plain = write(tmp_path / "bom.jsonl", rec, raw=b"\xef\xbb\xbf")
    packed = tmp_path / "bom.jsonl.gz"
    packed.write_bytes(gzip.compress(open(plain, "rb").read()))
    for path in (plain, str(packed)):
        assert [d.id for d in load_documents(path).records] == ["a"]


@pytest.mark.parametrize("blank", [b"\n", b"  \r\n"], ids=["alone", "with white space"])
def test_a_first_line_holding_only_a_byte_order_mark_is_a_blank_line(tmp_path, blank):
    """The line the mark leaves is blank, passed over as the split passes it over; it was
    "malformed JSON" at line 1, stopping the job or counted as a reject."""
    path = write(tmp_path / "bom.jsonl", {"id": "a", "article": "x", "highlights": "h"}, raw=b"\xef\xbb\xbf" + blank)
    for mode in ("error", "skip"):
        loaded = load_documents(path, on_bad_record=mode)
        assert ([(d.id, d.line) for d in loaded.records], loaded.rejects) == ([("a", 2)], [])


def test_a_line_nested_too_deeply_is_a_bad_record_naming_file_and_line(tmp_path):
    """json decodes by recursion: such a line raised a bare RecursionError, naming neither
    file nor line, whatever on_bad_record said."""
    rec = {"id": "a", "article": "x", "highlights": "h"}
    path = write(tmp_path / "refs.jsonl", rec, raw=b"")
    with open(path, "ab") as fh:
        fh.write(b'{"id": "b", "article": ' + b"[" * 100_000 + b"\n")
    reason = "malformed JSON (arrays or objects nested deeper than"
    with pytest.raises(BadRecordError, match=re.escape(f"{path}:2: {reason}")):
        load_documents(path)
    loaded = load_documents(path, on_bad_record="skip")
    assert [d.id for d in loaded.records] == ["a"]
    assert [(r.line, r.reason.startswith(reason)) for r in loaded.rejects] == [(2, True)]


def test_invalid_utf8_after_a_byte_order_mark_is_named_at_its_byte_as_the_split_names_it(tmp_path):
    """The byte of an invalid UTF-8 sequence on line 1 counts the mark, as the file holds
    it and as the split's reader names it (corpus.readers.decode_text): "utf-8-sig"
    counted from after the mark, 3 short, so one file's error named two bytes."""
    from shardflow.corpus.readers import ReaderOptions, iter_records

    raw = b'\xef\xbb\xbf{"id": "a", "article": "caf\xe9", "highlights": "h"}\n'
    path = tmp_path / "bom.jsonl"
    path.write_bytes(raw)
    at = raw.index(b"\xe9")
    with pytest.raises(BadRecordError, match=rf"bom.jsonl:1: invalid UTF-8 at byte {at}\b"):
        load_documents(str(path))
    with pytest.raises(ValueError, match=rf"invalid UTF-8 at byte {at}\b"):
        list(iter_records([str(path)], ReaderOptions(format="jsonl", text_field="article")))


def test_a_record_exactly_at_the_size_limit_is_read_and_one_byte_more_is_not(tmp_path):
    line = json.dumps({"id": "a", "article": "x" * 50, "highlights": "h"}).encode()
    path = tmp_path / "refs.jsonl"
    path.write_bytes(line + b"\n" + line.replace(b'"a"', b'"bb"') + b"\n" + line.replace(b'"a"', b'"c"'))
    loaded = load_documents(str(path), on_bad_record="skip", max_record_bytes=len(line))  # the newline is not counted
    assert [d.id for d in loaded.records] == ["a", "c"]  # "c": the last line, without its newline
    assert [(r.line, r.reason) for r in loaded.rejects] == [(2, f"record too large: {len(line) + 1:,} bytes, "
                                                                f"over input.max_record_mb ({len(line):,} bytes)")]


def test_a_gzip_file_cut_in_its_header_is_one_error_naming_the_file(tmp_path):
    path = tmp_path / "refs.jsonl.gz"
    path.write_bytes(gzip.compress(b'{"id": "a", "article": "x", "highlights": "h"}\n')[:6])
    with pytest.raises(BadRecordError, match=rf"{path}:1: gzip stream truncated"):
        load_documents(str(path))


def test_an_integer_id_and_its_string_are_one_id_across_files(tmp_path):
    rec = {"highlights": "The council met.", "summary": "The council met."}
    first = write(tmp_path / "a.jsonl", dict(rec, id=5))
    second = write(tmp_path / "b.jsonl", dict(rec, id="6"), dict(rec, id="5"))
    with pytest.raises(BadRecordError, match=rf"b.jsonl:2: duplicate id '5' \(first at {first}:1\)"):
        read_summaries([first, second], "summary").loaded()
    assert [r.id for r in read_summaries([first, second], "summary", on_bad_record="skip").loaded().records] == ["5", "6"]


@pytest.mark.parametrize("value", [1.0, True, None, "", ["a"]])
def test_an_id_no_split_would_read_is_an_error_at_its_line(tmp_path, value):
    path = write(tmp_path / "refs.jsonl", {"id": "a", "highlights": "h"}, {"id": value, "highlights": "h"})
    with pytest.raises(BadRecordError, match=rf"refs.jsonl:2: id field 'id' is {re.escape(repr(value))}, not a non-empty"):
        read_references(path).loaded()


def test_ids_are_compared_as_written_not_unicode_normalised(tmp_path):
    composed, decomposed = "caf\u00e9", "cafe\u0301"
    path = write(tmp_path / "refs.jsonl", {"id": composed, "highlights": "h"}, {"id": decomposed, "highlights": "h"})
    assert [d.id for d in read_references(path).loaded().records] == [composed, decomposed]


def test_an_id_with_an_unpaired_surrogate_is_an_error_naming_its_line(tmp_path):
    """The split rejects such an id; here it was read, and scoring stored summaries
    failed writing per_document.parquet, naming neither file nor line."""
    path = tmp_path / "s.jsonl"
    path.write_bytes(b'{"id": "a", "highlights": "h", "summary": "h"}\n{"id": "b\\ud800", "highlights": "h", "summary": "h"}\n')
    with pytest.raises(BadRecordError, match=rf"{path}:2: id field 'id' holds an unpaired surrogate"):
        read_summaries(str(path), "summary").loaded()


def test_a_system_name_with_a_dot_is_one_system(tmp_path):
    """"a.*" reads every key of the dict as a system; a key such as "gpt-3.5" was read as
    the path a -> gpt-3 -> 5, and every record was 'missing' it."""
    rec = {"id": "d1", "highlights": "The cat sat.", "s": {"gpt-3.5": "The cat sat.", "t5": "A dog ran."}}
    path = write(tmp_path / "s.jsonl", rec, dict(rec, id="d2"))
    (first, _) = read_summaries(path, "s.*").loaded().records
    assert first.summaries == {"gpt-3.5": "The cat sat.", "t5": "A dog ran."}
    bad = write(tmp_path / "bad.jsonl", rec, dict(rec, id="d2", s={"gpt-3.5": 7, "t5": "x"}))
    with pytest.raises(BadRecordError, match=r"bad.jsonl:2: field 's.gpt-3.5' is int, not a string"):
        read_summaries(bad, "s.*").loaded()


def test_a_key_read_twice_in_one_line_is_a_bad_record_naming_it(tmp_path):
    """json keeps a repeated key's last value: a reference, stored summary or id written
    twice was read as its last, the first dropped without a word. As the split reads its
    own fields (docs/bad-input.md, row 20b), the line is a bad record naming the key."""
    path = tmp_path / "s.jsonl"
    path.write_bytes(
        b'{"id": "a", "highlights": "h", "summary": "h"}\n'
        b'{"id": "b", "highlights": "first", "summary": "s", "highlights": "second"}\n'
        b'{"id": "c", "highlights": "h", "summary": "one", "summary": "two"}\n'
        b'{"id": "d", "id": "e", "highlights": "h", "summary": "h"}\n'
        b'{"id": "f", "highlights": "h", "summary": "h", "system_summaries": {"x": "s"}, "system_summaries": {"x": "t"}}\n'
    )
    with pytest.raises(BadRecordError, match=rf"{path}:2: key 'highlights' is repeated \(keys 2, 4 of the object\)"):
        read_references(str(path)).loaded()
    loaded = read_summaries(str(path), "summary", on_bad_record="skip").loaded()
    assert [r.id for r in loaded.records] == ["a", "f"]
    assert [(r.line, r.reason.split(" is repeated")[0]) for r in loaded.rejects] == [
        (2, "key 'highlights'"), (3, "key 'summary'"), (4, "key 'id'")
    ]
    nested = read_summaries(str(path), "system_summaries.*", on_bad_record="skip").loaded()
    assert (5, "key 'system_summaries'") in [(r.line, r.reason.split(" is repeated")[0]) for r in nested.rejects]
    # A key that is not read may repeat; so may one inside an object read (as the split allows).
    path.write_bytes(b'{"id": "a", "highlights": "h", "extra": 1, "extra": 2, "meta": {"id": 1, "id": 2}}\n')
    assert [d.reference for d in read_references(str(path)).loaded().records] == ["h"]
