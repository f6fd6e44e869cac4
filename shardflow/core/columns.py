"""The id column that travels beside every per-row output (embeddings, summaries),
and the duplicate check every stage's verification runs over it.

One string column `id` in Parquet: row k names row k of the matching output.
Bounded row groups, so streaming readers (merge, verify) hold one group at a time.
"""

from __future__ import annotations

import bisect
import hashlib
import os
from collections.abc import Callable, Iterable, Iterator, Sequence

import numpy as np

from shardflow.core.atomic import atomic_path

ID_ROW_GROUP = 16384


def write_ids_parquet(path: str | os.PathLike, ids: Sequence[str]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({"id": pa.array(list(ids), type=pa.string())})
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp, row_group_size=ID_ROW_GROUP)


def open_ids(path: str | os.PathLike):
    """The pyarrow ParquetFile of an id column file. A file that is not Parquet (empty,
    cut short, a Git LFS pointer) is a ValueError naming it: pyarrow's own error names
    no file, and a merge reads one per chunk."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return pq.ParquetFile(path)
    except pa.ArrowInvalid as exc:
        raise ValueError(f"{os.fspath(path)}: not a readable Parquet file ({exc})") from None


def read_ids(path: str | os.PathLike) -> list[str]:
    import pyarrow.parquet as pq

    return pq.read_table(path, columns=["id"]).column("id").to_pylist()


def read_id_array(path: str | os.PathLike):
    """The id column as one pyarrow array, for a job that needs few of many ids as `str`
    (`.take(rows).to_pylist()`). About 16 bytes an id (the text, an 8-byte offset: large
    strings, so ids of any total length fit one array) where `read_ids`' list takes about
    65: 0.6 GB for MS MARCO's 8.8 M passages."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    return pq.read_table(path, columns=["id"]).column("id").cast(pa.large_string()).combine_chunks()


def id_at(path: str | os.PathLike, row: int) -> str | None:
    """The id at `row` (counting from 0) of an id column file, reading the one row group
    that holds it; None where the file has no such row."""
    return ids_at(path, [row]).get(row)


def ids_at(path: str | os.PathLike, rows: Iterable[int]) -> dict[int, str]:
    """{row: its id} for each of `rows` (counting from 0) that an id column file has,
    each row group holding one of them read once, the others not at all."""
    ids = open_ids(path)
    wanted = sorted(set(rows))
    found: dict[int, str] = {}
    first = 0
    for group in range(ids.metadata.num_row_groups):
        end = first + ids.metadata.row_group(group).num_rows
        inside = wanted[bisect.bisect_left(wanted, first) : bisect.bisect_left(wanted, end)]
        if inside:
            column = ids.read_row_group(group, columns=["id"]).column(0)
            found.update((row, column[row - first].as_py()) for row in inside)
        first = end
    return found


def _id_hash(value: str) -> int:
    return int.from_bytes(hashlib.blake2b(value.encode(), digest_size=8).digest(), "little")


def duplicate_ids(batches: Callable[[], Iterator[list[str]]]) -> tuple[int, list[str]]:
    """(number of ids, ids that occur more than once) over `batches()`, a factory of
    id batches that may be called twice. 8-byte hashes keep memory at 8 bytes an id
    (one uint64 array per batch: a Python list of ints would cost ~36 bytes an id), 16
    while the batches' arrays are joined;
    hash collisions are resolved by comparing the actual strings in a second pass."""
    parts = [np.zeros(0, dtype=np.uint64)]
    for values in batches():
        parts.append(np.fromiter(map(_id_hash, values), dtype=np.uint64, count=len(values)))
    hashes = np.concatenate(parts)
    del parts  # the batches' arrays: kept beside np.sort's copy, they made the peak 24 bytes an id
    hashes.sort()  # in place: no copy
    suspect = set(hashes[1:][hashes[1:] == hashes[:-1]].tolist())
    if not suspect:
        return len(hashes), []
    seen: dict[str, int] = {}
    for values in batches():
        for value in values:
            if _id_hash(value) in suspect:
                seen[value] = seen.get(value, 0) + 1
    return len(hashes), sorted(v for v, c in seen.items() if c > 1)
