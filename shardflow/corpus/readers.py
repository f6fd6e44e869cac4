"""Stream corpus records out of JSONL, Parquet, CSV/TSV and plain-text files.

Every record leaves here as a `Record` with a stable id: the record's own id
field, or its source position (`<path>:<line>` / `<path>:<row>`, or the path
itself for one-document-per-file text) when the corpus has no id field.

Bad records (malformed JSON or CSV, missing or non-string fields, empty text,
invalid UTF-8, unpaired surrogate escapes) raise `BadRecordError` naming the
file and line. With `on_bad_record="skip"` they are yielded as `Rejected`
instead, so the caller can write them to a rejects file and count them: nothing
is dropped silently.
"""

from __future__ import annotations

import csv
import glob
import json
import os
import sys
from dataclasses import dataclass
from typing import IO, Iterable, Iterator

from shardflow.core.files import open_binary

FORMATS = ("jsonl", "parquet", "csv", "tsv", "text")

# The csv module refuses fields over 128 KiB by default; a corpus document may be
# far longer. (Process-wide setting; 2**31 - 1 fits a C long everywhere.)
csv.field_size_limit(min(sys.maxsize, 2**31 - 1))


class BadRecordError(ValueError):
    """A corpus record that cannot be used, located by file and line."""

    def __init__(self, source: str, line: int | None, reason: str):
        where = f"{source}:{line}" if line is not None else source
        super().__init__(f"{where}: {reason}")
        self.source, self.line, self.reason = source, line, reason


@dataclass(frozen=True)
class ReaderOptions:
    format: str = "auto"  # auto | jsonl | parquet | csv | tsv | text
    id_field: str | None = "id"  # None: ids are source positions
    text_field: str = "text"
    group_field: str | None = None
    text_mode: str = "lines"  # plain text: "lines" (one doc a line) or "files"
    on_bad_record: str = "error"  # error | skip

    def __post_init__(self) -> None:
        if self.format != "auto" and self.format not in FORMATS:
            raise ValueError(f"input format {self.format!r}: expected auto or one of {FORMATS}")
        if self.text_mode not in ("lines", "files"):
            raise ValueError(f"text_mode {self.text_mode!r}: expected 'lines' or 'files'")
        if self.on_bad_record not in ("error", "skip"):
            raise ValueError(f"on_bad_record {self.on_bad_record!r}: expected 'error' or 'skip'")


@dataclass(frozen=True)
class Record:
    id: str
    text: str
    group: str | None
    source: str
    line: int


@dataclass(frozen=True)
class Rejected:
    source: str
    line: int | None
    reason: str
    raw: str

    def as_json(self) -> dict:
        return {"source": self.source, "line": self.line, "reason": self.reason, "raw": self.raw}


def expand_inputs(pattern: str | os.PathLike | Iterable[str]) -> list[str]:
    """Resolve a path, a glob, or a list of either into a de-duplicated file list.

    Each glob expands in sorted order; a list keeps the order it was given in. A
    file named twice (by overlapping globs, or as `./x` and `x`) is read once.
    """
    patterns = [str(pattern)] if isinstance(pattern, (str, os.PathLike)) else [str(p) for p in pattern]
    found: list[str] = []
    seen: set[str] = set()
    for pat in patterns:
        matches = sorted(glob.glob(pat, recursive=True)) if glob.has_magic(pat) else [pat]
        if not matches:
            raise FileNotFoundError(f"input pattern {pat!r} matches no file")
        for m in matches:
            if not os.path.exists(m):
                raise FileNotFoundError(f"input file {m!r} does not exist")
            m = os.path.normpath(m)
            if os.path.isfile(m) and m not in seen:
                seen.add(m)
                found.append(m)
    if not found:
        raise FileNotFoundError(f"input {patterns!r} names no regular file")
    return found


def detect_format(path: str, opts: ReaderOptions) -> str:
    if opts.format != "auto":
        return opts.format
    name = path.lower()
    if name.endswith(".gz"):
        name = name[:-3]
    for suffix, fmt in (
        (".jsonl", "jsonl"),
        (".ndjson", "jsonl"),
        (".json", "jsonl"),
        (".parquet", "parquet"),
        (".pq", "parquet"),
        (".csv", "csv"),
        (".tsv", "tsv"),
        (".txt", "text"),
        (".text", "text"),
        (".md", "text"),
    ):
        if name.endswith(suffix):
            return fmt
    raise ValueError(f"{path}: cannot tell the format from the name; set input.format")


def _decode(raw: bytes, lineno: int) -> str:
    """Strict UTF-8; a byte-order mark opening the file is dropped, not made part of the data."""
    return raw.decode("utf-8-sig" if lineno == 1 else "utf-8")


def _encodable(value: str) -> bool:
    # JSON escapes can smuggle in unpaired surrogates ("\\ud800"): valid JSON, but
    # not text that can be written back out as UTF-8.
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _raw(data: bytes | str) -> str:
    if isinstance(data, bytes):
        data = data.decode("utf-8", errors="backslashreplace")
    return data.rstrip("\r\n")


class _Reader:
    """Shared validation; one subclass per format yields Record | Rejected."""

    def __init__(self, path: str, opts: ReaderOptions):
        self.path, self.opts = path, opts

    def bad(self, line: int | None, reason: str, raw: bytes | str) -> Rejected:
        if self.opts.on_bad_record == "error":
            raise BadRecordError(self.path, line, reason)
        return Rejected(self.path, line, reason, _raw(raw))

    def make(self, obj: dict, line: int, raw: bytes | str) -> Record | Rejected:
        o = self.opts
        text = obj.get(o.text_field)
        if o.text_field not in obj or text is None:
            return self.bad(line, f"missing text field {o.text_field!r}", raw)
        if not isinstance(text, str):
            return self.bad(line, f"text field {o.text_field!r} is {type(text).__name__}, not a string", raw)
        if not text.strip():
            return self.bad(line, f"empty text in field {o.text_field!r}", raw)
        if not _encodable(text):
            return self.bad(line, f"text field {o.text_field!r} holds an unpaired surrogate (not valid Unicode)", raw)
        if o.id_field is None:
            rid = f"{self.path}:{line}"
        else:
            value = obj.get(o.id_field)
            if value is None or (isinstance(value, str) and not value):
                return self.bad(
                    line,
                    f"missing id field {o.id_field!r} (set input.id_field: null to use source positions)",
                    raw,
                )
            if isinstance(value, (dict, list, float)):
                return self.bad(line, f"id field {o.id_field!r} is {type(value).__name__}, not a string or integer", raw)
            rid = str(value)
            if not _encodable(rid):
                return self.bad(line, f"id field {o.id_field!r} holds an unpaired surrogate (not valid Unicode)", raw)
        group = None
        if o.group_field is not None:
            g = obj.get(o.group_field)
            if g is None:
                return self.bad(line, f"missing group field {o.group_field!r}", raw)
            group = str(g)
            if not _encodable(group):
                return self.bad(line, f"group field {o.group_field!r} holds an unpaired surrogate", raw)
        return Record(rid, text, group, self.path, line)


class _JsonlReader(_Reader):
    def __iter__(self) -> Iterator[Record | Rejected]:
        with open_binary(self.path) as fh:
            for lineno, raw in enumerate(fh, 1):
                if not raw.strip():
                    continue  # blank separator lines carry no record
                try:
                    line = _decode(raw, lineno)
                except UnicodeDecodeError as exc:
                    yield self.bad(lineno, f"invalid UTF-8 at byte {exc.start}", raw)
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as exc:
                    yield self.bad(lineno, f"malformed JSON ({exc.msg} at column {exc.colno})", raw)
                    continue
                if not isinstance(obj, dict):
                    yield self.bad(lineno, f"JSON value is {type(obj).__name__}, not an object", raw)
                    continue
                yield self.make(obj, lineno, raw)


class _DelimitedReader(_Reader):
    """CSV/TSV with a header row. A record's line is the physical line its row starts on
    (a quoted field may span lines). Parsing is strict: an unclosed quote is a bad
    record, not a field that silently swallows the rows after it."""

    def __init__(self, path: str, opts: ReaderOptions, delimiter: str):
        super().__init__(path, opts)
        self.delimiter = delimiter

    def _lines(self, fh: IO[bytes], row: dict) -> Iterator[str]:
        # `row` collects the raw lines of the row being parsed, for rejects and UTF-8 errors.
        for lineno, raw in enumerate(fh, 1):
            row["raw"].append(raw)
            try:
                yield _decode(raw, lineno)
            except UnicodeDecodeError as exc:
                row["bad"] = row["bad"] or (lineno, f"invalid UTF-8 at byte {exc.start}")
                yield raw.decode("utf-8", errors="replace")

    def __iter__(self) -> Iterator[Record | Rejected]:
        kind = "TSV" if self.delimiter == "\t" else "CSV"
        row_state: dict = {"raw": [], "bad": None}
        with open_binary(self.path) as fh:
            reader = csv.reader(self._lines(fh, row_state), delimiter=self.delimiter, strict=True)
            try:
                header = next(reader)
            except StopIteration:
                return
            except csv.Error as exc:
                raise BadRecordError(self.path, 1, f"malformed {kind} header ({exc})") from exc
            if row_state["bad"]:
                raise BadRecordError(self.path, 1, "header is not valid UTF-8")
            while True:
                line = reader.line_num + 1
                row_state["raw"].clear()
                row_state["bad"] = None
                try:
                    row = next(reader)
                except StopIteration:
                    return
                except csv.Error as exc:
                    # The reader resets at the next line, so skipping can go on.
                    yield self.bad(line, f"malformed {kind} ({exc})", b"".join(row_state["raw"]))
                    continue
                raw = b"".join(row_state["raw"])
                if row_state["bad"]:
                    yield self.bad(*row_state["bad"], raw)
                    continue
                if not row:
                    continue
                if len(row) != len(header):
                    yield self.bad(line, f"{len(row)} fields where the header has {len(header)}", raw)
                    continue
                yield self.make(dict(zip(header, row)), line, raw)


class _ParquetReader(_Reader):
    def __iter__(self) -> Iterator[Record | Rejected]:
        import pyarrow.parquet as pq

        o = self.opts
        pf = pq.ParquetFile(self.path)
        names = set(pf.schema_arrow.names)
        wanted = [f for f in (o.id_field, o.text_field, o.group_field) if f is not None]
        missing = [f for f in wanted if f not in names]
        if missing:
            raise BadRecordError(self.path, None, f"no column {missing[0]!r} (columns: {sorted(names)})")
        row = 0
        for batch in pf.iter_batches(columns=wanted, batch_size=8192):
            for obj in batch.to_pylist():
                row += 1
                yield self.make(obj, row, json.dumps(obj, ensure_ascii=False, default=str))


class _TextLinesReader(_Reader):
    def __iter__(self) -> Iterator[Record | Rejected]:
        with open_binary(self.path) as fh:
            for lineno, raw in enumerate(fh, 1):
                try:
                    text = _decode(raw, lineno).rstrip("\r\n")
                except UnicodeDecodeError as exc:
                    yield self.bad(lineno, f"invalid UTF-8 at byte {exc.start}", raw)
                    continue
                if not text.strip():
                    yield self.bad(lineno, "empty line (empty text)", raw)
                    continue
                yield Record(f"{self.path}:{lineno}", text, None, self.path, lineno)


class _TextFileReader(_Reader):
    def __iter__(self) -> Iterator[Record | Rejected]:
        with open_binary(self.path) as fh:
            raw = fh.read()
        try:
            text = raw.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            line = raw[: exc.start].count(b"\n") + 1
            yield self.bad(line, f"invalid UTF-8 at byte {exc.start}", raw[:200])
            return
        if not text.strip():
            yield self.bad(None, "empty file (empty text)", "")
            return
        yield Record(self.path, text, None, self.path, 1)


def open_reader(path: str, opts: ReaderOptions) -> Iterable[Record | Rejected]:
    fmt = detect_format(path, opts)
    if fmt == "jsonl":
        return _JsonlReader(path, opts)
    if fmt == "parquet":
        return _ParquetReader(path, opts)
    if fmt in ("csv", "tsv"):
        return _DelimitedReader(path, opts, "," if fmt == "csv" else "\t")
    if opts.text_mode == "files":
        return _TextFileReader(path, opts)
    return _TextLinesReader(path, opts)


def iter_records(paths: Iterable[str], opts: ReaderOptions) -> Iterator[Record | Rejected]:
    """All records of all files, in file order then line order."""
    for path in paths:
        yield from open_reader(path, opts)


def count_records_cheap(paths: Iterable[str], opts: ReaderOptions) -> int:
    """An upper-bound record count without parsing: newline counts, Parquet metadata.

    Exact for JSONL without blank lines, plain text lines and Parquet; CSV
    counts physical lines, so quoted multi-line fields over-count. Used only
    to derive `n_chunks: auto` at parse time.
    """
    total = 0
    for path in paths:
        fmt = detect_format(path, opts)
        if fmt == "parquet":
            import pyarrow.parquet as pq

            total += pq.ParquetFile(path).metadata.num_rows
            continue
        if fmt == "text" and opts.text_mode == "files":
            total += 1
            continue
        lines, last = 0, b"\n"
        with open_binary(path) as fh:
            for block in iter(lambda: fh.read(1 << 22), b""):
                lines += block.count(b"\n")
                last = block[-1:]
        lines += last != b"\n"
        total += lines - (1 if fmt in ("csv", "tsv") and lines else 0)
    return total
