"""Bad input, one test (or a few) per row of docs/bad-input.md: each is a clear error naming
the file and line (or the config key), or a counted reject with on_bad_record: skip, and
memory stays bounded by input.max_record_mb."""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from shardflow.core.config import ConfigError, load_schema, validate_config
from shardflow.corpus.chunks import chunk_path, read_chunk
from shardflow.corpus.readers import (
    PREVIEW_BYTES,
    BadRecordError,
    ReaderOptions,
    Record,
    count_records_cheap,
    open_reader,
)
from shardflow.corpus.split import SplitParams, split_corpus

REPO = Path(__file__).resolve().parents[3]


def read(path, **opts) -> list:
    return list(open_reader(str(path), ReaderOptions(**opts)))


def kinds(items) -> list[str]:
    return [type(r).__name__ for r in items]


def run_split(out: Path, inputs: list, n: int = 2, **opts) -> dict:
    return split_corpus(
        [str(p) for p in inputs],
        ReaderOptions(**opts),
        SplitParams(n_chunks=n),
        [chunk_path(out, i) for i in range(n)],
        out / "manifest.json",
        out / "rejects.jsonl",
    )


def jsonl_bytes(n: int, prefix: str = "d") -> bytes:
    return b"".join(json.dumps({"id": f"{prefix}{i}", "text": f"text {i} " * 20}).encode() + b"\n" for i in range(n))


# --- truncated and corrupt gzip ------------------------------------------------------------


@pytest.mark.parametrize("mode", ["error", "skip"])
def test_truncated_gzip_stops_naming_the_line_it_ends_on(tmp_path, mode):
    path = tmp_path / "c.jsonl.gz"
    data = gzip.compress(jsonl_bytes(2000), mtime=0)
    path.write_bytes(data[: len(data) // 2])
    # Whatever on_bad_record says: the records after the cut cannot be counted.
    with pytest.raises(BadRecordError, match=r"c\.jsonl\.gz:\d+: gzip stream truncated") as err:
        read(path, on_bad_record=mode)
    assert f"; {err.value.line - 1} lines read before it" in str(err.value)
    assert 1 < err.value.line < 2000


def test_gzip_cut_after_the_last_line_is_still_truncated(tmp_path):
    path = tmp_path / "c.jsonl.gz"
    path.write_bytes(gzip.compress(jsonl_bytes(3), mtime=0)[:-4])  # the length trailer missing
    with pytest.raises(BadRecordError, match=r"c\.jsonl\.gz:4: gzip stream truncated .*; 3 lines read"):
        read(path)


def test_truncated_gzip_in_the_parse_time_count_names_the_file(tmp_path):
    path = tmp_path / "c.jsonl.gz"
    data = gzip.compress(jsonl_bytes(2000), mtime=0)
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(BadRecordError, match=r"c\.jsonl\.gz:\d+: gzip stream truncated"):
        count_records_cheap([str(path)], ReaderOptions())


@pytest.mark.parametrize("data", [b"", b"\x1f"], ids=["0 bytes", "1 byte"])
def test_a_gzip_file_cut_before_its_magic_bytes_stops_naming_it(tmp_path, data, write_jsonl):
    """A part whose download or copy stopped at once (no byte, or the magic's first one)
    has no gzip header to be opened by, so it was read as the plain file it is: the empty
    one as no records, silently, among the other parts, whatever on_bad_record said."""
    good = write_jsonl(tmp_path / "a.jsonl.gz", [{"id": "a", "text": "t"}])
    cut = tmp_path / "b.jsonl.gz"
    cut.write_bytes(data)
    why = rf"gzip stream truncated \(the file ends after {len(data)} bytes?, before the gzip magic bytes 1F 8B"
    for mode in ("error", "skip"):
        with pytest.raises(BadRecordError, match=rf"b\.jsonl\.gz:1: {why}.*; 0 lines read before it"):
            run_split(tmp_path / "out", [good, cut], on_bad_record=mode)
    with pytest.raises(BadRecordError, match=rf"b\.jsonl\.gz:1: {why}"):
        count_records_cheap([str(good), str(cut)], ReaderOptions())
    whole = tmp_path / "c.txt.gz"  # text_mode: files, where a truncated stream stops the split too
    whole.write_bytes(data)
    with pytest.raises(BadRecordError, match=rf"c\.txt\.gz: {why}"):
        read(whole, text_mode="files", on_bad_record="skip")
    # An empty file not named as gzip, and gzip of nothing, are still files without records.
    (tmp_path / "e.jsonl").write_bytes(data)
    (tmp_path / "z.jsonl.gz").write_bytes(gzip.compress(b"", mtime=0))
    assert read(tmp_path / "z.jsonl.gz") == [] and count_records_cheap([str(tmp_path / "z.jsonl.gz")], ReaderOptions()) == 0
    assert kinds(read(tmp_path / "e.jsonl", on_bad_record="skip")) == ([] if not data else ["Rejected"])


def test_corrupt_gzip_stops_naming_file_and_line(tmp_path):
    path = tmp_path / "c.jsonl.gz"
    data = bytearray(gzip.compress(jsonl_bytes(2000), mtime=0))
    data[100] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(BadRecordError, match=r"c\.jsonl\.gz:1: corrupt gzip stream \(Error -3"):
        read(path, on_bad_record="skip")


# --- binary files ----------------------------------------------------------------------------


def test_binary_file_is_a_bad_record_at_its_first_line(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_bytes(bytes(range(256)) * 8)  # NUL first, invalid UTF-8 later
    with pytest.raises(BadRecordError, match=r"c\.jsonl:1: NUL byte at byte 0 \(binary data, not text\)"):
        read(path)


@pytest.mark.parametrize("name", ["c.txt", "c.jsonl", "c.csv"])
def test_lines_broken_by_cr_alone_are_one_error_not_one_record(tmp_path, name):
    """Classic Mac OS line breaks: read by LF, the whole file was one record (a text
    file: one document holding every line, silently)."""
    lines = ["id,text", "a,one", "b,two"] if name.endswith(".csv") else (
        [json.dumps({"id": i, "text": t}) for i, t in (("a", "one"), ("b", "two"))] if name.endswith(".jsonl")
        else ["one", "two", "three"])
    path = tmp_path / name
    path.write_bytes("\r".join(lines).encode() + b"\r")
    for mode in ("error", "skip"):
        with pytest.raises(BadRecordError, match=rf"{name}: its lines end in CR alone .* the whole file would be one record"):
            read(path, on_bad_record=mode)


def test_a_line_over_the_limit_with_one_stray_cr_is_too_large_not_cr_broken(tmp_path):
    path = tmp_path / "c.txt"
    path.write_bytes(b"a\rb" + b"x" * (2 << 20))  # no LF; over 1 MiB
    (bad,) = read(path, on_bad_record="skip", max_record_bytes=1 << 20)
    assert bad.reason.startswith("record too large")
    path.write_bytes(b"a\rb\rc" + b"x" * (2 << 20))  # lines broken by CR: a second one in its head
    with pytest.raises(BadRecordError, match="its lines end in CR alone"):
        read(path, on_bad_record="skip", max_record_bytes=1 << 20)


def test_a_cr_at_the_end_of_one_line_and_crlf_breaks_are_read(tmp_path):
    one = tmp_path / "one.jsonl"
    one.write_bytes(b'{"id": "a", "text": "only"}\r')
    assert [r.text for r in read(one)] == ["only"]
    crlf = tmp_path / "crlf.txt"
    crlf.write_bytes(b"one\r\ntwo\r\n")
    assert len(read(crlf)) == 2


def test_binary_lines_skipped_are_counted_rejects(tmp_path):
    path = tmp_path / "c.txt"
    path.write_bytes(b"good line\n\x00\x01\x02\n\x89PNG\xff\ncaf\xe9\nlast\n")
    items = read(path, on_bad_record="skip")
    assert kinds(items) == ["Record", "Rejected", "Rejected", "Rejected", "Record"]
    assert [r.reason for r in items[1:4]] == [
        "NUL byte at byte 0 (binary data, not text)",
        "invalid UTF-8 at byte 0",
        "invalid UTF-8 at byte 3",
    ]


def test_binary_text_file_names_the_line_of_the_nul(tmp_path):
    path = tmp_path / "c.txt"
    path.write_bytes(b"fine\nalso \x00 fine?\n")
    with pytest.raises(BadRecordError, match=r"c\.txt:2: NUL byte at byte 10"):
        read(path, text_mode="files")


# --- Parquet with the wrong schema -----------------------------------------------------------


@pytest.mark.parametrize("mode", ["error", "skip"])
@pytest.mark.parametrize(
    "table, message",
    [
        ({"id": ["1"], "body": ["x"]}, r"c\.parquet: no column 'text' \(columns: \['body', 'id'\]\)"),
        ({"id": ["1"], "text": [1]}, r"c\.parquet: column 'text' is int64, not a string column"),
        ({"id": ["1"], "text": [b"x"]}, r"c\.parquet: column 'text' is binary, not a string column"),
        ({"id": [1.5], "text": ["x"]}, r"c\.parquet: column 'id' is double, not a string or integer column"),
    ],
)
def test_parquet_with_the_wrong_schema_is_one_error_for_the_file(tmp_path, table, message, mode):
    path = tmp_path / "c.parquet"
    pq.write_table(pa.table(table), path)
    with pytest.raises(BadRecordError, match=message):
        read(path, on_bad_record=mode)


def test_a_group_that_is_no_string_or_integer_is_bad(tmp_path):
    """A float group (1.0) would be another group than the integer 1 of another file, and a
    list one a group named by its Python repr: bad, as such an id is."""
    path = tmp_path / "c.parquet"
    pq.write_table(pa.table({"id": ["1"], "text": ["x"], "g": [1.0]}), path)
    with pytest.raises(BadRecordError, match=r"c\.parquet: column 'g' is double, not a string or integer column"):
        read(path, group_field="g", on_bad_record="skip")
    path = tmp_path / "c.jsonl"
    path.write_text('{"id": "a", "text": "x", "g": 1}\n{"id": "b", "text": "y", "g": 1.0}\n{"id": "c", "text": "z", "g": ["s"]}\n')
    items = read(path, group_field="g", on_bad_record="skip")
    assert kinds(items) == ["Record", "Rejected", "Rejected"] and items[0].group == "1"
    assert [r.reason for r in items[1:]] == ["group field 'g' is float, not a string or integer",
                                            "group field 'g' is list, not a string or integer"]


def test_parquet_dictionary_and_integer_columns_are_read(tmp_path):
    path = tmp_path / "c.parquet"
    text = pa.array(["x", "y"]).dictionary_encode()
    pq.write_table(pa.table({"id": pa.array([1, 2], pa.int32()), "text": text}), path)
    assert [(r.id, r.text) for r in read(path)] == [("1", "x"), ("2", "y")]


@pytest.mark.parametrize("cut", [0.5, None])
def test_file_that_is_not_parquet_names_it(tmp_path, cut):
    path = tmp_path / "c.parquet"
    pq.write_table(pa.table({"id": ["1"], "text": ["x"]}), path)
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * cut)] if cut else b'{"id": 1, "text": "json, not parquet"}\n')
    with pytest.raises(BadRecordError, match=r"c\.parquet: not a readable Parquet file \(Parquet magic bytes"):
        read(path, on_bad_record="skip")
    with pytest.raises(BadRecordError, match=r"c\.parquet: not a readable Parquet file"):
        count_records_cheap([str(path)], ReaderOptions())


# --- CSV: embedded newlines and NUL bytes ----------------------------------------------------


def test_csv_quoted_newlines_are_text_and_nul_bytes_are_bad(tmp_path):
    path = tmp_path / "c.csv"
    path.write_bytes(b'id,text\n1,"two\nlines"\n2,nul\x00here\n3,"after\r\nCRLF"\n')
    with pytest.raises(BadRecordError, match=r"c\.csv:4: NUL byte at byte 5 \(binary data, not text\)"):
        read(path)
    items = read(path, on_bad_record="skip")
    assert kinds(items) == ["Record", "Rejected", "Record"]
    assert [(r.id, r.text, r.line) for r in (items[0], items[2])] == [("1", "two\nlines", 2), ("3", "after\r\nCRLF", 5)]
    assert items[1].raw == "2,nul\x00here"  # kept as read (rejects.jsonl escapes it)


def test_csv_unquoted_newline_splits_the_row_and_is_bad(tmp_path):
    path = tmp_path / "c.csv"
    path.write_bytes(b"id,text\n1,broken\nrow\n2,fine\n")
    items = read(path, on_bad_record="skip")
    assert [(type(r).__name__, r.line) for r in items] == [("Record", 2), ("Rejected", 3), ("Record", 4)]
    assert items[1].reason == "1 fields where the header has 2"


# --- records over input.max_record_mb -------------------------------------------------------

LIMIT = 1000


@pytest.mark.parametrize("name", ["c.jsonl", "c.jsonl.gz"])
def test_too_large_line_is_a_bad_record_and_the_next_line_is_read(tmp_path, name, write_jsonl):
    docs = [{"id": "a", "text": "ok"}, {"id": "big", "text": "x" * 5000}, {"id": "c", "text": "after"}]
    path = write_jsonl(tmp_path / name, docs)
    too_large = r"record too large: 5,025 bytes, over input.max_record_mb \(1,000 bytes\); not read"
    with pytest.raises(BadRecordError, match=rf"{name}:2: {too_large}"):
        read(path, max_record_bytes=LIMIT)
    items = read(path, max_record_bytes=LIMIT, on_bad_record="skip")
    assert kinds(items) == ["Record", "Rejected", "Record"] and items[2].line == 3
    assert items[1].raw.startswith('{"id": "big"') and len(items[1].raw) <= PREVIEW_BYTES  # a preview


def test_line_of_exactly_the_limit_is_read(tmp_path):
    path = tmp_path / "c.txt"
    path.write_bytes(b"y" * LIMIT + b"\n" + b"z" * LIMIT)
    assert [len(r.text) for r in read(path, max_record_bytes=LIMIT)] == [LIMIT, LIMIT]


def crlf_records(name: str, sizes: list[int]) -> bytes:
    """A file of `name`'s format whose records are lines of `sizes` bytes (a short one
    last), each ending in CRLF; a CSV's last but one a quoted field over two lines."""
    if name.endswith(".txt"):
        lines = [b"y" * n for n in sizes] + [b"z"]
    elif name.endswith(".csv"):
        lines = [b"id,text"] + [b"%d," % i + b"x" * (n - 2) for i, n in enumerate(sizes)] + [b'q,"one\r\ntwo"', b"9,z"]
    else:
        bare = len(json.dumps({"id": "a", "text": ""}))
        lines = [json.dumps({"id": f"{i}", "text": "x" * (n - bare)}).encode() for i, n in enumerate(sizes)]
        lines.append(json.dumps({"id": "z", "text": "z"}).encode())
    data = b"".join(line + b"\r\n" for line in lines)
    return gzip.compress(data, mtime=0) if name.endswith(".gz") else data


@pytest.mark.parametrize("name", ["c.txt", "c.jsonl", "c.jsonl.gz", "c.csv"])
def test_a_crlf_line_of_exactly_the_limit_is_read_and_one_byte_over_is_not(tmp_path, name):
    """A record's size leaves out its line break, CRLF as LF: until 2026-11-29 a line of
    exactly the limit that ended in CRLF was too large by its CR (1,001 bytes of 1,000),
    while the same line ending in LF was read."""
    path = tmp_path / name
    path.write_bytes(crlf_records(name, [LIMIT, LIMIT + 1, LIMIT]))
    items = read(path, max_record_bytes=LIMIT, on_bad_record="skip")
    assert kinds(items) == ["Record", "Rejected", "Record", "Record"] + ["Record"] * name.endswith(".csv")
    assert items[1].reason.startswith(f"record too large: {LIMIT + 1:,} bytes,")
    assert [r.line for r in items] == ([2, 3, 4, 5, 7] if name.endswith(".csv") else [1, 2, 3, 4])
    if name.endswith(".csv"):  # a quoted line break is text: its CRLF is two bytes of the row
        path.write_bytes(crlf_records(name, []).replace(b'q,"', b'q,"' + b"w" * (LIMIT - 12)))  # a row of LIMIT bytes
        assert kinds(read(path, max_record_bytes=LIMIT - 1, on_bad_record="skip")) == ["Rejected", "Record"]
        assert [r.text for r in read(path, max_record_bytes=LIMIT)] == ["w" * (LIMIT - 12) + "one\r\ntwo", "z"]


def test_too_large_text_file(tmp_path):
    path = tmp_path / "c.txt"
    path.write_bytes(b"word " * 1000)
    with pytest.raises(BadRecordError, match=r"c\.txt: record too large: 5,000 bytes"):
        read(path, text_mode="files", max_record_bytes=LIMIT)


def test_too_large_parquet_text(tmp_path):
    path = tmp_path / "c.parquet"
    pq.write_table(pa.table({"id": ["1", "2"], "text": ["é" * 600, "é" * 400]}), path)  # 1200 and 800 bytes
    items = read(path, max_record_bytes=LIMIT, on_bad_record="skip")
    assert kinds(items) == ["Rejected", "Record"]
    assert items[0].reason.startswith("record too large: 1,200 bytes")


def test_too_large_csv_rows_keep_the_rows_after_them(tmp_path):
    # A long quoted field on one line, one spread over many short lines, one with
    # doubled quotes: the rows after each are still read, on their own lines.
    long_one = '"' + "a" * 3000 + '"'
    long_many = '"' + "b\n" * 2000 + '"'
    long_quotes = '"' + 'say ""hi"" ' * 300 + '"'
    path = tmp_path / "c.csv"
    path.write_text(f"id,text\n1,{long_one}\n2,ok\n3,{long_many}\n4,fine\n5,{long_quotes}\n6,last\n")
    items = read(path, max_record_bytes=LIMIT, on_bad_record="skip")
    assert [(type(r).__name__, r.line) for r in items] == [
        ("Rejected", 2),
        ("Record", 3),
        ("Rejected", 4),
        ("Record", 2005),
        ("Rejected", 2006),
        ("Record", 2007),
    ]
    assert [r.id for r in items if isinstance(r, Record)] == ["2", "4", "6"]
    assert items[0].reason.startswith("record too large: 3,004 bytes")


def test_too_large_csv_header(tmp_path):
    path = tmp_path / "c.csv"
    path.write_text("id," + "t" * 2000 + "\n1,x\n")
    with pytest.raises(BadRecordError, match=r"c\.csv:1: header row over input.max_record_mb"):
        read(path, max_record_bytes=LIMIT, on_bad_record="skip")


# Runs in a child process so that its peak memory (ru_maxrss) is its own.
PEAK_SCRIPT = """
import json, resource, sys
from shardflow.corpus.readers import ReaderOptions, open_reader
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
out = []
for path in sys.argv[1:]:
    items = list(open_reader(path, ReaderOptions(on_bad_record="skip")))  # the default limit, 64 MiB
    out.append([[type(r).__name__, r.line, getattr(r, "reason", None) or r.text] for r in items])
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"items": out, "grew_mb": (peak - base) / 1024}))
"""


def test_500_mb_line_is_rejected_with_bounded_memory(tmp_path):
    """One 500 MB line, plain and gzipped: a counted reject, the line after it read, and
    the reader's memory grows by about 2 x the 64 MiB limit, not by the line."""
    block = b"a" * (1 << 20)
    head, tail = b'{"id": "huge", "text": "', b'"}\n{"id": "next", "text": "small"}\n'
    plain, packed = tmp_path / "big.jsonl", tmp_path / "big.jsonl.gz"
    with open(plain, "wb") as fh:
        fh.write(head)
        for _ in range(500):
            fh.write(block)
        fh.write(tail)
    member = gzip.compress(block, compresslevel=1, mtime=0)  # gzip members concatenate
    packed.write_bytes(gzip.compress(head, mtime=0) + member * 500 + gzip.compress(tail, mtime=0))
    try:
        proc = subprocess.run(
            [sys.executable, "-c", PEAK_SCRIPT, str(plain), str(packed)],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=REPO,
            check=True,
        )
    finally:
        plain.unlink()
    result = json.loads(proc.stdout)
    too_large = f"record too large: {500 * 2**20 + len(head) + 2:,} bytes, over input.max_record_mb (64 MiB); not read"
    assert result["items"] == [[["Rejected", 1, too_large], ["Record", 2, "small"]]] * 2
    assert result["grew_mb"] < 200, result  # reading the line would take > 500


# --- duplicate ids ---------------------------------------------------------------------------


def test_duplicate_id_within_a_file_names_both_lines(tmp_path, write_jsonl):
    path = write_jsonl(tmp_path / "c.jsonl", [{"id": i, "text": "t"} for i in ("a", "b", "c", "b")])
    with pytest.raises(BadRecordError, match=rf"c\.jsonl:4: duplicate id 'b' \(first at {path}:2\)"):
        run_split(tmp_path / "out", [path])


def test_duplicate_id_across_files_names_both_files(tmp_path, write_jsonl):
    a = write_jsonl(tmp_path / "a.jsonl", [{"id": "x1", "text": "t"}, {"id": "shared", "text": "t"}])
    b = write_jsonl(tmp_path / "b.jsonl", [{"id": "shared", "text": "u"}])
    with pytest.raises(BadRecordError) as err:
        run_split(tmp_path / "out", [a, b])
    assert str(err.value) == f"{b}:1: duplicate id 'shared' (first at {a}:2)"


def test_duplicate_ids_skipped_keep_the_first_and_count_the_rest(tmp_path, write_jsonl):
    a = write_jsonl(tmp_path / "a.jsonl", [{"id": i, "text": f"a{i}"} for i in ("x", "y", "x", "z")])
    b = write_jsonl(tmp_path / "b.jsonl", [{"id": i, "text": f"b{i}"} for i in ("y", "w", "x")])
    out = tmp_path / "out"
    manifest = run_split(out, [a, b], 3, on_bad_record="skip")
    ids = sum((read_chunk(c["path"])[0] for c in manifest["chunks"]), [])
    assert ids == ["x", "y", "z", "w"]
    rejects = [json.loads(x) for x in (out / "rejects.jsonl").read_text().splitlines()]
    assert [(r["source"], r["line"], r["reason"]) for r in rejects] == [
        (str(a), 3, f"duplicate id 'x' (first at {a}:1)"),
        (str(b), 1, f"duplicate id 'y' (first at {a}:2)"),
        (str(b), 3, f"duplicate id 'x' (first at {a}:1)"),
    ]
    assert rejects[1]["raw"] == '{"id":"y","text":"by"}'
    assert (manifest["total_records"], manifest["rejected_records"]) == (4, 3)
    assert [c["items"] for c in manifest["chunks"]] == [2, 1, 1]


def test_ids_as_positions_are_not_checked(tmp_path):
    path = tmp_path / "c.txt"
    path.write_text("same\nsame\n")  # equal texts, distinct position ids
    manifest = run_split(tmp_path / "out", [path], 1)
    assert manifest["total_records"] == 2


# --- ids with ../ and path separators ---------------------------------------------------------


def test_ids_with_dot_dot_and_separators_are_kept_verbatim_and_make_no_path(tmp_path, write_jsonl):
    """No output path is built from an id (docs/bad-input.md): such ids are plain data."""
    ids = ["../../escape", "a/b", "c\\d", "/abs/path", "..", "C:\\x"]
    path = write_jsonl(tmp_path / "in" / "c.jsonl", [{"id": i, "text": f"text {i}"} for i in ids])
    manifest = run_split(tmp_path / "out", [path], 2)
    assert sum((read_chunk(c["path"])[0] for c in manifest["chunks"]), []) == ids
    written = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    assert written == ["in/c.jsonl", "out/chunk_0.jsonl", "out/chunk_1.jsonl", "out/manifest.json", "out/rejects.jsonl"]
    assert not (tmp_path.parent / "escape").exists()


# --- an empty corpus -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, data",
    [("c.jsonl", b""), ("c.jsonl.gz", gzip.compress(b"", mtime=0)), ("c.csv", b"id,text\n"), ("c.jsonl", b"\n\n")],
)
def test_empty_corpus_names_the_input(tmp_path, name, data):
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(ValueError, match=rf"no usable record in \['{path}'\]: the input holds no records \(empty\)"):
        run_split(tmp_path / "out", [path])


def test_corpus_of_only_rejects_names_the_first(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text('{"id": "a"}\nnot json\n')
    first = f"{path}:1: missing text field 'text' (the record's keys: ['id'])"
    with pytest.raises(ValueError, match=re.escape(f"all 2 rejected (the first: {first})")):
        run_split(tmp_path / "out", [path], on_bad_record="skip")


# --- config values out of range --------------------------------------------------------------


@pytest.mark.parametrize(
    "section, key, value, message",
    [
        (None, "n_chunks", 0, "config key 'n_chunks': 0 is less than the minimum of 1"),
        (None, "n_chunks", "many", "config key 'n_chunks': 'many' is neither an integer nor 'auto'"),
        ("retrieval", "n_chunks", -2, "config key 'retrieval.n_chunks': -2 is less than the minimum of 1"),
        ("embedding", "token_budget", -512, "config key 'embedding.token_budget': -512 is less than the minimum of 1"),
        ("summarise", "token_budget", 0, "config key 'summarise.token_budget': 0 is less than the minimum of 1"),
        ("shards", "tokens_per_shard", -1, "config key 'shards.tokens_per_shard': -1 is less than the minimum of 1"),
        ("input", "max_record_mb", 0, "config key 'input.max_record_mb': 0 is less than or equal to the minimum of 0"),
        ("embedding", "compile_cache", "", "config key 'embedding.compile_cache': '' should be non-empty"),
        ("train", "compile_cache", "", "config key 'train.compile_cache': '' should be non-empty"),
        ("train", "dropout", 1, "config key 'train.dropout': 1 is greater than or equal to the maximum of 1"),
    ],
)
def test_config_out_of_range_names_the_key(config, section, key, value, message):
    (config if section is None else config[section])[key] = value
    with pytest.raises(ConfigError) as err:
        validate_config(config, load_schema(REPO / "config" / "config.schema.yaml"))
    assert message in str(err.value).splitlines()[1]


def test_config_strings_from_the_command_line_read_as_yaml_would(config):
    """Snakemake leaves values nested in --config as strings: each becomes YAML's value
    (integer, float, boolean, null, a list of integers), as a config file would hold it,
    unless the schema takes the string and not that value (a prompt of digits stays
    text). A string a config file gave stays (YAML typed it already: a quoted "4" is one)."""
    given = {"n_chunks": "4", "train": {"max_iters": "10", "lr": "1e-3", "compile": "true", "lr_decay_iters": "null"},
             "embedding": {"length_buckets": ["32", "64"], "compile_cache": "null", "window": "8", "prompt": "null"},
             "input": {"id_field": "null"}, "retrieval": {"query_prompt": "123"}}
    for section, values in given.items():
        config[section] = {**config[section], **values} if isinstance(values, dict) else values
    schema = load_schema(REPO / "config" / "config.schema.yaml")
    got = validate_config(config, schema, given)
    assert got["n_chunks"] == 4 and got["embedding"]["length_buckets"] == [32, 64] and got["embedding"]["window"] == 8
    assert (got["train"]["max_iters"], got["train"]["lr"], got["train"]["compile"]) == (10, 0.001, True)
    # null is null where a key also takes text: no prompt "null", no id field or folder named "null"
    assert got["train"]["lr_decay_iters"] is None and got["embedding"]["compile_cache"] is None
    assert got["embedding"]["prompt"] is None and got["input"]["id_field"] is None
    assert got["retrieval"]["query_prompt"] == "123"  # text, where YAML's 123 does not fit
    config["embedding"]["window"] = "eight"
    with pytest.raises(ConfigError, match="config key 'embedding.window': 'eight' is not of type 'integer'"):
        validate_config(config, schema, {"embedding": {"window": "eight"}})
    # Out of range: the error a config file's value gets, not a type error about a string.
    config["embedding"]["window"] = "0"
    with pytest.raises(ConfigError, match="config key 'embedding.window': 0 is less than the minimum of 1"):
        validate_config(config, schema, {"embedding": {"window": "0"}})
    config["embedding"]["window"] = "8"  # from a file, not the command line
    with pytest.raises(ConfigError, match="config key 'embedding.window': '8' is not of type 'integer'"):
        validate_config(config, schema)


@pytest.mark.parametrize("value", [1, 7, "auto"])
def test_config_n_chunks_in_range_is_accepted(config, value):
    config["n_chunks"] = value
    assert validate_config(config, load_schema(REPO / "config" / "config.schema.yaml"))["n_chunks"] == value


@pytest.mark.parametrize(("text", "want"), [("off", "off"), ("'off'", "off"), ("slots", "slots")])
def test_config_unquoted_off_reads_as_the_word(config, text, want):
    """YAML 1.1 reads an unquoted off as False: a key offering "off" takes it as the word;
    a boolean where the word is not offered is still an error naming the key."""
    import yaml

    config["gpu_jobs"] = yaml.safe_load(f"pinning: {text}")
    assert validate_config(config, load_schema(REPO / "config" / "config.schema.yaml"))["gpu_jobs"]["pinning"] == want
    config["gpu_jobs"] = yaml.safe_load("pinning: on")  # no "on" among auto, slots, off
    with pytest.raises(ConfigError, match="config key 'gpu_jobs.pinning': True is not of type 'string'"):
        validate_config(config, load_schema(REPO / "config" / "config.schema.yaml"))


def test_config_unquoted_on_off_reads_as_the_word_for_every_switch(config):
    """The embedding switches (one in a oneOf) take the word from the same pass."""
    import yaml

    config["embedding"].update(
        yaml.safe_load(
            "{packing: on, padding_mask: off, kernels: off, length_buckets: on, cudnn_attention: off, attention_bias: on}"
        )
    )
    got = validate_config(config, load_schema(REPO / "config" / "config.schema.yaml"))["embedding"]
    assert (got["packing"], got["padding_mask"], got["kernels"], got["length_buckets"]) == ("on", "off", "off", "on")
    assert (got["cudnn_attention"], got["attention_bias"]) == ("off", "on")
    config["embedding"]["kernels"] = True  # "on" is not a kernels value: still an error naming the key
    with pytest.raises(ConfigError, match="config key 'embedding.kernels'"):
        validate_config(config, load_schema(REPO / "config" / "config.schema.yaml"))


def test_a_boolean_or_float_id_is_a_bad_record_not_the_text_true(tmp_path):
    """Ids are strings or integers: JSON true became the id "True"."""
    path = tmp_path / "c.jsonl"
    path.write_text('{"id": true, "text": "x"}\n{"id": 2.5, "text": "y"}\n{"id": 3, "text": "z"}\n')
    items = read(path, on_bad_record="skip")
    assert kinds(items) == ["Rejected", "Rejected", "Record"]
    assert "id field 'id' is bool, not a string or integer" in items[0].reason
    assert "is float" in items[1].reason and items[2].id == "3"
