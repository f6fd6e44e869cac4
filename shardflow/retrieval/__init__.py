"""Retrieval evaluation: load a benchmark, search embeddings exactly, score like MTEB.

data     BEIR / MS MARCO loaders (streaming) and export to a shardflow corpus
search   exact blocked top-k over a memory-mapped embedding matrix
metrics  nDCG / MAP / recall / P (trec_eval semantics) and MTEB's MRR, in pure Python
"""

from shardflow.retrieval.data import (
    Qrels,
    RetrievalDataError,
    doc_text,
    iter_beir_corpus,
    iter_beir_queries,
    iter_msmarco_collection,
    iter_msmarco_queries,
    load_beir_qrels,
    load_qrels,
    write_corpus_jsonl,
)
from shardflow.retrieval.metrics import MTEB_K_VALUES, RetrievalScores, evaluate

_SEARCH_NAMES = ("TopK", "exact_search", "load_embeddings", "to_run")


def __getattr__(name: str):
    # `search` imports torch (seconds); load it only when a search name is used,
    # so data conversion and scoring stay light.
    if name in _SEARCH_NAMES:
        from shardflow.retrieval import search

        return getattr(search, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "MTEB_K_VALUES",
    "Qrels",
    "RetrievalDataError",
    "RetrievalScores",
    "TopK",
    "doc_text",
    "evaluate",
    "exact_search",
    "iter_beir_corpus",
    "iter_beir_queries",
    "iter_msmarco_collection",
    "iter_msmarco_queries",
    "load_beir_qrels",
    "load_embeddings",
    "load_qrels",
    "to_run",
    "write_corpus_jsonl",
]
