"""Read summarisation records (documents, references, stored system summaries)
from JSONL or gzipped JSONL.

Each line is one JSON object. Blank lines carry no record and are passed over,
as in `shardflow.corpus.readers`. Anything else that cannot be used (invalid
UTF-8, malformed JSON, a value that is not an object, a key read written twice, a
missing or non-string field, an empty article or reference, a duplicate id, a dict
of summaries whose systems differ from those most records have) raises
`BadRecordError` naming the file and line; with `on_bad_record="skip"` it becomes a
`Rejected` in the returned rejects list instead, so nothing is dropped silently. An
empty stored summary is no such problem: the system wrote nothing there, and scores 0
(as rouge-score, and the workflow's own summaries, score it).

`read_references` and `read_summaries` give the records one at a time as the file is
read (`Reading`), so that a scoring of millions holds one; `Reading.loaded()` holds them
all.

Stored summaries may come from several files (`read_summaries` with a list of paths):
they are one input, as the split reads a corpus of several files. An id is unique
across them (a later record with an id an earlier file holds is a duplicate, named
with the first's file and line), and a dict of systems is compared with the set most
records of all the files hold.

Summaries are named by a field spec:
  "summary"                 a top-level field; the system is called "summary"
  "system_summaries.bart"   a dotted path into nested objects; system "bart"
  "system_summaries.*"      every entry of a dict field, one system per key

The id field is a key of the record, as the split reads `input.id_field` (a dot in it
is part of the name), so that both name a record alike. A line over `max_record_bytes`
(input.max_record_mb, as the split reads the same files) is a bad record, never read whole.
"""

from __future__ import annotations

import functools
import json
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from shardflow.core.files import loads_json, open_binary
from shardflow.core.s3 import logical_path
from shardflow.corpus.readers import (
    DEFAULT_MAX_RECORD_BYTES,
    BadRecordError,
    LongLine,
    Rejected,
    blank_line,
    decode_text,
    encodable,
    iter_lines,
    limit_label,
    malformed_json,
    repeated_key,
)

__all__ = [
    "BadRecordError",
    "Document",
    "Loaded",
    "Reading",
    "Rejected",
    "SummaryRecord",
    "load_documents",
    "read_references",
    "read_summaries",
]


@dataclass(frozen=True)
class Document:
    id: str
    article: str
    reference: str | None  # None when no reference field was asked for
    line: int


@dataclass(frozen=True)
class SummaryRecord:
    id: str
    reference: str
    summaries: dict[str, str]  # system name -> summary text
    line: int


@dataclass(frozen=True)
class Loaded:
    records: list  # Document | SummaryRecord, in file order
    rejects: list[Rejected]


@dataclass(frozen=True)
class Reading:
    """Records read as they are iterated (once, in file order) and the rejects so far:
    a scoring that takes one record at a time holds none of the others (`Loaded` holds
    them all)."""

    records: Iterable  # Document | SummaryRecord
    rejects: list[Rejected]  # complete once `records` is exhausted

    def loaded(self) -> Loaded:
        return Loaded(list(self.records), self.rejects)


class _Bad(Exception):
    """A record-level problem, turned into BadRecordError or Rejected by the caller."""


def load_documents(
    path: str,
    *,
    id_field: str | None = "id",
    article_field: str = "article",
    reference_field: str | None = "highlights",
    on_bad_record: str = "error",
    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
) -> Loaded:
    """Documents to summarise (and, when `reference_field` is set, their references)."""

    name = logical_path(path)

    def make(obj: dict, line: int) -> Document:
        ref = _text(obj, reference_field) if reference_field else None
        return Document(_id(obj, id_field, name, line), _text(obj, article_field), ref, line)

    _check_on_bad_record(on_bad_record)
    rejects: list[Rejected] = []
    read = _read_keys(id_field, article_field, reference_field)
    return Reading(_read(path, make, on_bad_record, max_record_bytes, rejects, read=read), rejects).loaded()


def read_references(
    path: str,
    *,
    id_field: str | None = "id",
    reference_field: str = "highlights",
    on_bad_record: str = "error",
    passed_over: frozenset[int] = frozenset(),
    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
) -> Reading:
    """(id, reference) pairs as Documents with an empty article: what evaluation joins
    generated summaries with. `passed_over`: lines not read at all, the lines the split
    rejected (so that an id's reference comes from the line whose text was summarised)."""

    name = logical_path(path)

    def make(obj: dict, line: int) -> Document:
        return Document(_id(obj, id_field, name, line), "", _text(obj, reference_field), line)

    _check_on_bad_record(on_bad_record)
    rejects: list[Rejected] = []
    records = _read(path, make, on_bad_record, max_record_bytes, rejects, passed_over,
                    read=_read_keys(id_field, reference_field))
    return Reading(records, rejects)


def read_summaries(
    path: str | Sequence[str],
    summaries: str,
    *,
    id_field: str | None = "id",
    reference_field: str = "highlights",
    on_bad_record: str = "error",
    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
) -> Reading:
    """Stored summaries named by `summaries` (see the module docstring) and their references,
    from one file or several read as one input (`path` a list: see the module docstring).
    The spec is checked, and the usual systems found, before this returns."""
    paths = [path] if isinstance(path, str) else list(path)
    if not summaries or summaries.startswith(".") or ".." in summaries:
        raise ValueError(f"summaries field spec {summaries!r}: expected 'field', 'a.b' or 'a.*'")
    parent = summaries[:-2] if summaries.endswith(".*") else None
    systems, n_with = usual_systems(paths, parent, max_record_bytes) if parent is not None else ((), 0)

    def make(obj: dict, line: int, name: str) -> SummaryRecord:
        if parent is not None:
            value = _get(obj, parent)
            if not isinstance(value, dict) or not value:
                raise _Bad(f"field {parent!r} is {type(value).__name__}, not a non-empty object of summaries")
            names = tuple(sorted(value))
            if names != systems:
                missing, extra = sorted(set(systems) - set(names)), sorted(set(names) - set(systems))
                raise _Bad(
                    f"systems in {parent!r} differ from the {n_with} records' that share one set "
                    f"{list(systems)}: missing {missing}, extra {extra}"
                )
            # value[name], not the path f"{parent}.{name}": a system's name may hold a dot ("gpt-3.5")
            texts = {name: _string(value[name], f"{parent}.{name}", empty_ok=True) for name in names}
        else:
            texts = {summaries.rsplit(".", 1)[-1]: _text(obj, summaries, empty_ok=True)}
        return SummaryRecord(_id(obj, id_field, name, line), _text(obj, reference_field), texts, line)

    _check_on_bad_record(on_bad_record)
    rejects: list[Rejected] = []
    seen: dict = {}
    read = _read_keys(id_field, reference_field, summaries)
    records = (
        rec
        for one in paths
        for rec in _read(one, functools.partial(make, name=logical_path(one)), on_bad_record, max_record_bytes,
                         rejects, seen=seen, read=read)
    )
    return Reading(records, rejects)


def usual_systems(
    paths: Sequence[str], parent: str, max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES
) -> tuple[tuple[str, ...], int]:
    """For "a.*": the set of systems most records of `paths` hold (the first such set
    on a tie) and how many hold it. Decided over every file, so one record with a
    system missing is the record reported, wherever it stands, and every system is
    scored on the same documents."""
    counts: Counter[tuple[str, ...]] = Counter()
    for _, _, obj in (found for path in paths for found in json_objects(path, max_record_bytes)):
        if isinstance(obj, dict):
            try:
                value = _get(obj, parent)
            except _Bad:
                continue
            if isinstance(value, dict) and value:
                counts[tuple(sorted(value))] += 1
    if not counts:
        return (), 0
    return counts.most_common(1)[0]


def _check_on_bad_record(on_bad_record: str) -> None:
    if on_bad_record not in ("error", "skip"):
        raise ValueError(f"on_bad_record {on_bad_record!r}: expected 'error' or 'skip'")


def _read(
    path: str,
    make,
    on_bad_record: str,
    max_record_bytes: int,
    rejects: list[Rejected],
    passed_over: frozenset[int] = frozenset(),
    seen: dict | None = None,
    read: Sequence[str] = (),
) -> Iterator:
    """The records of `path`, one at a time; those set aside are appended to `rejects`
    (callers check `on_bad_record` first, `_check_on_bad_record`: this runs only when
    iterated). `seen`: {id: (path, line)} of the records kept so far, shared by the files
    of one input (read_summaries), so an id is unique across them. `read`: the keys `make`
    reads (`_read_keys`), for `json_objects`."""
    seen = {} if seen is None else seen
    for line, raw, obj in json_objects(path, max_record_bytes, read):
        if line in passed_over:
            continue
        try:
            if isinstance(obj, _Bad):
                raise obj
            rec = make(obj, line)
            if rec.id in seen:
                first, first_line = seen[rec.id]
                where = f"on line {first_line}" if first == path else f"at {first}:{first_line}"
                raise _Bad(f"duplicate id {rec.id!r} (first {where})")
        except _Bad as exc:
            if on_bad_record == "error":
                raise BadRecordError(path, line, str(exc)) from None
            rejects.append(Rejected(path, line, str(exc), raw.decode("utf-8", errors="backslashreplace").rstrip("\r\n")))
            continue
        seen[rec.id] = (path, line)
        yield rec


def json_objects(
    path: str, max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES, read: Sequence[str] = ()
) -> Iterator[tuple[int, bytes, Any]]:
    """(line number, raw bytes, parsed object or _Bad) for each non-blank line: the one
    reader of these files (the workflow's parse-time field check reads them with it too).
    `max_record_bytes`: input.max_record_mb, the split's limit on the same files, so that
    a record the split read is read here too, and none longer than it is held. `read`:
    keys of the object that a record is read from; an object that writes one twice is a
    _Bad, as the split's reader makes it (json keeps the last value, dropping the first)."""
    if max_record_bytes < 1:
        raise ValueError(f"max_record_bytes must be >= 1, got {max_record_bytes}")
    with open_binary(path) as fh:
        # Bounded lines; a truncated gzip stream stops the load at its line (BadRecordError).
        for line, raw in iter_lines(fh, path, max_record_bytes):
            if isinstance(raw, LongLine):
                yield line, raw.head, _Bad(f"record too large: {raw.size:,} bytes, over input.max_record_mb ({limit_label(max_record_bytes)})")
                continue
            if blank_line(raw, line):
                continue
            try:
                text = decode_text(raw, line)  # the byte of an error counts a mark
                obj = loads_json(text)
            except UnicodeDecodeError as exc:
                yield line, raw, _Bad(f"invalid UTF-8 at byte {exc.start}")
                continue
            except json.JSONDecodeError as exc:
                yield line, raw, _Bad(malformed_json(exc))
                continue
            if not isinstance(obj, dict):
                obj = _Bad(f"JSON value is {type(obj).__name__}, not an object")
            elif read and (repeated := repeated_key(text, read)):
                obj = _Bad(repeated)
            yield line, raw, obj


def _read_keys(id_field: str | None, *fields: str | None) -> list[str]:
    """The keys of a record's object that its fields are read from: the id field (a key,
    a dot in it included) and the first part of each dotted field."""
    keys = [] if id_field is None else [id_field]
    return keys + [field.split(".")[0] for field in fields if field]


def _get(obj: dict, dotted: str) -> Any:
    for key in dotted.split("."):
        if not isinstance(obj, dict) or key not in obj:
            raise _Bad(f"missing field {dotted!r}")
        obj = obj[key]
    return obj


def _text(obj: dict, dotted: str, empty_ok: bool = False) -> str:
    """The string at `dotted`, checked by `_string`."""
    return _string(_get(obj, dotted), dotted, empty_ok)


def _string(value: Any, field: str, empty_ok: bool = False) -> str:
    """`value`, the content of `field`, if it is a string of valid Unicode. `empty_ok`: an
    empty or blank one is kept (a stored system summary: a system that wrote nothing
    scores 0 there, as rouge-score scores it)."""
    if not isinstance(value, str):
        raise _Bad(f"field {field!r} is {type(value).__name__}, not a string")
    if not value.strip() and not empty_ok:
        raise _Bad(f"empty text in field {field!r}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise _Bad(f"field {field!r} holds an unpaired surrogate (not valid Unicode)") from None
    return value


def _id(obj: dict, field: str | None, name: str, line: int) -> str:
    """A record's id: its `field`, or with no id field (input.id_field: null) its source
    position, `<name>:<line>`, as the split names it (shardflow.corpus.readers): `name`
    is the file as the workflow names it (core.s3.logical_path: in S3 storage the
    object's URL or the workflow's path, never the local copy a job reads). `field` is a
    key of the record, as the split reads input.id_field, never a dotted path: "doc.id"
    is the key a flattened export writes, and reading it as obj["doc"]["id"] found no id
    for any record the split had read."""
    if field is None:
        return f"{name}:{line}"
    if field not in obj:
        raise _Bad(f"missing field {field!r}")
    value = obj[field]
    if isinstance(value, bool) or not isinstance(value, (str, int)) or value == "":
        raise _Bad(f"id field {field!r} is {value!r}, not a non-empty string or integer")
    if not encodable(str(value)):  # as the split rejects it; written to Parquet it named no line
        raise _Bad(f"id field {field!r} holds an unpaired surrogate (not valid Unicode)")
    return str(value)
