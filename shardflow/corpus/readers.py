"""Stream corpus records out of JSONL, Parquet, CSV/TSV and plain-text files.

Every record leaves here as a `Record` with a stable id: the record's own id
field, or its source position (`<path>:<line>` / `<path>:<row>`, or the path
itself for one-document-per-file text) when the corpus has no id field.

Bad records (malformed JSON or CSV, missing or non-string fields, empty text,
invalid UTF-8, NUL bytes, unpaired surrogate escapes, a key read twice in one JSON
object, a record over `max_record_bytes`) raise `BadRecordError` naming the file and
line. With `on_bad_record="skip"` they are yielded as `Rejected` instead, so the caller
can write them to a rejects file and count them: nothing is dropped silently.

A file that cannot be read on (a truncated or corrupt gzip stream, a file that is
not Parquet, a Parquet column of the wrong type, UTF-16 or UTF-32 text, zstd, xz or
bzip2 data, gzip inside gzip) is a `BadRecordError` whatever `on_bad_record` says: the records it hides
cannot be counted. (With `text_mode="files"` such a text file is one record, so one
bad record.)

Memory is bounded by `max_record_bytes`: lines are read with a size limit, and a
longer line is skipped in 1 MiB pieces, never held whole (docs/bad-input.md).
"""

from __future__ import annotations

import codecs
import csv
import functools
import glob
import gzip
import itertools
import json
import os
import re
import sys
import zlib
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import IO

from shardflow.core.files import GZIP_MAGIC, GZIP_SUFFIXES, cut_short, loads_json, malformed_json, open_binary
from shardflow.core.s3 import logical_path

FORMATS = ("jsonl", "parquet", "csv", "tsv", "text")

# The default of input.max_record_mb: a record (a line, a CSV row, a text file) over
# this many bytes is a bad record, read no further than the limit.
DEFAULT_MAX_RECORD_BYTES = 64 << 20
# Bytes of a too-large record kept in its reject, and the pieces the rest is skipped in.
PREVIEW_BYTES = 1024
SKIP_BYTES = 1 << 20


def record_limit_bytes(max_record_mb: float) -> int:
    """input.max_record_mb in bytes, as every reader of the input takes it (the split's
    ReaderOptions, the summarisation scoring's ScoreParams): MiB, rounded, at least 1."""
    return max(1, round(max_record_mb * 2**20))


# The csv module refuses fields over 128 KiB by default; a corpus document may be
# far longer. (Process-wide setting; 2**31 - 1 fits a C long everywhere.)
csv.field_size_limit(min(sys.maxsize, 2**31 - 1))


class BadRecordError(ValueError):
    """A corpus record that cannot be used, located by file and line. `skippable`: one
    record that `on_bad_record="skip"` would have set aside (not a whole unreadable file)."""

    def __init__(self, source: str, line: int | None, reason: str, skippable: bool = False):
        where = f"{source}:{line}" if line is not None else source
        super().__init__(f"{where}: {reason}")
        self.source, self.line, self.reason, self.skippable = source, line, reason, skippable


@dataclass(frozen=True)
class ReaderOptions:
    format: str = "auto"  # auto | jsonl | parquet | csv | tsv | text
    id_field: str | None = "id"  # None: ids are source positions
    text_field: str = "text"
    group_field: str | None = None
    text_mode: str = "lines"  # plain text: "lines" (one doc a line) or "files"
    on_bad_record: str = "error"  # error | skip
    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES  # input.max_record_mb
    # A record whose text field is empty (or white space) is kept as it is, not a bad
    # record: the retrieval corpus, whose empty documents MTEB embeds and ranks too.
    keep_empty_text: bool = False
    # The config section whose `format`, `id_field` and `text_field` these are, as an
    # error's advice names them: input (the corpus) or search (task search's queries).
    section: str = "input"

    def __post_init__(self) -> None:
        if self.format != "auto" and self.format not in FORMATS:
            raise ValueError(f"input format {self.format!r}: expected auto or one of {FORMATS}")
        if self.text_mode not in ("lines", "files"):
            raise ValueError(f"text_mode {self.text_mode!r}: expected 'lines' or 'files'")
        if self.on_bad_record not in ("error", "skip"):
            raise ValueError(f"on_bad_record {self.on_bad_record!r}: expected 'error' or 'skip'")
        if self.max_record_bytes < 1:
            raise ValueError(f"max_record_bytes must be >= 1, got {self.max_record_bytes}")


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
    file named twice (by overlapping globs, as `./x` and `x`, by a relative and an
    absolute path, or through a symbolic link) is read once, under the name it was
    first given; read twice, its records would be in two chunks, and with ids from
    positions (`<path>:<line>`, two spellings of one path) nothing would flag them. A glob
    passes over the folders it matches; a path named as it is must be a regular file
    (a folder named so is an error, not read as nothing).
    """
    patterns = [str(pattern)] if isinstance(pattern, (str, os.PathLike)) else [str(p) for p in pattern]
    found: list[str] = []
    seen: set[str] = set()
    folders: dict[str, str] = {}  # real_path's: each folder's real path, resolved once
    for pat in patterns:
        is_glob = glob.has_magic(pat)
        matches = sorted(glob.glob(pat, recursive=True)) if is_glob else [pat]
        if not matches:
            raise FileNotFoundError(f"input pattern {pat!r} matches no file")
        for m in matches:
            if not os.path.exists(m):
                raise FileNotFoundError(f"input file {m!r} does not exist")
            if not is_glob and not os.path.isfile(m):
                if os.path.isdir(m):
                    example = os.path.join(m, "*.jsonl")
                    raise FileNotFoundError(f"input path {m!r} is a folder; name its files or a glob such as {example!r}")
                raise FileNotFoundError(f"input path {m!r} is not a regular file")
            m = os.path.normpath(m)
            if not os.path.isfile(m):
                continue
            same = real_path(m, folders)
            if same not in seen:
                seen.add(same)
                found.append(m)
    if not found:
        raise FileNotFoundError(f"input {patterns!r} names no regular file")
    return found


def real_path(path: str, folders: dict[str, str]) -> str:
    """`os.path.realpath(path)`, each folder resolved once (kept in `folders`): realpath
    looks at every component of every path, one lstat each, and expand_inputs runs at
    every parse, remote jobs' included (20,000 files five folders deep: 0.6 s, not 0.14).
    Only a file that is itself a link is resolved whole."""
    if os.path.islink(path):
        return os.path.realpath(path)
    folder, name = os.path.split(path)
    real = folders.get(folder)
    if real is None:
        real = folders[folder] = os.path.realpath(folder or os.curdir)
    return os.path.join(real, name)


def detect_format(path: str, opts: ReaderOptions) -> str:
    if opts.format != "auto":
        return opts.format
    # A compression suffix is passed over: gzip is read, the others are named by the reader
    # (FOREIGN_STARTS) once it opens the file, rather than here as a name without a format.
    name = path.lower()
    for compressed in (".gz", ".zst", ".xz", ".bz2"):
        name = name.removesuffix(compressed)
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
    raise ValueError(f"{path}: cannot tell the format from the name; set {opts.section}.format")


def decode_text(raw: bytes, lineno: int) -> str:
    """Strict UTF-8 of line `lineno` (a whole file is its line 1); a byte-order mark
    opening the file is dropped, not made part of the data. Decoded first, then dropped,
    so an error's byte (`UnicodeDecodeError.start`) counts from the first byte of `raw`
    as the file holds it, the mark included, as a hex editor shows it: the "utf-8-sig"
    codec counts from after the mark, 3 short. Every reader of user text that names such
    a byte decodes through here."""
    text = raw.decode("utf-8")
    return text[1:] if lineno == 1 and text.startswith("\ufeff") else text


def blank_line(raw: bytes, lineno: int) -> bool:
    """Whether line `lineno` of a JSON-lines file (its bytes, `raw`) is blank, carrying no
    record: white space only, a byte-order mark opening the file set aside, as decode_text
    drops it (a line of the mark alone read as malformed JSON). The split's and the
    summarisation scoring's readers pass such a line over."""
    if lineno == 1:
        raw = raw.removeprefix(codecs.BOM_UTF8)
    return not raw.strip()


def encodable(value: str) -> bool:
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


def nul_byte(raw: bytes, start: int = 0) -> str | None:
    """Why `raw` (a line's bytes, or those from its byte `start` on) is not text, or None:
    text never holds a raw NUL byte (JSON can only escape one), so one marks binary data.
    The position split's read of its text file holds to it too (shardflow.train.prepare),
    reading a long line in parts."""
    at = raw.find(b"\0")
    return None if at < 0 else f"NUL byte at byte {start + at} (binary data, not text)"


def limit_label(n: int) -> str:
    """A record limit as messages name it: whole MiB (64 MiB), else its bytes."""
    return f"{n >> 20} MiB" if n % 2**20 == 0 else f"{n:,} bytes"


def line_break(line: bytes) -> int:
    """Bytes of the line break `line` ends in: 2 for CRLF, 1 for LF, 0 for none (a file's
    last line). A record's size leaves its line break out, CRLF as LF, so that a line of
    exactly input.max_record_mb is read whichever break the file uses."""
    return 2 if line.endswith(b"\r\n") else 1 if line.endswith(b"\n") else 0


@dataclass(frozen=True)
class LongLine:
    """A line over the size limit, skipped rather than read: its first bytes, its length
    (line break not counted), how many '"' it holds (the CSV reader keeps its place in
    the quoting with that), and the bytes of its line break (line_break)."""

    head: bytes
    size: int
    quotes: int
    newline: int


# What reading a damaged file raises: EOFError (a truncated gzip stream), zlib.error and
# gzip.BadGzipFile (an OSError: corrupt compressed data), OSError (the disk).
READ_ERRORS = (EOFError, OSError, zlib.error)


def _gzip_cut_before_its_magic(path: str, fh: IO[bytes], data: bytes) -> str | None:
    """Why `path`, opened as `fh`, whose whole content is `data`, is a gzip stream cut
    short, or None: named as gzip, but ending before its magic bytes are whole (no byte,
    or 1F alone), as a part whose download or copy stopped at once does. open_binary
    knows gzip by the magic alone, so such a file was read as the plain file it is: an
    empty one as no records, with nothing to count or name. (gzip of nothing is a whole
    stream of 20 bytes, read as no records.)"""
    if isinstance(fh, gzip.GzipFile) or not path.lower().endswith(GZIP_SUFFIXES) or not GZIP_MAGIC.startswith(data):
        return None
    return (
        f"gzip stream truncated (the file ends after {len(data)} byte{'s' * (len(data) != 1)}, before the gzip "
        "magic bytes 1F 8B, though its name says gzip: fetch or copy it again)"
    )


def _read_problem(exc: BaseException) -> str:
    if isinstance(exc, EOFError):
        return "gzip stream truncated (the compressed data ends before its end marker)"
    if isinstance(exc, (zlib.error, gzip.BadGzipFile)):
        return f"corrupt gzip stream ({exc})"
    return f"read error ({exc})"


# Files that open with these bytes are in an encoding or a compression the readers do not
# read (gzip they open, by its magic bytes: core.files.open_binary). Read as UTF-8 such a
# file fails line by line as "binary data", at lines its own line breaks do not make, and
# under on_bad_record: skip its records would become rejects with the wrong reason and
# count; so it is one error for the file. UTF-32 LE comes before UTF-16 LE: its mark
# begins with UTF-16 LE's. These bytes are looked for in the data as opened, so gzip's
# own magic there is a gzip stream inside one (no UTF-8 text starts with byte 8B second).
FOREIGN_STARTS = (
    (
        GZIP_MAGIC,
        "gzip-compressed twice (magic bytes 1F 8B once gunzipped)",
        "gunzip it once (gunzip -c in.gz > out.gz)",
    ),
    (b"\xff\xfe\x00\x00", "UTF-32 (byte-order mark FF FE 00 00)", "convert it to UTF-8 (iconv -f UTF-32 -t UTF-8)"),
    (b"\x00\x00\xfe\xff", "UTF-32 (byte-order mark 00 00 FE FF)", "convert it to UTF-8 (iconv -f UTF-32 -t UTF-8)"),
    (b"\xff\xfe", "UTF-16 (byte-order mark FF FE)", "convert it to UTF-8 (iconv -f UTF-16 -t UTF-8)"),
    (b"\xfe\xff", "UTF-16 (byte-order mark FE FF)", "convert it to UTF-8 (iconv -f UTF-16 -t UTF-8)"),
    (b"\x28\xb5\x2f\xfd", "zstd-compressed (magic bytes 28 B5 2F FD)", "decompress it (zstd -d) or gzip it instead"),
    (b"\xfd7zXZ\x00", "xz-compressed (magic bytes FD 37 7A 58 5A 00)", "decompress it (xz -d) or gzip it instead"),
    (b"BZh", "bzip2-compressed (magic bytes 'BZh')", "decompress it (bzip2 -d) or gzip it instead"),
)


def _foreign(head: bytes) -> str | None:
    """Why a file whose data (gunzipped) starts with `head` is not read, or None."""
    # bzip2's 'BZh' is followed by the block size digit and a block's magic (31 41 59 26 53
    # 59) or an empty stream's end (17 72 45 38 50 90): a text that begins 'BZh' is read.
    bzip2 = head[3:4].isdigit() and head[4:10] in (b"1AY&SY", b"\x17\x72\x45\x38\x50\x90")
    for start, what, remedy in FOREIGN_STARTS:
        if head.startswith(start) and (start != b"BZh" or bzip2):
            return f"{what}, not UTF-8 text: not read; {remedy}"
    return None


CR_ONLY = (
    "its lines end in CR alone (classic Mac OS line breaks), and no line ends in LF: read as it is, the whole "
    "file would be one record; convert the line breaks to LF (tr '\\r' '\\n' < in > out)"
)


def _cr_line_breaks(first: bytes, whole: bool) -> bool:
    """Whether a file whose first line (no LF in it: the file has none this far) breaks
    its lines with CR alone: a CR with more text after it. A lone CR at the end (one
    record written with a CR line break) is no matter. `whole`: `first` is the whole
    file; else the head of a line over the size limit, where one stray CR in its first
    KiB is not enough to call it lines (two are: such a file's lines are short)."""
    if b"\x00" in first:
        return False
    lone = first.rstrip(b"\r\n \t").replace(b"\r\n", b"").count(b"\r")
    return lone >= (1 if whole else 2)


def _skip_rest(fh: IO[bytes], start: bytes) -> LongLine:
    size, quotes = len(start), start.count(b'"')
    piece, end = start, start[-2:]  # end: the line's last two bytes (a CRLF may span two pieces)
    while piece and not piece.endswith(b"\n"):
        piece = fh.readline(SKIP_BYTES)
        size += len(piece)
        quotes += piece.count(b'"')
        end = (end + piece)[-2:]
    newline = line_break(end)
    return LongLine(start[:PREVIEW_BYTES], size - newline, quotes, newline)


def iter_lines(fh: IO[bytes], path: str, max_bytes: int, start: int = 1) -> Iterator[tuple[int, bytes | LongLine]]:
    """(line number, line) for each line of `fh`, the newline kept, holding at most
    `max_bytes` of any line, its line break (LF or CRLF) not counted: a longer one comes
    back as a `LongLine`. `start`: the number of the line `fh` is at.

    A truncated or corrupt gzip stream (or a failing read) is a `BadRecordError` at the
    line it stopped on: the records after it are lost and cannot be counted, so no
    `on_bad_record` setting passes it.
    """
    lineno = start - 1
    while True:
        lineno += 1
        try:
            line = fh.readline(max_bytes + 2)  # room for a CRLF after max_bytes
            if len(line) - line_break(line) > max_bytes:
                line = _skip_rest(fh, line)
        except READ_ERRORS as exc:
            raise BadRecordError(path, lineno, f"{_read_problem(exc)}; {lineno - 1} lines read before it") from exc
        if lineno == 1 and isinstance(line, bytes):
            cut = _gzip_cut_before_its_magic(path, fh, line)
            if cut:
                raise BadRecordError(path, lineno, f"{cut}; 0 lines read before it")
        if not line:
            return
        if lineno == 1:
            head = line.head if isinstance(line, LongLine) else line
            foreign = _foreign(head)
            if foreign:
                raise BadRecordError(path, None, foreign)
            long = isinstance(line, LongLine)
            if (long or not line.endswith(b"\n")) and _cr_line_breaks(head, whole=not long):
                raise BadRecordError(path, None, CR_ONLY)
        yield lineno, line


def _read_whole(fh: IO[bytes], path: str, max_bytes: int) -> bytes | LongLine:
    """All of `fh`, or a `LongLine` when it holds more than `max_bytes`."""
    try:
        data = fh.read(max_bytes + 1)
        cut = _gzip_cut_before_its_magic(path, fh, data)
        if cut:
            raise BadRecordError(path, None, cut)
        if len(data) <= max_bytes:
            return data
        size = len(data)
        for piece in iter(lambda: fh.read(SKIP_BYTES), b""):
            size += len(piece)
    except READ_ERRORS as exc:
        raise BadRecordError(path, None, _read_problem(exc)) from exc
    return LongLine(data[:PREVIEW_BYTES], size, 0, 0)  # a whole file: no line break


def _repeated_column(names: list[str], read: list[str], kind: str = "column", within: str = "") -> str | None:
    """Why a file whose columns are `names` (or a JSON object whose keys are: `kind` "key",
    `within` " of the object") cannot be read, when a column it is read for (`read`) is
    there more than once: which one holds the field would be a guess. A repeated column
    that is not read is no matter."""
    for name in read:
        at = [i + 1 for i, n in enumerate(names) if n == name]
        if len(at) > 1:
            where = f"{kind}s {', '.join(map(str, at))}{within}"
            return f"{kind} {name!r} is repeated ({where}): which one to read is ambiguous"
    return None


@functools.lru_cache(maxsize=256)
def _json_key(key: str) -> str:
    """`key` as JSON writes it (repeated_key looks for it in each line): json.dumps with
    ensure_ascii=False builds an encoder per call, microseconds a key a line otherwise."""
    return json.dumps(key, ensure_ascii=False)


def repeated_key(line: str, read: Sequence[str]) -> str | None:
    """Why a JSON line whose object writes a key it is read for (`read`) twice cannot be
    read: json keeps the last value, silently dropping the first (the corpus readers',
    retrieval.data's and summarise.data's lines). A key written as JSON writes it is found in the line as that text (a quote
    inside a string is escaped, so a text cannot hold it), so only a line that holds one
    twice, as a key, a nested key or a whole value, is parsed again for its keys; a key
    spelled with escapes (`"\\u0074ext"`) is not looked for."""
    if all(line.count(_json_key(key)) < 2 for key in read):
        return None
    keys = [key for key, _ in loads_json(line, object_pairs_hook=list)]
    return _repeated_column(keys, read, kind="key", within=" of the object")


# A missing field's message lists at most this many of the record's keys, each cut to
# this many characters: a record may hold thousands, or one key of a megabyte.
SHOWN_KEYS = 10
SHOWN_KEY_CHARS = 40

# Key names that look like a record's id: id, _id, uuid, docid, pid, doc_id, passage-id,
# docId, articleID (not "paid" or "valid": a word that ends in "id").
_ID_NAME = re.compile(r"(?i:_?(?:id|uuid|guid|docid|pid|qid)|.+[-_. ](?:id|uuid|guid))|.+[a-z0-9](?:Id|ID)")


def _shown_keys(obj: dict) -> str:
    """The first SHOWN_KEYS keys of `obj`, each cut to SHOWN_KEY_CHARS, as a list."""
    shown = [k if len(k) <= SHOWN_KEY_CHARS else k[:SHOWN_KEY_CHARS] + "..." for k in itertools.islice(obj, SHOWN_KEYS)]
    more = f", ... {len(obj)} keys in all" if len(obj) > SHOWN_KEYS else ""
    return f"[{', '.join(map(repr, shown))}{more}]"


def _id_value(value: object) -> bool:
    """Whether `value` would be read as an id (make's checks: a string or an integer)."""
    return (isinstance(value, str) and value != "" and encodable(value)) or (
        isinstance(value, int) and not isinstance(value, bool)
    )


def _nameable(key: str) -> bool:
    """Whether a message may suggest `key` as a field: shown whole, and valid Unicode."""
    return len(key) <= SHOWN_KEY_CHARS and encodable(key)


def _yaml_key(key: str) -> str:
    """`key` as a config file gives it: bare where YAML reads it as that string, else in
    double quotes (a JSON string is a YAML one)."""
    return key if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]*", key) else json.dumps(key, ensure_ascii=False)


class _Reader:
    """Shared validation; one subclass per format yields Record | Rejected."""

    def __init__(self, path: str, opts: ReaderOptions):
        self.path, self.opts = path, opts
        # How records and rejects name the file (ids from positions included): in S3
        # storage its URL, not its local copy (core.s3.logical_path); read from self.path.
        self.name = logical_path(path)

    def fields(self) -> list[str]:
        """The fields read from each record."""
        o = self.opts
        return [f for f in (o.id_field, o.text_field, o.group_field) if f is not None]

    def bad(self, line: int | None, reason: str, raw: bytes | str) -> Rejected:
        if self.opts.on_bad_record == "error":
            raise BadRecordError(self.path, line, reason, skippable=True)
        return Rejected(self.name, line, reason, _raw(raw))

    def too_large(self, line: int | None, size: int, head: bytes | str, hint: str = "") -> Rejected:
        limit = self.opts.max_record_bytes
        reason = f"record too large: {size:,} bytes, over input.max_record_mb ({limit_label(limit)}); not read{hint}"
        return self.bad(line, reason, head)

    def _other_id_keys(self, obj: dict) -> str:
        """What a JSON record without the id key holds: its keys, and an id-like one with a
        value make reads as an id. "set input.id_field: null" alone sent users whose ids
        were under doc_id to drop them. (A CSV header or Parquet schema without the column
        is an error for the file, naming its columns.)"""
        likely = next((k for k, v in obj.items() if _ID_NAME.fullmatch(k) and _id_value(v) and _nameable(k)), None)
        to = " to the key that holds the ids" if likely is None else f": {_yaml_key(likely)} if that key holds the ids"
        keys = _shown_keys(obj)
        key = f"{self.opts.section}.id_field"
        return f"(the record's keys: {keys}): set {key}{to}, or {key}: null to use source positions"

    def _other_text_keys(self, obj: dict) -> str:
        """What a JSON record without the text key holds: its keys, and the key of its
        longest string (the first of equals) that is not an id's, likely the text."""
        o = self.opts
        texts = [
            (len(v), k)
            for k, v in obj.items()
            if isinstance(v, str)
            and v.strip()
            and k not in (o.id_field, o.group_field)
            and not _ID_NAME.fullmatch(k)
            and _nameable(k)
        ]
        likely = max(texts, key=lambda t: t[0])[1] if texts else None
        to = "" if likely is None else f": set {o.section}.text_field: {_yaml_key(likely)} if that key holds the text"
        return f"(the record's keys: {_shown_keys(obj)}){to}"

    def make(self, obj: dict, line: int, raw: bytes | str) -> Record | Rejected:
        o = self.opts
        text = obj.get(o.text_field)
        if o.text_field not in obj:
            return self.bad(line, f"missing text field {o.text_field!r} {self._other_text_keys(obj)}", raw)
        if text is None:  # the key or column is there, its value unset: as a null id
            return self.bad(line, f"null text in field {o.text_field!r}", raw)
        if not isinstance(text, str):
            return self.bad(line, f"text field {o.text_field!r} is {type(text).__name__}, not a string", raw)
        if not text.strip() and not o.keep_empty_text:
            return self.bad(line, f"empty text in field {o.text_field!r}", raw)
        if not encodable(text):
            return self.bad(line, f"text field {o.text_field!r} holds an unpaired surrogate (not valid Unicode)", raw)
        if o.id_field is None:
            rid = f"{self.name}:{line}"
        else:
            value = obj.get(o.id_field)
            if o.id_field not in obj:
                return self.bad(line, f"missing id field {o.id_field!r} {self._other_id_keys(obj)}", raw)
            # The key or column is there: its ids are the corpus's, one of them is not set.
            if value is None:
                return self.bad(line, f"null id in field {o.id_field!r}", raw)
            if isinstance(value, str) and not value:
                return self.bad(line, f"empty id in field {o.id_field!r}", raw)
            if isinstance(value, (dict, list, float, bool)):
                return self.bad(line, f"id field {o.id_field!r} is {type(value).__name__}, not a string or integer", raw)
            rid = str(value)
            if not encodable(rid):
                return self.bad(line, f"id field {o.id_field!r} holds an unpaired surrogate (not valid Unicode)", raw)
        group = None
        if o.group_field is not None:
            g = obj.get(o.group_field)
            if g is None:
                return self.bad(line, f"missing group field {o.group_field!r}", raw)
            if isinstance(g, (dict, list, float, bool)):  # as an id: 1.0 and 1 would be two groups
                return self.bad(line, f"group field {o.group_field!r} is {type(g).__name__}, not a string or integer", raw)
            group = str(g)
            if not encodable(group):
                return self.bad(line, f"group field {o.group_field!r} holds an unpaired surrogate", raw)
        return Record(rid, text, group, self.name, line)


TO_JSON_LINES = "JSON Lines (one object a line) is read here; convert it"


def _one_json_document(line: str, value: object = None, exc: json.JSONDecodeError | None = None) -> str:
    """What to add to the reason of a file's first record line that is bad JSON (`exc`) or
    a list (`value`) where the file looks like one JSON document: a `.json` file holding an
    array, or an object written over several lines. Only that line is looked at, so this
    costs nothing per record; whether the whole file parses as one document would cost a
    second read of it."""
    start = line.lstrip()[:1]
    if start == "[" and (exc is not None or not value or isinstance(value[0], dict)):
        return f"; the file opens with '[', as one JSON array does: {TO_JSON_LINES} (jq -c '.[]' in.json > out.jsonl)"
    if start == "{" and exc is not None and cut_short(exc):
        return f"; an object written over several lines? {TO_JSON_LINES} (jq -c . in.json > out.jsonl)"
    return ""


class _JsonlReader(_Reader):
    def __iter__(self) -> Iterator[Record | Rejected]:
        fields = self.fields()
        first = True  # the file's first line that is not blank
        with open_binary(self.path) as fh:
            for lineno, raw in iter_lines(fh, self.path, self.opts.max_record_bytes):
                if isinstance(raw, LongLine):
                    # A whole JSON array on one line is the likeliest line of this size.
                    hint = _one_json_document(raw.head.decode("utf-8", "replace")) if first else ""
                    yield self.too_large(lineno, raw.size, raw.head, hint)
                    first = False
                    continue
                if blank_line(raw, lineno):
                    continue  # blank separator lines carry no record
                opens, first = first, False
                nul = nul_byte(raw)
                if nul:
                    yield self.bad(lineno, nul, raw)
                    continue
                try:
                    line = decode_text(raw, lineno)
                except UnicodeDecodeError as exc:
                    yield self.bad(lineno, f"invalid UTF-8 at byte {exc.start}", raw)
                    continue
                try:
                    obj = loads_json(line)
                except json.JSONDecodeError as exc:
                    reason = malformed_json(exc) + (_one_json_document(line, exc=exc) if opens else "")
                    yield self.bad(lineno, reason, raw)
                    continue
                if not isinstance(obj, dict):
                    reason = f"JSON value is {type(obj).__name__}, not an object"
                    yield self.bad(lineno, reason + (_one_json_document(line, value=obj) if opens else ""), raw)
                    continue
                repeated = repeated_key(line, fields)
                if repeated:
                    yield self.bad(lineno, repeated, raw)
                    continue
                yield self.make(obj, lineno, raw)


class _DelimitedReader(_Reader):
    """CSV/TSV with a header row. A record's line is the physical line its row starts on
    (a quoted field may span lines). Parsing is strict: an unclosed quote is a bad
    record, not a field that silently swallows the rows after it. The parser finds the
    quote unclosed only lines later (at a quote that cannot end a field, or at the end
    of the file); skipping, the row's first line is the reject and the lines after it
    are parsed again as rows."""

    def __init__(self, path: str, opts: ReaderOptions, delimiter: str):
        super().__init__(path, opts)
        self.delimiter = delimiter

    def _lines(self, fh: IO[bytes], row: dict) -> Iterator[str]:
        # `row` follows the row being parsed: its raw lines (for rejects), its size, its
        # first problem (line, reason), its first line (number, stream offset of its
        # end, size) and its last line number; its lines, kept whole while it is within
        # the limit, are parsed again should the row turn out malformed. Lines come from
        # `row["replay"]` first, then from `row["source"]`, whose offset is `row["offset"]`.
        # Once the row is over the size limit, the parser is fed a stand-in for each
        # further line instead: a newline, after a quote when the line holds an odd
        # number of them, so the parser stays in step with the quoting (inside or
        # outside a quoted field) and buffers nothing more.
        limit = self.opts.max_record_bytes
        replay = row["replay"]
        while True:
            if replay:
                lineno, raw, end = replay.popleft()
                long = False  # lines kept whole only
                size = len(raw) - line_break(raw)
            else:
                item = next(row["source"], None)
                if item is None:
                    return
                lineno, raw = item
                long = isinstance(raw, LongLine)
                size = raw.size if long else len(raw) - line_break(raw)
                # Where the line ends in the (uncompressed) stream, its line break counted.
                end = row["offset"] = row["offset"] + (size + raw.newline if long else len(raw))
            if row["first"] is None:
                row["first"] = (lineno, end, size)
            row["last"] = lineno
            within = row["size"] <= limit
            # The row's bytes: its lines and the line breaks between them (a quoted CRLF is
            # two bytes of the field's text); the break that ends the row is no part of it.
            row["size"] += size + (row["newline"] if row["raw"] else 0)
            row["newline"] = raw.newline if long else line_break(raw)
            if row["size"] > limit:
                if within:
                    row["raw"].append((raw.head if long else raw)[:PREVIEW_BYTES])
                quotes = raw.quotes if long else raw.count(b'"')
                yield '"' * (quotes % 2) + "\n"
                continue
            row["raw"].append(raw)
            nul = nul_byte(raw)
            if nul:
                row["bad"] = row["bad"] or (lineno, nul)
            try:
                yield decode_text(raw, lineno)
            except UnicodeDecodeError as exc:
                row["bad"] = row["bad"] or (lineno, f"invalid UTF-8 at byte {exc.start}")
                yield raw.decode("utf-8", errors="replace")

    def _malformed(self, fh: IO[bytes], row: dict, kind: str, exc: csv.Error) -> Rejected:
        """The reject of a row the parser found malformed: its first line alone (an error,
        not skipping). The lines after that one are queued to be parsed again: from the
        row's kept lines, or, for a row over the size limit (which kept only a preview),
        from the file read again after the first line."""
        line, end, first_size = row["first"]
        limit = self.opts.max_record_bytes
        first = row["raw"][0]
        if first_size > limit:
            reject = self.too_large(line, first_size, first[:PREVIEW_BYTES])
        else:
            where = f" on line {row['last']}" if row["last"] != line else ""
            reject = self.bad(line, f"malformed {kind} ({exc}{where})", first)
        if row["size"] <= limit:
            # All the row's lines are whole in row["raw"], numbered on from its first.
            again = []
            for lineno, raw in enumerate(row["raw"][1:], line + 1):
                end += len(raw)
                again.append((lineno, raw, end))
            row["replay"].extendleft(reversed(again))
        else:
            fh.seek(end)
            row.update(offset=end)
            row["replay"].clear()
            row["source"] = iter_lines(fh, self.path, limit, start=line + 1)
        return reject

    def __iter__(self) -> Iterator[Record | Rejected]:
        kind = "TSV" if self.delimiter == "\t" else "CSV"
        limit = self.opts.max_record_bytes
        with open_binary(self.path) as fh:
            row: dict = {"source": iter_lines(fh, self.path, limit), "offset": 0, "replay": deque()}
            row.update(raw=[], size=0, bad=None, first=None, last=None)
            reader = csv.reader(self._lines(fh, row), delimiter=self.delimiter, strict=True)
            try:
                header = next(reader)
            except StopIteration:
                return
            except csv.Error as exc:
                raise BadRecordError(self.path, 1, f"malformed {kind} header ({exc})") from exc
            if row["size"] > limit:
                raise BadRecordError(self.path, 1, f"header row over input.max_record_mb ({limit_label(limit)})")
            if row["bad"]:
                raise BadRecordError(self.path, 1, f"header: {row['bad'][1]}")
            repeated = _repeated_column(header, self.fields())
            if repeated:
                raise BadRecordError(self.path, 1, f"header: {repeated}")
            # A column the reader reads missing from the header makes every row bad: one
            # error for the file, as a Parquet schema without it (skipping would set the
            # whole file aside, row by row).
            missing = [f for f in self.fields() if f not in header]
            if missing:
                raise BadRecordError(self.path, 1, f"header: no column {missing[0]!r} (columns: {header})")
            while True:
                row.update(raw=[], size=0, bad=None, first=None, last=None)
                try:
                    fields = next(reader)
                except StopIteration:
                    return
                except csv.Error as exc:
                    yield self._malformed(fh, row, kind, exc)
                    # A fresh parser for the lines queued again (the old one may be left
                    # inside a quoted field, and its line source at the end of the file).
                    reader = csv.reader(self._lines(fh, row), delimiter=self.delimiter, strict=True)
                    continue
                line = row["first"][0]
                raw = b"".join(row["raw"])
                if row["size"] > limit:
                    yield self.too_large(line, row["size"], raw[:PREVIEW_BYTES])
                    continue
                if row["bad"]:
                    yield self.bad(*row["bad"], raw)
                    continue
                if not fields:
                    if len(header) > 1:
                        continue  # no row of several columns is written so: it separates rows, as in JSONL
                    # With one column a blank line is a row whose field is empty, as a blank
                    # line of a text file is a line without text: read so, it is counted.
                    fields = [""]
                if len(fields) != len(header):
                    yield self.bad(line, f"{len(fields)} fields where the header has {len(header)}", raw)
                    continue
                yield self.make(dict(zip(header, fields, strict=True)), line, raw)


def _string_column(t, integers: bool) -> bool:
    import pyarrow as pa

    if pa.types.is_dictionary(t):
        t = t.value_type
    strings = pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)
    return strings or pa.types.is_null(t) or (integers and pa.types.is_integer(t))


class _ParquetReader(_Reader):
    """Rows of a Parquet file; a record's line is its row number. Memory is bounded by the
    file's row groups (the writer's choice); a text over max_record_bytes is rejected."""

    def __iter__(self) -> Iterator[Record | Rejected]:
        import pyarrow as pa
        import pyarrow.parquet as pq

        o = self.opts
        try:
            pf = pq.ParquetFile(self.path)
        except (pa.ArrowException, OSError) as exc:
            raise BadRecordError(self.path, None, f"not a readable Parquet file ({exc})") from exc
        schema = pf.schema_arrow
        names = set(schema.names)
        wanted = self.fields()
        missing = [f for f in wanted if f not in names]
        if missing:
            raise BadRecordError(self.path, None, f"no column {missing[0]!r} (columns: {sorted(names)})")
        repeated = _repeated_column(schema.names, wanted)
        if repeated:
            raise BadRecordError(self.path, None, repeated)
        # A column of the wrong type makes every row bad: one error for the file.
        if not _string_column(schema.field(o.text_field).type, integers=False):
            text_type = schema.field(o.text_field).type
            raise BadRecordError(self.path, None, f"column {o.text_field!r} is {text_type}, not a string column")
        if o.id_field is not None and not _string_column(schema.field(o.id_field).type, integers=True):
            id_type = schema.field(o.id_field).type
            raise BadRecordError(self.path, None, f"column {o.id_field!r} is {id_type}, not a string or integer column")
        if o.group_field is not None and not _string_column(schema.field(o.group_field).type, integers=True):
            group_type = schema.field(o.group_field).type
            raise BadRecordError(
                self.path, None, f"column {o.group_field!r} is {group_type}, not a string or integer column"
            )
        limit = o.max_record_bytes
        row = 0
        batches = pf.iter_batches(columns=wanted, batch_size=parquet_batch_rows(pf.metadata, wanted))
        while True:
            try:
                batch = next(batches, None)
            except (pa.ArrowException, OSError) as exc:
                reason = f"unreadable Parquet data ({exc}); {row} rows read before it"
                raise BadRecordError(self.path, row + 1, reason) from exc
            if batch is None:
                return
            for obj, not_utf8 in _batch_rows(batch, wanted):
                row += 1
                if not_utf8:
                    yield self.bad(row, not_utf8, json.dumps(obj, ensure_ascii=False, default=str))
                    continue
                text = obj.get(o.text_field)
                if isinstance(text, str) and len(text) > limit // 4:
                    size = len(text.encode("utf-8", errors="surrogatepass"))
                    if size > limit:
                        yield self.too_large(row, size, text[:PREVIEW_BYTES])
                        continue
                yield self.make(obj, row, json.dumps(obj, ensure_ascii=False, default=str))


def _batch_rows(batch, columns: Sequence[str]) -> Iterator[tuple[dict, str | None]]:
    """(row, why it is bad or None) for each row of a Parquet batch. pyarrow neither writes
    nor reads a string column checking its UTF-8 (Spark has written such files, and so does
    from_pylist of surrogate-escaped text), so a value that is not UTF-8 first fails here,
    as the codec's error naming neither file nor row. A batch holding one is read again a
    value at a time, to make that row a bad record; the value is kept with backslash escapes
    for the reject."""
    try:
        rows = batch.to_pylist()
    except UnicodeDecodeError:
        rows = None
    if rows is not None:
        for obj in rows:
            yield obj, None
        return
    for i in range(batch.num_rows):
        obj, why = {}, None
        for name in columns:
            try:
                obj[name] = batch.column(name)[i].as_py()
            except UnicodeDecodeError as exc:
                obj[name] = exc.object.decode("utf-8", errors="backslashreplace")
                why = why or f"field {name!r} holds invalid UTF-8 at byte {exc.start} of its value"
        yield obj, why


# Parquet is read a batch of rows at a time (pyarrow streams within a row group): at most
# this many rows, and fewer where the columns read are long, so that a batch holds about
# PARQUET_BATCH_BYTES of their data (8,192 rows of 4 MB texts held 656 MB more, one row
# 41 MB). The size comes from the row groups' metadata, by their widest rows on average.
PARQUET_BATCH_ROWS = 8192
PARQUET_BATCH_BYTES = 32 << 20


def parquet_batch_rows(metadata, columns: Sequence[str]) -> int:
    """Rows per batch for reading `columns` of a Parquet file (see PARQUET_BATCH_BYTES)."""
    widest = 0.0
    for g in range(metadata.num_row_groups):
        group = metadata.row_group(g)
        if group.num_rows <= 0:
            continue
        size = sum(
            group.column(c).total_uncompressed_size
            for c in range(group.num_columns)
            if group.column(c).path_in_schema in columns
        )
        widest = max(widest, size / group.num_rows)
    return max(1, min(PARQUET_BATCH_ROWS, int(PARQUET_BATCH_BYTES // widest) if widest else PARQUET_BATCH_ROWS))


class _TextLinesReader(_Reader):
    def __iter__(self) -> Iterator[Record | Rejected]:
        with open_binary(self.path) as fh:
            for lineno, raw in iter_lines(fh, self.path, self.opts.max_record_bytes):
                if isinstance(raw, LongLine):
                    yield self.too_large(lineno, raw.size, raw.head)
                    continue
                nul = nul_byte(raw)
                if nul:
                    yield self.bad(lineno, nul, raw)
                    continue
                try:
                    text = decode_text(raw, lineno).rstrip("\r\n")
                except UnicodeDecodeError as exc:
                    yield self.bad(lineno, f"invalid UTF-8 at byte {exc.start}", raw)
                    continue
                if not text.strip():
                    yield self.bad(lineno, "empty line (empty text)", raw)
                    continue
                yield Record(f"{self.name}:{lineno}", text, None, self.name, lineno)


class _TextFileReader(_Reader):
    def __iter__(self) -> Iterator[Record | Rejected]:
        with open_binary(self.path) as fh:
            raw = _read_whole(fh, self.path, self.opts.max_record_bytes)
        # One document a file: a file in an encoding or compression not read hides exactly
        # one record, so it is one bad record (a reject under skip, as a binary file is), not
        # an error for the whole corpus as in a file of lines, whose records it cannot count.
        foreign = _foreign(raw.head if isinstance(raw, LongLine) else raw)
        if foreign:
            yield self.bad(None, foreign, raw.head if isinstance(raw, LongLine) else raw[:200])
            return
        if isinstance(raw, LongLine):
            yield self.too_large(None, raw.size, raw.head)
            return
        nul = nul_byte(raw)
        if nul:
            line = raw[: raw.index(b"\0")].count(b"\n") + 1
            yield self.bad(line, nul, raw[:200])
            return
        try:
            text = decode_text(raw, 1)
        except UnicodeDecodeError as exc:
            line = raw[: exc.start].count(b"\n") + 1
            yield self.bad(line, f"invalid UTF-8 at byte {exc.start}", raw[:200])
            return
        if not text.strip():
            yield self.bad(None, "empty file (empty text)", "")
            return
        yield Record(self.name, text, None, self.name, 1)


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
            import pyarrow as pa
            import pyarrow.parquet as pq

            try:
                total += pq.ParquetFile(path).metadata.num_rows
            except (pa.ArrowException, OSError) as exc:
                raise BadRecordError(path, None, f"not a readable Parquet file ({exc})") from exc
            continue
        if fmt == "text" and opts.text_mode == "files":
            total += 1
            continue
        lines, last, head = 0, b"\n", b""
        with open_binary(path) as fh:
            try:
                for at, block in enumerate(iter(lambda: fh.read(1 << 22), b"")):
                    foreign = _foreign(block) if at == 0 else None
                    if foreign:  # as the split would find it, but at parse time
                        raise BadRecordError(path, None, foreign)
                    head = head or block[:2]  # as much as the gzip magic of the first block
                    lines += block.count(b"\n")
                    last = block[-1:]
            except READ_ERRORS as exc:
                raise BadRecordError(path, lines + 1, f"{_read_problem(exc)}; {lines} lines read before it") from exc
            cut = _gzip_cut_before_its_magic(path, fh, head)
            if cut:
                raise BadRecordError(path, 1, f"{cut}; 0 lines read before it")
        lines += last != b"\n"
        total += lines - (1 if fmt in ("csv", "tsv") and lines else 0)
    return total
