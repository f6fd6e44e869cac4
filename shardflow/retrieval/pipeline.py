"""The retrieval evaluation as workflow steps.

prepare   BEIR / MS MARCO files -> corpus.jsonl + queries.jsonl (shardflow chunk
          format) + qrels.json, one job each (prepare_corpus, prepare_queries,
          prepare_qrels), so an edited qrels or queries file reruns only what reads
          it; the corpus then goes through the ordinary split -> embed_<i> -> merge
          pipeline as data set <name>.
evaluate  merged corpus embeddings + query embeddings -> exact top-k -> MTEB
          metrics (metrics.json), per-query scores, the run itself.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from shardflow.core.atomic import atomic_path, write_json
from shardflow.core.columns import read_id_array, read_ids
from shardflow.core.fields import check_device, check_field_types, whole_floats_as_ints
from shardflow.core.figures import pyplot, save_figure
from shardflow.core.files import read_json
from shardflow.core.hashing import digest, sha256_file
from shardflow.core.parsecache import cached
from shardflow.retrieval import data as rdata
from shardflow.retrieval.metrics import beyond_depth, evaluate, level_label

log = logging.getLogger(__name__)

SEARCH_SIMILARITIES = ("cosine", "dot")
JUDGED_CACHE = "judged-queries"  # core.parsecache.cache_file(JUDGED_CACHE)
HEADLINE = ("ndcg_at_10", "recall_at_10", "recall_at_100", "mrr_at_10", "map_at_10")


@dataclass(frozen=True)
class RetrievalSpec:
    path: str
    format: str = "beir"
    split: str = "test"
    msmarco_collection: str = "collection.tsv"
    msmarco_queries: str = "queries.dev.small.tsv"
    msmarco_qrels: str = "qrels.dev.small.tsv"
    # An s3:// path's objects (URL -> ETag): core.s3.list_folder with the run's settings.
    list_folder: Callable[[str], dict[str, str]] | None = field(default=None, compare=False, repr=False)

    @classmethod
    def from_config(cls, cfg: dict, list_folder: Callable[[str], dict[str, str]] | None = None) -> RetrievalSpec:
        r = cfg["retrieval"]
        return cls(
            path=r["path"],
            format=r["format"],
            split=r["split"],
            msmarco_collection=r["msmarco_collection"],
            msmarco_queries=r["msmarco_queries"],
            msmarco_qrels=r["msmarco_qrels"],
            list_folder=list_folder,
        )

    @property
    def in_s3(self) -> bool:
        return str(self.path).startswith("s3://")

    def _names(self) -> list[tuple[str, ...]]:
        """Each input file's candidate names inside the folder, in order: corpus, queries, qrels."""
        if self.format == "beir":
            return [rdata.beir_names("corpus"), rdata.beir_names("queries"), (f"qrels/{self.split}.tsv",)]
        return [(self.msmarco_collection,), (self.msmarco_queries,), (self.msmarco_qrels,)]

    def _stored(self) -> dict[str, str]:
        if self.list_folder is None:
            raise ValueError(f"retrieval.path {self.path!r} is in S3, but no S3 listing was given")
        found = self.list_folder(self.path)
        if not found:
            raise FileNotFoundError(f"retrieval.path {self.path!r}: no object below it")
        return found

    def source_files(self) -> list[str]:
        """The input files, checked to exist (named in the error when not): local paths,
        or s3:// URLs when the folder is in S3 (the rules fetch them through Snakemake
        storage)."""
        if self.in_s3:
            found, folder = self._stored(), self.path.rstrip("/")

            def exists(name: str) -> str | None:
                return f"{folder}/{name}" if f"{folder}/{name}" in found else None
        else:
            if not Path(self.path).is_dir():
                raise FileNotFoundError(f"retrieval.path {self.path!r} is not a folder")

            def exists(name: str) -> str | None:
                return str(Path(self.path) / name) if (Path(self.path) / name).is_file() else None

        files = []
        for names in self._names():
            found_file = next((f for f in map(exists, names) if f is not None), None)
            if found_file is None:
                raise FileNotFoundError(f"retrieval.path {self.path!r}: no {' or '.join(names)} in it")
            files.append(found_file)
        return files

    def judged_queries(self) -> str:
        """What of the qrels the prepared queries depend on: the ids of the judged queries.

        Only judged queries are embedded (MTEB), so queries.jsonl depends on the qrels
        through this set alone. Rule retrieval_queries records it as a param and takes
        the qrels file as ancient input: a new judgement or a changed grade of a judged
        query reruns retrieval_qrels and retrieval_evaluate only, a newly judged or
        dropped query the query side too. Qrels that cannot be read give the file's
        checksum instead, so the jobs run and report the bad line. Read at parse time
        (about 1 s per 500,000 qrels lines), it is kept between parses
        (core.parsecache), so cluster jobs' re-parses do not read the qrels again.
        """
        qrels_file = self.source_files()[2]
        if self.in_s3:
            # Not read at parse time (every pod parses): the object's version stands for
            # it, so any change of the qrels object reruns the query side too.
            return f"qrels object {qrels_file}, etag {self._stored()[qrels_file]}"

        def judged() -> str:
            qids = sorted(rdata.load_qrels(qrels_file))
            return f"{len(qids)} judged queries, ids sha256 {digest(qids)}"

        try:
            return cached(JUDGED_CACHE, [qrels_file], None, judged)
        except (ValueError, OSError, EOFError):  # not kept: the next parse reads the file again
            return f"unreadable qrels, file sha256 {sha256_file(qrels_file)}"


def prepare_corpus(fmt: str, corpus_file: str, corpus_out: str) -> int:
    """The benchmark's documents as a shardflow corpus (chunk format); returns their count."""
    docs = rdata.iter_beir_corpus(corpus_file) if fmt == "beir" else rdata.iter_msmarco_collection(corpus_file)
    n_docs = rdata.write_corpus_jsonl(docs, corpus_out, check_unique=False)  # the readers check, naming lines
    log.info("prepared %s: %d documents", corpus_file, n_docs)
    return n_docs


def prepare_queries(fmt: str, queries_file: str, qrels_file: str, queries_out: str) -> dict:
    """The judged queries in file order (chunk format): only queries that have qrels are
    evaluated (MTEB), so the others are not embedded. A judged query without text is
    an error."""
    qrels = rdata.load_qrels(qrels_file)
    read = rdata.iter_beir_queries if fmt == "beir" else rdata.iter_msmarco_queries
    queries = read(queries_file, judged=qrels)  # a repeated judged id is an error; others are not embedded
    found: set[str] = set()
    empty: list[str] = []

    def judged():
        for qid, text in queries:
            if qid in qrels:
                found.add(qid)
                if not text.strip():
                    empty.append(qid)
                yield qid, text

    n_queries = rdata.write_corpus_jsonl(judged(), queries_out, check_unique=False)
    if empty:
        log.warning("%s: %d judged queries have empty text (embedded as they are, as MTEB does): %s",
                    queries_file, len(empty), ", ".join(map(repr, empty[:5])))
    missing = sorted(set(qrels) - found)
    if missing:
        raise ValueError(f"{len(missing)} qrels queries have no text in {queries_file}, e.g. {missing[:5]}")
    stats = {"queries": n_queries, "qrels_queries": len(qrels)}
    log.info("prepared %s: %s", queries_file, stats)
    return stats


def prepare_qrels(qrels_file: str, qrels_out: str) -> int:
    """The qrels as `{query id: {doc id: relevance}}` JSON; returns the judged query count."""
    qrels = rdata.load_qrels(qrels_file)
    write_json(qrels_out, qrels)
    log.info("prepared %s: %d judged queries", qrels_file, len(qrels))
    return len(qrels)


@dataclass(frozen=True)
class EvaluateParams:
    top_k: int = 1000
    block_size: int = 65536
    backend: str = "torch"
    drop_identical_ids: bool = False
    relevance_level: int = 1  # retrieval.relevance_level: metrics.evaluate
    device: str | None = None  # None or auto: CUDA when available, else CPU
    # The model's similarity (embed.stconfig.ModelSpec.similarity), as MTEB scores with
    # model.similarity: cosine normalises queries and documents as they are searched
    # (a model without a Normalize module included), dot takes the inner product as is.
    similarity: str = "cosine"

    def __post_init__(self) -> None:
        whole_floats_as_ints(self)  # top_k 100.0 (the schema's "integer" takes it): torch sizes take no float
        if self.similarity not in SEARCH_SIMILARITIES:
            raise ValueError(
                f"the model's similarity_fn_name is {self.similarity!r}: retrieval evaluation searches by "
                f"{' or '.join(SEARCH_SIMILARITIES)} (exact inner-product search)"
            )
        # top_k='10' was kept and stopped the job with Python's bare TypeError after the ids
        # and queries were read; drop_identical_ids='false' (a true string) dropped them.
        check_field_types(self)
        # Another word ('Faiss') was kept until exact_search refused it, after the ids,
        # queries and judgements were read.
        from shardflow.retrieval.search import BACKENDS  # torch: the job imports it to search anyway

        if self.backend not in BACKENDS:
            raise ValueError(f"backend {self.backend!r}: expected one of {', '.join(BACKENDS)}")
        # Any string was kept until torch.device refused it ('cuda0', 'gpu'), after the ids,
        # queries and judgements were read. After the type check: 0 stays its TypeError.
        if self.device is not None:
            check_device(self.device)


def judged_documents_not_in(qrels: dict[str, dict[str, int]], doc_ids: pa.Array) -> list[str]:
    """The judged document ids (any grade) that `doc_ids` (a pyarrow string array) lacks,
    sorted; of the corpus ids, only the judged ones become Python strings."""
    judged = {doc for judgements in qrels.values() for doc in judgements}
    if not judged:
        return []
    found = doc_ids.filter(pc.is_in(doc_ids, value_set=pa.array(sorted(judged), doc_ids.type)))
    return sorted(judged - set(found.to_pylist()))


def shallow_metrics(depth: int, n_documents: int) -> list[str]:
    """The keys of metrics.json (nested ones as a sweep names them: `all.recall_at_1000`)
    computed on a ranking of `depth` hits that is shallower than their k
    (metrics.beyond_depth). They keep their keys and values, as pytrec_eval would score
    that run: sweeps and reports name them, and a null would leave a sweep ranked by one
    with no value at all; listed (`beyond_ranking_depth`), no one need take them for the
    metric at k."""
    deeper = beyond_depth(depth, n_documents)
    return [key for key in HEADLINE if key in deeper] + [f"all.{key}" for key in deeper]


def beyond_ranking_depth(metrics: dict) -> list[str]:
    """A metrics.json's `beyond_ranking_depth`; for one written before it was, the same
    list from its `top_k` (the ranking's depth) and `n_documents`."""
    if "beyond_ranking_depth" in metrics:
        return list(metrics["beyond_ranking_depth"])
    return shallow_metrics(metrics["top_k"], metrics["n_documents"])


def search_and_score(
    doc_npy: str,
    doc_ids_path: str,
    query_npy: str,
    query_ids_path: str,
    qrels_path: str,
    params: EvaluateParams,
    metrics_out: str,
    per_query_out: str,
    run_out: str,
) -> dict:
    from shardflow.retrieval.search import LazyRun, exact_search, search_device

    # Where the scores are computed, recorded for the job's cost (shardflow.sweep.cost:
    # GPU-hours count the jobs that ran on CUDA).
    device = search_device(params.backend, params.device)
    # The corpus ids as one Arrow array: only the hits' ids become Python strings, a query at
    # a time (LazyRun). Held as Python objects, MS MARCO's 8.8 M ids and 7 M hits made the
    # job's memory after the search peak at 2.1 GB; 1.1 GB so.
    doc_ids = read_id_array(doc_ids_path)
    query_ids = read_ids(query_ids_path)
    with open(qrels_path, encoding="utf-8") as fh:
        qrels = json.load(fh)
    highest = max((rel for judged in qrels.values() for rel in judged.values()), default=0)
    if params.relevance_level > highest:
        # As trec_eval -l scores it, but the zeros alone read as a model that found nothing.
        log.warning(
            "%s: retrieval.relevance_level %d is above every grade in the qrels (the highest: %d), so no document "
            "counts as relevant: MAP, recall, precision and MRR are 0 for every query (nDCG reads the grades); "
            "relevance_level 1 is MTEB's",
            qrels_path,
            params.relevance_level,
            highest,
        )
    k = min(params.top_k, len(doc_ids))
    hits = exact_search(
        query_npy,  # by its path, so that a vector that is not finite is named with its file
        doc_npy,
        k,
        block_size=params.block_size,
        backend=params.backend,
        query_ids=query_ids,
        doc_ids=doc_ids,  # the twin check's, and the id of a vector that is not finite
        drop_identical_ids=params.drop_identical_ids,
        device=device,
        normalize=params.similarity == "cosine",
    )
    run = LazyRun(hits, query_ids, doc_ids)
    unknown = judged_documents_not_in(qrels, doc_ids)
    if unknown:
        log.warning("%s: %d judged documents are not in the corpus, e.g. %s: no run can retrieve them, so they "
                    "count as misses (as in MTEB); a mistyped id, or ids written as 1.0 for 1, does the same",
                    qrels_path, len(unknown), ", ".join(map(repr, unknown[:5])))
    _warn_unshared_queries(query_ids, query_npy, qrels, qrels_path)
    scores = evaluate(qrels, run, ignore_identical_ids=params.drop_identical_ids,
                      relevance_level=params.relevance_level)
    shallow = shallow_metrics(k, len(doc_ids))
    if shallow:
        deepest = max(int(name.rsplit("_at_", 1)[1]) for name in shallow)
        log.warning(
            "the ranking holds the top %d of %d documents per query (retrieval.top_k), so the metrics at a deeper k "
            "are computed on those %d hits and are not the metric at k: %s (metrics.json lists them as "
            "beyond_ranking_depth); retrieval.top_k %d gives them all",
            k,
            len(doc_ids),
            k,
            ", ".join(shallow),
            deepest,
        )
    metrics = {key: scores.scores[key] for key in HEADLINE}
    metrics.update(
        {
            "all": scores.scores,
            "n_queries": scores.n_queries,
            "n_queries_not_in_run": scores.n_queries_not_in_run,
            "n_documents": len(doc_ids),
            "judged_documents_not_in_corpus": len(unknown),
            "top_k": k,  # the ranking's depth: retrieval.top_k, or every document of a smaller corpus
            "beyond_ranking_depth": shallow,
            "drop_identical_ids": params.drop_identical_ids,
            "similarity": params.similarity,
            "device": device,
        }
    )
    if params.relevance_level != 1:  # the default's record keeps its former bytes
        metrics["relevance_level"] = params.relevance_level
    write_json(metrics_out, metrics)
    rows = sorted(scores.per_query.items())
    table = pa.table({"query_id": [q for q, _ in rows], **{m: [s[m] for _, s in rows] for m in HEADLINE}})
    with atomic_path(per_query_out) as tmp:
        pq.write_table(table, tmp)
    _write_run(run_out, run)
    log.info("metrics: %s", {key: round(metrics[key], 5) for key in HEADLINE})
    return metrics


def _warn_unshared_queries(query_ids: list[str], query_npy: str, qrels: dict, qrels_path: str) -> None:
    """Name the queries that metrics.evaluate leaves out of every mean: embedded but not
    judged, or judged but not embedded. The prepared queries are the judged ones, so either
    means the query embeddings are older than the qrels (kept by `--touch` or
    `--rerun-triggers mtime` after a query was judged or dropped); metrics.json counts only
    the second kind (`n_queries_not_in_run`)."""
    embedded = set(query_ids)
    unjudged = [qid for qid in query_ids if not qrels.get(qid)]  # as evaluate: {} judges nothing
    unembedded = sorted(qid for qid, judged in qrels.items() if judged and qid not in embedded)
    if unjudged:
        log.warning("%d queries of %s have no qrels, so they are not scored: %s (in %s)", len(unjudged), query_npy,
                    ", ".join(map(repr, unjudged[:5])), qrels_path)
    if unembedded:
        log.warning("%s: %d judged queries are not among the embedded queries (%s), so the means leave them out: "
                    "%s; the query embeddings are older than the qrels: snakemake --forcerun retrieval_queries "
                    "embeds them", qrels_path, len(unembedded), query_npy, ", ".join(map(repr, unembedded[:5])))


def _write_run(path: str, run: Mapping[str, dict[str, float]]) -> None:
    """run.parquet: a row a hit, queries in run order, each in rank order. Each query's
    rows become Arrow arrays as the run makes its ranking, and each column is joined into
    one array at the end: one chunk, as when the columns were Python lists (a table of
    several chunks is written in other Parquet bytes)."""
    parts: dict[str, list] = {"query_id": [], "doc_id": [], "rank": [], "score": []}
    for qid, ranking in run.items():
        if ranking:
            parts["query_id"].append(pa.array([qid] * len(ranking), pa.string()))
            parts["doc_id"].append(pa.array(list(ranking), pa.string()))
            parts["rank"].append(pa.array(np.arange(1, len(ranking) + 1, dtype=np.int64)))
            parts["score"].append(pa.array(list(ranking.values()), pa.float32()))
    if parts["rank"]:
        table = pa.table({name: pa.concat_arrays(parts.pop(name)) for name in list(parts)})
    else:  # no hit at all: the columns empty Python lists make (null, but for the scores)
        table = pa.table({"query_id": [], "doc_id": [], "rank": [], "score": pa.array([], pa.float32())})
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)


def plot_per_query(per_query_path: str, metrics_path: str, out_png: str) -> None:
    plt = pyplot()
    ndcg = pq.read_table(per_query_path, columns=["ndcg_at_10"]).column(0).to_numpy()
    metrics = read_json(metrics_path)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.5), gridspec_kw={"width_ratios": [3, 2]})
    ax1.hist(ndcg, bins=20, range=(0, 1), color="#3b75af")
    ax1.set_xlabel("nDCG@10 per query")
    ax1.set_ylabel("queries")
    ax1.set_title(f"{len(ndcg)} queries, {metrics['n_documents']} documents")
    ax2.axis("off")
    # Away from 1 (recorded only there) recall, MRR and MAP are not MTEB's numbers: their
    # cells name the level. At 1 the figure is drawn as before the key existed.
    level = metrics.get("relevance_level", 1)
    cells = [[level_label(key, level), f"{metrics[key]:.5f}"] for key in HEADLINE]
    table = ax2.table(cellText=cells, colLabels=["metric", "value"], loc="center")
    if level != 1:
        table.auto_set_column_width([0, 1])  # the longer labels fit their column
    save_figure(fig, out_png)  # closed also when saving fails
