"""Exact top-k search over a memory-mapped document matrix.

The document embeddings (`embeddings.npy`, float32 or float16, one row per
document) are read one block of rows at a time, so memory stays at
`block_size x dim` for the documents plus `query_block_size x block_size` for
one score block, whatever the corpus size. Each block is scored against the
queries with one matrix product, reduced to its own top k, and merged into a
running top k per query.

Ranking order is score descending, then document row ascending. That order is
exact, not "whatever topk returned": `torch.topk` picks arbitrarily among equal
scores at the k-th place, so rows where a tie straddles the cut are redone by
hand (see `_block_topk`). Blocked search therefore returns exactly what sorting
the block's scores would. The scores themselves come from matrix products whose
kernels depend on the block's shape (a last, partial block; another block size;
the faiss backend), so one (query, document) score can differ in its last float32
bit between block sizes: documents that tie exactly (duplicates) can then order
differently. The same settings give the same ranking, run after run.

Scores are dot products. For cosine similarity the vectors must be unit length
(sentence-transformers models with a Normalize layer already are); pass
`normalize=True` to normalise queries and each document block on the fly.
A query or document vector that holds NaN or infinity is refused, naming its file, row
and id: its scores are NaN (or infinite), which the backends would rank apart (torch
counted a NaN score -1, as MTEB does; faiss's heap never keeps one, so the document was
left out). Documents are checked block by block as they are read. A NaN score from
finite vectors (products past float32's range: a dot-product model's vectors of
magnitude near 1e19) still counts as -1 in the torch backend, and faiss leaves it out.

ArguAna protocol: MTEB drops a hit whose document id equals the query id (the
queries are also in the corpus). `drop_identical_ids=True` searches k plus the
number of such twins, drops them, and still returns k hits per query.
"""

from __future__ import annotations

import math
import os
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import torch

BACKENDS = ("torch", "faiss")
# Query vectors are copied to float32, checked and normalised this many bytes at a time
# on their way to where they are scored (the device's one matrix of them): the job's host
# memory holds one such slice, not a second and third copy of every query.
QUERY_COPY_BYTES = 256 * 2**20
# The memory a slice of queries searched in one pass over the corpus (task search's, a
# neighbours job's chunk) may take where it is scored: a GPU's (next to a corpus block and
# a score block, 256 MiB each at dim 1,024), or a CPU job's own (`slice_queries`).
SLICE_BYTES = {"cuda": 4 * 2**30, "cpu": 2**30}
HIT_BYTES = 24  # a kept hit: its score and row while searching, and their host copies
QUERY_BLOCK = 1_024  # exact_search's default query_block_size, which a slice is a multiple of
_NO_DOC = torch.iinfo(torch.int64).max  # padding row: sorts after every real row


@dataclass(frozen=True)
class TopK:
    """Search hits, best first.

    indices: (n_queries, k) int64 document rows; -1 pads a query with fewer hits.
    scores:  (n_queries, k) float32; -inf where indices is -1.
    """

    indices: np.ndarray
    scores: np.ndarray


def slice_queries(device: str, dim: int, k: int) -> int:
    """The queries one pass over the corpus searches (exact_search's `query_rows`): as
    many as SLICE_BYTES of the device's memory holds (dim float32s and k hits each), a
    multiple of QUERY_BLOCK, so each query is scored in the block a search of all of
    them at once puts it in (the same float sums and ties); one block at least. On a GPU
    the budget is at most half the memory free on it now: a small GPU or a MIG slice (5
    GB) holds the slice beside a corpus block, its scores and the CUDA context."""
    if device == "cpu":
        budget = SLICE_BYTES["cpu"]
    else:
        budget = min(SLICE_BYTES["cuda"], torch.cuda.mem_get_info(torch.device(device))[0] // 2)
    return slice_rows(budget, dim, k)


def slice_rows(budget: int, dim: int, k: int) -> int:
    """The queries a slice of `budget` bytes holds (dim float32s and k hits each), in whole
    query blocks, one at least (`slice_queries`; make estimate's passes over a corpus)."""
    fits = budget // (4 * dim + HIT_BYTES * k)
    return max(QUERY_BLOCK, fits // QUERY_BLOCK * QUERY_BLOCK)


def load_embeddings(path: str | os.PathLike) -> np.ndarray:
    """Open an `.npy` embedding matrix memory-mapped, read only."""
    arr = np.load(path, mmap_mode="r")
    if arr.ndim != 2:
        raise ValueError(f"{path}: expected a 2-D embedding matrix, found shape {arr.shape}")
    return arr


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def search_device(backend: str, device: str | None) -> str:
    """Where exact_search scores with `backend` on the job's `device`: the CPU for faiss,
    whatever the job was given; None or auto: CUDA when available, else the CPU. A CUDA
    device this process does not have is an error naming it (core.devices.resolve_device);
    the device is returned as given (auto's "cuda" stays "cuda"), as jobs record it."""
    from shardflow.core.devices import resolve_device

    device = "cpu" if backend == "faiss" else (device or "auto")
    device = default_device() if device == "auto" else device
    if device != "cpu":
        resolve_device(device)
    return device


def exact_search(
    queries: np.ndarray | str | os.PathLike,
    docs: np.ndarray | str | os.PathLike,
    k: int,
    *,
    block_size: int = 65_536,
    query_block_size: int = QUERY_BLOCK,
    normalize: bool = False,
    device: str | None = None,
    backend: str = "torch",
    query_ids: Sequence[str] | None = None,
    doc_ids: Sequence[str] | pa.Array | None = None,
    drop_identical_ids: bool = False,
    query_rows: range | None = None,
) -> TopK:
    """Top-k documents for every query by exact inner product.

    queries: (n_queries, dim) array or `.npy` path; docs: (n_docs, dim) array or
    `.npy` path (opened memory-mapped). A vector holding NaN or infinity is a
    ValueError naming the file (where a path was given), the row and, where `query_ids`
    / `doc_ids` are given, the id. Returns `min(k, n_docs)` hits per query, ordered by
    score descending then document row ascending. `device` defaults to CUDA when
    available. `backend="faiss"` scores blocks with `faiss.IndexFlatIP` instead
    of torch (faiss must be installed; equal scores at a block's k-th place go to the
    lowest rows there too). With `drop_identical_ids`, `query_ids` and `doc_ids`
    are required and a hit whose doc id equals its query id is removed. `query_rows`:
    search only these rows of `queries` (a slice of a large file), whose errors name
    their rows (and `query_ids`, the whole file's) in the whole file.
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    query_source, doc_source = "query vectors", "document vectors"  # named in an error, or their files
    if isinstance(queries, (str, os.PathLike)):
        query_source, queries = os.fspath(queries), load_embeddings(queries)
    if isinstance(docs, (str, os.PathLike)):
        doc_source, docs = os.fspath(docs), load_embeddings(docs)
    queries = np.asarray(queries)
    first_query = 0
    if query_rows is not None:
        if drop_identical_ids or query_rows.step != 1:
            raise ValueError("query_rows: a range of step 1, without drop_identical_ids")
        queries, first_query = queries[query_rows.start : query_rows.stop], query_rows.start
    _check_shapes(queries, docs, k, block_size, query_block_size)
    n_queries, n_docs = queries.shape[0], docs.shape[0]
    k_out = min(k, n_docs)

    twins = None
    k_search = k_out
    if drop_identical_ids:
        if query_ids is None or doc_ids is None:
            raise ValueError("drop_identical_ids needs query_ids and doc_ids")
        if len(query_ids) != n_queries or len(doc_ids) != n_docs:
            raise ValueError(
                f"{len(query_ids)} query ids / {len(doc_ids)} doc ids for "
                f"{n_queries} queries / {n_docs} docs"
            )
        twins = _twin_rows(query_ids, doc_ids)
        k_search = min(k_out + twins.shape[1], n_docs)

    def read_block(start: int, stop: int) -> np.ndarray:
        block = _read_block(docs, start, stop)
        refuse_non_finite(block, start, "document", doc_source, doc_ids)
        return block

    if backend == "faiss":
        q = np.empty(queries.shape, dtype=np.float32)
        for first, part in _query_parts(queries, normalize, query_source, query_ids, first_query):
            q[first : first + len(part)] = part
        scores, indices = _search_faiss(q, n_docs, read_block, k_search, block_size, query_block_size, normalize)
    else:
        dev = torch.device(device or default_device())
        q_t = torch.empty(queries.shape, dtype=torch.float32, device=dev)
        for first, part in _query_parts(queries, normalize, query_source, query_ids, first_query):
            q_t[first : first + len(part)] = torch.from_numpy(part)
        scores, indices = _search_torch(q_t, n_docs, read_block, k_search, block_size, query_block_size, normalize)
    if twins is not None:
        scores, indices = _drop_twins(scores, indices, twins, k_out)
    return TopK(indices=indices, scores=scores)


def to_run(
    hits: TopK, query_ids: Sequence[str], doc_ids: Sequence[str]
) -> dict[str, dict[str, float]]:
    """Map hits to `{query id: {doc id: score}}`, each inner dict in rank order.

    This is the `results` shape MTEB and pytrec_eval take; padding (-1) is skipped.
    """
    return dict(LazyRun(hits, query_ids, doc_ids).items())


class LazyRun(Mapping[str, dict[str, float]]):
    """`to_run`'s run, each query's ranking made when it is read and not kept.

    Held whole, MS MARCO dev's run (6,980 queries x 1,000 hits) took 0.5 GB of Python
    dicts and floats (0.7 GB while it was made), while scoring and writing it need one
    query at a time. `doc_ids` is a sequence of str or a pyarrow array
    (`core.columns.read_id_array`), of which only a query's hit rows become str. A
    query read twice is made twice; the same hits give the same rankings, in the same
    order (`to_run` is this, made whole).
    """

    def __init__(self, hits: TopK, query_ids: Sequence[str], doc_ids) -> None:
        if len(query_ids) != hits.indices.shape[0]:
            raise ValueError(f"{len(query_ids)} query ids for {hits.indices.shape[0]} result rows")
        if hits.scores.shape != hits.indices.shape:
            raise ValueError(f"scores of shape {hits.scores.shape} for indices of shape {hits.indices.shape}")
        self._hits, self._doc_ids = hits, doc_ids
        # As a dict filled in query order: a repeated query id keeps its first place and
        # its last row's ranking.
        self._row = {qid: i for i, qid in enumerate(query_ids)}

    def __getitem__(self, qid: str) -> dict[str, float]:
        i = self._row[qid]
        rows, scores = self._hits.indices[i], self._hits.scores[i]
        kept = rows >= 0
        if isinstance(self._doc_ids, (pa.Array, pa.ChunkedArray)):
            ids = self._doc_ids.take(rows[kept]).to_pylist()
        else:
            ids = [self._doc_ids[row] for row in rows[kept].tolist()]
        return dict(zip(ids, scores[kept].tolist(), strict=True))

    def __contains__(self, qid: object) -> bool:
        return qid in self._row  # Mapping's own would make the ranking

    def __iter__(self) -> Iterator[str]:
        return iter(self._row)

    def __len__(self) -> int:
        return len(self._row)


# --- checks and small helpers --------------------------------------------------


def _check_shapes(queries, docs, k: int, block_size: int, query_block_size: int) -> None:
    if queries.ndim != 2 or docs.ndim != 2:
        raise ValueError(f"queries and docs must be 2-D, got {queries.shape} and {docs.shape}")
    if queries.shape[1] != docs.shape[1]:
        raise ValueError(
            f"dimension mismatch: queries have {queries.shape[1]}, docs have {docs.shape[1]}"
        )
    if k < 1 or block_size < 1 or query_block_size < 1:
        raise ValueError("k, block_size and query_block_size must be positive")
    if docs.dtype not in (np.float16, np.float32, np.float64):
        raise ValueError(f"docs must be float16/float32/float64, got {docs.dtype}")


def _query_parts(
    queries: np.ndarray, normalize: bool, source: str, ids, offset: int = 0
) -> Iterator[tuple[int, np.ndarray]]:
    """(first row, rows) of `queries` QUERY_COPY_BYTES at a time: float32 copies (writable
    for torch, also from a memory-mapped file), refused where not finite (naming the row
    in `source`, where `queries` start at row `offset`), normalised where asked. Row by
    row as for the whole matrix at once: the same bytes whatever the slicing."""
    step = max(1, QUERY_COPY_BYTES // (4 * max(queries.shape[1], 1)))
    for first in range(0, queries.shape[0], step):
        part = np.array(queries[first : first + step], dtype=np.float32)
        refuse_non_finite(part, offset + first, "query", source, ids)
        yield first, _normalize_np(part) if normalize else part


def _normalize_np(x: np.ndarray) -> np.ndarray:
    """`x` (float32, a copy of its own) with each row divided by max(its norm, 1e-12), as
    torch.nn.functional.normalize does, in place: a 256 MiB part of queries took two more
    of its size (the quotient and a float32 copy of it), the same bits."""
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return np.divide(x, np.maximum(norms, 1e-12), out=x)


def _read_block(docs: np.ndarray, start: int, stop: int) -> np.ndarray:
    # A fresh float32 copy: bounded by the block, writable for torch, and
    # float16 is upcast here because CPU matmul in float16 is slow and inexact.
    return np.array(docs[start:stop], dtype=np.float32, copy=True)


def refuse_non_finite(vectors: np.ndarray, first_row: int, side: str, source: str, ids) -> None:
    """A ValueError naming the first row of `vectors` (row `first_row` of `source`) that
    holds NaN or infinity, with its id where `ids` (a sequence of str or a pyarrow array
    of the whole file) has it. Checked in float32, as searched."""
    finite = np.isfinite(vectors).all(axis=1)
    if finite.all():
        return
    row = first_row + int(np.argmin(finite))
    name = ""
    if ids is not None and row < len(ids):
        found = ids[row].as_py() if isinstance(ids, (pa.Array, pa.ChunkedArray)) else ids[row]
        name = f", {side} id {found!r},"
    raise ValueError(
        f"{source}: row {row} (counting from 0){name} holds NaN or infinity: it has no score to rank by "
        f"(its scores are NaN, which the torch backend counted -1 and faiss left out); the {side} embeddings "
        f"are broken there"
    )


def _twin_rows(query_ids: Sequence[str], doc_ids) -> np.ndarray:
    """(n_queries, m) rows whose doc id equals the query id, padded with -2. `doc_ids`: a
    sequence of str, or a pyarrow string array (core.columns.read_id_array), of which only
    the rows that hold a query id become Python strings."""
    wanted = set(query_ids)
    if isinstance(doc_ids, pa.Array):
        import pyarrow.compute as pc

        held = pc.is_in(doc_ids, value_set=pa.array(sorted(wanted), doc_ids.type))
        rows = np.flatnonzero(held.to_numpy(zero_copy_only=False))
        pairs = zip(rows.tolist(), doc_ids.take(pa.array(rows)).to_pylist(), strict=True)
    else:
        pairs = enumerate(doc_ids)
    rows_by_id: dict[str, list[int]] = defaultdict(list)
    for row, doc_id in pairs:
        if doc_id in wanted:
            rows_by_id[doc_id].append(row)
    width = max((len(r) for r in rows_by_id.values()), default=0)
    twins = np.full((len(query_ids), width), -2, dtype=np.int64)
    for i, qid in enumerate(query_ids):
        rows = rows_by_id.get(qid, ())
        twins[i, : len(rows)] = rows
    return twins


def _drop_twins(
    scores: np.ndarray, indices: np.ndarray, twins: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """Remove hits that are a query's twin, keep order, return k columns (padded)."""
    drop = (indices[:, :, None] == twins[:, None, :]).any(axis=2) | (indices < 0)
    order = np.argsort(drop, axis=1, kind="stable")  # kept hits first, in rank order
    indices = np.take_along_axis(indices, order, axis=1)[:, :k].copy()
    scores = np.take_along_axis(scores, order, axis=1)[:, :k].copy()
    dropped = np.take_along_axis(drop, order, axis=1)[:, :k]
    indices[dropped] = -1
    scores[dropped] = -np.inf
    return scores, indices


# --- torch backend ---------------------------------------------------------------


def _search_torch(
    q_t: torch.Tensor,
    n_docs: int,
    read_block: Callable[[int, int], np.ndarray],
    k: int,
    block_size: int,
    query_block_size: int,
    normalize: bool,
) -> tuple[np.ndarray, np.ndarray]:
    dev = q_t.device
    n_queries = q_t.shape[0]
    best_s = torch.full((n_queries, k), -torch.inf, dtype=torch.float32, device=dev)
    best_i = torch.full((n_queries, k), _NO_DOC, dtype=torch.int64, device=dev)
    with torch.inference_mode():
        for start in range(0, n_docs, block_size):
            stop = min(start + block_size, n_docs)
            block = torch.from_numpy(read_block(start, stop)).to(dev)
            if normalize:
                block = torch.nn.functional.normalize(block, dim=1)
            kb = min(k, stop - start)
            for qs in range(0, n_queries, query_block_size):
                qe = min(qs + query_block_size, n_queries)
                s = q_t[qs:qe] @ block.T
                s.nan_to_num_(nan=-1.0, posinf=math.inf, neginf=-math.inf)
                cand_s, cand_i = _block_topk(s, kb)
                best_s[qs:qe], best_i[qs:qe] = _merge(
                    best_s[qs:qe], best_i[qs:qe], cand_s, cand_i + start, k
                )
    return _finish(best_s, best_i)


def _block_topk(s: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Top k columns per row of `s`, ties at the cut going to the lowest column.

    torch.topk is exact about the k-th value but not about which of several
    equal values it keeps. Asking for k + 1 shows where that matters: a row
    whose (k+1)-th value equals its k-th has a tie across the cut, and only
    those rows are recomputed: keep everything above the k-th value, then the
    lowest-column entries equal to it until k are kept.
    """
    if k >= s.shape[1]:
        return torch.topk(s, k, dim=1)  # every column is kept; _merge orders them
    vals, idx = torch.topk(s, k + 1, dim=1, largest=True, sorted=True)
    ambiguous = torch.nonzero(vals[:, k - 1] == vals[:, k]).squeeze(1)
    vals, idx = vals[:, :k].contiguous(), idx[:, :k].contiguous()
    if ambiguous.numel():
        sub = s[ambiguous]
        kth = vals[ambiguous, k - 1 :]
        above = sub > kth
        equal = sub == kth
        free = (k - above.sum(dim=1)).unsqueeze(1)
        keep = above | (equal & (torch.cumsum(equal, dim=1, dtype=torch.int32) <= free))
        # nonzero is row-major, so each row's k kept columns come out ascending.
        cols = torch.nonzero(keep)[:, 1].view(-1, k)
        idx[ambiguous] = cols
        vals[ambiguous] = sub.gather(1, cols)
    return vals, idx


def _merge(
    s1: torch.Tensor, i1: torch.Tensor, s2: torch.Tensor, i2: torch.Tensor, k: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Best k of two candidate sets by (score descending, row ascending)."""
    s = torch.cat([s1, s2], dim=1)
    i = torch.cat([i1, i2], dim=1)
    by_row = torch.argsort(i, dim=1, stable=True)
    s, i = s.gather(1, by_row), i.gather(1, by_row)
    by_score = torch.argsort(s, dim=1, descending=True, stable=True)[:, :k]
    return s.gather(1, by_score), i.gather(1, by_score)


def _finish(best_s: torch.Tensor, best_i: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    missing = best_i == _NO_DOC
    best_i = best_i.masked_fill(missing, -1)
    best_s = best_s.masked_fill(missing, -torch.inf)
    return best_s.cpu().numpy(), best_i.cpu().numpy()


# --- faiss backend -----------------------------------------------------------------


def _import_faiss():
    try:
        import faiss  # noqa: PLC0415 - optional dependency, imported only when chosen
    except ImportError as exc:
        raise ImportError(
            "backend='faiss' needs the faiss package (pip install faiss-cpu, or "
            "faiss-gpu); use backend='torch' otherwise"
        ) from exc
    return faiss


def _search_faiss(
    q: np.ndarray,
    n_docs: int,
    read_block: Callable[[int, int], np.ndarray],
    k: int,
    block_size: int,
    query_block_size: int,
    normalize: bool,
) -> tuple[np.ndarray, np.ndarray]:
    faiss = _import_faiss()
    n_queries, dim = q.shape
    best_s = torch.full((n_queries, k), -torch.inf, dtype=torch.float32)
    best_i = torch.full((n_queries, k), _NO_DOC, dtype=torch.int64)
    q = np.ascontiguousarray(q)
    for start in range(0, n_docs, block_size):
        stop = min(start + block_size, n_docs)
        block = read_block(start, stop)
        if normalize:
            block = _normalize_np(block)
        index = faiss.IndexFlatIP(dim)
        index.add(block)
        dist, rows = _faiss_topk(index, q, min(k, stop - start), stop - start, query_block_size)
        cand_s = torch.from_numpy(np.where(np.isnan(dist), -1.0, dist).astype(np.float32))
        cand_i = torch.from_numpy(rows.astype(np.int64))
        cand_i = torch.where(cand_i < 0, torch.full_like(cand_i, _NO_DOC - start), cand_i)
        best_s, best_i = _merge(best_s, best_i, cand_s, cand_i + start, k)
    return _finish(best_s, best_i)


def _faiss_topk(
    index, q: np.ndarray, k: int, n_rows: int, query_block_size: int
) -> tuple[np.ndarray, np.ndarray]:
    """Top k of the index's `n_rows` rows per query, ties at the cut going to the lowest row.

    faiss is exact about the k-th score but keeps whichever of the documents tied at it
    its heap met (not the lowest rows, and not the same ones for another block size). As
    in `_block_topk`, one hit more shows where that matters: the queries whose (k+1)-th
    score equals their k-th are searched again, deeper (twice as deep each time) until
    the deepest hit scores below the k-th or the whole block is in, and cut by score
    descending, then row ascending. They go query_block_size // 8 at a time: a hit held
    here takes 24 bytes (score, row, sort order), torch's score block 4 a score, so the
    two bound memory alike.
    """
    if k >= n_rows:
        return index.search(q, k)  # every row is kept; _merge orders them
    dist, rows = index.search(q, k + 1)
    tied = np.flatnonzero(dist[:, k - 1] == dist[:, k])
    dist, rows = np.ascontiguousarray(dist[:, :k]), np.ascontiguousarray(rows[:, :k])
    step = max(1, query_block_size // 8)
    for first in range(0, len(tied), step):
        some = tied[first : first + step]
        width = min(2 * k + 1, n_rows)
        while True:
            d, r = index.search(q[some], width)
            if width == n_rows or not (d[:, width - 1] == d[:, k - 1]).any():
                break
            width = min(2 * width, n_rows)
        r = np.where(r < 0, n_rows, r)  # no hit (a NaN score): after every row, and back to -1 below
        order = np.lexsort((r, -d), axis=-1)[:, :k]
        dist[some] = np.take_along_axis(d, order, axis=1)
        kept = np.take_along_axis(r, order, axis=1)
        rows[some] = np.where(kept == n_rows, -1, kept)
    return dist, rows
