"""Retrieval metrics against hand-computed values (MTEB / trec_eval semantics)."""

from __future__ import annotations

import math
import random

import pytest

from shardflow.retrieval.metrics import MTEB_K_VALUES, beyond_depth, evaluate, level_label, trec_order

KS = (1, 3, 10, 100)


def one(qrels, run, k_values=KS, **kwargs):
    """Per-query scores of the single query "q"."""
    return evaluate({"q": qrels}, {"q": run}, k_values, **kwargs).per_query["q"]


def test_graded_relevance_by_hand():
    # Ranking x, a, c, b; relevant: a (2), b (1), m (1, not in the corpus).
    scores = one({"a": 2, "b": 1, "c": 0, "m": 1}, {"x": 0.9, "a": 0.8, "c": 0.7, "b": 0.6})
    dcg = 2 / math.log2(3) + 1 / math.log2(5)
    idcg = 2 + 1 / math.log2(3) + 1 / math.log2(4)  # ideal: 2, 1, 1 (m counts)
    assert scores["ndcg_at_10"] == pytest.approx(dcg / idcg)
    assert scores["ndcg_at_3"] == pytest.approx((2 / math.log2(3)) / idcg)
    assert scores["ndcg_at_1"] == 0.0
    assert scores["recall_at_10"] == pytest.approx(2 / 3)  # m is never retrievable
    assert scores["recall_at_1"] == 0.0
    assert scores["precision_at_10"] == pytest.approx(2 / 10)  # divides by k, not by 4 retrieved
    assert scores["map_at_10"] == pytest.approx((1 / 2 + 2 / 4) / 3)
    assert scores["map_at_3"] == pytest.approx((1 / 2) / 3)
    assert scores["mrr_at_10"] == 0.5
    assert scores["mrr_at_1"] == 0.0


def test_map_divides_by_all_relevant_not_by_k():
    relevant = {f"d{i}": 1 for i in range(20)}
    run = {f"d{i}": 1.0 - i / 100 for i in range(10)}
    scores = one(relevant, run)
    assert scores["map_at_10"] == pytest.approx(10 / 20)
    assert scores["recall_at_10"] == pytest.approx(0.5)
    assert scores["ndcg_at_10"] == pytest.approx(1.0)


def test_qrels_to_missing_docs_count_in_denominators():
    scores = one({"present": 1, "missing": 1}, {"present": 0.9, "other": 0.1})
    assert scores["recall_at_10"] == 0.5
    assert scores["ndcg_at_10"] == pytest.approx(1 / (1 + 1 / math.log2(3)))
    assert scores["map_at_10"] == 0.5


def test_ties_trec_metrics_break_by_doc_id_descending():
    # trec_eval ranks equal scores by doc id descending, whatever the run order.
    for run in ({"a": 0.5, "b": 0.5}, {"b": 0.5, "a": 0.5}):
        scores = one({"a": 1}, run)
        assert scores["ndcg_at_1"] == 0.0
        assert scores["recall_at_1"] == 0.0
        assert scores["ndcg_at_3"] == pytest.approx(1 / math.log2(3))
        assert scores["map_at_3"] == 0.5
    # strcmp order, not numeric: "9" > "10".
    assert trec_order({"10": 1.0, "9": 1.0, "2": 2.0}) == ["2", "9", "10"]
    assert one({"10": 1}, {"9": 1.0, "10": 1.0})["recall_at_1"] == 0.0


def test_ties_mrr_keeps_run_order_like_mteb():
    # MTEB's MRR uses a stable sort: equal scores stay in run (insertion) order.
    assert one({"a": 1}, {"a": 0.5, "b": 0.5})["mrr_at_1"] == 1.0
    assert one({"a": 1}, {"b": 0.5, "a": 0.5})["mrr_at_1"] == 0.0
    assert one({"a": 1}, {"b": 0.5, "a": 0.5})["mrr_at_3"] == 0.5


def test_relevance_threshold_is_positive():
    scores = one({"zero": 0, "rel": 1}, {"zero": 0.9, "rel": 0.1})
    assert scores["mrr_at_10"] == 0.5
    assert scores["recall_at_1"] == 0.0
    assert scores["ndcg_at_1"] == 0.0


def test_query_without_relevant_retrieved_and_denominators():
    qrels = {
        "hit": {"a": 1},
        "miss": {"a": 1},  # retrieves only non-relevant docs
        "empty": {"a": 1},  # retrieved nothing: still counted, as MTEB's run has every query
        "nothing_relevant": {"a": 0},  # no relevant doc at all: scores 0, still counted
        "not_searched": {"a": 1},  # not in the run: ignored (pytrec_eval scores run queries)
    }
    run = {
        "hit": {"a": 1.0},
        "miss": {"b": 1.0},
        "empty": {},
        "nothing_relevant": {"a": 1.0},
        "unjudged": {"a": 1.0},  # no qrels: ignored
    }
    result = evaluate(qrels, run, KS)
    assert result.n_queries == 4
    assert result.n_queries_without_qrels == 1
    assert result.n_queries_not_in_run == 1
    assert set(result.per_query) == {"hit", "miss", "empty", "nothing_relevant"}
    for q in ("miss", "empty", "nothing_relevant"):
        assert all(v == 0.0 for v in result.per_query[q].values()), q
    for name in ("ndcg_at_10", "recall_at_10", "recall_at_100", "mrr_at_10", "map_at_10"):
        assert result.scores[name] == pytest.approx(0.25)
    flat = result.as_dict()
    assert flat["ndcg_at_10"] == pytest.approx(0.25) and flat["n_queries"] == 4
    assert flat["per_query"]["hit"]["mrr_at_10"] == 1.0


def test_a_query_without_any_judgement_is_not_scored_as_in_pytrec_eval():
    """qrels `{"q": {}}` (a filter such as `if rel > 0` emptied it): pytrec_eval leaves the
    query out of its results, so BEIR and MTEB (which drops it with its query) average
    over the others; a judgement of grade 0 still makes a query scored, at 0."""
    qrels = {"hit": {"a": 1}, "zero": {"a": 0}, "none": {}, "none_unsearched": {}}
    run = {"hit": {"a": 1.0}, "zero": {"a": 1.0}, "none": {"a": 1.0}}
    result = evaluate(qrels, run, KS)
    assert set(result.per_query) == {"hit", "zero"}
    assert result.n_queries == 2 and result.n_queries_without_qrels == 1 and result.n_queries_not_in_run == 0
    assert result.scores["ndcg_at_10"] == 0.5 and result.scores["mrr_at_10"] == 0.5  # (1 + 0) / 2
    with pytest.raises(ValueError, match="no query"):
        evaluate({"none": {}}, {"none": {"a": 1.0}})


def test_ignore_identical_ids_drops_self_hits_without_mutating_run():
    qrels = {"q1": {"a": 1}}
    run = {"q1": {"q1": 0.9, "a": 0.5}}
    assert evaluate(qrels, run, KS).per_query["q1"]["mrr_at_1"] == 0.0
    assert evaluate(qrels, run, KS, ignore_identical_ids=True).per_query["q1"]["mrr_at_1"] == 1.0
    assert run == {"q1": {"q1": 0.9, "a": 0.5}}


def test_default_k_values_give_mteb_keys():
    scores = evaluate({"q": {"a": 1}}, {"q": {"a": 1.0}}).scores
    for metric in ("ndcg", "map", "recall", "precision", "mrr"):
        for k in MTEB_K_VALUES:
            assert f"{metric}_at_{k}" in scores


def test_bad_inputs():
    with pytest.raises(ValueError, match="no query"):
        evaluate({"q": {"a": 1}}, {"other": {"a": 1.0}})
    with pytest.raises(ValueError, match="positive"):
        evaluate({"q": {"a": 1}}, {"q": {"a": 1.0}}, [0, 10])


def test_matches_pytrec_eval_when_installed():
    pytrec_eval = pytest.importorskip("pytrec_eval")
    rng = random.Random(7)
    docs = [f"d{i}" for i in range(60)] + ["10", "9", "é1"]
    for _ in range(30):
        qrels = {
            f"q{i}": {d: rng.choice([-1, 0, 1, 2, 3]) for d in rng.sample(docs, 10)} | {"gone": 1}
            for i in range(8)
        } | {"unjudged": {}}
        run = {
            q: {d: rng.randint(0, 4) / 4 for d in rng.sample(docs, rng.randint(0, 40))}
            for q in qrels
        }
        measures = {"ndcg_cut.1,3,10", "map_cut.1,3,10", "recall.1,3,10", "P.1,3,10"}
        ref = pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate(run)
        ours = evaluate(qrels, run, (1, 3, 10)).per_query
        assert set(ours) == set(ref)  # the same queries scored
        for q in ref:
            for k in (1, 3, 10):
                for trec, name in (
                    ("ndcg_cut", "ndcg"),
                    ("map_cut", "map"),
                    ("recall", "recall"),
                    ("P", "precision"),
                ):
                    assert ours[q][f"{name}_at_{k}"] == pytest.approx(
                        ref[q][f"{trec}_{k}"], abs=1e-12
                    )


def test_metrics_beyond_the_ranking_depth():
    """A 100-deep ranking: every metric at 1000 is computed on 100 hits (recall@1000 is
    its recall@100), so it is named; a ranking of the whole corpus names none."""
    at_1000 = ["ndcg_at_1000", "map_at_1000", "recall_at_1000", "precision_at_1000", "mrr_at_1000"]
    assert beyond_depth(100, 8_674) == at_1000
    assert beyond_depth(1000, 8_674) == []
    assert beyond_depth(100, 100) == [] and beyond_depth(300, 300) == []  # every document ranked
    measures = ("ndcg", "map", "recall", "precision", "mrr")
    assert beyond_depth(150, 300, (1000, 10, 200)) == [f"{m}_at_{k}" for m in measures for k in (200, 1000)]
    # What it names: recall@1000 of a 2-deep run is its recall@2, not recall@1000.
    run, qrels = {"a": 0.9, "b": 0.8}, {"a": 1, "c": 1}
    assert one(qrels, run, (2, 1000))["recall_at_1000"] == one(qrels, run, (2, 1000))["recall_at_2"] == 0.5


def test_a_relevance_level_counts_only_grades_at_or_above_it_in_the_binary_metrics():
    """retrieval.relevance_level (trec_eval's -l): MAP, recall, P and MRR count a grade
    below it as not relevant, in their numerators and denominators; nDCG reads the
    grades. TREC DL's graded passage judgements are reported with 2."""
    qrels, run = {"a": 2, "b": 1, "c": 3, "m": 2}, {"b": 0.9, "a": 0.8, "x": 0.7, "c": 0.6}
    one_level, two = one(qrels, run), one(qrels, run, relevance_level=2)
    assert two["ndcg_at_10"] == one_level["ndcg_at_10"]
    assert two["recall_at_10"] == pytest.approx(2 / 3) and one_level["recall_at_10"] == pytest.approx(3 / 4)
    assert two["precision_at_10"] == pytest.approx(2 / 10)
    assert two["map_at_10"] == pytest.approx((1 / 2 + 2 / 4) / 3)
    assert two["mrr_at_10"] == 0.5 and one_level["mrr_at_10"] == 1.0  # b (1) no longer counts
    assert one(qrels, run, relevance_level=4)["recall_at_10"] == 0.0  # none that high: 0, still scored
    with pytest.raises(ValueError, match="relevance_level must be >= 1"):
        one(qrels, run, relevance_level=0)


def test_a_figure_names_the_relevance_level_on_exactly_the_metrics_it_changes():
    """level_label marks the metrics whose value the level changes (MAP, recall, P, MRR:
    here a grade-1 document ranked first, relevant at 1 only) and leaves nDCG, and every
    metric at level 1, as it is named."""
    qrels, run = {"a": 1, "b": 2}, {"a": 0.9, "x": 0.8, "b": 0.7}
    one_level, two = one(qrels, run, (1,)), one(qrels, run, (1,), relevance_level=2)
    for name in one_level:
        changed = two[name] != one_level[name]
        assert level_label(name, 2) == (f"{name} (relevance >= 2)" if changed else name)
        assert level_label(name, 1) == name
    assert level_label("all.map_at_5", 3) == "all.map_at_5 (relevance >= 3)"
    assert level_label("all.ndcg_at_5", 3) == "all.ndcg_at_5"


def test_a_relevance_level_matches_pytrec_evals_when_installed():
    pytrec_eval = pytest.importorskip("pytrec_eval")
    rng = random.Random(11)
    docs = [f"d{i}" for i in range(40)]
    for level in (2, 3):
        qrels = {f"q{i}": {d: rng.choice([0, 1, 2, 3]) for d in rng.sample(docs, 12)} for i in range(10)}
        run = {q: {d: rng.randint(0, 8) / 8 for d in rng.sample(docs, 25)} for q in qrels}
        measures = {"ndcg_cut.1,3,10", "map_cut.1,3,10", "recall.1,3,10", "P.1,3,10"}
        ref = pytrec_eval.RelevanceEvaluator(qrels, measures, relevance_level=level).evaluate(run)
        ours = evaluate(qrels, run, (1, 3, 10), relevance_level=level).per_query
        for q in ref:
            for k in (1, 3, 10):
                for trec, name in (("ndcg_cut", "ndcg"), ("map_cut", "map"), ("recall", "recall"), ("P", "precision")):
                    assert ours[q][f"{name}_at_{k}"] == pytest.approx(ref[q][f"{trec}_{k}"], abs=1e-12), (level, q, k)
