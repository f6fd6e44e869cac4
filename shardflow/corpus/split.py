"""Split a corpus into exactly N chunk files, streaming, deterministically.

Two passes over the input keep peak memory small: pass 1 measures (record
count, bytes, or per-group sizes) and keeps an 8-byte hash of each record id,
pass 2 writes each record to the chunk its position assigns it to. The same
corpus and N always give byte-identical chunks.

Ids are unique across the whole input: a repeated id is a bad record naming
both places (`<file>:<line>: duplicate id 'x' (first at <file>:<line>)`), found
by sorting the hashes after pass 1 and, only when two are equal, one more pass
that compares the ids themselves. With on_bad_record=skip the first record of
an id is kept and the later ones are rejects. The hashes cost 8 bytes a record
(80 MB for 10 M records), as verify's check of the embedded ids does, and the pass
that compares ids keeps the first place of each repeated id, nothing per later record;
with input.id_field null ids are source positions, unique already, and none are kept.

Assignment rules
- by records: record k of R goes to chunk floor(k * N / R) (sizes differ by at most 1).
- by size: a record whose preceding records hold c of B text bytes goes to
  chunk floor(c * N / B), so chunks carry about B / N bytes each.
- group_by: whole groups are placed, largest first, on the chunk with the least
  load so far (ties: lowest chunk); records keep input order inside a chunk.
  Memory here grows with the number of distinct groups, not records.
"""

from __future__ import annotations

import contextlib
import hashlib
import heapq
import json
import logging
import os
from array import array
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from shardflow.core.atomic import atomic_open, publish_all, tmp_path, write_json
from shardflow.core.fields import check_field_types, whole_floats_as_ints
from shardflow.core.hashing import sha256_file
from shardflow.core.s3 import logical_path
from shardflow.corpus.chunks import ChunkRecord, dump_record
from shardflow.corpus.readers import BadRecordError, ReaderOptions, Record, Rejected, iter_records

log = logging.getLogger(__name__)


MANIFEST_FORMAT = "shardflow.chunks/1"  # a split's manifest.json (corpus.by_source's too)


@dataclass(frozen=True)
class SplitParams:
    n_chunks: int
    by: str = "records"  # records | size
    # For the manifest's time estimate. A run passes the config's value (the schema fills
    # chunking.rate_items_per_s's default); this default, for callers outside a run, is
    # the schema's (tests/unit/corpus/test_split.py holds them equal).
    rate_items_per_s: float = 40.0
    max_open_files: int = 256

    def __post_init__(self) -> None:
        whole_floats_as_ints(self)  # n_chunks 4.0 is 4: `[0] * n_chunks` takes no float
        if self.by not in ("records", "size"):
            raise ValueError(f"chunking.by {self.by!r}: expected 'records' or 'size'")
        # Before the bounds: a string or None there is Python's bare TypeError; True (one
        # chunk) was kept, and max_open_files '256' until the first chunk file opened.
        check_field_types(self)
        if self.n_chunks < 1:
            raise ValueError(f"n_chunks must be >= 1, got {self.n_chunks}")
        if self.rate_items_per_s <= 0:
            raise ValueError("rate_items_per_s must be > 0")


@dataclass
class _Measure:
    records: int = 0
    bytes: int = 0
    rejected: int = 0
    first_reject: Rejected | None = None  # for the message when nothing is usable
    groups: dict | None = None  # group -> weight, in first-seen order
    id_hashes: array | None = None  # hash(id) of each record, for the duplicate check


def _weight(rec: Record, by: str) -> int:
    return len(rec.text.encode("utf-8")) if by == "size" else 1


def _measure(paths: list[str], opts: ReaderOptions, params: SplitParams) -> _Measure:
    m = _Measure(groups={} if opts.group_field else None, id_hashes=array("q") if opts.id_field else None)
    for item in iter_records(paths, opts):
        if isinstance(item, Rejected):
            m.rejected += 1
            m.first_reject = m.first_reject or item
            continue
        if m.groups is not None and item.group is None:
            raise ValueError(
                f"{item.source}:{item.line}: chunking.group_by={opts.group_field!r} needs a field, "
                "but this record has none (plain text has no fields)"
            )
        w = _weight(item, params.by)
        m.records += 1
        m.bytes += w if params.by == "size" else 0
        if m.groups is not None:
            m.groups[item.group] = m.groups.get(item.group, 0) + w
        if m.id_hashes is not None:
            m.id_hashes.append(hash(item.id))
    return m


def _repeated_hashes(hashes: array) -> set[int]:
    """Hashes seen more than once: a duplicate id (or, rarely, two ids with one hash)."""
    h = np.frombuffer(hashes, dtype=np.int64).copy()
    h.sort()
    return set(h[1:][h[1:] == h[:-1]].tolist())


@dataclass
class _Repeats:
    """What pass 2 needs to set aside the later records of a repeated id: the hashes two
    records share, and where the first record of each id among them is. Nothing is kept
    per later record (a corpus listed twice would otherwise hold a reason string for each
    of its records); pass 2 compares each record's place with its id's first one."""

    suspects: set[int]
    first: dict[str, tuple[str, int]]
    count: int = 0  # later records, set aside

    def reason(self, item: Record) -> str | None:
        """Why `item` is set aside (a later record of a repeated id), or None."""
        if not self.suspects or hash(item.id) not in self.suspects:
            return None
        source, line = self.first.get(item.id, (item.source, item.line))
        if (source, line) == (item.source, item.line):
            return None
        return f"duplicate id {item.id!r} (first at {source}:{line})"


def _duplicates(paths: list[str], opts: ReaderOptions, params: SplitParams, m: _Measure) -> _Repeats:
    """The repeated ids, each later record of one taken out of `m`.

    Runs a pass only when two hashes are equal. In error mode the first repeat raises.
    """
    suspects = _repeated_hashes(m.id_hashes) if m.id_hashes is not None and len(m.id_hashes) > 1 else set()
    m.id_hashes = None
    repeats = _Repeats(suspects, {})
    if not suspects:
        return repeats
    for item in iter_records(paths, opts):
        if isinstance(item, Rejected) or hash(item.id) not in suspects:
            continue
        if item.id not in repeats.first:
            repeats.first[item.id] = (item.source, item.line)
            continue
        reason = repeats.reason(item)
        if opts.on_bad_record == "error":
            raise BadRecordError(item.source, item.line, reason, skippable=True)
        repeats.count += 1
        w = _weight(item, params.by)
        m.records -= 1
        m.rejected += 1
        m.bytes -= w if params.by == "size" else 0
        if m.groups is not None:
            m.groups[item.group] -= w
    return repeats


def _size_and_mtime(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None  # gone since: changed
    return st.st_size, st.st_mtime_ns


def assign_groups(groups: dict, n_chunks: int) -> dict:
    """Largest-first onto the least-loaded chunk (the lowest-numbered of equals);
    deterministic given insertion order."""
    order = sorted(enumerate(groups.items()), key=lambda t: (-t[1][1], t[0]))
    # (load, chunk) of every chunk, a heap: its first is the chunk a scan of all would
    # pick, found in log(n_chunks) comparisons. The scan made 100,000 groups onto 5,000
    # chunks take 30 s, growing as groups x chunks.
    loads = [(0, i) for i in range(n_chunks)]
    placed = {}
    for _, (group, weight) in order:
        load, target = loads[0]
        placed[group] = target
        heapq.heapreplace(loads, (load + weight, target))
    return placed


# The chunks' bytes held before they are written. Group mode writes to the chunks in any
# order: a record written as it came, with more chunks than open files (max_open_files)
# and groups taking turns in the corpus, closed one file and opened another for nearly
# every record (95 % of them at 5,000 chunks and 256 files). Held, each chunk's records
# go out together: a file opened per chunk once per HELD_BYTES of the corpus.
HELD_BYTES = 64 << 20


class _ChunkWriters:
    """The chunk files, written to in any order: records held up to HELD_BYTES in all,
    then each chunk's appended to its file, at most `limit` files open (the least
    recently used closed first)."""

    def __init__(self, tmp_paths: list[Path], limit: int):
        self.tmp_paths, self.limit = tmp_paths, limit
        self.open: dict[int, object] = {}
        self.started: set[int] = set()
        self.held: dict[int, bytearray] = {}
        self.held_bytes = 0

    def write(self, i: int, line: bytes) -> None:
        self.held.setdefault(i, bytearray()).extend(line)
        self.held_bytes += len(line)
        if self.held_bytes >= HELD_BYTES:
            self.flush()

    def flush(self) -> None:
        for i, data in self.held.items():
            self.get(i).write(data)
        self.held.clear()
        self.held_bytes = 0

    def get(self, i: int):
        fh = self.open.get(i)
        if fh is None:
            if len(self.open) >= self.limit:
                victim = next(iter(self.open))
                self.open.pop(victim).close()
            fh = open(self.tmp_paths[i], "ab" if i in self.started else "wb")
            self.open[i] = fh
            self.started.add(i)
        else:  # move to the back: least-recently used goes first
            self.open[i] = self.open.pop(i)
        return fh

    def close(self) -> None:
        """Close the files; records still held are dropped (`flush` first to keep them)."""
        self.held.clear()
        self.held_bytes = 0
        for fh in self.open.values():
            fh.close()
        self.open.clear()


# A reader with keep_empty_text reads the chunk-format corpus this workflow wrote itself
# (the retrieval corpus, workflow.plan.CHUNK_READER), always with on_bad_record: error:
# its bad record's error names the prepared file, and the hint the split script gives
# (input.on_bad_record: skip) cannot apply there.
RETRIEVAL_HINT = (
    "a document of the retrieval corpus, prepared from retrieval.path's corpus file in its order; "
    "input.on_bad_record does not apply to it (every document is searched, as in MTEB): "
    "raise input.max_record_mb, which this split reads too, for a longer document, or fix the corpus file"
)


def split_corpus(
    paths: Iterable[str],
    opts: ReaderOptions,
    params: SplitParams,
    chunk_paths: list[str | os.PathLike],
    manifest_path: str | os.PathLike,
    rejects_path: str | os.PathLike,
    *,
    allow_empty: bool = False,
    on_record: Callable[[Record, int], None] | None = None,
) -> dict:
    """Write `len(chunk_paths)` == n_chunks chunks, a manifest and a rejects file.

    allow_empty: no usable record writes empty chunks instead of stopping (one source
    of many, corpus.by_source, whose collector stops when the whole corpus has none).
    on_record(record, chunk): called for each record written, in order.
    """
    paths = list(paths)
    n = params.n_chunks
    if len(chunk_paths) != n:
        raise ValueError(f"{len(chunk_paths)} chunk paths given for n_chunks={n}")
    read_as = {p: _size_and_mtime(p) for p in paths}  # to name a file written to between the passes
    try:  # pass 1 meets every bad record
        m = _measure(paths, opts, params)
        repeats = _duplicates(paths, opts, params, m)
    except BadRecordError as exc:
        if not (opts.keep_empty_text and exc.skippable):
            raise
        # Not skippable: scripts/split.py would add the on_bad_record: skip hint.
        raise BadRecordError(exc.source, exc.line, f"{exc.reason} ({RETRIEVAL_HINT})") from None
    log.info(
        "pass 1: %d records, %d rejected (%d duplicate ids)%s",
        m.records,
        m.rejected,
        repeats.count,
        f", {m.bytes} text bytes" if params.by == "size" else "",  # measured only to split by size
    )
    if m.records == 0 and not allow_empty:
        if m.first_reject is None:
            raise ValueError(f"no usable record in {paths}: the input holds no records (empty)")
        r = m.first_reject
        where = r.source if r.line is None else f"{r.source}:{r.line}"
        raise ValueError(f"no usable record in {paths}: all {m.rejected} rejected (the first: {where}: {r.reason})")
    if n > m.records:
        log.warning("n_chunks=%d exceeds the %d records: %d chunks will be empty", n, m.records, n - m.records)
    placed = assign_groups(m.groups, n) if m.groups is not None else None

    finals = [Path(p) for p in chunk_paths]
    tmps = [tmp_path(p) for p in finals]
    for p in finals:
        p.parent.mkdir(parents=True, exist_ok=True)
    items, nbytes = [0] * n, [0] * n
    digests = [hashlib.sha256() for _ in range(n)]
    writers = _ChunkWriters(tmps, params.max_open_files)
    k = cum = rejected = 0

    def input_changed(read: str) -> RuntimeError:
        changed = [p for p in paths if _size_and_mtime(p) != read_as[p]]
        which = (
            f"changed since the split began: {', '.join(changed)}"
            if changed
            else f"no file's size or modification time changed ({len(paths)} read)"
        )
        return RuntimeError(
            f"input changed between the split's two passes ({which}): pass 2 read {read}, pass 1 "
            f"{m.records}/{m.rejected} records/rejects; rerun once nothing writes to the input"
        )

    try:
        with atomic_open(rejects_path, "w", encoding="utf-8") as rejects:
            for item in iter_records(paths, opts):
                repeated = repeats.reason(item) if isinstance(item, Record) else None
                if repeated:
                    raw = dump_record(ChunkRecord(item.id, item.text, item.group)).rstrip("\n")
                    item = Rejected(item.source, item.line, repeated, raw)
                if isinstance(item, Rejected):
                    rejects.write(json.dumps(item.as_json(), ensure_ascii=False) + "\n")
                    rejected += 1
                    continue
                if k >= m.records or (placed is not None and item.group not in placed):
                    # More than pass 1 counted (or a group it did not see): no chunk is planned for it.
                    raise input_changed(f"more than {m.records} records" if k >= m.records else f"group {item.group!r}")
                if placed is not None:
                    i = placed[item.group]
                elif params.by == "size":
                    i = min(n - 1, cum * n // m.bytes)
                    cum += _weight(item, "size")
                else:
                    i = k * n // m.records
                k += 1
                line = dump_record(ChunkRecord(item.id, item.text, item.group)).encode("utf-8")
                writers.write(i, line)
                items[i] += 1
                nbytes[i] += len(line)
                digests[i].update(line)
                if on_record is not None:
                    on_record(item, i)
            if k != m.records or rejected != m.rejected:
                raise input_changed(f"{k}/{rejected}")
        writers.flush()
        writers.close()
        for i in range(n):
            if i not in writers.started:  # an empty chunk is still a chunk
                open(tmps[i], "w").close()
        publish_all(list(zip(tmps, finals, strict=True)))
    finally:
        writers.close()
        for t in tmps:
            with contextlib.suppress(FileNotFoundError):
                t.unlink()

    manifest = {
        "format": MANIFEST_FORMAT,
        "n_chunks": n,
        "by": params.by,
        "group_by": opts.group_field,
        "sources": [logical_path(p) for p in paths],
        # Provenance reads these instead of hashing the inputs again.
        "source_sha256": {logical_path(p): sha256_file(p) for p in paths},
        "total_records": m.records,
        "rejected_records": m.rejected,
        "rejects_path": logical_path(rejects_path),
        "rate_items_per_s": params.rate_items_per_s,
        "estimated_seconds_total": round(m.records / params.rate_items_per_s, 3),
        "chunks": [
            {
                "chunk": i,
                "path": logical_path(finals[i]),
                "items": items[i],
                "bytes": nbytes[i],
                "sha256": digests[i].hexdigest(),
                "estimated_seconds": round(items[i] / params.rate_items_per_s, 3),
            }
            for i in range(n)
        ],
    }
    write_json(manifest_path, manifest)
    return manifest
