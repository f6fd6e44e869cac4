"""`chunking.by: source`: each source (a corpus file or S3 object) is one chunk, split
by a job of its own, so that adding a source adds a chunk and leaves the others, and
every job that read them, as they were.

A split of the whole corpus in one job writes every chunk anew whenever an input is
added, and Snakemake then reruns every job downstream: it compares file times, not
contents. Here the job of chunk i (rule split_source) reads source i alone and writes
the chunk, a part manifest, its rejects and the keys of its records (id, group, line);
a source appended to input.path (its name sorting last) gets the next chunk number,
and only its job, the merges and the reports run. A source whose sorted position
moves (a name inserted before others) renumbers the chunks after it, which then run
again: name new files so that they sort last (numbered or dated parts).

The collector (rule split_<dataset>) checks across sources what one split checks
across its input: ids unique, each group in one chunk (chunking.group_by), at least
one usable record; and writes the data set's manifest.json in the split's format
(`by: source`, each chunk naming its source) and rejects.jsonl, the parts' rejects in
source order. A repeated id or a split group across two sources is an error even under
input.on_bad_record: skip: both records are in finished chunks already, and skipping
one would mean rewriting its chunk, so the error names both places to fix.
"""

from __future__ import annotations

import json
import logging
import os
import shutil

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from shardflow.core.atomic import atomic_open, atomic_path, write_json
from shardflow.core.s3 import logical_path
from shardflow.corpus.readers import BadRecordError, ReaderOptions, Record
from shardflow.corpus.split import SplitParams, split_corpus

log = logging.getLogger(__name__)

KEYS_SCHEMA = pa.schema([("id", pa.string()), ("group", pa.string()), ("line", pa.int64())])


def split_source(
    source: str,
    opts: ReaderOptions,
    rate_items_per_s: float,
    chunk_path: str | os.PathLike,
    part_path: str | os.PathLike,
    rejects_path: str | os.PathLike,
    keys_path: str | os.PathLike,
) -> dict:
    """One source into one chunk: the chunk, its part manifest (the split's manifest of
    this source alone), its rejects and the keys of its records, in chunk order. A
    source without a usable record gives an empty chunk (the collector stops if the
    whole corpus has none)."""
    ids: list[str] = []
    groups: list[str | None] = []
    lines: list[int] = []

    def keep(record: Record, _chunk: int) -> None:
        ids.append(record.id)
        groups.append(record.group)
        lines.append(record.line)

    params = SplitParams(n_chunks=1, by="records", rate_items_per_s=rate_items_per_s)
    manifest = split_corpus(
        [source], opts, params, [chunk_path], part_path, rejects_path, allow_empty=True, on_record=keep
    )
    if not ids:
        log.warning("%s: no usable record: its chunk is empty", logical_path(source))
    table = pa.table({"id": ids, "group": groups, "line": lines}, schema=KEYS_SCHEMA)
    with atomic_path(keys_path) as tmp:
        pq.write_table(table, tmp)
    return manifest


def _places(keys: pa.Table, sources: list[str], value: str, column: str) -> list[str]:
    """`<source>:<line>` of each record whose `column` is `value`, in corpus order."""
    hit = keys.filter(pc.equal(keys[column], value))
    return [f"{sources[c]}:{line}" for c, line in zip(hit["chunk"].to_pylist(), hit["line"].to_pylist(), strict=True)]


def _repeated(keys: pa.Table, column: str) -> list[str]:
    """Values of `column` held by more than one record (ids) or chunk (groups), sorted."""
    counted = keys.group_by(column).aggregate([("chunk", "count_distinct" if column == "group" else "count")])
    counts = counted.column(1)
    return sorted(counted.filter(pc.greater(counts, 1))[column].to_pylist())


def check_keys(keys_paths: list[str | os.PathLike], sources: list[str], opts: ReaderOptions) -> None:
    """Stop on an id in two sources (when ids come from a field) or a group in two
    chunks, naming the places; ids repeated within one source were handled by its split."""
    if opts.id_field is None and opts.group_field is None:
        return  # ids from positions are unique, and there are no groups
    tables = []
    for i, path in enumerate(keys_paths):
        t = pq.read_table(path, columns=["id", "group", "line"])
        tables.append(t.append_column("chunk", pa.array([i] * t.num_rows, pa.int64())))
    keys = pa.concat_tables(tables) if tables else KEYS_SCHEMA.empty_table()
    hint = (
        "chunking.by: source splits each source on its own, so the records are in finished chunks and "
        "cannot be set aside (input.on_bad_record: skip applies within a source)"
    )
    if opts.id_field is not None:
        repeated = _repeated(keys, "id")
        if repeated:
            first, *later = _places(keys, sources, repeated[0], "id")
            more = f"; {len(repeated) - 1} more id(s) repeat across sources" if len(repeated) > 1 else ""
            source, line = later[0].rsplit(":", 1)
            raise BadRecordError(
                source, int(line), f"duplicate id {repeated[0]!r} (first at {first}){more}: {hint}; remove one"
            )
    if opts.group_field is not None:
        split = _repeated(keys, "group")
        if split:
            where = sorted({p.rsplit(":", 1)[0] for p in _places(keys, sources, split[0], "group")}, key=sources.index)
            more = f"; {len(split) - 1} more group(s) span sources" if len(split) > 1 else ""
            raise ValueError(
                f"chunking.group_by={opts.group_field!r}: group {split[0]!r} has records in {', '.join(where)}{more}, "
                "but chunking.by: source makes each source one chunk: put each group's records in one source file"
            )


def collect_sources(
    part_paths: list[str | os.PathLike],
    rejects_paths: list[str | os.PathLike],
    keys_paths: list[str | os.PathLike],
    opts: ReaderOptions,
    rate_items_per_s: float,
    manifest_path: str | os.PathLike,
    rejects_path: str | os.PathLike,
) -> dict:
    """The data set's manifest.json and rejects.jsonl from the parts of its sources,
    chunk i being source i; see the module docstring for what is checked first."""
    parts = [json.loads(open(p, encoding="utf-8").read()) for p in part_paths]
    for path, part in zip(part_paths, parts, strict=True):
        if part.get("format") != "shardflow.chunks/1" or part.get("n_chunks") != 1 or len(part["sources"]) != 1:
            raise ValueError(f"{path}: not a one-source split manifest (rule split_source writes them)")
    sources = [part["sources"][0] for part in parts]
    total = sum(part["total_records"] for part in parts)
    rejected = sum(part["rejected_records"] for part in parts)
    if total == 0:
        with_rejects = [str(p) for p, part in zip(rejects_paths, parts, strict=True) if part["rejected_records"]]
        why = (
            f"all {rejected} rejected (listed in {', '.join(with_rejects)})"
            if rejected
            else "the input holds no records (empty)"
        )
        raise ValueError(f"no usable record in {sources}: {why}")
    check_keys(keys_paths, sources, opts)
    with atomic_open(rejects_path, "wb") as out:
        for path in rejects_paths:
            with open(path, "rb") as part_rejects:
                shutil.copyfileobj(part_rejects, out)
    chunks = []
    for i, part in enumerate(parts):
        (entry,) = part["chunks"]
        chunks.append({**entry, "chunk": i, "source": sources[i]})
    manifest = {
        "format": "shardflow.chunks/1",
        "n_chunks": len(parts),
        "by": "source",
        "group_by": opts.group_field,
        "sources": sources,
        "source_sha256": {s: part["source_sha256"][s] for s, part in zip(sources, parts, strict=True)},
        "total_records": total,
        "rejected_records": rejected,
        "rejects_path": logical_path(rejects_path),
        "rate_items_per_s": rate_items_per_s,
        "estimated_seconds_total": round(total / rate_items_per_s, 3),
        "chunks": chunks,
    }
    write_json(manifest_path, manifest)
    return manifest
