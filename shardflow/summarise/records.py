"""The summaries file: one JSON object a line, in corpus order.

    {"id": ..., "summary": ..., "input_tokens": ..., "output_tokens": ..., "truncated": ...}

`summary` holds one sentence a line for the extractive methods (lead, extractive),
so ROUGE-Lsum sees their sentence boundaries as they were chosen; an abstractive
model's text as it generated it. Token counts are the model's tokens for
`abstractive` and whitespace-separated words for the extractive methods (which
read and write sentences, not tokens); `truncated` is true where the input was
cut to the model's limit.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence

from shardflow.core.atomic import atomic_open
from shardflow.core.files import iter_json_lines

# Each field with its JSON type, as write_summaries writes it (bool is no int here: type(), not isinstance).
FIELD_TYPES = {"summary": (str, "a string"), "input_tokens": (int, "an integer"),
               "output_tokens": (int, "an integer"), "truncated": (bool, "true or false")}
RECORD_FIELDS = tuple(FIELD_TYPES)


class SummariesError(ValueError):
    """A summaries file that is not what the stage wrote (names file and line)."""


def write_summaries(path: str | os.PathLike, ids: Sequence[str], records: Sequence[dict]) -> None:
    """Atomically write `ids[k]` with `records[k]`'s fields, in order."""
    if len(ids) != len(records):
        raise ValueError(f"{len(ids)} ids but {len(records)} summaries")
    with atomic_open(path, "w", encoding="utf-8") as fh:
        for id_, rec in zip(ids, records, strict=True):
            fh.write(json.dumps({"id": id_, **{k: rec[k] for k in RECORD_FIELDS}}, ensure_ascii=False) + "\n")


def iter_summaries(path: str | os.PathLike) -> Iterator[dict]:
    """The records of a summaries file, checked field by field (present, of the type
    write_summaries writes); a line that is not UTF-8, not JSON or not an object is an
    error naming the file and line too."""
    for lineno, rec in iter_json_lines(path, SummariesError):
        missing = [k for k in ("id", *RECORD_FIELDS) if k not in rec]
        if missing:
            raise SummariesError(f"{path}:{lineno}: missing {', '.join(missing)}")
        if not isinstance(rec["id"], str):  # the split's ids are strings; a null one names no document
            raise SummariesError(f"{path}:{lineno}: id is {json.dumps(rec['id'])}, not a string")
        for key, (kind, what) in FIELD_TYPES.items():  # a null summary was a bare TypeError in evaluate
            if type(rec[key]) is not kind:
                shown = json.dumps(rec[key], ensure_ascii=False)
                shown = shown if len(shown) <= 40 else shown[:39] + "…"
                raise SummariesError(f"{path}:{lineno}: {key} is {shown}, not {what}")
        yield rec

