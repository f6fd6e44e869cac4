"""Batch search (task `search`): a file of queries searched against a data set's corpus,
on the workflow's GPUs, as `make search` does for a few queries on this machine.

prepare  The queries file, read as corpus input is (any input format; `search.id_field`,
         `text_field`), written as a queries file of the chunk format, in file order. A
         bad record (no id, no text, a line cut short) is an error naming its file and
         line, as is an id given twice (the hits are keyed by it) and a file without
         queries. The queries are then embedded by the embed rule's script, with the
         query prompt (`search.query_prompt`, `query_prompt_name`).
search   The embedded queries against the data set's verified embeddings: exact, by the
         model's similarity (search.exact_search: the corpus read a block at a time), the
         k best a query, best first, ties to the earlier corpus row. Each slice of
         queries is one pass over the corpus's matrix, its queries and their running
         best hits held where they are scored (the GPU; a CPU job's own memory):
         `search.slice_queries` sizes it to SLICE_BYTES there (float32 vectors and 24 bytes a
         hit kept), so a large corpus is read few times (a million queries of dim 1,024
         with k 10: twice on a GPU, five times on a CPU) while memory stays bounded
         whatever the number of queries (and k, down to one query block a slice). A
         slice is a whole number of exact_search's query blocks, so each query is scored
         in the block a search of all of them at once (`make search`'s) puts it in: the
         same float sums, the same ties. Writes one row a hit (HITS_SCHEMA: query_id,
         rank, id, score, and the corpus row of embeddings.npy), queries in file order,
         WRITE_ROWS at a time; a summary (counts, each query's best score: quantiles and
         histogram) and its figure. A corpus smaller than k gives every query all of it.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from shardflow.core.atomic import atomic_open, atomic_path, write_json
from shardflow.core.columns import read_id_array
from shardflow.core.figures import save_figure
from shardflow.corpus.chunks import ChunkRecord, write_record
from shardflow.corpus.readers import ReaderOptions, Rejected, detect_format, iter_records
from shardflow.retrieval.neighbours import (
    check_search_params,
    score_histogram,
    score_histogram_figure,
    score_quantiles,
)

log = logging.getLogger(__name__)

HITS_SCHEMA = pa.schema(
    [
        ("query_id", pa.large_string()),
        ("rank", pa.int32()),
        ("id", pa.large_string()),
        ("score", pa.float32()),
        ("row", pa.int64()),
    ]
)
WRITE_ROWS = 1 << 20  # hits turned into one Arrow table at a time


@dataclass(frozen=True)
class SearchParams:
    k: int = 10
    block_size: int = 65_536
    backend: str = "torch"
    # The model's similarity (embed.stconfig.ModelSpec.similarity): cosine normalises as
    # it searches, dot takes the inner product as it is.
    similarity: str = "cosine"
    device: str | None = None  # None or auto: CUDA when available, else CPU

    def __post_init__(self) -> None:
        check_search_params(self, "search", "search ranks by")


def prepare_queries(path: str, opts: ReaderOptions, out_path: str) -> dict:
    """The queries of `path` (read with `opts`) as a queries file at `out_path`, in file
    order; returns {"queries": count}. Every record is kept or the job stops: a bad
    record, an id given twice or no query at all is an error naming the file (and line).
    Without an id field (`id_field` null, or plain text) a query's id is the line the
    reader names (a CSV's first row is line 2, after its header; a Parquet file's rows
    count from 1): not the reader's `<path>:<line>`, whose path is where this job's copy
    lies (an S3 object's differs between machines)."""
    positional = opts.id_field is None or detect_format(path, opts) == "text"
    first_line: dict[str, int] = {}
    with atomic_open(out_path, "w", encoding="utf-8", newline="\n") as fh:
        for rec in iter_records([path], opts):
            if isinstance(rec, Rejected):  # on_bad_record is "error": the readers raise instead
                raise ValueError(f"{rec.source}:{rec.line}: {rec.reason}")
            qid = str(rec.line) if positional else rec.id
            if qid in first_line:
                raise ValueError(f"{rec.source}:{rec.line}: query id {qid!r} again (first on line "
                                 f"{first_line[qid]}): each query's hits are keyed by its id")
            first_line[qid] = rec.line
            write_record(fh, ChunkRecord(qid, rec.text))
        if not first_line:
            raise ValueError(f"{path}: no queries (search.queries): nothing to search")
    return {"queries": len(first_line)}


def search_queries(doc_npy: str, doc_ids_path: str, query_npy: str, query_ids_path: str, params: SearchParams,
                   outputs: dict) -> dict:
    """The k nearest documents of every query, written to outputs["hits"], with
    outputs["summary"] and outputs["figure"]; returns the job's record (the summary with
    its times)."""
    from shardflow.retrieval.search import QUERY_BLOCK, exact_search, load_embeddings, search_device, slice_queries

    start = time.time()
    device = search_device(params.backend, params.device)
    doc_ids = read_id_array(doc_ids_path)
    query_ids = read_id_array(query_ids_path)
    queries = load_embeddings(query_npy)
    docs = load_embeddings(doc_npy)
    if len(query_ids) != queries.shape[0]:
        raise ValueError(f"{query_ids_path}: {len(query_ids)} ids, but {query_npy} holds {queries.shape[0]} vectors: "
                         "not the same embed job's files")
    if len(doc_ids) != docs.shape[0]:
        raise ValueError(f"{doc_ids_path}: {len(doc_ids)} ids, but {doc_npy} holds {docs.shape[0]} vectors: "
                         "not the same merge's files")
    if queries.ndim != 2 or queries.shape[1] != docs.shape[1]:
        raise ValueError(f"{query_npy}: vectors of shape {queries.shape[1:]}, but {doc_npy}'s are "
                         f"{docs.shape[1:]}: the queries were embedded with another model than the documents")
    k = min(params.k, len(doc_ids))
    n = queries.shape[0]
    best = np.full(n, np.nan, dtype=np.float32)
    step = slice_queries(device, queries.shape[1], k)
    with atomic_path(outputs["hits"]) as tmp, pq.ParquetWriter(tmp, HITS_SCHEMA) as writer:
        for first in range(0, n, step) if k >= 1 else ():
            last = min(first + step, n)
            hits = exact_search(query_npy, doc_npy, k, block_size=params.block_size, query_block_size=QUERY_BLOCK,
                                backend=params.backend, device=device, normalize=params.similarity == "cosine",
                                query_ids=query_ids, doc_ids=doc_ids, query_rows=range(first, last))
            rows = max(1, WRITE_ROWS // k)
            for a in range(0, last - first, rows):
                b = min(a + rows, last - first)
                writer.write_table(_hits_table(hits.indices[a:b], hits.scores[a:b],
                                               query_ids.slice(first + a, b - a), doc_ids))
            best[first:last] = hits.scores[:, 0]
    end = time.time()
    summary = {
        "queries": int(n),
        "documents": len(doc_ids),
        "dim": int(docs.shape[1]),
        "k": int(max(k, 0)),
        "hits": int(n * max(k, 0)),
        "similarity": params.similarity,
        "backend": params.backend,
        "device": device,
        "best_score": score_quantiles(best),
        "best_histogram": score_histogram(best),
    }
    write_json(outputs["summary"], summary)
    plot_best(summary, outputs["figure"])
    return {**summary, "seconds": end - start, "start_unix": start, "end_unix": end}


def _hits_table(indices: np.ndarray, scores: np.ndarray, ids: pa.Array, doc_ids: pa.Array) -> pa.Table:
    """A slice's hits (the queries `ids`) as rows of HITS_SCHEMA, in query and rank order."""
    rows, k = indices.shape
    return pa.Table.from_arrays(
        [ids.take(pa.array(np.repeat(np.arange(rows, dtype=np.int64), k))),
         pa.array(np.tile(np.arange(1, k + 1, dtype=np.int32), rows)),
         doc_ids.take(pa.array(indices.ravel())),
         pa.array(scores.ravel().astype(np.float32)),
         pa.array(indices.ravel().astype(np.int64))],
        schema=HITS_SCHEMA,
    )


def plot_best(summary: dict, path: str) -> None:
    """Each query's best score: a mass at the left is queries the corpus does not answer."""
    fig, _ = score_histogram_figure(summary["best_histogram"], f"best hit's {summary['similarity']} score", "queries",
                                    f"{summary['queries']:,} queries against {summary['documents']:,} documents, "
                                    f"{summary['k']} hits each")
    save_figure(fig, path)
