"""Length-sorted, token-budget batches, collated with numpy.

A window of texts is tokenized once (no padding), sorted by token count (longest
first, ties in input order), then cut into batches whose padded size
`rows * longest_row` stays within a token budget. Sorting keeps padding small;
the budget keeps the memory of a batch roughly constant, so short texts travel
in large batches and long ones in small batches. Longest first also means the
biggest batch runs first: an out-of-memory error shows up at once, not an hour in.

Everything here is a pure function of the token lengths and the parameters, so
the same window always gives the same batches (resume relies on this).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import chain

import numpy as np


@dataclass(frozen=True)
class Batch:
    """Rows of one window, collated. `rows` index the window in input order."""

    rows: np.ndarray  # int64 [n]
    lengths: np.ndarray  # int64 [n], real tokens per row
    input_ids: np.ndarray  # int64 [n, width]
    attention_mask: np.ndarray  # int64 [n, width]

    @property
    def padded_tokens(self) -> int:
        return int(self.input_ids.size)


def length_order(lengths: np.ndarray) -> np.ndarray:
    """Indices sorting `lengths` longest first; equal lengths keep input order."""
    return np.argsort(-np.asarray(lengths, dtype=np.int64), kind="stable")


def plan_batches(sorted_lengths: np.ndarray, token_budget: int, max_batch_size: int) -> list[tuple[int, int]]:
    """Cut a longest-first length sequence into [start, end) batches.

    Each batch's first row is its longest, so its padded size is
    `(end - start) * sorted_lengths[start]`; it is kept <= token_budget, except that
    a single row longer than the budget still forms a batch of one.
    """
    if token_budget < 1 or max_batch_size < 1:
        raise ValueError("token_budget and max_batch_size must be >= 1")
    n = len(sorted_lengths)
    spans: list[tuple[int, int]] = []
    start = 0
    while start < n:
        longest = max(int(sorted_lengths[start]), 1)
        size = max(1, min(max_batch_size, token_budget // longest, n - start))
        spans.append((start, start + size))
        start += size
    return spans


def collate(
    token_ids: list[list[int]],
    rows: np.ndarray,
    pad_id: int,
    left_pad: bool,
) -> Batch:
    """Pad the given rows of `token_ids` into dense arrays, without a Python loop over tokens."""
    lengths = np.fromiter((len(token_ids[i]) for i in rows), dtype=np.int64, count=len(rows))
    width = max(1, int(lengths.max())) if len(rows) else 0
    flat = np.fromiter(chain.from_iterable(token_ids[i] for i in rows), dtype=np.int64, count=int(lengths.sum()))
    cols = np.arange(width, dtype=np.int64)
    if left_pad:
        real = cols[None, :] >= (width - lengths)[:, None]
    else:
        real = cols[None, :] < lengths[:, None]
    input_ids = np.full((len(rows), width), pad_id, dtype=np.int64)
    input_ids[real] = flat  # boolean assignment fills row-major: row by row, left to right
    return Batch(
        rows=np.asarray(rows, dtype=np.int64),
        lengths=lengths,
        input_ids=input_ids,
        attention_mask=real.astype(np.int64),
    )


def split_batch(batch: Batch, max_rows: int, left_pad: bool) -> list[Batch]:
    """Split a collated batch into pieces of at most `max_rows`, each trimmed to its own width."""
    pieces = []
    for start in range(0, len(batch.rows), max(1, max_rows)):
        sl = slice(start, start + max_rows)
        lengths = batch.lengths[sl]
        width = max(1, int(lengths.max()))
        cols = slice(batch.input_ids.shape[1] - width, None) if left_pad else slice(0, width)
        pieces.append(
            Batch(
                rows=batch.rows[sl],
                lengths=lengths,
                input_ids=batch.input_ids[sl, cols],
                attention_mask=batch.attention_mask[sl, cols],
            )
        )
    return pieces
