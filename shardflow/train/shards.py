"""Token shard files in the llm.c format, written streaming, read by memory map.

Layout (karpathy/llm.c `dev/data/data_common.py`, `write_datafile`):

    header   256 x int32, little-endian (1024 bytes)
             header[0] = magic, header[1] = version, header[2] = number of tokens,
             the rest zero
    tokens   header[2] tokens, little-endian, uint16 or uint32

    uint16 tokens: magic 20240520, version 1  ("gpt-2": what llm.c's C loader and
                   modded-nanogpt's `_load_data_shard` read)
    uint32 tokens: magic 20240801, version 7  ("llama-3")

The token count is an int32, so one shard holds fewer than 2**31 tokens.
`header=False` (ShardWriter, Shard) writes and reads bare tokens instead, without that
limit: a scratch file that is cut into shards, never one handed to a reader.

`ShardWriter` streams tokens to a temporary next to `<path>` (`core.atomic.tmp_path`), fills in the token count at
close, fsyncs and `os.replace`s the file into place: a reader sees a whole shard
or none. `open_shard` checks magic, version, dtype and the exact file size before
handing out a memory map (np.memmap at offset 1024), so a truncated or mislabelled
file is refused with its name and what is wrong, and a shard is never read whole.
"""

from __future__ import annotations

import contextlib
import os
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from shardflow.core.atomic import publish, tmp_path

HEADER_INTS = 256
HEADER_BYTES = HEADER_INTS * 4
MAX_TOKENS = 2**31 - 1  # header[2] is an int32
# dtype name -> (magic, version)
FORMATS = {"uint16": (20240520, 1), "uint32": (20240801, 7)}
BY_MAGIC = {magic: (name, version) for name, (magic, version) in FORMATS.items()}


class ShardFormatError(ValueError):
    """A file that is not a well-formed token shard; the message names the file."""


class ShardReadError(OSError):
    """A checked shard that returned fewer bytes than it holds: an I/O fault or a file
    changed while open, which a retry may not meet (an OSError: retried,
    shardflow.core.failures), not a format error."""


def choose_dtype(vocab_size: int, requested: str = "auto") -> str:
    """uint16 when every id fits (vocab_size <= 65536), else uint32; an explicit dtype must fit."""
    if requested == "auto":
        return "uint16" if vocab_size <= 2**16 else "uint32"
    if requested not in FORMATS:
        raise ValueError(f"token dtype {requested!r}: expected 'auto', 'uint16' or 'uint32'")
    limit = 2 ** (8 * np.dtype(requested).itemsize)
    if vocab_size > limit:
        raise ValueError(
            f"token dtype {requested} holds ids below {limit}, but the tokenizer's vocab_size is {vocab_size}; "
            "use dtype uint32 or auto"
        )
    return requested


def header_bytes(dtype: str, n_tokens: int) -> bytes:
    magic, version = FORMATS[dtype]
    return struct.pack("<3i", magic, version, n_tokens) + bytes(HEADER_BYTES - 12)


class ShardWriter:
    """Append tokens to a new shard; `close()` publishes it and returns its token count.

    Used as a context manager, an exception inside the block discards the file.
    `header=False`: bare tokens, any number of them (see the module docstring).
    """

    def __init__(self, path: str | os.PathLike, dtype: str, *, header: bool = True):
        if dtype not in FORMATS:
            raise ValueError(f"token dtype {dtype!r}: expected one of {sorted(FORMATS)}")
        self.path = Path(path)
        self.dtype = dtype
        self.header = header
        self._np = np.dtype(dtype).newbyteorder("<")
        self._max_id = np.iinfo(self._np).max
        self.n_tokens = 0
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._tmp = tmp_path(self.path)
        self._fh = open(self._tmp, "wb")
        if header:
            self._fh.write(header_bytes(dtype, 0))  # count filled in at close

    def write(self, tokens: Iterable[int] | np.ndarray) -> None:
        arr = np.asarray(tokens)
        if arr.size == 0:
            return
        if arr.dtype.kind not in "iu":
            raise TypeError(f"{self.path}: tokens must be integers, got {arr.dtype}")
        if arr.dtype != self._np:
            lo, hi = int(arr.min()), int(arr.max())
            if lo < 0 or hi > self._max_id:
                raise ValueError(f"{self.path}: token id {hi if hi > self._max_id else lo} does not fit {self.dtype}")
            arr = arr.astype(self._np)
        if self.header and self.n_tokens + arr.size > MAX_TOKENS:
            raise ValueError(f"{self.path}: more than {MAX_TOKENS} tokens; the int32 header cannot count them")
        self._fh.write(np.ascontiguousarray(arr))  # the buffer itself, no bytes copy
        self.n_tokens += arr.size

    def close(self) -> int:
        fh = self._fh
        if fh is None:
            return self.n_tokens
        if self.header:
            fh.seek(0)
            fh.write(header_bytes(self.dtype, self.n_tokens))
        fh.flush()
        os.fsync(fh.fileno())
        fh.close()
        self._fh = None
        publish(self._tmp, self.path, synced=True)
        return self.n_tokens

    def abort(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None
        with contextlib.suppress(FileNotFoundError):
            self._tmp.unlink()

    def __enter__(self) -> ShardWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


def write_shard(path: str | os.PathLike, tokens: Iterable[int] | np.ndarray, dtype: str) -> int:
    with ShardWriter(path, dtype) as w:
        w.write(tokens)
    return w.n_tokens


@dataclass(frozen=True)
class ShardHeader:
    path: str
    dtype: str
    magic: int
    version: int
    n_tokens: int


def read_header(path: str | os.PathLike, dtype: str | None = None) -> ShardHeader:
    """Parse and check a shard's header against its size (and `dtype`, when given)."""
    path = str(path)
    size = os.path.getsize(path)
    if size < HEADER_BYTES:
        raise ShardFormatError(f"{path}: {size} bytes, shorter than the {HEADER_BYTES}-byte shard header (truncated?)")
    with open(path, "rb") as fh:
        magic, version, n_tokens = struct.unpack("<3i", fh.read(12))
    if magic not in BY_MAGIC:
        known = ", ".join(f"{m} ({name})" for m, (name, _) in BY_MAGIC.items())
        raise ShardFormatError(f"{path}: magic number {magic} is not a token shard's (expected {known})")
    name, want_version = BY_MAGIC[magic]
    if version != want_version:
        raise ShardFormatError(
            f"{path}: magic {magic} ({name} tokens) with version {version}; that format is version {want_version}"
        )
    if dtype is not None and dtype != name:
        raise ShardFormatError(f"{path}: holds {name} tokens (magic {magic}), expected {dtype}")
    if n_tokens < 0:
        raise ShardFormatError(f"{path}: negative token count {n_tokens} in the header")
    expected = HEADER_BYTES + n_tokens * np.dtype(name).itemsize
    if size != expected:
        what = "truncated" if size < expected else "has trailing bytes"
        raise ShardFormatError(
            f"{path}: {what}: the header says {n_tokens} {name} tokens ({expected} bytes with the header) "
            f"but the file has {size} bytes"
        )
    return ShardHeader(path, name, magic, version, n_tokens)


class Shard:
    """A checked shard. `tokens` is a read-only memory map; `read` copies a slice
    without mapping (pread), for copying through a file without growing RSS.
    `header=False`: a file of bare `dtype` tokens (ShardWriter's), `header` None."""

    def __init__(self, path: str | os.PathLike, dtype: str | None = None, *, header: bool = True):
        if header:
            self.header: ShardHeader | None = read_header(path, dtype)
            self.path, self.dtype, self.n_tokens = self.header.path, self.header.dtype, self.header.n_tokens
            self._offset = HEADER_BYTES
        else:
            if dtype not in FORMATS:
                raise ValueError(f"token dtype {dtype!r}: a file without a header needs one of {sorted(FORMATS)}")
            self.header, self.path, self.dtype, self._offset = None, str(path), dtype, 0
            size, item = os.path.getsize(path), np.dtype(dtype).itemsize
            if size % item:
                raise ShardFormatError(f"{path}: {size} bytes, not a whole number of {dtype} tokens")
            self.n_tokens = size // item
        self._np = np.dtype(self.dtype).newbyteorder("<")
        self._tokens: np.ndarray | None = None
        self._fd: int | None = None

    def __len__(self) -> int:
        return self.n_tokens

    @property
    def tokens(self) -> np.ndarray:
        if self._tokens is None:
            if self.n_tokens == 0:  # mmap cannot map zero bytes
                self._tokens = np.empty(0, dtype=self._np)
            else:
                self._tokens = np.memmap(
                    self.path, dtype=self._np, mode="r", offset=self._offset, shape=(self.n_tokens,)
                )
        return self._tokens

    def read(self, start: int, stop: int) -> np.ndarray:
        if not 0 <= start <= stop <= self.n_tokens:
            raise IndexError(f"{self.path}: slice [{start}:{stop}] outside its {self.n_tokens} tokens")
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDONLY)
        item = self._np.itemsize
        want = (stop - start) * item
        data = os.pread(self._fd, want, self._offset + start * item)
        if len(data) != want:
            raise ShardReadError(
                f"{self.path}: short read at token {start}: {len(data)} of {want} bytes (file changed while open?)"
            )
        return np.frombuffer(data, dtype=self._np)

    def close(self) -> None:
        """Drop the memory map (once no slice of it is referenced) and the read handle."""
        self._tokens = None
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> Shard:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def open_shard(path: str | os.PathLike, dtype: str | None = None, *, header: bool = True) -> Shard:
    return Shard(path, dtype, header=header)
