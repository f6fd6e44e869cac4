"""A sweep's metrics are checked against what its stage's jobs write, at parse time; the
lists of shardflow.sweep.metrics are pinned here to the writers themselves (training's
to real runs in tests/workflow/test_sweep_e2e.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from shardflow.core.columns import write_ids_parquet
from shardflow.sweep.metrics import (
    RETRIEVAL_LEVELLED,
    incomparable_points,
    stage_metrics,
    summary_report_metrics,
    unknown_metrics,
)

from .conftest import parse, sweep


def leaf_names(record: dict, prefix: str = "") -> set[str]:
    """Every key a metrics record holds a number (or null) at, nested keys joined by '.'."""
    names = set()
    for key, value in record.items():
        if isinstance(value, dict):
            names |= leaf_names(value, f"{prefix}{key}.")
        elif value is None or (isinstance(value, (int, float)) and not isinstance(value, bool)):
            names.add(f"{prefix}{key}")
    return names


def test_a_misspelt_metric_names_the_sweep_the_metric_and_the_closest_name():
    specs = parse({
        "ok": sweep(metrics={"best_val_loss": "min", "tokens_per_second": "max"}),
        "r": sweep(stage="retrieval", grid={"retrieval.top_k": [100]}, metrics={"ndcg@10": "max", "all.ndcg_at_100": "max"}),
        "s": sweep(stage="summarise", grid={"summarise.k": [1]}, metrics={"rouge1": "max", "systems.lead.rougeL.mean": "max",
                                                                      "rougeLSum": "max"}),
        "e": sweep(stage="embed", grid={"embedding.max_length": [64]},
                   metrics={"items_per_s": "max", "agreement.cosine_minimum": "max"}),
    })
    assert unknown_metrics(specs["ok"]) == []
    # What the parse reports (rules/common.smk), one line a metric, every sweep's at once.
    lines = [line for spec in specs.values() for line in unknown_metrics(spec)]
    assert len(lines) == 3
    assert lines[0].startswith("sweep 'r': metric 'ndcg@10' is not one a retrieval job writes; did you mean 'ndcg_at_10'?")
    assert "all.* (35 names, e.g. all.ndcg_at_1)" in lines[0]
    assert lines[1].startswith("sweep 's': metric 'rougeLSum' is not one a summarise job writes; did you mean 'rougeLsum'?")
    assert lines[2].startswith(
        "sweep 'e': metric 'agreement.cosine_minimum' is not one an embed job writes; did you mean 'agreement.cosine_min'?"
    )


def test_a_metric_named_as_a_column_of_the_runs_table_stops_the_parse():
    """An embed job writes gpu_hours, but the runs table has its own gpu_hours column (the
    collection's): ranking by it stopped the collection after every job had run."""
    specs = parse({"e": sweep(stage="embed", grid={"embedding.max_length": [64]},
                              metrics={"items_per_s": "max", "gpu_hours": "min"})})
    (line,) = unknown_metrics(specs["e"])
    assert line.startswith("sweep 'e': metric 'gpu_hours' is a column the collection writes for every run")
    assert line.endswith("estimated_cost ranks by the same GPU-hours")


def test_agreement_needs_every_point_to_load_the_main_runs_model():
    """An embed point with another model has no agreement (its vectors live in another
    space): a sweep showing it stops the parse, naming the points, not the collection."""
    specs = parse({
        "models": sweep(stage="embed", grid={"embedding.model": ["default", "/models/e5"]},
                        metrics={"items_per_s": "max", "agreement.cosine_min": "max"}),
        "speed": sweep(stage="embed", grid={"embedding.model": ["default", "/models/e5"]}, metrics={"items_per_s": "max"}),
        "same": sweep(stage="embed", grid={"embedding.max_length": [64]}, metrics={"agreement.cosine_mean": "max"}),
    })
    (line,) = incomparable_points(specs["models"], "default")
    assert line.startswith("sweep 'models': agreement.cosine_min compares each point's vectors with the main run's")
    assert "(embedding.model 'default'), but point model=_2fmodels_2fe5 loads another model" in line
    assert incomparable_points(specs["speed"], "default") == [] and incomparable_points(specs["same"], "default") == []
    assert incomparable_points(specs["same"], "/models/e5") != []  # the main run loads another model


def test_another_spelling_of_the_main_runs_model_has_an_agreement():
    """"default" and the bundled model's folder (or a folder with and without its trailing
    slash) are one model: no parse error, and the point's job reads the main run's vectors."""
    from shardflow.core.models import bundled_model_path

    bundled = bundled_model_path()
    specs = parse({"spelt": sweep(stage="embed", grid={"embedding.model": [bundled, bundled + "/"]},
                                  metrics={"agreement.cosine_min": "max"})})
    assert incomparable_points(specs["spelt"], "default") == []
    assert incomparable_points(specs["spelt"], bundled + "/") == []


def test_mfu_is_no_train_metric_on_the_cpu():
    """Null where no GPU peak applies: ranking by it failed in the collection, after the jobs."""
    assert "mfu" in stage_metrics("train", {"gpu_jobs": {"device": "auto"}})
    assert "mfu" not in stage_metrics("train", {"gpu_jobs": {"device": "cpu"}})
    assert "best_val_loss" in stage_metrics("train", {})


@pytest.mark.parametrize("stage", ["train", "embed"])
def test_peak_gpu_memory_is_a_metric_of_gpu_jobs_only(stage):
    """A train or embed sweep may tabulate or rank by the jobs' peak GPU memory; on the CPU
    it is null in every record, so naming it stops the parse (unknown_metrics reads these
    names), as mfu does."""
    for name in ("peak_gpu_mem_mib", "peak_gpu_mem_reserved_mib"):
        assert name in stage_metrics(stage, {"gpu_jobs": {"device": "auto"}})
        assert name not in stage_metrics(stage, {"gpu_jobs": {"device": "cpu"}})


def test_summarise_names_follow_the_method():
    assert "systems.extractive.rouge2.ci_low" in stage_metrics("summarise", {"summarise": {"method": "extractive"}})
    assert "systems.lead.rouge2.ci_low" not in stage_metrics("summarise", {"summarise": {"method": "extractive"}})


def test_retrieval_names_are_what_search_and_score_writes(tmp_path):
    from shardflow.retrieval.pipeline import EvaluateParams, search_and_score

    docs = np.eye(4, dtype=np.float32)
    np.save(tmp_path / "d.npy", docs)
    np.save(tmp_path / "q.npy", docs[:2])
    write_ids_parquet(tmp_path / "d.parquet", ["d0", "d1", "d2", "d3"])
    write_ids_parquet(tmp_path / "q.parquet", ["q0", "q1"])
    (tmp_path / "qrels.json").write_text(json.dumps({"q0": {"d0": 1}, "q1": {"d1": 1}}))
    out = {n: str(tmp_path / n) for n in ("m.json", "p.parquet", "r.parquet")}
    search_and_score(str(tmp_path / "d.npy"), str(tmp_path / "d.parquet"), str(tmp_path / "q.npy"),
                     str(tmp_path / "q.parquet"), str(tmp_path / "qrels.json"), EvaluateParams(top_k=4, device="cpu"),
                     out["m.json"], out["p.parquet"], out["r.parquet"])
    record = json.loads((tmp_path / "m.json").read_text())
    assert leaf_names(record) == set(stage_metrics("retrieval", {}))


def test_summarise_names_are_what_the_rouge_evaluation_writes(tmp_path):
    from shardflow.summarise.evaluate import evaluate_summaries
    from shardflow.summarise.params import ScoreParams
    from shardflow.summarise.records import write_summaries

    src = tmp_path / "src.jsonl"
    src.write_text(json.dumps({"id": "a", "highlights": "The council approved the budget."}) + "\n")
    summaries = tmp_path / "s.jsonl"
    write_summaries(summaries, ["a"], [{"summary": "The council met.", "input_tokens": 9, "output_tokens": 3,
                                        "truncated": False}])
    out = {k: str(tmp_path / n) for k, n in (("metrics", "m.json"), ("per_document", "p.parquet"), ("figure", "f.png"))}
    evaluate_summaries(str(summaries), [str(src)], ScoreParams(resamples=10), out, system="lead")
    record = json.loads((tmp_path / "m.json").read_text())
    assert leaf_names(record) == set(stage_metrics("summarise", {"summarise": {"method": "lead"}}))


@pytest.mark.parametrize(("method", "device", "peak"), [("extractive", "auto", 650.0), ("lead", "auto", None),
                                                        ("abstractive", "cpu", None)])
def test_summary_report_names_are_what_run_summary_writes(method, device, peak):
    """A reproduction of summaries without references reads the stage's summary.json: its
    names are checked at parse time against summary_report_metrics. The largest job's peak
    GPU memory is null where the jobs run on the CPU (method lead's always); the seconds
    of killed attempts per device are keyed by the data's devices, not listed."""
    from shardflow.summarise.report import SummaryReportParams, run_summary

    job = {"items": 10, "input_tokens": 1000, "output_tokens": 100, "truncated": 1, "start_time": 0.0,
           "end_time": 10.0, "seconds": 9.0, "device": "cpu" if peak is None else "cuda:0", "chunk": 0,
           "peak_gpu_mem_mib": peak, "peak_gpu_mem_reserved_mib": peak, "earlier_attempts": 1,
           "earlier_attempt_seconds": 5.0, "earlier_attempt_devices": {"cuda:1": 5.0}}
    record = run_summary([job], [{"s": 10.0}], {"rejected_records": 0}, SummaryReportParams(),
                         np.array([[1000, 100]], dtype=np.int64))
    written = {n for n in leaf_names(record) if not n.startswith("earlier_attempt_devices.")}
    if peak is None:  # null on the CPU: no value a reproduction can compare
        written -= {n for n in written if n.startswith("peak_gpu_mem_") and record[n] is None}
    config = {"summarise": {"method": method}, "gpu_jobs": {"device": device}}
    assert written == set(summary_report_metrics(config))


def test_the_measures_a_relevance_level_decides_are_the_scorings():
    """The sweep's figures name the level on the measures the retrieval scoring counts it
    in (the sweep layer may not import shardflow.retrieval, so the list is written out)."""
    from shardflow.retrieval.metrics import LEVELLED_METRICS

    assert RETRIEVAL_LEVELLED == LEVELLED_METRICS

