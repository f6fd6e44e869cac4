"""`chunking.by: source`: each source (a corpus file or S3 object) is one chunk, split
by a job of its own, so that adding a source adds a chunk and leaves the others, and
every job that read them, as they were.

A split of the whole corpus in one job writes every chunk anew whenever an input is
added, and Snakemake then reruns every job downstream: it compares file times, not
contents. Here the job of chunk i (rule split_source) reads source i alone and writes
the chunk, a part manifest, its rejects and the keys of its records (id, group, line);
a source appended to input.path (its name sorting last) gets the next chunk number,
and only its job, the merges and the reports run. A source whose sorted position
moves (a name inserted before others, or one removed) renumbers the chunks after it,
which then run again with every job that reads them: name new files so that they sort
last (numbered or dated parts). Chunk numbers are positions because every per-chunk
rule numbers chunks 0 to N-1; Snakemake splits a renumbered chunk again through its
input rerun trigger (the job's recorded source changed).

The collector (rule split_<dataset>) checks across sources what one split checks
across its input: ids unique, each group in one chunk (chunking.group_by), at least
one usable record; and that no source is in two chunks (a chunk left from another list
of sources, when Snakemake's input rerun trigger was off); and writes the data set's manifest.json in the split's format
(`by: source`, each chunk naming its source) and rejects.jsonl, the parts' rejects in
source order. A repeated id or a split group across two sources is an error even under
input.on_bad_record: skip: both records are in finished chunks already, and skipping
one would mean rewriting its chunk, so the error names both places to fix.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from shardflow.core.atomic import atomic_open, atomic_path, write_json
from shardflow.core.files import read_json
from shardflow.core.s3 import logical_path
from shardflow.corpus.readers import BadRecordError, ReaderOptions, Record
from shardflow.corpus.split import MANIFEST_FORMAT, SplitParams, split_corpus

log = logging.getLogger(__name__)

# A record's keys: its id and group, their stable 64-bit hashes (the collector compares
# hashes, 8 bytes a record, and reads the strings only where two hashes are equal), and
# its line in the source (for the error).
KEYS_SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("group", pa.string()),
        ("line", pa.int64()),
        ("id_hash", pa.uint64()),
        ("group_hash", pa.uint64()),
    ]
)
KEYS_BATCH = 65536  # records a row group: what split_source holds of them at once


def stable_hash(value: str | None) -> int:
    """A 64-bit hash that is the same in every process (Python's `hash` of a str is not)."""
    if value is None:
        return 0
    return int.from_bytes(hashlib.blake2b(value.encode("utf-8"), digest_size=8).digest(), "little")


class _KeysWriter:
    """The keys of a source's records into a Parquet file, a row group at a time."""

    def __init__(self, path: Path):
        self.writer = pq.ParquetWriter(path, KEYS_SCHEMA)
        self.rows: dict[str, list] = {name: [] for name in KEYS_SCHEMA.names}

    def add(self, record: Record, _chunk: int) -> None:
        for name, value in (
            ("id", record.id),
            ("group", record.group),
            ("line", record.line),
            ("id_hash", stable_hash(record.id)),
            ("group_hash", stable_hash(record.group)),
        ):
            self.rows[name].append(value)
        if len(self.rows["id"]) >= KEYS_BATCH:
            self.flush()

    def flush(self) -> None:
        self.writer.write_table(pa.table(self.rows, schema=KEYS_SCHEMA))
        self.rows = {name: [] for name in KEYS_SCHEMA.names}

    def close(self) -> None:
        if self.rows["id"]:
            self.flush()
        self.writer.close()


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
    params = SplitParams(n_chunks=1, by="records", rate_items_per_s=rate_items_per_s)
    with atomic_path(keys_path) as tmp:
        keys = _KeysWriter(tmp)
        try:
            manifest = split_corpus(
                [source], opts, params, [chunk_path], part_path, rejects_path, allow_empty=True, on_record=keys.add
            )
        finally:
            keys.close()
    if not manifest["total_records"]:
        log.warning("%s: no usable record: its chunk is empty", logical_path(source))
    return manifest


def _repeated(hashes: np.ndarray, chunks: np.ndarray, *, across_chunks: bool) -> set[int]:
    """Hashes held by more than one record, or (`across_chunks`) by records of more than
    one chunk: candidates, to be compared as strings (two values may share a hash)."""
    if across_chunks:  # each (hash, chunk) pair once
        pairs = np.unique(np.stack([hashes, chunks.astype(np.uint64)], axis=1), axis=0)
        hashes = pairs[:, 0]
    ordered = np.sort(hashes)
    return set(ordered[1:][ordered[1:] == ordered[:-1]].tolist())


def _holders(keys_paths: list, column: str, suspects: set[int]) -> dict[str, list[tuple[int, int]]]:
    """{value: [(chunk, line), ...]} in corpus order, for the records whose `column`
    hashes to one of `suspects`; one source's keys in memory at a time."""
    found: dict[str, list[tuple[int, int]]] = {}
    wanted = pa.array(sorted(suspects), pa.uint64())
    for chunk, path in enumerate(keys_paths):
        t = pq.read_table(path, columns=[column, "line", f"{column}_hash"])
        t = t.filter(pc.is_in(t[f"{column}_hash"], value_set=wanted))
        for value, line in zip(t[column].to_pylist(), t["line"].to_pylist(), strict=True):
            found.setdefault(value, []).append((chunk, line))
    return found


def check_keys(keys_paths: list[str | os.PathLike], sources: list[str], opts: ReaderOptions) -> None:
    """Stop on an id in two sources (when ids come from a field) or a group in two
    chunks, naming the places; ids repeated within one source were handled by its split.
    Memory: 12 bytes a record (a hash and a chunk number), and one source's keys where
    two hashes are equal."""
    if opts.id_field is None and opts.group_field is None:
        return  # ids from positions are unique, and there are no groups
    columns = (["id_hash"] if opts.id_field is not None else []) + (["group_hash"] if opts.group_field else [])
    hashes: dict[str, list[np.ndarray]] = {c: [] for c in columns}
    chunks = []
    for i, path in enumerate(keys_paths):
        t = pq.read_table(path, columns=columns)
        for c in columns:
            hashes[c].append(t[c].to_numpy())
        chunks.append(np.full(t.num_rows, i, dtype=np.int32))
    chunk_of = np.concatenate(chunks) if chunks else np.empty(0, np.int32)
    hint = (
        "chunking.by: source splits each source on its own, so the records are in finished chunks and "
        "cannot be set aside (input.on_bad_record: skip applies within a source)"
    )
    if opts.id_field is not None:
        suspects = _repeated(np.concatenate(hashes["id_hash"]), chunk_of, across_chunks=False)
        repeated = {v: at for v, at in _holders(keys_paths, "id", suspects).items() if len(at) > 1} if suspects else {}
        if repeated:
            value = min(repeated)
            (first_chunk, first_line), (chunk, line), *_ = repeated[value]
            more = f"; {len(repeated) - 1} more id(s) repeat across sources" if len(repeated) > 1 else ""
            raise BadRecordError(
                sources[chunk],
                line,
                f"duplicate id {value!r} (first at {sources[first_chunk]}:{first_line}){more}: {hint}; remove one",
            )
    if opts.group_field is not None:
        suspects = _repeated(np.concatenate(hashes["group_hash"]), chunk_of, across_chunks=True)
        held = _holders(keys_paths, "group", suspects) if suspects else {}
        split = {v: sorted({c for c, _ in at}) for v, at in held.items() if len({c for c, _ in at}) > 1}
        if split:
            value = min(split)
            where = ", ".join(sources[c] for c in split[value])
            more = f"; {len(split) - 1} more group(s) span sources" if len(split) > 1 else ""
            raise ValueError(
                f"chunking.group_by={opts.group_field!r}: group {value!r} has records in {where}{more}, "
                "but chunking.by: source makes each source one chunk: put each group's records in one source file"
            )


def _check_one_chunk_each(part_paths: list, sources: list[str]) -> None:
    """Stop where two chunks were split from one source. The rules never plan that (each
    source is listed once), so one of the two is left from another list of sources: a
    source inserted or removed renumbers the chunks after it, and Snakemake splits them
    again only through its `input` rerun trigger, which compares each job's recorded
    input file. Without it (`--rerun-triggers mtime`, or .snakemake/ removed) a chunk
    whose new source is older than it stays as it was: the next chunk's source twice,
    its own left out, and with ids from positions nothing else would notice."""
    first: dict[str, int] = {}
    for i, source in enumerate(sources):
        j = first.setdefault(source, i)
        if j != i:
            raise ValueError(
                f"{part_paths[i]}: chunk {i} was split from {source}, as chunk {j} was ({part_paths[j]}): "
                "one of them is left from another list of sources (a source inserted or removed renumbers the "
                "chunks after it) and was not split again, which Snakemake does only through its input rerun "
                "trigger (off under --rerun-triggers without 'input', or with .snakemake/ removed). Rerun with the "
                "default rerun triggers; without the metadata, --forcerun the chunk files from the first source "
                "inserted or removed on"
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
    parts = [read_json(p) for p in part_paths]
    for path, part in zip(part_paths, parts, strict=True):
        if part.get("format") != MANIFEST_FORMAT or part.get("n_chunks") != 1 or len(part["sources"]) != 1:
            raise ValueError(f"{path}: not a one-source split manifest (rule split_source writes them)")
    sources = [part["sources"][0] for part in parts]
    _check_one_chunk_each(part_paths, sources)
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
        "format": MANIFEST_FORMAT,
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
