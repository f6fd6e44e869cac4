"""The chunk file format shared by `split` and `embed_<i>`.

A chunk is UTF-8 JSON Lines, one record per line: `{"id": "<str>", "text": "<str>"}`
(plus `"group"` when the split used `group_by`). Keys are written in a fixed order
with compact separators, so the same records always give the same bytes.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

# chunking.by: source (corpus.by_source): where split_source writes chunk i's part
# manifest (.json), rejects (.rejects.jsonl) and record keys (.keys.parquet); the rules'
# outputs, and what make status reads.
SOURCE_PART = "results/{dataset}/chunks/sources/chunk_{chunk}"


@dataclass(frozen=True)
class ChunkRecord:
    id: str
    text: str
    group: str | None = None


def dump_record(rec: ChunkRecord) -> str:
    obj = {"id": rec.id, "text": rec.text}
    if rec.group is not None:
        obj["group"] = rec.group
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n"


def write_record(fh: IO[str], rec: ChunkRecord) -> int:
    """Write one record; return the number of UTF-8 bytes written."""
    line = dump_record(rec)
    fh.write(line)
    return len(line.encode("utf-8"))


# A JSON value's type as a message names it.
_JSON_TYPES = {
    type(None): "null",
    bool: "a boolean",
    int: "a number",
    float: "a number",
    list: "an array",
    dict: "an object",
}


def _not_strings(rec: ChunkRecord) -> list[str]:
    """The fields of `rec` that are not the strings the split writes (group may be
    absent). A null or numeric text read as it stood failed later, in a tokenizer or a
    join, naming neither the chunk file nor the line."""
    fields = [("id", rec.id), ("text", rec.text)] + ([("group", rec.group)] if rec.group is not None else [])
    return [
        f"field {key!r} is {_JSON_TYPES.get(type(value), type(value).__name__)}, not a string"
        for key, value in fields
        if not isinstance(value, str)
    ]


def parse_chunk_line(raw: bytes, path: str | os.PathLike, lineno: int) -> ChunkRecord:
    """Line `lineno` of chunk file `path`, as bytes: decoded here, so that a line that is
    not UTF-8 names its file and line too (a text-mode read raises the codec's error,
    naming neither, from the reading loop itself)."""
    try:
        obj = json.loads(raw.decode("utf-8"))
        rec = ChunkRecord(obj["id"], obj["text"], obj.get("group"))
    except UnicodeDecodeError as exc:
        raise ValueError(
            f"{path}:{lineno}: not a shardflow chunk record (invalid UTF-8 at byte {exc.start} of the line)"
        ) from None
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise ValueError(f"{path}:{lineno}: not a shardflow chunk record ({exc})") from exc
    if wrong := _not_strings(rec):
        raise ValueError(f"{path}:{lineno}: not a shardflow chunk record ({'; '.join(wrong)})")
    return rec


def iter_chunk(path: str | os.PathLike) -> Iterator[ChunkRecord]:
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, 1):
            yield parse_chunk_line(raw, path, lineno)


def read_chunk(path: str | os.PathLike) -> tuple[list[str], list[str]]:
    """Return (ids, texts) of a chunk file, in file order."""
    ids: list[str] = []
    texts: list[str] = []
    for rec in iter_chunk(path):
        ids.append(rec.id)
        texts.append(rec.text)
    return ids, texts


@contextlib.contextmanager
def naming_records(path: str | os.PathLike, ids: list[str], *errors: type[Exception]) -> Iterator[None]:
    """An error of `errors` raised inside, which names a text by its index in chunk file
    `path` (its `row`), is raised again naming the file and the record's id: the record a
    user can find. The error keeps its type and attributes, so what retries or records it
    (core.failures) sees the same error."""
    try:
        yield
    except errors as exc:
        exc.args = (f"{path}: id {ids[exc.row]!r}: {exc}", *exc.args[1:])
        raise


def chunk_path(folder: str | os.PathLike, index: int) -> Path:
    return Path(folder) / f"chunk_{index}.jsonl"
