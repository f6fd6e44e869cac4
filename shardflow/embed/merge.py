"""Concatenate per-chunk embeddings, in chunk order, into one memory-mappable file.

Streaming: each chunk is read and written in row blocks through plain file I/O
(no memory maps, whose touched pages count as resident memory), and ids are
appended to a Parquet writer chunk by chunk, so peak memory does not grow with
the corpus. Row k of `embeddings.npy` is the
vector of row k of `ids.parquet`.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from shardflow.core.atomic import atomic_path
from shardflow.core.columns import open_ids
from shardflow.core.fields import check_field_types, whole_floats_as_ints
from shardflow.core.npyio import NpyWriter, iter_row_blocks, read_header

log = logging.getLogger(__name__)

ID_SCHEMA = pa.schema([pa.field("id", pa.string(), nullable=False)])


@dataclass(frozen=True)
class MergeParams:
    block_rows: int | None = None  # None: about 4 MiB of vectors a block
    id_batch: int = 16384

    def __post_init__(self) -> None:
        whole_floats_as_ints(self)  # 5000.0 (JSON Schema's "integer" takes it) is 5000
        check_field_types(self)


def _header(path: str) -> tuple[tuple[int, ...], np.dtype]:
    shape, dtype, _, _ = read_header(path)
    return shape, dtype


def _check_no_null_id(path: str, first_row: int, ids: pa.Array) -> None:
    """A null id names no document, so its vector could never be joined back: stop naming
    the file and row (the cast to the non-nullable id column names neither)."""
    if ids.null_count:
        k = first_row + pc.index(ids.is_null(), True).as_py()
        raise ValueError(f"{path}: row {k} (counting from 0) has a null id")


def merge_embeddings(
    npy_paths: list[str], id_paths: list[str], out_npy: str | os.PathLike, out_ids: str | os.PathLike,
    params: MergeParams = MergeParams(),
) -> dict:
    if len(npy_paths) != len(id_paths):
        raise ValueError(f"{len(npy_paths)} embedding files but {len(id_paths)} id files")
    if not npy_paths:
        raise ValueError("no chunk to merge")
    shapes, dtypes = [], []
    for p, ip in zip(npy_paths, id_paths, strict=True):
        shape, dtype = _header(p)
        if len(shape) != 2:
            raise ValueError(f"{p}: expected a 2-D matrix, found shape {shape}")
        ids_file = open_ids(ip)
        if "id" not in ids_file.schema_arrow.names:
            raise ValueError(f"{ip}: no 'id' column (columns: {', '.join(ids_file.schema_arrow.names) or 'none'})")
        n_ids = ids_file.metadata.num_rows
        if n_ids != shape[0]:
            raise ValueError(f"{p} has {shape[0]} rows but {ip} has {n_ids} ids")
        shapes.append(shape)
        dtypes.append(dtype)
    # An empty chunk holds no vectors, so its width and dtype are placeholders
    # (np.empty((0, 0)) is float64): only chunks with rows must agree.
    full = [i for i, s in enumerate(shapes) if s[0] > 0] or [0]
    first = full[0]
    dim, dtype = shapes[first][1], dtypes[first]
    odd = next((i for i in full if (shapes[i][1], dtypes[i]) != (dim, dtype)), None)
    if odd is not None:  # name the file: of a thousand chunks, the widths alone say not which
        found_dims, found_dtypes = {shapes[i][1] for i in full}, {str(dtypes[i]) for i in full}
        raise ValueError(f"{npy_paths[odd]}: vectors of {shapes[odd][1]} x {dtypes[odd]}, where {npy_paths[first]} "
                         f"has {dim} x {dtype}: chunks disagree: dimensions {sorted(found_dims)}, dtypes "
                         f"{sorted(found_dtypes)}")
    total = sum(s[0] for s in shapes)

    with atomic_path(out_npy) as tmp_npy, atomic_path(out_ids) as tmp_ids:
        with NpyWriter(tmp_npy, dtype, (total, dim)) as out, pq.ParquetWriter(tmp_ids, ID_SCHEMA) as writer:
            for p, ip, shape in zip(npy_paths, id_paths, shapes, strict=True):
                if shape[0]:
                    for block in iter_row_blocks(p, params.block_rows):
                        out.write(block)
                ids, row = open_ids(ip), 0
                for batch in ids.iter_batches(columns=["id"], batch_size=params.id_batch):
                    _check_no_null_id(ip, row, batch.column(0))
                    writer.write_table(pa.Table.from_batches([batch]).cast(ID_SCHEMA), row_group_size=params.id_batch)
                    row += batch.num_rows
    log.info("merged %d chunks: %d rows x %d (%s)", len(npy_paths), total, dim, dtype)
    return {"chunks": len(npy_paths), "rows": total, "dim": dim, "dtype": str(dtype)}
