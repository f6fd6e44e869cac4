"""A corpus's own nearest neighbours (task `neighbours`), and its near-duplicates.

chunk  Each chunk's documents are searched against the whole corpus's embeddings,
       exactly and by the model's similarity (search.exact_search: blocked, so memory
       stays bounded whatever the corpus), the document itself left out: its k
       nearest, best first, ties by corpus row. One row a (document, neighbour):
       id, rank (1 = nearest), neighbour, score, and both rows of embeddings.npy.
merge  The chunks' tables into one (neighbours.parquet, chunk order), and from them the
       near-duplicates: every pair whose score is at least `duplicate_threshold`, once
       (near_duplicates.parquet), and their groups (duplicate_groups.parquet).

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

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from shardflow.core.atomic import atomic_path, write_json
from shardflow.core.columns import read_id_array
from shardflow.core.fields import check_device, check_field_types, whole_floats_as_ints
from shardflow.core.figures import pyplot, save_figure

log = logging.getLogger(__name__)

SIMILARITIES = ("cosine", "dot")
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


@dataclass(frozen=True)
class NeighbourParams:
    k: int = 10
    duplicate_threshold: float = 0.95
    block_size: int = 65_536
    backend: str = "torch"
    # The model's similarity (embed.stconfig.ModelSpec.similarity), as retrieval searches:
    # cosine normalises as it searches, dot takes the inner product as it is.
    similarity: str = "cosine"
    device: str | None = None  # None or auto: CUDA when available, else CPU

    def __post_init__(self) -> None:
        whole_floats_as_ints(self)
        check_field_types(self)
        if self.k < 1:
            raise ValueError(f"neighbours.k {self.k}: expected 1 or more")
        if self.block_size < 1:
            raise ValueError(f"neighbours.block_size {self.block_size}: expected 1 or more")
        if not math.isfinite(self.duplicate_threshold):
            raise ValueError(f"neighbours.duplicate_threshold {self.duplicate_threshold}: expected a finite number")
        if self.similarity not in SIMILARITIES:
            raise ValueError(f"the model's similarity_fn_name is {self.similarity!r}: neighbours are searched by "
                             f"{' or '.join(SIMILARITIES)} (exact inner-product search)")
        from shardflow.retrieval.search import BACKENDS

        if self.backend not in BACKENDS:
            raise ValueError(f"neighbours.backend {self.backend!r}: expected one of {', '.join(BACKENDS)}")
        if self.device is not None:
            check_device(self.device)


def chunk_neighbours(doc_npy: str, doc_ids_path: str, rows: range, params: NeighbourParams, out_path: str) -> dict:
    """The k nearest documents of each document of `rows` (a chunk's rows of the merged
    matrix, chunk_rows), written to `out_path`; returns the job's record. The chunk's
    vectors are read from the merged matrix, not from its embed job's file, which
    `embedding.keep_chunk_vectors: false` deletes once merged."""
    from shardflow.core.devices import resolve_device
    from shardflow.retrieval.search import default_device, exact_search, load_embeddings

    start = time.time()
    device = "cpu" if params.backend == "faiss" else (params.device or "auto")
    device = default_device() if device == "auto" else device
    if device != "cpu":
        resolve_device(device)  # only its check: a CUDA device this process has
    doc_ids = read_id_array(doc_ids_path)
    if rows.stop > len(doc_ids):
        raise ValueError(f"{doc_ids_path}: {len(doc_ids)} rows, but the split's manifest puts this chunk at rows "
                         f"{rows.start} to {rows.stop - 1}: the embeddings are not of this split")
    first_row = rows.start
    ids = doc_ids.slice(first_row, len(rows))
    k = min(params.k, len(doc_ids) - 1)
    if len(ids) and k >= 1:
        hits = exact_search(
            load_embeddings(doc_npy)[first_row : rows.stop], doc_npy, k, block_size=params.block_size,
            backend=params.backend, device=device, normalize=params.similarity == "cosine",
            query_ids=ids.to_pylist(), doc_ids=doc_ids,
            drop_identical_ids=True,  # a document's own row: ids are unique (verify)
        )
        indices, scores = hits.indices, hits.scores
    else:  # a corpus of one document has no neighbours
        indices, scores = np.full((len(ids), 0), -1, np.int64), np.zeros((len(ids), 0), np.float32)
    found = indices >= 0
    query_rows = np.broadcast_to(np.arange(first_row, rows.stop, dtype=np.int64)[:, None], indices.shape)[found]
    ranks = np.broadcast_to(np.arange(1, indices.shape[1] + 1, dtype=np.int32), indices.shape)[found]
    neighbour_rows = indices[found]
    table = pa.Table.from_arrays(
        [ids.take(pa.array(query_rows - first_row)), pa.array(ranks), doc_ids.take(pa.array(neighbour_rows)),
         pa.array(scores[found].astype(np.float32)), pa.array(query_rows), pa.array(neighbour_rows)],
        schema=TABLE_SCHEMA,
    )
    with atomic_path(out_path) as tmp:
        pq.write_table(table, tmp)
    end = time.time()
    return {"items": len(ids), "documents": len(doc_ids), "k": k, "similarity": params.similarity,
            "backend": params.backend, "device": device, "seconds": end - start, "start_unix": start,
            "end_unix": end}


class _Groups:
    """Union-find over corpus rows, each group's root its smallest row (the member kept)."""

    def __init__(self) -> None:
        self.parent: dict[int, int] = {}

    def find(self, row: int) -> int:
        root = row
        while self.parent.get(root, root) != root:
            root = self.parent[root]
        while row != root:  # path compression: chains stay short on long runs of twins
            self.parent[row], row = root, self.parent[row]
        return root

    def join(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)
            self.parent.setdefault(min(ra, rb), min(ra, rb))


def merge_neighbours(chunk_tables: list[str], doc_ids_path: str, params: NeighbourParams, outputs: dict) -> dict:
    """The chunks' tables into outputs["table"], streamed a chunk at a time; the
    near-duplicate pairs (outputs["pairs"]) and groups (outputs["groups"]); the summary
    (outputs["summary"], returned) and the figure of each document's nearest score
    (outputs["figure"])."""
    doc_ids = read_id_array(doc_ids_path)
    threshold = params.duplicate_threshold
    pairs: dict[tuple[int, int], float] = {}
    nearest = np.full(len(doc_ids), np.nan, dtype=np.float32)
    reaching = np.zeros(len(doc_ids), dtype=np.int32)  # neighbours at or above the threshold
    listed = np.zeros(len(doc_ids), dtype=np.int32)
    rows_written = 0
    with atomic_path(outputs["table"]) as tmp:
        with pq.ParquetWriter(tmp, TABLE_SCHEMA) as writer:
            for path in chunk_tables:
                table = pq.read_table(path, schema=TABLE_SCHEMA)
                writer.write_table(table)
                rows_written += table.num_rows
                row = table.column("row").to_numpy()
                other = table.column("neighbour_row").to_numpy()
                score = table.column("score").to_numpy()
                first = table.column("rank").to_numpy() == 1
                nearest[row[first]] = score[first]
                np.add.at(listed, row, 1)
                near = score >= threshold
                np.add.at(reaching, row[near], 1)
                for a, b, s in zip(row[near].tolist(), other[near].tolist(), score[near].tolist(), strict=True):
                    key = (a, b) if a < b else (b, a)
                    pairs[key] = max(s, pairs.get(key, -math.inf))  # seen from both sides: one pair
    groups = _Groups()
    for a, b in pairs:
        groups.join(a, b)
    members = sorted(groups.parent)
    roots = [groups.find(r) for r in members]
    ordered = sorted(pairs)
    _write(outputs["pairs"], PAIR_SCHEMA, [
        doc_ids.take(pa.array([a for a, _ in ordered], pa.int64())),
        doc_ids.take(pa.array([b for _, b in ordered], pa.int64())),
        pa.array([pairs[p] for p in ordered], pa.float32()),
        pa.array([a for a, _ in ordered], pa.int64()), pa.array([b for _, b in ordered], pa.int64()),
    ])
    _write(outputs["groups"], GROUP_SCHEMA, [
        doc_ids.take(pa.array(members, pa.int64())), pa.array(members, pa.int64()),
        doc_ids.take(pa.array(roots, pa.int64())), pa.array([m == r for m, r in zip(members, roots, strict=True)]),
    ])
    # A document that lists every other one (k at least the corpus less one) has no twin
    # left unseen, whatever its scores: no larger k finds more.
    saturated = np.flatnonzero((listed > 0) & (reaching == listed) & (listed < len(doc_ids) - 1))
    sizes = np.bincount(np.unique(roots, return_inverse=True)[1]) if roots else np.zeros(0, np.int64)
    searched = nearest[~np.isnan(nearest)]
    summary = {
        "documents": len(doc_ids),
        "k": params.k,
        "similarity": params.similarity,
        "duplicate_threshold": threshold,
        "rows": rows_written,
        "near_duplicate_pairs": len(pairs),
        "documents_in_groups": len(members),
        "groups": len(sizes),
        "largest_group": int(sizes.max()) if len(sizes) else 0,
        # What keeping one document a group removes.
        "documents_to_drop": len(members) - len(sizes),
        "share_to_drop": (len(members) - len(sizes)) / max(len(doc_ids), 1),
        # Documents whose k neighbours all reach the threshold: their groups may hold more.
        "saturated": len(saturated),
        "nearest_score": _quantiles(searched),
        "nearest_histogram": _histogram(searched),
    }
    if len(saturated):
        log.warning(
            "%d documents have all of their %d neighbours at or above duplicate_threshold %g (first: %r): their "
            "groups may have more members than the neighbours show; a larger neighbours.k finds them",
            len(saturated), params.k, threshold, doc_ids[int(saturated[0])].as_py(),
        )
    write_json(outputs["summary"], summary)
    plot_nearest(summary, outputs["figure"])
    log.info("%d documents: %d near-duplicate pairs at >= %g in %d groups; %d documents to drop (%.2f%%)",
             len(doc_ids), len(pairs), threshold, len(sizes), summary["documents_to_drop"],
             100 * summary["share_to_drop"])
    return summary


def _write(path: str, schema: pa.Schema, arrays: list) -> None:
    with atomic_path(path) as tmp:
        pq.write_table(pa.Table.from_arrays(arrays, schema=schema), tmp)


def _quantiles(scores: np.ndarray) -> dict | None:
    if not len(scores):
        return None
    q = np.quantile(scores.astype(np.float64), [0.0, 0.01, 0.5, 0.99, 1.0])
    return dict(zip(("min", "p01", "median", "p99", "max"), (float(x) for x in q), strict=True))


def _histogram(scores: np.ndarray) -> dict | None:
    if not len(scores):
        return None
    low, high = float(scores.min()), float(scores.max())
    counts, edges = np.histogram(scores.astype(np.float64), bins=HISTOGRAM_BINS, range=(low, max(high, low + 1e-6)))
    return {"edges": [float(e) for e in edges], "counts": [int(c) for c in counts]}


def plot_nearest(summary: dict, path: str) -> None:
    """Each document's nearest-neighbour score, with the threshold drawn: a mass at the
    right is the corpus's duplicates."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 3.2))
    hist = summary["nearest_histogram"]
    if hist:
        edges = np.array(hist["edges"])
        ax.bar(edges[:-1], hist["counts"], width=np.diff(edges), align="edge", color="#3b75af")
    ax.axvline(summary["duplicate_threshold"], color="#c0392b", linestyle="--",
               label=f"duplicate threshold {summary['duplicate_threshold']:g}")
    ax.set_xlabel(f"nearest neighbour's {summary['similarity']} score")
    ax.set_ylabel("documents")
    ax.set_title(f"{summary['documents']:,} documents: {summary['near_duplicate_pairs']:,} near-duplicate pairs, "
                 f"{summary['documents_to_drop']:,} to drop")
    ax.legend(loc="upper left")
    save_figure(fig, path)


def chunk_rows(manifest: dict, chunk: int) -> range:
    """Chunk `chunk`'s rows in the merged matrix: merge concatenates the chunks in order,
    a row a record the split wrote (its manifest's `items`; verify checks the total)."""
    items = [int(c["items"]) for c in manifest["chunks"]]
    if not 0 <= chunk < len(items):
        raise ValueError(f"chunk {chunk}: the split's manifest lists {len(items)} chunks")
    first = sum(items[:chunk])
    return range(first, first + items[chunk])
