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

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain, pairwise

import numpy as np


@dataclass(frozen=True)
class Batch:
    """Rows of one window, collated. `rows` index the window in input order."""

    rows: np.ndarray  # int64 [n]
    lengths: np.ndarray  # int64 [n], real tokens per row
    input_ids: np.ndarray  # int64 [n, width]; packed: [1, total]
    attention_mask: np.ndarray  # int64 [n, width]; packed: [1, total], the position ids
    packed: bool = False  # one unpadded row (see `pack`)

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
    """Split a collated batch into pieces of at most `max_rows` (at least 1), each trimmed
    to its own width."""
    max_rows = max(1, max_rows)  # 0: a packed batch was cut into empty pieces, every row lost
    if batch.packed:
        return split_packed(batch, max_rows)
    pieces = []
    for start in range(0, len(batch.rows), max_rows):
        sl = slice(start, min(start + max_rows, len(batch.rows)))  # never a bucket's filler rows
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


# --------------------------------------------------------------------------- shape buckets
#
# torch.compile specialises a graph to its input shapes: with a width per batch (the
# longest row) and a row count per batch, a job sees hundreds of shapes and recompiles
# for each. Rounding the width up to a bucket, and padding the rows of a batch up to
# the budget's row count for that width, leaves one shape per bucket. The extra padding
# is masked (and the extra rows dropped), so the embeddings do not change beyond the
# last bits of a different kernel shape.


def default_length_buckets(max_length: int) -> tuple[int, ...]:
    """Powers of two from 16 to 256, then multiples of 256 (and 128s up to 512), up to max_length.

    Few enough shapes to compile each once (about 8 for a 1,024-token model), with at
    most ~33% padding added to a batch of long rows and ~50% to the shortest ones.
    """
    if max_length < 1:
        raise ValueError("max_length must be >= 1")
    out = [b for b in (16, 32, 64, 128, 256, 384, 512) if b < max_length]
    b = 768
    while b < max_length:
        out.append(b)
        b += 256
    out.append(max_length)
    return tuple(out)


def graph_length_buckets(max_length: int) -> tuple[int, ...]:
    """Widths for CUDA graphs (embedding.cuda_graphs): multiples of 16 up to 1,024, then
    steps of 1/32 of the power of two below (32 up to 2,048, 64 up to 4,096, ...), up to
    max_length.

    A graph is captured in about one forward's host time, not compiled, so shapes may be
    many; what matters is the padding they add to a GPU-bound model: at most 15 tokens
    a row, and about 3 % of a row's length beyond 1,024 (64 widths for a 1,024-token
    model, against `default_length_buckets`' 8 and their 11-35 % more tokens)."""
    if max_length < 1:
        raise ValueError("max_length must be >= 1")
    out = []
    width = 16
    while width < max_length:
        out.append(width)
        width += max(16, (1 << (width.bit_length() - 1)) // 32)
    out.append(max_length)
    return tuple(out)


def bucket_width(length: int, buckets: tuple[int, ...]) -> int:
    """The smallest bucket >= length (a length beyond the last bucket keeps its own width)."""
    for b in buckets:
        if b >= length:
            return b
    return max(int(length), 1)


def bucket_rows(width: int, token_budget: int, max_batch_size: int) -> int:
    """Rows of every batch of this bucket width: as many as the budget allows."""
    return max(1, min(max_batch_size, token_budget // max(width, 1)))


def plan_bucketed_batches(
    sorted_lengths: np.ndarray, buckets: tuple[int, ...], token_budget: int, max_batch_size: int
) -> list[tuple[int, int, int, int]]:
    """As `plan_batches`, but each batch is (start, end, width, rows): its width is the
    bucket of its longest row and `rows` (>= end - start) the fixed row count of that
    bucket, so `(rows, width)` takes at most len(buckets) values over any input."""
    if token_budget < 1 or max_batch_size < 1:
        raise ValueError("token_budget and max_batch_size must be >= 1")
    n = len(sorted_lengths)
    spans = []
    start = 0
    while start < n:
        width = bucket_width(max(int(sorted_lengths[start]), 1), buckets)
        rows = bucket_rows(width, token_budget, max_batch_size)
        end = start + min(rows, n - start)
        spans.append((start, end, width, rows))
        start = end
    return spans


def collate_to(
    token_ids: list[list[int]], rows: np.ndarray, pad_id: int, left_pad: bool, width: int, n_rows: int
) -> Batch:
    """`collate`, padded to exactly [n_rows, width]. Filler rows (after the real ones)
    hold one unmasked pad token each, so no attention row is fully masked; `rows` and
    `lengths` describe the real rows only."""
    batch = collate(token_ids, rows, pad_id, left_pad)
    n, w = batch.input_ids.shape
    if w > width or n > n_rows:
        raise ValueError(f"batch [{n}, {w}] does not fit the bucket [{n_rows}, {width}]")
    input_ids = np.full((n_rows, width), pad_id, dtype=np.int64)
    mask = np.zeros((n_rows, width), dtype=np.int64)
    cols = slice(width - w, None) if left_pad else slice(0, w)
    input_ids[:n, cols] = batch.input_ids
    mask[:n, cols] = batch.attention_mask
    mask[n:, -1 if left_pad else 0] = 1
    return Batch(rows=batch.rows, lengths=batch.lengths, input_ids=input_ids, attention_mask=mask)


# --------------------------------------------------------------------------- packing
#
# A packed batch is one row holding its texts back to back, without padding: the model
# sees position ids that restart at every text and attention kept within each text
# (a block-diagonal mask, or a variable-length kernel given the boundaries).


def plan_packed_batches(sorted_lengths: np.ndarray, token_budget: int, max_batch_size: int) -> list[tuple[int, int]]:
    """Cut lengths into [start, end) batches of at most `token_budget` real tokens
    (a text longer than the budget still forms a batch of one)."""
    if token_budget < 1 or max_batch_size < 1:
        raise ValueError("token_budget and max_batch_size must be >= 1")
    spans = []
    start, n = 0, len(sorted_lengths)
    while start < n:
        end, total = start, 0
        while end < n and end - start < max_batch_size:
            size = max(int(sorted_lengths[end]), 1)
            if end > start and total + size > token_budget:
                break
            total += size
            end += 1
        spans.append((start, end))
        start = end
    return spans


def pack(token_ids: list[list[int]], rows: np.ndarray) -> Batch:
    """The given rows as one unpadded row: input_ids [1, total]; `attention_mask` [1, total]
    holds each token's position within its text (the position ids), `lengths` the
    boundaries. An empty text would have no token to pool: callers tokenize with
    special tokens, so none is empty (checked)."""
    lengths = np.fromiter((len(token_ids[i]) for i in rows), dtype=np.int64, count=len(rows))
    if len(rows) and lengths.min() < 1:
        raise ValueError("cannot pack an empty token sequence")
    total = int(lengths.sum())
    flat = np.fromiter(chain.from_iterable(token_ids[i] for i in rows), dtype=np.int64, count=total)
    starts = np.repeat(np.cumsum(lengths) - lengths, lengths)
    positions = np.arange(total, dtype=np.int64) - starts
    return Batch(
        rows=np.asarray(rows, dtype=np.int64),
        lengths=lengths,
        input_ids=flat[None, :],
        attention_mask=positions[None, :],
        packed=True,
    )


def split_packed(batch: Batch, max_rows: int) -> list[Batch]:
    """Split a packed batch into packed pieces of at most `max_rows` texts (at least 1)."""
    max_rows = max(1, max_rows)
    bounds = np.concatenate([[0], np.cumsum(batch.lengths)])
    pieces = []
    for start in range(0, len(batch.rows), max_rows):
        end = min(start + max_rows, len(batch.rows))
        a, b = int(bounds[start]), int(bounds[end])
        pieces.append(
            Batch(
                rows=batch.rows[start:end],
                lengths=batch.lengths[start:end],
                input_ids=batch.input_ids[:, a:b],
                attention_mask=batch.attention_mask[:, a:b],
                packed=True,
            )
        )
    return pieces


# --------------------------------------------------------------------------- sort groups

# A window's lead group: its longest texts, 1/LEAD_FRACTION of its characters (see `sort_groups`).
LEAD_FRACTION = 8


def sort_groups(
    texts: Sequence[str], windows: Sequence[tuple[int, int, int]], bands: int = 2
) -> list[tuple[int, np.ndarray, bool]]:
    """The groups each window is tokenized, sorted and batched in: (window, indices of
    its texts in the window, last group of the window).

    By default two groups per window of 2+ texts: its longest texts by characters, taken
    until they hold 1/LEAD_FRACTION of its characters (the text that crosses it
    included), then the rest (a window whose lead would be all of it stays one group).
    The device runs the first while a helper thread tokenizes the second, so a job does
    not wait for a whole window's tokenization before its first batch. Characters
    follow tokens closely enough that the groups are bands of token length: batches
    cut from each are padded about as little as from the whole window sorted at once
    (0.993-1.016x the tokens, benchmarks/bench_bucket_padding.py).

    `bands` > 2 cuts the rest, longest first, into bands - 1 groups of about equal
    characters (each cut after the text that crosses it; empty groups dropped), so
    that the device can start on each as it is tokenized instead of waiting for the
    whole rest (benchmarks/bench_first_batch.py --bands compares them).

    Every window is cut the same way, whichever of them a resumed run has left, so
    batching stays a pure function of (window texts, params)."""
    if bands < 2:
        raise ValueError(f"bands must be at least 2, not {bands}")
    groups = []
    for w, a, b in windows:
        chars = np.fromiter((len(texts[i]) for i in range(a, b)), dtype=np.int64, count=b - a)
        order = np.argsort(-chars, kind="stable")
        running = np.cumsum(chars[order])
        lead = int(np.searchsorted(running, chars.sum() / LEAD_FRACTION)) + 1
        if lead >= b - a:
            groups.append((w, np.arange(b - a), True))
            continue
        cuts = [0, lead]
        rest = running[-1] - running[lead - 1]
        for k in range(1, bands - 1):  # after the text that crosses k/(bands-1) of the rest's characters
            cut = int(np.searchsorted(running, running[lead - 1] + rest * k / (bands - 1))) + 1
            if cuts[-1] < cut < b - a:
                cuts.append(cut)
        cuts.append(b - a)
        for s, e in pairwise(cuts):
            groups.append((w, np.sort(order[s:e]), e == b - a))
    return groups
