"""A corpus's own nearest neighbours (task `neighbours`), and its near-duplicates.

chunk  Each chunk's documents are searched against the whole corpus's embeddings,
       exactly and by the model's similarity (search.exact_search: blocked, so memory
       stays bounded whatever the corpus), the document itself left out: its k
       nearest, best first, ties by corpus row. One row a (document, neighbour):
       id, rank (1 = nearest), neighbour, score, and both rows of embeddings.npy.
       A chunk is searched a slice at a time (search.slice_queries: its vectors and their
       running best where they are scored, up to SLICE_BYTES of a GPU's memory or of a
       CPU job's), so a job's memory stays bounded by the slice, not the chunk: each
       slice is one pass over the corpus's matrix (a chunk of a million documents of dim
       1,024: two on a GPU).
merge  The chunks' tables into one (neighbours.parquet, chunk order), and from them the
       near-duplicates: every pair whose score is at least `duplicate_threshold`, once
       (near_duplicates.parquet), and their groups (duplicate_groups.parquet). The chunk
       tables are read a batch of rows at a time; what grows is numpy arrays of about 20
       bytes a document and, at the peak, about 130 bytes a near-duplicate pair.

The threshold: by default (`duplicate_threshold: null`) 0.95 for a cosine model; a
dot-product model's scores have no fixed scale, so it must be given, and the merge stops
until it is, naming the nearest scores' spread. A score within SLACK below the threshold
counts: the cosine of two identical vectors comes out of float32 normalising and summing
anywhere in 1 +- 7e-7 at dim 384, so a threshold of 1 finds every pair of identical
vectors. Identical texts embedded in different batches in half precision (bf16, the
default on CUDA) differ more (a cosine of 0.99998 measured on the CPU): for exact
duplicate texts, 0.9995 or a hash of the texts.

Groups are single-linkage: a~b and b~c put a, b and c in one group, even where a and c
are further apart than the threshold; each group is named by its first document in
corpus order, the one a deduplication keeps (`keep`), so dropping every other member
leaves one document a group. Only pairs within a document's k neighbours are seen: a
document whose k neighbours all reach the threshold may have more twins than k shows,
which the summary counts (`saturated`) and the job's log warns of, naming the first.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from shardflow.core.atomic import atomic_path, write_json
from shardflow.core.columns import read_id_array
from shardflow.core.fields import check_device, check_field_types, whole_floats_as_ints
from shardflow.core.figures import pyplot, save_figure
from shardflow.retrieval.pipeline import SEARCH_SIMILARITIES

log = logging.getLogger(__name__)

TABLE_SCHEMA = pa.schema(
    [
        ("id", pa.large_string()),
        ("rank", pa.int32()),
        ("neighbour", pa.large_string()),
        ("score", pa.float32()),
        ("row", pa.int64()),
        ("neighbour_row", pa.int64()),
    ]
)
PAIR_SCHEMA = pa.schema(
    [("id", pa.large_string()), ("neighbour", pa.large_string()), ("score", pa.float32()),
     ("row", pa.int64()), ("neighbour_row", pa.int64())]
)
GROUP_SCHEMA = pa.schema(
    [("id", pa.large_string()), ("row", pa.int64()), ("group", pa.large_string()), ("keep", pa.bool_())]
)
HISTOGRAM_BINS = 50
# A chunk's query vectors searched at once (float32; the search holds a copy or two).
# The default threshold of a cosine model.
COSINE_THRESHOLD = 0.95
# Below the threshold, as a share of its size (at least 1), what still reaches it: float32
# rounding (module docstring).
SLACK = 2e-6
# Rows of a chunk table the merge reads at once.
MERGE_BATCH_ROWS = 1 << 18


def check_search_params(params: Any, section: str, searched: str) -> None:
    """The checks of an exact search's parameters (NeighbourParams; batch.SearchParams):
    whole floats made ints, field types, k and block_size 1 or more, the model's similarity
    one exact_search ranks by, a known backend and device. Messages name the config
    `section`'s keys; `searched` says what ranks by the similarity ("search ranks by")."""
    whole_floats_as_ints(params)
    check_field_types(params)
    if params.k < 1:
        raise ValueError(f"{section}.k {params.k}: expected 1 or more")
    if params.block_size < 1:
        raise ValueError(f"{section}.block_size {params.block_size}: expected 1 or more")
    if params.similarity not in SEARCH_SIMILARITIES:
        raise ValueError(f"the model's similarity_fn_name is {params.similarity!r}: {searched} "
                         f"{' or '.join(SEARCH_SIMILARITIES)} (exact inner-product search)")
    from shardflow.retrieval.search import BACKENDS  # torch: the job imports it to search anyway

    if params.backend not in BACKENDS:
        raise ValueError(f"{section}.backend {params.backend!r}: expected one of {', '.join(BACKENDS)}")
    if params.device is not None:
        check_device(params.device)


@dataclass(frozen=True)
class NeighbourParams:
    k: int = 10
    duplicate_threshold: float | None = None  # None: COSINE_THRESHOLD for a cosine model
    block_size: int = 65_536
    backend: str = "torch"
    # The model's similarity (embed.stconfig.ModelSpec.similarity), as retrieval searches:
    # cosine normalises as it searches, dot takes the inner product as it is.
    similarity: str = "cosine"
    device: str | None = None  # None or auto: CUDA when available, else CPU

    def __post_init__(self) -> None:
        check_search_params(self, "neighbours", "neighbours are searched by")
        if self.duplicate_threshold is not None and not math.isfinite(self.duplicate_threshold):
            raise ValueError(f"neighbours.duplicate_threshold {self.duplicate_threshold}: expected a finite number")

    def threshold(self) -> float | None:
        """The threshold pairs are held to: the one given, else COSINE_THRESHOLD for a
        cosine model; None for a dot-product model without one (merge_neighbours stops)."""
        if self.duplicate_threshold is not None:
            return self.duplicate_threshold
        return COSINE_THRESHOLD if self.similarity == "cosine" else None


def reaches(scores: np.ndarray, threshold: float) -> np.ndarray:
    """Which float32 `scores` reach `threshold`, SLACK below it included."""
    return scores >= np.float32(threshold - SLACK * max(1.0, abs(threshold)))


def chunk_neighbours(doc_npy: str, doc_ids_path: str, rows: range, params: NeighbourParams, out_path: str) -> dict:
    """The k nearest documents of each document of `rows` (a chunk's rows of the merged
    matrix, chunk_rows), written to `out_path`; returns the job's record. The chunk's
    vectors are read from the merged matrix, not from its embed job's file, which
    `embedding.keep_chunk_vectors: false` deletes once merged."""
    from shardflow.retrieval.search import exact_search, load_embeddings, search_device, slice_queries

    start = time.time()
    device = search_device(params.backend, params.device)
    doc_ids = read_id_array(doc_ids_path)
    if rows.stop > len(doc_ids):
        raise ValueError(f"{doc_ids_path}: {len(doc_ids)} rows, but the split's manifest puts this chunk at rows "
                         f"{rows.start} to {rows.stop - 1}: the embeddings are not of this split")
    k = min(params.k, len(doc_ids) - 1)
    matrix = load_embeddings(doc_npy)
    step = slice_queries(device, matrix.shape[1], k + 1)
    with atomic_path(out_path) as tmp, pq.ParquetWriter(tmp, TABLE_SCHEMA) as writer:
        for first in range(rows.start, rows.stop, step) if k >= 1 else ():
            last = min(first + step, rows.stop)
            hits = exact_search(  # k + 1: a document's own row is among them, where it scores high
                doc_npy, doc_npy, k + 1, block_size=params.block_size, backend=params.backend, device=device,
                normalize=params.similarity == "cosine", query_ids=doc_ids, doc_ids=doc_ids,
                query_rows=range(first, last),
            )
            indices, scores = _without_own_rows(hits.indices, hits.scores, first, k)
            step_rows = max(1, MERGE_BATCH_ROWS // k)  # a table of about as many rows as the merge reads at once
            for a in range(0, last - first, step_rows):
                b = min(a + step_rows, last - first)
                writer.write_table(_hits_table(indices[a:b], scores[a:b], first + a,
                                               doc_ids.slice(first + a, b - a), doc_ids))
    end = time.time()
    return {"items": len(rows), "documents": len(doc_ids), "dim": int(matrix.shape[1]), "k": max(k, 0),
            "similarity": params.similarity, "backend": params.backend, "device": device,
            "seconds": end - start, "start_unix": start, "end_unix": end}


def _without_own_rows(indices: np.ndarray, scores: np.ndarray, first: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Each query's k best hits other than its own row (the query is row `first` + i of the
    matrix searched), in rank order. Its own row is left out where it is among the k + 1
    searched; where it is not (a dot-product model can rank another document above a
    document's own vector), the k + 1th goes. By row, not by id: no pass over the ids."""
    own = indices == np.arange(first, first + len(indices), dtype=indices.dtype)[:, None]
    order = np.argsort(own, axis=1, kind="stable")[:, :k]  # the others first, in rank order
    return np.take_along_axis(indices, order, 1), np.take_along_axis(scores, order, 1)


def _hits_table(indices: np.ndarray, scores: np.ndarray, first: int, ids: pa.Array, doc_ids: pa.Array) -> pa.Table:
    """A slice's hits (rows from `first`, their `ids`) as rows of TABLE_SCHEMA; padding
    (-1: fewer documents than k) left out."""
    found = indices >= 0
    query_rows = np.broadcast_to(np.arange(first, first + len(ids), dtype=np.int64)[:, None], indices.shape)[found]
    ranks = np.broadcast_to(np.arange(1, indices.shape[1] + 1, dtype=np.int32), indices.shape)[found]
    neighbour_rows = indices[found]
    return pa.Table.from_arrays(
        [ids.take(pa.array(query_rows - first)), pa.array(ranks), doc_ids.take(pa.array(neighbour_rows)),
         pa.array(scores[found].astype(np.float32)), pa.array(query_rows), pa.array(neighbour_rows)],
        schema=TABLE_SCHEMA,
    )


def _group_roots(a: np.ndarray, b: np.ndarray, n: int) -> np.ndarray:
    """Each index below `n` joined by the pairs (a[i], b[i]), mapped to the smallest index
    of its connected component (single linkage: the member kept). Minimum labels spread
    over the pairs, and pointer jumping shortens the chains: numpy arrays of n and a few
    passes over the pairs, where a Python union-find took a dict entry a document."""
    parent = np.arange(n, dtype=np.int64)
    while True:
        root_a, root_b = parent[a], parent[b]
        if (root_a == root_b).all():
            return parent
        low = np.minimum(root_a, root_b)
        np.minimum.at(parent, root_a, low)  # a root takes the smaller root of each pair it is in
        np.minimum.at(parent, root_b, low)
        while True:  # every index to its root's root, until each points at a root
            jumped = parent[parent]
            if (jumped == parent).all():
                break
            parent = jumped


def merge_neighbours(chunk_tables: list[str], doc_ids_path: str, params: NeighbourParams, outputs: dict) -> dict:
    """The chunks' tables into outputs["table"], streamed a chunk at a time; the
    near-duplicate pairs (outputs["pairs"]) and groups (outputs["groups"]); the summary
    (outputs["summary"], returned) and the figure of each document's nearest score
    (outputs["figure"]). A dot-product model without a threshold stops here, with the
    nearest scores' spread to choose one from (NeighbourParams.threshold)."""
    doc_ids = read_id_array(doc_ids_path)
    n = len(doc_ids)
    threshold = params.threshold()
    nearest = np.full(n, np.nan, dtype=np.float32)
    reaching = np.zeros(n, dtype=np.int32)  # neighbours at or above the threshold
    listed = np.zeros(n, dtype=np.int32)
    near_rows, near_others, near_scores = [], [], []
    rows_written = 0
    with atomic_path(outputs["table"]) as tmp:
        with pq.ParquetWriter(tmp, TABLE_SCHEMA) as writer:
            batches = (batch for path in chunk_tables for batch in _read_batches(path))
            for table in batches:
                writer.write_table(table)
                rows_written += table.num_rows
                row = table.column("row").to_numpy()
                score = table.column("score").to_numpy()
                first = table.column("rank").to_numpy() == 1
                nearest[row[first]] = score[first]
                np.add.at(listed, row, 1)
                if threshold is None:
                    continue
                near = reaches(score, threshold)
                np.add.at(reaching, row[near], 1)
                near_rows.append(row[near])
                near_others.append(table.column("neighbour_row").to_numpy()[near])
                near_scores.append(score[near])
        if threshold is None:  # before the table is published: the job fails, its outputs unwritten
            raise ValueError(
                "neighbours.duplicate_threshold is null, and the model scores by dot product, whose scores have no "
                f"fixed scale: give it one (here each document's nearest neighbour's score {_spread(nearest)})"
            )
    low, high, score = _pairs(near_rows, near_others, near_scores, n)
    del near_rows, near_others, near_scores
    _write(outputs["pairs"], PAIR_SCHEMA, [doc_ids.take(pa.array(low)), doc_ids.take(pa.array(high)),
                                           pa.array(score, pa.float32()), pa.array(low), pa.array(high)])
    members = np.unique(np.concatenate([low, high]))
    # The components over the members alone: their indices in `members`, which is in row
    # order, so a component's smallest index is its first row.
    roots = members[_group_roots(np.searchsorted(members, low), np.searchsorted(members, high), len(members))]
    _write(outputs["groups"], GROUP_SCHEMA, [doc_ids.take(pa.array(members)), pa.array(members),
                                             doc_ids.take(pa.array(roots)), pa.array(members == roots)])
    # Documents whose listed neighbours all reach the threshold, short of the whole rest
    # of the corpus (listing all of it, no larger k would find another twin).
    saturated = np.flatnonzero((listed > 0) & (reaching == listed) & (listed < n - 1))
    sizes = np.unique(roots, return_counts=True)[1]
    searched = nearest[~np.isnan(nearest)]
    summary = {
        "documents": n,
        "k": params.k,
        "similarity": params.similarity,
        "duplicate_threshold": threshold,
        "rows": rows_written,
        "near_duplicate_pairs": len(low),
        "documents_in_groups": len(members),
        "groups": len(sizes),
        "largest_group": int(sizes.max()) if len(sizes) else 0,
        # What keeping one document a group removes.
        "documents_to_drop": len(members) - len(sizes),
        "share_to_drop": (len(members) - len(sizes)) / max(n, 1),
        # Documents whose k neighbours all reach the threshold: their groups may hold more.
        "saturated": len(saturated),
        "nearest_score": score_quantiles(searched),
        "nearest_histogram": score_histogram(searched),
    }
    if len(saturated):
        log.warning(
            "%d documents have all of their %d neighbours at or above duplicate_threshold %g (first: %r): their "
            "groups may have more members than the neighbours show; a larger neighbours.k finds them",
            len(saturated), params.k, threshold, doc_ids[int(saturated[0])].as_py(),
        )
    if summary["share_to_drop"] > 0.5:
        log.warning(
            "keeping one document a group would drop %.1f%% of the corpus at duplicate_threshold %g: is that the "
            "threshold for this model's scores? Each document's nearest neighbour's score %s",
            100 * summary["share_to_drop"], threshold, _spread(nearest),
        )
    write_json(outputs["summary"], summary)
    plot_nearest(summary, outputs["figure"])
    log.info("%d documents: %d near-duplicate pairs at >= %g in %d groups; %d documents to drop (%.2f%%)",
             n, len(low), threshold, len(sizes), summary["documents_to_drop"], 100 * summary["share_to_drop"])
    return summary


def _pairs(rows: list, others: list, scores: list, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each pair once, the earlier row first, at the higher of its two sides' scores (both
    documents list each other where each is in the other's k), sorted by rows. A pair is
    one int64 key (low x n + high) while sorted: about 40 bytes a listed side at the peak."""
    if not sum(len(r) for r in rows):
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32)
    a, b = np.concatenate(rows), np.concatenate(others)
    rows.clear()
    others.clear()
    key = np.minimum(a, b) * n + np.maximum(a, b)
    del a, b
    order = np.argsort(key, kind="stable")
    key = key[order]
    score = np.concatenate(scores)[order]
    scores.clear()
    del order
    starts = np.flatnonzero(np.concatenate([[True], key[1:] != key[:-1]]))
    return key[starts] // n, key[starts] % n, np.maximum.reduceat(score, starts)


def _spread(nearest: np.ndarray) -> str:
    """Each document's nearest score, in words: for choosing a threshold."""
    q = score_quantiles(nearest[~np.isnan(nearest)])
    return "is not known: no document has a neighbour" if q is None else (
        f"runs from {q['min']:.4g} to {q['max']:.4g}: median {q['median']:.4g}, 1% below {q['p01']:.4g}, "
        f"1% above {q['p99']:.4g}")


def _read_batches(path: str):
    """A chunk table, MERGE_BATCH_ROWS rows at a time, as tables of TABLE_SCHEMA: read
    whole, a chunk of 2 M documents at k 10 held about 8 GB with URL-long ids."""
    file = pq.ParquetFile(path)
    if file.schema_arrow != TABLE_SCHEMA:
        raise ValueError(f"{path}: not a neighbours table (its columns: {file.schema_arrow}); rerun its job")
    for batch in file.iter_batches(batch_size=MERGE_BATCH_ROWS):
        yield pa.Table.from_batches([batch], schema=TABLE_SCHEMA)


def _write(path: str, schema: pa.Schema, arrays: list) -> None:
    with atomic_path(path) as tmp:
        pq.write_table(pa.Table.from_arrays(arrays, schema=schema), tmp)


def score_quantiles(scores: np.ndarray) -> dict | None:
    if not len(scores):
        return None
    q = np.quantile(scores.astype(np.float64), [0.0, 0.01, 0.5, 0.99, 1.0])
    return dict(zip(("min", "p01", "median", "p99", "max"), (float(x) for x in q), strict=True))


def score_histogram(scores: np.ndarray) -> dict | None:
    if not len(scores):
        return None
    low, high = float(scores.min()), float(scores.max())
    counts, edges = np.histogram(scores.astype(np.float64), bins=HISTOGRAM_BINS, range=(low, max(high, low + 1e-6)))
    return {"edges": [float(e) for e in edges], "counts": [int(c) for c in counts]}


def plot_nearest(summary: dict, path: str) -> None:
    """Each document's nearest-neighbour score, with the threshold drawn: a mass at the
    right is the corpus's duplicates."""
    fig, ax = score_histogram_figure(summary["nearest_histogram"], f"nearest neighbour's {summary['similarity']} score",
                                     "documents", f"{summary['documents']:,} documents: "
                                     f"{summary['near_duplicate_pairs']:,} near-duplicate pairs, "
                                     f"{summary['documents_to_drop']:,} to drop")
    ax.axvline(summary["duplicate_threshold"], color="#c0392b", linestyle="--",
               label=f"duplicate threshold {summary['duplicate_threshold']:g}")
    ax.legend(loc="upper left")
    save_figure(fig, path)


def score_histogram_figure(hist: dict | None, xlabel: str, ylabel: str, title: str):
    """(figure, axes) of a score histogram (`score_histogram`'s; None: empty axes), for a
    stage's report figure: neighbours' nearest scores, task search's best hits."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 3.2))
    if hist:
        edges = np.array(hist["edges"])
        ax.bar(edges[:-1], hist["counts"], width=np.diff(edges), align="edge", color="#3b75af")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    return fig, ax


def chunk_rows(manifest: dict, chunk: int) -> range:
    """Chunk `chunk`'s rows in the merged matrix: merge concatenates the chunks in order,
    a row a record the split wrote (its manifest's `items`; verify checks the total)."""
    items = [int(c["items"]) for c in manifest["chunks"]]
    if not 0 <= chunk < len(items):
        raise ValueError(f"chunk {chunk}: the split's manifest lists {len(items)} chunks")
    first = sum(items[:chunk])
    return range(first, first + items[chunk])
