"""Out-of-memory back-off for batched GPU work (embedding, generation; training between attempts).

A batch that does not fit is split in halves and the token budget halved for the
rest of the run; a single row that does not fit even alone raises `TooLargeError`
naming its row. Batch shapes then differ from an undisturbed run, so the last bits
of the output can too (documented by each caller).

    backoff = OomBackoff(token_budget=32768, device=device, logger=log)
    for batch, out in backoff.run(batch, forward, split):
        ...

`forward(batch)` does the work; `split(batch, rows)` cuts a batch into pieces of
at most `rows` rows (`shardflow.core.batching.split_batch` for collated batches).

Training cannot split a step in flight (under torchrun every rank would have to agree),
so it backs off between attempts instead: the attempt that ran out of memory records
its micro-batch (shardflow.core.failures, kind `out_of_memory`), and the next one trains
with `smaller_micro_batch` windows per forward pass and proportionally more of them
(shardflow.train.trainer).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

import torch

OOM_ERRORS = (getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError),)
# What a row too large alone can do, unless the caller names its own keys (`OomBackoff.run`).
LOWER = "lower max_length or use a device with more memory"

T = TypeVar("T")


class TooLargeError(RuntimeError):
    """One row does not fit in device memory, even in a batch of its own."""

    def __init__(self, message: str, row: int, n_tokens: int):
        super().__init__(message)
        self.row = row
        self.n_tokens = n_tokens


class OomBackoff:
    """Runs batches, halving them (and the budget) when the device runs out of memory."""

    def __init__(
        self,
        token_budget: int,
        device: torch.device,
        logger: logging.Logger | None = None,
        on_oom: Callable[[], None] | None = None,
    ):
        self.token_budget = token_budget
        self.device = device
        self.logger = logger or logging.getLogger(__name__)
        self.backoffs = 0
        # Called on out-of-memory before the cache is emptied and the halves run: what
        # the caller holds that empty_cache cannot free (the engine's CUDA graphs).
        self.on_oom = on_oom

    def run(
        self,
        batch: Any,
        forward: Callable[[Any], T],
        split: Callable[[Any, int], list[Any]],
        *,
        row_offset: int = 0,
        noun: str = "row",
        lower: str = LOWER,
    ) -> list[tuple[Any, T]]:
        """[(piece, forward(piece)), ...] covering `batch`'s rows, in order.

        `batch` has `input_ids` [n, width], `rows` and `lengths` (a collated
        `shardflow.core.batching.Batch`); `row_offset + rows[k]` names a row in errors.
        `lower`: what the error for a row too large alone advises (the caller's config keys).
        """
        n, width = batch.input_ids.shape
        if n > 1 and n * width > self.token_budget:
            # The budget dropped after this batch was planned: cut it to the budget first.
            rows = max(1, self.token_budget // width)
            return [
                r for piece in split(batch, rows) for r in self._attempt(piece, forward, split, row_offset, noun, lower)
            ]
        return self._attempt(batch, forward, split, row_offset, noun, lower)

    def _attempt(self, batch, forward, split, row_offset: int, noun: str, lower: str) -> list[tuple[Any, Any]]:
        failed = False
        try:
            out = forward(batch)
        except OOM_ERRORS:
            failed = True  # handled outside the except block, so the frames holding activations are freed
        if not failed:
            return [(batch, out)]
        if self.on_oom is not None:
            self.on_oom()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        self.backoffs += 1
        n, width = batch.input_ids.shape
        if n == 1:
            row, n_tokens = row_offset + int(batch.rows[0]), int(batch.lengths[0])
            raise TooLargeError(
                f"{noun} {row} ({n_tokens} tokens) does not fit in {self.device} memory even alone; {lower}",
                row=row,
                n_tokens=n_tokens,
            )
        self.token_budget = max(1, min(self.token_budget, n * width) // 2)
        self.logger.warning(
            "out of memory on a batch of %d x %d tokens: splitting it, token budget now %d", n, width, self.token_budget
        )
        half = (n + 1) // 2
        return [
            r for piece in split(batch, half) for r in self._attempt(piece, forward, split, row_offset, noun, lower)
        ]


def smaller_micro_batch(batch_size: int, failed: int) -> int | None:
    """The micro-batch to try after one of `failed` windows ran out of memory: the largest
    divisor of `batch_size` (the configured micro-batch) at most half of `failed`, so that
    each configured micro-batch is cut into equal pieces and a step trains on the same
    windows (32 -> 16 -> 8 ...; 12 -> 6 -> 3 -> 1); None where `failed` is 1 already."""
    if failed <= 1:
        return None
    return max(d for d in range(1, min(batch_size, failed // 2) + 1) if batch_size % d == 0)
