"""Retrieval metrics computed the way MTEB computes them, without pytrec_eval.

MTEB (`mteb/_evaluators/retrieval_metrics.py`, `calculate_retrieval_scores`)
scores a run `{query id: {doc id: score}}` against qrels
`{query id: {doc id: relevance}}` in two ways, and so do we:

nDCG@k, MAP@k, recall@k, P@k come from pytrec_eval (trec_eval's `ndcg_cut`,
`map_cut`, `recall`, `P`). What that means, checked against trec_eval's source
and pytrec_eval-terrier 0.5.x:
  - The run is re-sorted by score descending, ties broken by doc id
    *descending* (trec_eval `comp_sim_docno`: `strcmp(p2->docno, p1->docno)`);
    the order the run was written in does not matter.
  - Relevant means relevance >= 1 (`relevance_level`, trec_eval's `-l`: TREC DL's
    graded passage judgements report MAP, recall and MRR with 2). Relevant docs are
    counted from the qrels, so a judged doc missing from the corpus still counts in
    the denominators.
  - recall@k = relevant in top k / relevant; P@k = relevant in top k / k
    (even when fewer than k were retrieved).
  - MAP@k = sum of precision at each relevant doc in the top k, divided by the
    number of relevant docs (not by min(k, relevant)).
  - nDCG@k uses linear gain (the relevance value, only when > 0) and discount
    1 / log2(rank + 1); the ideal ranking is all positive judged relevance values,
    sorted descending, cut at k. It reads the grades themselves, whatever the
    relevance level (as trec_eval's ndcg_cut).
  - A query with no relevant doc scores 0 on all four; with a relevance level above 1
    a lower positive grade still scores in nDCG (trec_eval alike).
  - Only queries present in both the run and the qrels are scored; a query in
    the run with an empty ranking scores 0 (MTEB's search puts every query in
    the run, so a query that retrieved nothing counts as 0). A query whose
    judgements are empty (`{}`) counts as not in the qrels: pytrec_eval leaves it
    out of its results and MTEB drops it with its query, while one judged 0 only
    is scored (at 0).

MRR@k is MTEB's own function, not trec_eval's: the run is sorted by score
descending with Python's stable sort, so equal scores keep the order they have
in the run dict (for a run from `search.to_run`: doc row ascending); the
reciprocal rank of the first doc with relevance > 0 (at least `relevance_level`
where that is above 1) within the top k, else 0.
MTEB's own run dict is filled from a heap, so its order among equal scores is
effectively arbitrary (about half the tied pairs in id order in a simulation on
ArguAna's ids): MRR can differ from a published number on queries whose first
relevant doc ties with another doc (exact duplicate documents), nothing else.

For @k metrics to be tie-exact, search deeper than the largest k (MTEB
searches 1000): trec_eval re-sorts only what the run holds. A run shallower
than k (retrieval.top_k 100 and recall@1000) scores its hits as pytrec_eval
would score that run, which is not MTEB's @k (recall@1000 of a 100-deep run is
its recall@100): `beyond_depth` names those metrics, and metrics.json lists
them, so a reader can tell.

Means are plain sums over queries (in run order) divided by the query count.
MTEB then rounds nDCG/MAP/recall/P to 5 decimals for its results files; the
values here are unrounded.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

MTEB_K_VALUES = (1, 3, 5, 10, 20, 100, 1000)
METRICS = ("ndcg", "map", "recall", "precision", "mrr")
# The measures retrieval.relevance_level decides (a document relevant or not); nDCG reads
# the grades themselves, whatever the level.
LEVELLED_METRICS = ("map", "recall", "precision", "mrr")

Qrels = Mapping[str, Mapping[str, int]]
Run = Mapping[str, Mapping[str, float]]


@dataclass(frozen=True)
class RetrievalScores:
    """Mean scores (`ndcg_at_10`, `recall_at_100`, `mrr_at_10`, ...) and per-query values."""

    scores: dict[str, float]
    per_query: dict[str, dict[str, float]] = field(repr=False)
    n_queries: int  # queries scored: in the run and in the qrels
    n_queries_without_qrels: int  # in the run, not in the qrels (or judged by none): ignored
    n_queries_not_in_run: int  # judged in the qrels, not in the run: ignored

    def as_dict(self) -> dict:
        return {
            **self.scores,
            "n_queries": self.n_queries,
            "n_queries_without_qrels": self.n_queries_without_qrels,
            "n_queries_not_in_run": self.n_queries_not_in_run,
            "per_query": self.per_query,
        }


def evaluate(
    qrels: Qrels,
    run: Run,
    k_values: Sequence[int] = MTEB_K_VALUES,
    *,
    ignore_identical_ids: bool = False,
    relevance_level: int = 1,
) -> RetrievalScores:
    """Score a run against qrels; see the module docstring for the exact definitions.

    `ignore_identical_ids` removes from the run every doc whose id equals its
    query id before scoring (MTEB's flag of the same name; the run passed in is
    not modified). `relevance_level`: the lowest grade the binary metrics (MAP,
    recall, P, MRR) count as relevant, as trec_eval's `-l` (nDCG reads the grades).
    """
    ks = sorted(set(int(k) for k in k_values))
    if not ks or ks[0] < 1:
        raise ValueError(f"k values must be positive, got {list(k_values)}")
    if relevance_level < 1:
        raise ValueError(f"relevance_level must be >= 1, got {relevance_level}")

    per_query: dict[str, dict[str, float]] = {}
    without_qrels = 0
    for qid, ranking in run.items():
        judged = qrels.get(qid)
        if not judged:  # absent, or no judgement at all: pytrec_eval does not score it
            without_qrels += 1
            continue
        if ignore_identical_ids:
            ranking = {doc: score for doc, score in ranking.items() if doc != qid}
        per_query[qid] = {
            **trec_scores(judged, ranking, ks, relevance_level),
            **mteb_mrr(judged, ranking, ks, relevance_level),
        }
    if not per_query:
        raise ValueError("no query of the run has qrels: nothing to score")

    n = len(per_query)
    names = [f"{metric}_at_{k}" for metric in METRICS for k in ks]
    means = {name: sum(q[name] for q in per_query.values()) / n for name in names}
    not_in_run = sum(1 for qid, judged in qrels.items() if judged and qid not in run)
    return RetrievalScores(means, per_query, n, without_qrels, not_in_run)


def beyond_depth(depth: int, n_documents: int, k_values: Sequence[int] = MTEB_K_VALUES) -> list[str]:
    """The metric names (`recall_at_1000`, ...) whose k is deeper than a ranking of
    `depth` hits per query over `n_documents` documents: computed on those hits, they
    are not the metric at k. None where the ranking holds every document (a corpus
    smaller than k: a deeper search would find nothing more)."""
    if depth >= n_documents:
        return []
    ks = sorted(set(int(k) for k in k_values))
    return [f"{metric}_at_{k}" for metric in METRICS for k in ks if k > depth]


def level_label(name: str, relevance_level: int) -> str:
    """`name` (`recall_at_10`, `all.map_at_5`) as a figure shows it: with "(relevance >=
    <level>)" where the level is not 1 and decides the metric (LEVELLED_METRICS), since
    such a number is not the one scored at 1 (MTEB's); nDCG and the default as they are."""
    measure = name.rsplit(".", 1)[-1].split("_at_", 1)[0]
    if relevance_level == 1 or measure not in LEVELLED_METRICS:
        return name
    return f"{name} (relevance >= {relevance_level})"


def trec_order(ranking: Mapping[str, float]) -> list[str]:
    """Doc ids in trec_eval's order: score descending, then doc id descending.

    Python compares str by code point, which for UTF-8 is the byte order strcmp uses.
    """
    return [
        doc for doc, _ in sorted(ranking.items(), key=lambda item: (item[1], item[0]), reverse=True)
    ]


def trec_scores(
    judged: Mapping[str, int], ranking: Mapping[str, float], ks: Sequence[int], relevance_level: int = 1
) -> dict[str, float]:
    """nDCG@k, MAP@k, recall@k, P@k of one query, as trec_eval computes them.

    One pass down the ranking, reading the running sums at each cutoff; this
    is also trec_eval's summation order, so the floats agree to the bit.
    """
    num_rel = sum(1 for rel in judged.values() if rel >= relevance_level)
    ideal = sorted((rel for rel in judged.values() if rel > 0), reverse=True)
    depth = max(ks)
    rels = [judged.get(doc, 0) for doc in trec_order(ranking)[:depth]]

    dcg = idcg = precision_sum = 0.0
    found = 0
    out: dict[str, float] = {}
    for i in range(depth):
        discount = math.log2(i + 2)  # rank i + 1
        rel = rels[i] if i < len(rels) else 0
        if rel > 0:
            dcg += rel / discount
        if rel >= relevance_level:
            found += 1
            precision_sum += found / (i + 1)
        if i < len(ideal):
            idcg += ideal[i] / discount
        k = i + 1
        if k in ks:
            out[f"ndcg_at_{k}"] = dcg / idcg if idcg > 0 else 0.0
            out[f"map_at_{k}"] = precision_sum / num_rel if num_rel else 0.0
            out[f"recall_at_{k}"] = found / num_rel if num_rel else 0.0
            out[f"precision_at_{k}"] = found / k
    return out


def mteb_mrr(
    judged: Mapping[str, int], ranking: Mapping[str, float], ks: Sequence[int], relevance_level: int = 1
) -> dict[str, float]:
    """MRR@k of one query as MTEB's `mrr` computes it (stable sort: ties keep run order);
    relevant: a grade above 0 and at least `relevance_level`."""
    relevant = {doc for doc, rel in judged.items() if rel > 0 and rel >= relevance_level}
    ranked = sorted(ranking.items(), key=lambda item: item[1], reverse=True)
    first = next((rank for rank, (doc, _) in enumerate(ranked, 1) if doc in relevant), None)
    return {f"mrr_at_{k}": 1.0 / first if first is not None and first <= k else 0.0 for k in ks}
