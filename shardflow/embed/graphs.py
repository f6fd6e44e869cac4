"""CUDA graphs of the padded forward, one per batch shape (`embedding.cuda_graphs`).

Why: on an H200 the Qwen3-0.6B shape's GPU sat idle for about 12 % of an encode while
the host queued small kernels (liger's RMSNorm wrapper alone was 36 % of the host's op
time; docs/gpu.md, stop 23). A graph replays a whole forward's kernels in one launch,
so the host's cost per batch is two small copies, one launch and one copy out.

How, per shape [rows, width] of a full batch (bucket widths make shapes repeat):
1. its first batch runs eagerly, as without graphs (that run also builds whatever a
   kernel builds on first use at that shape: Triton specialisations, cuDNN plans);
2. right after, the forward is captured (recorded, not run) on a side stream into a
   memory pool all the graphs share, the eager batch's device tensors kept as the
   graph's static inputs. A capture costs host time, while the device still runs step
   1's kernels; the job's first capture also runs one eager forward on the side stream
   (its set-up), and the checked ones below a replay and a sync;
3. later batches of that shape copy their tokens into the static inputs and replay.
   The output buffer is the graph's own and is overwritten by the next replay: a
   replay returns a copy.

The first VERIFY_SHAPES captures (and again the first after a drop) are checked: the graph replays step 1's batch and its
embeddings must match the eager ones (cosine >= VERIFY_COSINE per row); a model that
keeps tensors between forwards (which a replay would not refresh) fails here. A failed
capture or check turns graphs off for the rest of the job, with the reason logged and
in the job's stats; the batches run eagerly as before.

Nothing here is CUDA-specific but `CudaBackend`: tests drive `ShapeGraphs` on the CPU
with a backend whose "graph" calls the function again on its static inputs.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

# Captures whose first replay is checked against the eager output of the same batch.
VERIFY_SHAPES = 3
VERIFY_COSINE = 0.9999
# At most this many graphs per job; shapes beyond run eagerly (bucket widths keep a
# 1,024-token model under 50 shapes per token budget; see core.batching.graph_length_buckets).
MAX_GRAPHS = 256

Forward = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


class CudaBackend:
    """Capture and replay with torch.cuda.CUDAGraph, all graphs in one memory pool."""

    def __init__(self, device: torch.device):
        self.device = device
        self.stream = torch.cuda.Stream(device)
        self.pool = torch.cuda.graph_pool_handle()
        self.warm = False

    def capture(self, fn: Forward, ids: torch.Tensor, mask: torch.Tensor) -> tuple[Any, torch.Tensor]:
        main = torch.cuda.current_stream(self.device)
        self.stream.wait_stream(main)
        try:
            with torch.cuda.stream(self.stream):
                if not self.warm:
                    # Once per job, an eager forward on the capture stream: what a library
                    # sets up per stream on first use (cuBLAS workspaces) is set up outside
                    # the capture.
                    fn(ids, mask)
                    self.warm = True
                graph = torch.cuda.CUDAGraph()
                # thread_local: the producer thread pins host memory meanwhile, which the
                # default ("global") mode would count as an error in the capture.
                graph.capture_begin(pool=self.pool, capture_error_mode="thread_local")
                try:
                    out = fn(ids, mask)
                except BaseException:
                    try:
                        graph.capture_end()
                    except RuntimeError:
                        pass  # the capture was already invalidated; the first error is the one to report
                    raise
                graph.capture_end()
        finally:
            main.wait_stream(self.stream)
        return graph, out

    def replay(self, graph: Any) -> None:
        graph.replay()

    def release(self) -> None:
        # Before graphs are dropped: none of them may still be running.
        torch.cuda.synchronize(self.device)

    def free(self) -> None:
        # After they are dropped: their pool's memory back to the device, a new pool next.
        torch.cuda.empty_cache()
        self.pool = torch.cuda.graph_pool_handle()


@dataclass
class _Graph:
    graph: Any
    ids: torch.Tensor
    mask: torch.Tensor
    out: torch.Tensor


class ShapeGraphs:
    """A job's graphs, by batch shape; see the module's docstring.

    `fn(ids, mask)` is the forward a graph records: device tensors in, embeddings out,
    nothing that reads values back to the host."""

    def __init__(self, fn: Forward, backend: Any, logger: logging.Logger):
        self.fn = fn
        self.backend = backend
        self.logger = logger
        self.graphs: dict[tuple[int, ...], _Graph] = {}
        self.off_reason = ""  # set when a capture or a check failed: no graphs after
        self.checks_left = VERIFY_SHAPES  # captures still to check (again after a drop)
        self.captured = 0
        self.replays = 0
        self.capture_seconds = 0.0

    @property
    def active(self) -> bool:
        return not self.off_reason

    def ready(self, shape: tuple[int, ...]) -> bool:
        """Whether batches of this shape replay a graph."""
        return shape in self.graphs

    def replay(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The embeddings of a batch (host tensors, pinned on CUDA) from the graph of its
        shape (`ready`)."""
        g = self.graphs[tuple(ids.shape)]
        g.ids.copy_(ids, non_blocking=True)
        g.mask.copy_(mask, non_blocking=True)
        self.backend.replay(g.graph)
        self.replays += 1
        return g.out.clone()

    def capture(self, ids: torch.Tensor, mask: torch.Tensor, eager_out: torch.Tensor) -> None:
        """Record the forward for the shape of `ids` (the device tensors of the batch that
        just ran eagerly, kept as the graph's inputs; `eager_out` its embeddings)."""
        shape = tuple(ids.shape)
        if not self.active or shape in self.graphs or len(self.graphs) >= MAX_GRAPHS:
            return
        t0 = time.perf_counter()
        try:
            graph, out = self.backend.capture(self.fn, ids, mask)
            if self.checks_left > 0:
                self.checks_left -= 1
                self.backend.replay(graph)
                cos = _row_agreement(out, eager_out)
                if not cos >= VERIFY_COSINE:
                    self._turn_off(f"the graph of shape {_shape(shape)} replayed its batch to cosine {cos:.6f} of the eager output")
                    return
        except (RuntimeError, torch.OutOfMemoryError) as exc:
            self._turn_off(f"capturing shape {_shape(shape)} failed: {type(exc).__name__}: {exc}")
            return
        finally:
            self.capture_seconds += time.perf_counter() - t0
        self.graphs[shape] = _Graph(graph, ids, mask, out)
        self.captured += 1

    def drop(self) -> None:
        """Drop every graph and the memory they hold (an out-of-memory back-off calls
        this: the graphs' shapes are not the new budget's, and their pool holds a
        batch's activations). Later full batches capture again."""
        if self.graphs:
            self.backend.release()
            self.graphs.clear()
            self.backend.free()
            self.checks_left = VERIFY_SHAPES  # a new pool: check its first captures again

    def _turn_off(self, reason: str) -> None:
        self.off_reason = reason
        self.drop()
        self.logger.warning("CUDA graphs: off for the rest of the job (%s); batches run eagerly", reason)


def _row_agreement(got: torch.Tensor, want: torch.Tensor) -> float:
    """The lowest cosine between matching rows; a row that is zero in both (a text of
    nothing but an excluded prompt) agrees."""
    got, want = got.float(), want.float()
    cos = torch.nn.functional.cosine_similarity(got, want, dim=-1)
    both_zero = (got.abs().amax(dim=-1) == 0) & (want.abs().amax(dim=-1) == 0)
    return torch.where(both_zero, torch.ones_like(cos), cos).min().item()


def _shape(shape: tuple[int, ...]) -> str:
    return "x".join(map(str, shape))
