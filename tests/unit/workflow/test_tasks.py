"""Each task's files per data set (what `all`, provenance and the landing page read)."""

import pytest

from shardflow.workflow.tasks import task_files


def test_embedding_main_corpus_has_the_report_other_data_sets_only_verify(config):
    (main,) = task_files(("embedding",), "demo", config, "demo")
    assert main.targets == ["results/demo/verification.json", "results/demo/report/summary.json"]
    assert main.jobs == ["results/demo/embed/jobs.json"]
    (other,) = task_files(("embedding",), "beir", config, "demo")
    assert other.targets == ["results/beir/verification.json"]


@pytest.mark.parametrize(
    ("method", "reference", "targets", "jobs"),
    [
        ("lead", None, ["results/d/summarise/report/summary.json"], ["results/d/summarise/jobs.json"]),
        ("abstractive", "highlights", ["results/d/summarise/report/summary.json", "results/d/summarise/metrics.json"],
         ["results/d/summarise/jobs.json"]),
        ("stored", "highlights", ["results/d/summarise/metrics.json"], []),
    ],
)
def test_summarisation_files_follow_the_method(config, method, reference, targets, jobs):
    config["summarise"] = {"method": method, "reference_field": reference}
    (files,) = task_files(("summarisation",), "d", config, "d")
    assert files.targets == targets and files.jobs == jobs
    (stage, ds, landing), = files.landing
    assert (stage, ds) == ("summarisation", "d") and ("metrics" in landing) == bool(reference)


def test_search_files_are_its_hits_summary_and_records_and_its_landing_section_reads_its_own(config):
    """The landing section reads the search job's record, not the query embedding's (both
    are stats: provenance names each one's device)."""
    (files,) = task_files(("search",), "d", config, "d")
    assert files.targets == ["results/d/search/summary.json", "results/d/search/best_scores.png"]
    assert files.outputs == ["results/d/search/hits.parquet", "results/d/search/summary.json"]
    assert files.stats == ["results/d/search/queries.stats.json", "results/d/search/search.stats.json"]
    assert files.benchmarks == ["benchmarks/embed_search_queries/d.tsv", "benchmarks/search/d.tsv"]
    assert files.landing == [("search", "d", {"summary": "results/d/search/summary.json",
                                              "stats": "results/d/search/search.stats.json"})]


def test_an_unknown_task_is_named(config):
    with pytest.raises(ValueError, match=r"unknown tasks \['traning'\]"):
        task_files(("embedding", "traning"), "d", config, "d")


def test_reproduction_data_checks_match_by_name_or_by_a_byte_identical_copy():
    from shardflow.workflow.reproduce import check_reproduction

    sha = "86c4e6aa9db7c042" + "0" * 48
    expect = {"data_sha256": {"input.txt": sha}}
    (row,) = check_reproduction(expect, {"inputs": {"/data/input.txt": sha}}, None)
    assert (row.item, row.status) == ("data input.txt", "ok")
    (row,) = check_reproduction(expect, {"inputs": {"/data/shakespeare.txt": sha}}, None)  # another name, same bytes
    assert row.status == "ok" and row.item == "data input.txt (as /data/shakespeare.txt)"
    (row,) = check_reproduction(expect, {"inputs": {"/data/input.txt": "f" * 64}}, None)
    assert row.status == "FAIL" and row.got == "f" * 16
    (row,) = check_reproduction(expect, {"inputs": {"/data/other.txt": "f" * 64}}, None)
    assert (row.got, row.status) == ("missing", "FAIL")


@pytest.mark.parametrize("got", [{"mean": 0.5}, "0.5", True, None, float("nan")])
def test_a_reproduction_metric_that_is_no_number_fails_its_row(got):
    """A metrics file whose value is not a number (a nested record, a string) is a FAIL
    row of the check, not a TypeError that ends it before the other rows."""
    from shardflow.workflow.reproduce import check_reproduction

    expect = {"metrics": {"ndcg_at_10": {"value": 0.5, "tolerance": 0.001}, "recall_at_10": {"value": 0.9, "tolerance": 0.001}}}
    rows = check_reproduction(expect, {}, {"ndcg_at_10": got, "recall_at_10": 0.9})
    assert [(r.item, r.status) for r in rows] == [("metric ndcg_at_10", "FAIL"), ("metric recall_at_10", "ok")]


def test_provenance_hashes_the_models_each_task_ran():
    from shardflow.workflow.tasks import models

    cfg = {"embedding": {"model": "default"}, "summarise": {"method": "abstractive", "model": "m/bart", "encoder": "enc"}}
    assert models(("embedding",), cfg) == {"embedding": "default"}
    assert models(("embedding", "retrieval"), cfg) == {"embedding": "default"}
    assert models(("search",), cfg) == {"embedding": "default"}  # the queries' vectors, the model's similarity
    assert models(("summarisation",), cfg) == {"summarise": "m/bart"}
    assert models(("embedding", "summarisation"), cfg) == {"embedding": "default", "summarise": "m/bart"}
    cfg["summarise"]["method"] = "extractive"
    assert models(("summarisation",), cfg) == {"summarise_encoder": "enc"}
    cfg["summarise"]["method"] = "lead"
    assert models(("summarisation", "training"), cfg) == {} and models(("training",), cfg) == {}
