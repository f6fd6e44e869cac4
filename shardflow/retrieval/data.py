"""Load retrieval benchmarks: BEIR folders and MS MARCO TSV files.

Everything streams line by line (a corpus can hold millions of passages) and
every id leaves here as a `str`, whatever the file wrote. A line that cannot be
read raises `RetrievalDataError` naming the file and line number.

BEIR folder (https://github.com/beir-cellar/beir, the layout MTEB uses):
    corpus.jsonl[.gz]    {"_id": ..., "title": ..., "text": ...}
    queries.jsonl[.gz]   {"_id": ..., "text": ...}
    qrels/<split>.tsv    header `query-id corpus-id score`, tab separated

MS MARCO: collection `pid<TAB>passage`, queries `qid<TAB>query`, qrels in TREC
form `qid 0 pid rel` (or three columns, with or without a header). The official
collection and queries have no header; a first line whose every field names a column
(`pid<TAB>passage`, as pandas writes one) is read as one, with a warning.

A document's text is `(title + " " + text).strip()`, which is just
`text.strip()` when the title is empty: the string MTEB embeds, the empty string
included (the retrieval corpus's split keeps empty texts). Queries are kept
exactly as given, as MTEB does.
"""

from __future__ import annotations

import csv
import json
import logging
import os
from collections.abc import Container, Iterable, Iterator
from pathlib import Path

from shardflow.core.atomic import atomic_open
from shardflow.core.files import loads_json, open_binary
from shardflow.corpus.chunks import ChunkRecord, dump_record
from shardflow.corpus.readers import (
    DEFAULT_MAX_RECORD_BYTES,
    BadRecordError,
    LongLine,
    encodable,
    iter_lines,
    repeated_key,
)

log = logging.getLogger(__name__)

Qrels = dict[str, dict[str, int]]  # query id -> {doc id: relevance}


class RetrievalDataError(ValueError):
    """A line of a retrieval data file that cannot be used, located by file and line
    (`line` None: the whole file, such as one in UTF-16 or with CR line breaks)."""

    def __init__(self, path: str | os.PathLike, line: int | None, reason: str):
        super().__init__(f"{path}:{line}: {reason}" if line is not None else f"{path}: {reason}")
        self.path, self.line, self.reason = str(path), line, reason


def _iter_lines(path: str | os.PathLike) -> Iterator[tuple[int, str]]:
    """Yield (line number, line without its line ending), skipping blank lines.

    Lines are decoded one at a time so a bad byte is reported at its own line; a line
    over the corpus reader's size limit is an error without being read whole, and a
    truncated gzip stream is one at the line it stopped on.
    """
    with open_binary(path) as fh:
        try:
            for lineno, raw in iter_lines(fh, str(path), DEFAULT_MAX_RECORD_BYTES):
                if isinstance(raw, LongLine):
                    raise RetrievalDataError(
                        path, lineno, f"line too large: {raw.size:,} bytes, over the limit of {DEFAULT_MAX_RECORD_BYTES:,}"
                    )
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise RetrievalDataError(path, lineno, f"invalid UTF-8 ({exc.reason})") from exc
                line = line.rstrip("\r\n")
                if lineno == 1:  # a byte-order mark is no part of the first id or object
                    line = line.removeprefix("\ufeff")
                if line.strip():
                    yield lineno, line
        except BadRecordError as exc:
            raise RetrievalDataError(path, exc.line, exc.reason) from exc


def doc_text(title: str | None, text: str) -> str:
    """The string MTEB embeds for a BEIR document."""
    return (f"{title} {text}" if title else text).strip()


# --- BEIR ---------------------------------------------------------------------


def beir_names(name: str) -> tuple[str, str]:
    """A BEIR file's names in a folder, in the order they are looked for: plain, then gzip."""
    return f"{name}.jsonl", f"{name}.jsonl.gz"


def beir_file(folder: str | os.PathLike, name: str) -> Path:
    """`<folder>/<name>.jsonl`, or its `.gz` twin; error if neither exists."""
    folder = Path(folder)
    for candidate in beir_names(name):
        if (folder / candidate).is_file():
            return folder / candidate
    raise FileNotFoundError(f"{folder}: no {name}.jsonl or {name}.jsonl.gz")


def _iter_jsonl_objects(path: Path, read: tuple[str, ...]) -> Iterator[tuple[int, dict]]:
    """(line number, object) of each line; a key of `read` written twice in one object is
    an error (json keeps the last value, silently dropping the first)."""
    for lineno, line in _iter_lines(path):
        try:
            obj = loads_json(line)
        except json.JSONDecodeError as exc:
            raise RetrievalDataError(path, lineno, f"malformed JSON ({exc.msg})") from exc
        if not isinstance(obj, dict):
            raise RetrievalDataError(path, lineno, "expected a JSON object")
        if problem := repeated_key(line, read):
            raise RetrievalDataError(path, lineno, problem)
        yield lineno, obj


def _field(path: Path, lineno: int, obj: dict, key: str) -> object:
    try:
        value = obj[key]
    except KeyError:
        raise RetrievalDataError(path, lineno, f"missing field {key!r}") from None
    if value is None:
        raise RetrievalDataError(path, lineno, f"field {key!r} is null")
    return value


def _text_field(path: Path, lineno: int, obj: dict, key: str) -> str:
    value = _field(path, lineno, obj, key)
    if not isinstance(value, str):
        raise RetrievalDataError(path, lineno, f"field {key!r} is not a string")
    _check_unicode(path, lineno, key, value)
    return value


def _check_unicode(path: Path, lineno: int, key: str, value: str) -> None:
    """JSON can escape half a surrogate pair (`\\ud800`), which no UTF-8 file can hold:
    named here, at the user's line, not later in the prepared copy."""
    if not encodable(value):
        raise RetrievalDataError(path, lineno, f"field {key!r} holds an unpaired surrogate (not valid Unicode)")


def _check_id(path: str | os.PathLike, lineno: int, what: str, key: str) -> str:
    """An id of any retrieval file (corpus, queries, qrels), returned as written.

    Empty or whitespace-only, it names nothing. With whitespace at its start or end it is
    an error too, rather than kept or stripped: BEIR's and MTEB's loaders keep it (' d1'
    is not 'd1' there), TREC tools split it away, and either reading here would let an
    invisible character turn a judgement into a miss or a query into one without text.
    """
    stripped = key.strip()
    if not stripped:
        raise RetrievalDataError(path, lineno, f"{what} is empty")
    if stripped != key:
        raise RetrievalDataError(
            path, lineno, f"{what} {key!r} starts or ends with whitespace (ids are matched as written): remove it"
        )
    return key


def _id_field(path: Path, lineno: int, obj: dict) -> str:
    """A BEIR `_id`: a string or an integer, as text. Qrels name ids as text, so a float
    (1.0, as pandas writes an integer column with a gap), a boolean or a list would match
    no judgement and score as a miss; an empty id names nothing."""
    value = _field(path, lineno, obj, "_id")
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise RetrievalDataError(
            path, lineno, f"field '_id' is {type(value).__name__} ({value!r}), not a string or integer"
        )
    key = _check_id(path, lineno, "field '_id'", str(value))
    _check_unicode(path, lineno, "_id", key)
    return key


def _resolve(path_or_folder: str | os.PathLike, name: str) -> Path:
    path = Path(path_or_folder)
    return beir_file(path, name) if path.is_dir() else path


class _UniqueIds:
    """Each id once per file: search maps rows back to ids, and qrels name them. A
    repeat (ids are compared as strings: 5 and "5" are one id) names the file and its
    line. Keeps every id of the file in memory (a set: an MS MARCO collection's 8.8M
    ids take about 0.7 GB)."""

    def __init__(self, path: str | os.PathLike, kind: str, only: Container[str] | None = None):
        self.path, self.kind, self.seen, self.only = path, kind, set(), only

    def __call__(self, key: str, lineno: int) -> str:
        if self.only is not None and key not in self.only:
            return key
        if key in self.seen:
            raise RetrievalDataError(self.path, lineno, f"duplicate {self.kind} id {key!r} (an earlier line has it)")
        self.seen.add(key)
        return key


def iter_beir_corpus(path_or_folder: str | os.PathLike) -> Iterator[tuple[str, str]]:
    """Yield (doc id, document text) from a BEIR corpus file or folder, in file order;
    a repeated id is an error naming its line."""
    path = _resolve(path_or_folder, "corpus")
    unique = _UniqueIds(path, "document")
    for lineno, obj in _iter_jsonl_objects(path, ("_id", "title", "text")):
        doc_id = unique(_id_field(path, lineno, obj), lineno)
        text = _text_field(path, lineno, obj, "text")
        title = obj.get("title")
        if title is not None and not isinstance(title, str):
            raise RetrievalDataError(path, lineno, "field 'title' is not a string")
        yield doc_id, doc_text(title, text)


def iter_beir_queries(
    path_or_folder: str | os.PathLike, judged: Container[str] | None = None
) -> Iterator[tuple[str, str]]:
    """Yield (query id, query text) from a BEIR queries file or folder, in file order;
    a repeated id is an error naming its line (with `judged`, only a repeated judged id:
    the others are not evaluated, and BEIR's loader keeps the last)."""
    path = _resolve(path_or_folder, "queries")
    unique = _UniqueIds(path, "query", judged)
    for lineno, obj in _iter_jsonl_objects(path, ("_id", "text")):
        yield unique(_id_field(path, lineno, obj), lineno), _text_field(path, lineno, obj, "text")


def load_beir_qrels(folder: str | os.PathLike, split: str = "test") -> Qrels:
    """Qrels of one split of a BEIR folder (`qrels/<split>.tsv`)."""
    path = Path(folder) / "qrels" / f"{split}.tsv"
    if not path.is_file():
        raise FileNotFoundError(f"{folder}: no qrels/{split}.tsv")
    return load_qrels(path)


# --- MS MARCO -----------------------------------------------------------------


# What the text columns of an `id<TAB>text` file's header may be called (lowercased, `_`
# read as `-`); its id column takes a qrels header's id names (`_QRELS_FIELDS`), `id` and
# `_id`. DPR's psgs_w100.tsv starts `id<TAB>text<TAB>title`.
_TSV_TEXT_NAMES = {
    "text", "passage", "passage-text", "query", "query-text", "question", "title", "contents", "content", "body",
    "doc", "document", "doc-text", "document-text",
}


def _column_name(name: str) -> str:
    """A header field as the headers here are matched: lowercased, `_` read as `-`."""
    return name.strip().lower().replace("_", "-")


def _is_tsv_header(key: str, text: str) -> bool:
    """Whether the first line of an `id<TAB>text` file is a header: its id an id column's
    name and every field after it a text column's. The official MS MARCO files have none,
    but pandas' `to_csv(sep="\t")` and DPR's passages write one, whose first word was read as
    a record's id. Ids that are words stay ids: only a record whose id is a column's name
    and whose text is nothing but column names would be taken for a header."""
    ids = {"id", "-id"} | _QRELS_FIELDS["query id"] | _QRELS_FIELDS["document id"]
    return _column_name(key) in ids and all(_column_name(f) in _TSV_TEXT_NAMES for f in text.split("\t"))


def iter_tsv_pairs(
    path: str | os.PathLike, kind: str = "record", only: Container[str] | None = None
) -> Iterator[tuple[str, str]]:
    """Yield (id, text) from a two-column `id<TAB>text` file (MS MARCO collection or queries).

    The text is everything after the first tab, kept as written; a line with no
    tab, an empty id, an id with whitespace at either end (`_check_id`), one in double
    quotes (a csv writer's) or a repeated id (`kind` names it in the message; with
    `only`, a repeated id of those) is an error.
    A first line that is a header (`_is_tsv_header`) is passed over with a warning: it
    is certainly no record, and qrels headers are read alike (`load_qrels`).
    """
    unique = _UniqueIds(path, kind, only)
    first = True
    for lineno, line in _iter_lines(path):
        key, sep, text = line.partition("\t")
        if not sep:
            raise RetrievalDataError(path, lineno, "expected `id<TAB>text`")
        if first:
            first = False
            if _is_tsv_header(key, text):
                log.warning("%s:%d: %r is a header line (every field names a column), not a %s: not read as one "
                            "(the official MS MARCO files have no header)", path, lineno, line, kind)
                continue
        if key.startswith('"'):
            # Kept, the quotes matched no qrels id (load_qrels reads a quoted field as BEIR
            # does, without them); dropped, the text after it, quoted too, would keep its.
            raise RetrievalDataError(
                path, lineno, f"{kind} id {key!r} is in double quotes, as csv writers quote: this file is read "
                "as MS MARCO's, every field as written (its passages hold quotation marks), so the quotes would "
                "stay part of the id and text; write it without quoting"
            )
        yield unique(_check_id(path, lineno, f"{kind} id", key), lineno), text


def iter_msmarco_collection(path: str | os.PathLike) -> Iterator[tuple[str, str]]:
    """Yield (passage id, passage text) from an MS MARCO `collection.tsv[.gz]`."""
    for pid, text in iter_tsv_pairs(path, "passage"):
        yield pid, text.strip()


def iter_msmarco_queries(path: str | os.PathLike, judged: Container[str] | None = None) -> Iterator[tuple[str, str]]:
    """Yield (query id, query text) from an MS MARCO `queries.*.tsv[.gz]` (`judged`: as
    iter_beir_queries)."""
    return iter_tsv_pairs(path, "query", judged)


# --- qrels --------------------------------------------------------------------


def _split_columns(path: str | os.PathLike, lineno: int, line: str) -> list[str]:
    """A qrels line's fields: tab-separated when there is a tab (BEIR, MS MARCO), otherwise
    split at any whitespace (classic TREC qrels are space separated).

    Tab-separated lines are read as BEIR reads its qrels, with csv.reader (QUOTE_MINIMAL):
    a field in double quotes (`"q1"`, as csv writers and pandas' QUOTE_NONNUMERIC write
    it) is the text inside them, `""` in it one quote. Kept, the quotes made every judged
    document one the corpus lacks: all zeros. A quote csv cannot close on this line is
    an error, where BEIR's reader would run on into the next lines. Whitespace-separated
    fields are not CSV: trec_eval keeps a leading quote as part of the id, a CSV reader
    drops it, so one is an error. Tab-separated ids keep what surrounds them, for
    load_qrels to check (_check_id).
    """
    if "\t" not in line:
        cols = line.split()
        for i, col in enumerate(cols, 1):
            if col.startswith('"'):
                raise RetrievalDataError(
                    path, lineno, f"column {i} {col!r} is in double quotes: whitespace-separated (TREC) qrels "
                    "keep quotes as part of the id, CSV drops them; remove them, or separate the columns by tabs "
                    "(read as CSV, as BEIR reads its qrels)"
                )
        return cols
    if '"' not in line:  # nothing quoted: the plain split, the common case
        return line.split("\t")
    try:
        return next(csv.reader([line], delimiter="\t", strict=True))
    except csv.Error as exc:
        raise RetrievalDataError(path, lineno, f"malformed CSV quoting ({exc})") from exc


def _is_number(value: str) -> bool:
    try:
        float(value)
    except ValueError:
        return False
    return True


def _parse_relevance(value: str) -> int | None:
    try:
        return int(value)
    except ValueError:
        pass
    try:
        as_float = float(value)
    except ValueError:
        return None
    return int(as_float) if as_float.is_integer() else None


# What a qrels header may call each field (lowercased, `_` read as `-`): BEIR's names,
# TREC's and ir_datasets' (`query_id doc_id relevance iteration`) among them.
_QRELS_FIELDS = {
    "query id": {"query-id", "queryid", "qid", "query", "topic", "topic-id", "topicid"},
    "document id": {"corpus-id", "corpusid", "doc-id", "docid", "docno", "doc", "document-id", "pid", "passage-id"},
    "grade": {"score", "rel", "relevance", "label", "grade", "judgment", "judgement"},
}


def _qrels_columns(
    path: str | os.PathLike, lineno: int, n_columns: int, header: list[str] | None
) -> tuple[int, int, int]:
    """The (query id, document id, grade) columns of qrels rows.

    A header that names all three decides (MTEB reads BEIR qrels by column name), so a
    file with other or more columns (ir_datasets' four, a pandas index before BEIR's
    three) is read where its header says. Otherwise the layout goes by the column
    count: three are BEIR's `query-id corpus-id score`, four TREC's `qid iteration docid
    rel`; a header that names a field in another column than that is an error, since
    which of the two to believe cannot be told.
    """
    named: dict[str, int] = {}
    for i, name in enumerate(header or ()):
        key = _column_name(name)
        for field, names in _QRELS_FIELDS.items():
            if key in names:
                if field in named:
                    raise RetrievalDataError(
                        path, lineno, f"columns {named[field] + 1} and {i + 1} both name the {field} ({header!r})"
                    )
                named[field] = i
    if len(named) == len(_QRELS_FIELDS):
        return named["query id"], named["document id"], named["grade"]
    if n_columns not in (3, 4):
        raise RetrievalDataError(path, lineno, f"qrels need 3 or 4 columns, found {n_columns}")
    layout = (0, 1, 2) if n_columns == 3 else (0, 2, 3)
    for field, at in zip(_QRELS_FIELDS, layout, strict=True):
        if named.get(field, at) != at:
            raise RetrievalDataError(
                path,
                lineno,
                f"header names the {field} in column {named[field] + 1}, where a {n_columns}-column file holds it "
                f"in column {at + 1} ({header!r}): name the query id, document id and grade columns "
                "(query-id, corpus-id, score) so they are read by name, or name none",
            )
    return layout


def load_qrels(path: str | os.PathLike) -> Qrels:
    """Read qrels into `{query id: {doc id: relevance}}`.

    Accepted layouts, detected from the first line:
      - `query-id corpus-id score` with a header line (BEIR),
      - `qid docid rel` without header,
      - TREC `qid iteration docid rel` (MS MARCO `qrels.*.tsv`),
      - any columns under a header that names the query id, document id and grade
        columns (`_QRELS_FIELDS`: `query_id doc_id relevance iteration`, as ir_datasets
        names its qrels), read by those names.
    Every row must have as many columns as the first line, and ids are kept as
    written (one empty or with whitespace at either end is an error), but for the
    quotes of a CSV-quoted field of a tab-separated file (`_split_columns`). Rows with
    relevance 0 are kept (judged non-relevant); a repeated (query, doc) pair keeps
    its last value, as BEIR's loader does, with a warning when the grades differ.
    """
    qrels: Qrels = {}
    n_columns: int | None = None
    regraded: list[tuple[int, str, str]] = []
    for lineno, line in _iter_lines(path):
        cols = _split_columns(path, lineno, line)
        if n_columns is None:
            n_columns = len(cols)
            # Only the first line may be a header (`query-id corpus-id score`): data rows
            # end in a number (one that is not an integer, or none, is an error below,
            # not a header).
            header = cols if cols[-1].strip() and not _is_number(cols[-1]) else None
            q_col, d_col, r_col = _qrels_columns(path, lineno, n_columns, header)
            if header is not None:
                continue
        if len(cols) != n_columns:
            raise RetrievalDataError(
                path, lineno, f"expected {n_columns} columns like the first row, found {len(cols)}"
            )
        qid, docid, rel_text = cols[q_col], cols[d_col], cols[r_col]
        rel = _parse_relevance(rel_text.strip())
        if rel is None:
            raise RetrievalDataError(path, lineno, f"relevance {rel_text.strip()!r} is not an integer")
        _check_id(path, lineno, "query id", qid)
        _check_id(path, lineno, "document id", docid)
        judged = qrels.setdefault(qid, {})
        if judged.get(docid, rel) != rel:
            regraded.append((lineno, qid, docid))
        judged[docid] = rel
    if not qrels:
        raise RetrievalDataError(path, 1, "no judgement in the file: nothing to evaluate")
    if regraded:
        line, qid, docid = regraded[0]
        log.warning("%s: %d (query, document) pairs are judged again with another grade; the last grade counts, "
                    "as in BEIR (first: line %d, %r, %r)", path, len(regraded), line, qid, docid)
    return qrels


# --- export -------------------------------------------------------------------


def write_corpus_jsonl(
    docs: Iterable[tuple[str, str]], path: str | os.PathLike, *, check_unique: bool = True
) -> int:
    """Write (id, text) pairs as a shardflow corpus (`{"id":..., "text":...}` per line).

    Written atomically, in input order; returns the number of documents. With
    `check_unique` a repeated id is an error (search maps rows back to ids, so
    ids must name one row each); it keeps every id in memory.
    """
    seen: set[str] = set()
    count = 0
    with atomic_open(path, "w", encoding="utf-8", newline="\n") as fh:
        for doc_id, text in docs:
            if check_unique:
                if doc_id in seen:
                    raise ValueError(f"{path}: duplicate document id {doc_id!r}")
                seen.add(doc_id)
            fh.write(dump_record(ChunkRecord(doc_id, text)))
            count += 1
    return count
