"""Streaming .npy reads and writes with plain file I/O.

Memory maps are convenient but every touched page of a mapped file counts in
the process's resident memory until the kernel evicts it, so a merge through
`open_memmap` grows with the corpus. These helpers read and write row blocks
through a fixed buffer instead: peak memory is one block, whatever the size.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import numpy as np

from shardflow.core.atomic import atomic_open


def read_header(path: str | os.PathLike) -> tuple[tuple[int, ...], np.dtype, bool, int]:
    """(shape, dtype, fortran_order, data offset) of an .npy file, reading only its header.
    A file that is not one (empty, cut in its header, a Git LFS pointer) is a ValueError
    naming it: numpy's own error names no file."""
    with open(path, "rb") as fh:
        try:
            version = np.lib.format.read_magic(fh)
            read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            shape, fortran, dtype = read(fh)
        except ValueError as exc:
            raise ValueError(f"{os.fspath(path)}: not a readable .npy file ({exc})") from None
        return shape, dtype, fortran, fh.tell()


DEFAULT_BLOCK_BYTES = 4 << 20


def rows_per_block(cols: int, dtype: np.dtype, block_bytes: int = DEFAULT_BLOCK_BYTES) -> int:
    return max(1, block_bytes // max(1, cols * np.dtype(dtype).itemsize))


def iter_row_blocks(path: str | os.PathLike, block_rows: int | None = None) -> Iterator[np.ndarray]:
    """Consecutive row blocks of a 2-D C-order .npy file, each a fresh array
    (default: about 4 MiB a block, whatever the width)."""
    shape, dtype, fortran, offset = read_header(path)
    if fortran or len(shape) != 2:
        raise ValueError(f"{path}: expected a 2-D C-order matrix, found shape {shape} fortran={fortran}")
    rows, cols = shape
    row_bytes = cols * dtype.itemsize
    block_rows = block_rows or rows_per_block(cols, dtype)
    with open(path, "rb", buffering=0) as fh:
        fh.seek(offset)
        for start in range(0, rows, block_rows):
            n = min(block_rows, rows - start)
            block = np.empty((n, cols), dtype=dtype)
            view = memoryview(block).cast("B")
            got = 0
            while got < n * row_bytes:
                k = fh.readinto(view[got:])
                if not k:
                    raise ValueError(f"{path}: file ends at row {start + got // row_bytes} of {rows}")
                got += k
            yield block


class NpyWriter:
    """Write a 2-D .npy of known shape row block by row block."""

    def __init__(self, path: str | os.PathLike, dtype: np.dtype, shape: tuple[int, int]):
        self.path, self.dtype, self.shape = path, np.dtype(dtype), shape
        self.rows_written = 0
        self.fh = open(path, "wb")
        header = {"descr": np.lib.format.dtype_to_descr(self.dtype), "fortran_order": False, "shape": shape}
        np.lib.format.write_array_header_1_0(self.fh, header)

    def write(self, block: np.ndarray) -> None:
        if block.ndim != 2 or block.shape[1] != self.shape[1]:
            raise ValueError(f"block of shape {block.shape} for a matrix of width {self.shape[1]}")
        if self.rows_written + len(block) > self.shape[0]:
            raise ValueError(f"more than the {self.shape[0]} rows declared")
        self.fh.write(memoryview(np.ascontiguousarray(block, dtype=self.dtype)).cast("B"))
        self.rows_written += len(block)

    def close(self) -> None:
        self.fh.flush()
        os.fsync(self.fh.fileno())
        self.fh.close()
        if self.rows_written != self.shape[0]:
            raise ValueError(f"{self.path}: {self.rows_written} rows written of {self.shape[0]} declared")

    def __enter__(self) -> NpyWriter:
        return self

    def __exit__(self, exc_type, *_) -> None:
        if exc_type is None:
            self.close()
        else:
            self.fh.close()


def write_npy(path: str | os.PathLike, arr: np.ndarray) -> None:
    """np.save, atomically (a file object: np.save would append ".npy" to a bare name)."""
    with atomic_open(path, "wb") as fh:
        np.save(fh, arr, allow_pickle=False)
