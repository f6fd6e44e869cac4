"""Runs table (one row per point and seed), the summary over seeds, the best point, files."""

from __future__ import annotations

import json
import math
import os

import pandas as pd
import pytest

from shardflow.sweep.spec import SweepError
from shardflow.sweep.table import (
    RunResult,
    _typed,
    aggregate,
    best,
    collect,
    flatten_metrics,
    read_table,
    run_result,
    summarise,
    write_table,
)

from .conftest import parse, sweep


def results(spec, loss=lambda point, seed: point["train.lr"] * 100 + point["train.n_layer"] + seed):
    return [run_result(pid, seed, {"best_val_loss": loss(spec.by_id[pid], seed), "steps": 10, "note": "x"},
                       benchmark={"s": 360.0 + seed, "max_rss": 1.0}, gpus=2)
            for pid, seed in reversed(spec.jobs())]


def test_runs_table_has_a_row_per_point_and_seed_in_order(spec):
    runs = collect(spec, results(spec))
    assert list(runs.columns) == ["sweep", "point", "train.lr", "train.n_layer", "seed", "best_val_loss", "steps",
                                  "wall_time_s", "gpu_hours"]
    assert list(zip(runs["point"], runs["seed"], strict=True)) == spec.jobs()
    assert str(runs["train.lr"].dtype) == "float64" and str(runs["train.n_layer"].dtype) == "Int64"
    row = runs.iloc[3]  # lr=0.001, n_layer=4, seed 1
    assert (row["train.lr"], row["train.n_layer"], row["seed"]) == (0.001, 4, 1)
    assert row["best_val_loss"] == pytest.approx(0.1 + 4 + 1)
    assert row["wall_time_s"] == 361.0 and row["gpu_hours"] == pytest.approx(361.0 * 2 / 3600)


def test_every_run_must_be_there_once_with_its_metrics(spec):
    rows = results(spec)
    with pytest.raises(SweepError, match="no result for 1 run"):
        collect(spec, rows[1:])
    with pytest.raises(SweepError, match="two results for point"):
        collect(spec, rows + rows[:1])
    with pytest.raises(SweepError, match="a result for unknown point 'lr=9'"):
        collect(spec, rows + [RunResult("lr=9", 0)])
    rows[0] = RunResult(rows[0].point, rows[0].seed, {"val_loss": 1.0})
    with pytest.raises(SweepError, match=r"seed 1 has no metric 'best_val_loss' \(it has: val_loss\)"):
        collect(spec, rows)


def test_summary_is_mean_and_sample_std_over_seeds():
    spec = parse({"s": sweep(grid={"train.lr": [0.1, 0.2]}, seeds=[0, 1, 2])})["s"]
    values = {("lr=0.1", 0): 1.0, ("lr=0.1", 1): 2.0, ("lr=0.1", 2): 3.0,
              ("lr=0.2", 0): 5.0, ("lr=0.2", 1): 5.0, ("lr=0.2", 2): 8.0}
    runs = collect(spec, [RunResult(p, s, {"best_val_loss": v}, 10.0 * (s + 1), 0.5) for (p, s), v in values.items()])
    summary = aggregate(runs, spec.params)
    assert list(summary.columns) == ["point", "sweep", "train.lr", "n_seeds", "best_val_loss_mean",
                                     "best_val_loss_std", "wall_time_s_mean", "gpu_hours_total"]
    assert summary["best_val_loss_mean"].tolist() == [2.0, 6.0]
    assert summary["best_val_loss_std"].tolist() == pytest.approx([1.0, math.sqrt(3.0)])
    assert summary["n_seeds"].tolist() == [3, 3] and summary["gpu_hours_total"].tolist() == [1.5, 1.5]
    assert summary["wall_time_s_mean"].tolist() == [20.0, 20.0]
    one = aggregate(runs[runs["seed"] == 0], spec.params)
    assert one["best_val_loss_std"].isna().all()  # one seed: no spread to report


def test_best_point(spec):
    summary = summarise(spec, collect(spec, results(spec)))
    assert best(summary, "best_val_loss", maximize=False)["point"] == "lr=0.0003__n_layer=2"
    assert best(summary, "best_val_loss", maximize=True)["point"] == "lr=0.001__n_layer=4"
    assert summary.loc[summary["best"], "point"].tolist() == ["lr=0.0003__n_layer=2"]
    summary.loc[0, "best_val_loss_mean"] = math.nan  # NaN never wins
    assert best(summary, "best_val_loss", maximize=True)["point"] == "lr=0.001__n_layer=4"
    ties = pd.DataFrame({"point": ["a", "b"], "m_mean": [1.0, 1.0]})
    assert best(ties, "m", maximize=True)["point"] == "a"
    with pytest.raises(SweepError, match="no point has a value for metric 'x'"):
        best(pd.DataFrame({"point": ["a"], "x_mean": [math.nan]}), "x", True)


def test_tables_are_written_as_parquet_and_csv(spec, tmp_path):
    runs = collect(spec, results(spec))
    write_table(runs, tmp_path / "runs.parquet", tmp_path / "runs.csv")
    assert sorted(os.listdir(tmp_path)) == ["runs.csv", "runs.parquet"]  # no temporary files left
    back = read_table(tmp_path / "runs.parquet")
    pd.testing.assert_frame_equal(back, runs, check_dtype=False)
    assert str(back["train.n_layer"].dtype) == "Int64"
    assert pd.read_csv(tmp_path / "runs.csv")["train.lr"].tolist() == runs["train.lr"].tolist()


def test_parameter_columns_keep_one_type():
    assert str(_typed([None, 128]).dtype) == "Int64"
    assert str(_typed([1, 0.5]).dtype) == "float64"
    assert str(_typed([True, False]).dtype) == "boolean"
    assert _typed(["a/b", None]).tolist() == ["a/b", pd.NA]
    assert _typed([1, "auto", 0.5]).tolist() == ["1", "auto", "0.5"]  # mixed: their id spellings


def test_metric_records_are_flattened_to_numbers():
    record = {"ndcg_at_10": 0.5, "per_k": {"recall": {"10": 0.7}}, "name": "x", "ok": True, "n": 3}
    assert flatten_metrics(record) == {"ndcg_at_10": 0.5, "per_k.recall.10": 0.7, "n": 3.0}
    assert math.isnan(run_result("p", 0, {}).wall_time_s) and run_result("p", 0, {}, gpus=1).gpu_hours == 0.0


def test_what_a_job_ran_with_is_no_metric():
    """A training record holds `made_with` (core.madewith): its threads and cuDNN version
    are numbers, not metrics a sweep could be ranked by."""
    record = {"steps": 6, "made_with": {"threads": 2, "cudnn": 90100, "model": None}, "x": {"made_with": 1}}
    assert flatten_metrics(record) == {"steps": 6.0, "x.made_with": 1.0}


def test_a_null_metric_is_a_run_without_a_value_and_a_sweep_ranked_by_it_alone_is_refused(spec):
    """A diverged run writes its losses as null (metrics.json is strict JSON), as a CPU run
    writes mfu: the run is tabulated without a value (its point without a mean), where a
    null made the whole collection fail as a metric the run does not write. A sweep
    ranked by a metric no point has stops with one line saying why."""
    flat = flatten_metrics({"best_val_loss": None, "diverged": True, "steps": 6})
    assert sorted(flat) == ["best_val_loss", "steps"] and math.isnan(flat["best_val_loss"])
    point, seed = spec.jobs()[0]
    one_diverged = results(spec, lambda p, s: None if (p, s) == (spec.by_id[point], seed) else 1.0 + s)
    summary = summarise(spec, collect(spec, one_diverged))
    assert math.isnan(summary.at[0, "best_val_loss_mean"]) and not summary.at[0, "best"] and summary["best"].any()
    with pytest.raises(SweepError, match="no point has a value for metric 'best_val_loss': each has a run that wrote "
                                         "it as null, NaN or Infinity"):
        summarise(spec, collect(spec, results(spec, lambda p, s: None)))


def test_a_record_from_before_strict_json_reads_nan_and_infinity_as_no_value(spec):
    """A training record written before metrics.json was strict JSON holds a diverged
    run's loss as NaN or Infinity: read as the null it is now. An infinite loss in every
    seed was the best mean, and best.json held Infinity."""
    old = json.loads('{"best_val_loss": Infinity, "final_val_loss": NaN, "steps": 6}')
    flat = flatten_metrics(old)
    assert math.isnan(flat["best_val_loss"]) and math.isnan(flat["final_val_loss"]) and flat["steps"] == 6.0
    with pytest.raises(SweepError, match="no point has a value for metric 'best_val_loss'"):
        summarise(spec, collect(spec, results(spec, lambda p, s: math.inf)))


def test_a_seed_without_a_value_leaves_its_point_without_a_mean():
    """A diverged seed (NaN loss) used to drop out of the mean: the point showed the other
    seed's loss, bold, as the best. Now it has no mean, and another point is best."""
    import numpy as np

    from shardflow.sweep.table import aggregate, best

    runs = pd.DataFrame({"point": ["a", "a", "b", "b"], "seed": [0, 1, 0, 1], "lr": [1.0, 1.0, 2.0, 2.0],
                         "loss": [np.nan, 1.5, 2.0, 2.2]})
    summary = aggregate(runs, ["lr"], ["loss"])
    assert summary["n_seeds"].tolist() == [2, 2] and np.isnan(summary.at[0, "loss_mean"])
    assert summary.at[1, "loss_mean"] == pytest.approx(2.1) and summary.at[1, "loss_std"] == pytest.approx(0.1414, abs=1e-4)
    assert best(summary, "loss", maximize=False)["point"] == "b"


def test_a_priced_sweeps_tables_carry_its_currency_as_a_column_not_a_metric():
    """The currency of an embed sweep's cost metrics (report.currency): one string column
    in runs and summary, never averaged as a metric; a sweep without it has no column."""
    from shardflow.sweep.table import metric_columns

    spec = parse({"speed": sweep(stage="embed", grid={"embedding.max_length": [64, 128]},
                                 metrics={"estimated_cost": "min"})})["speed"]
    results = [RunResult(p, s, {"estimated_cost": 1.0 + s}, 1.0) for p, s in spec.jobs()]
    runs = collect(spec, results, currency="EUR")
    assert runs["currency"].tolist() == ["EUR"] * 4 and metric_columns(runs, spec.params) == ["estimated_cost"]
    summary = summarise(spec, runs)
    assert summary["currency"].tolist() == ["EUR", "EUR"]
    assert summary["estimated_cost_mean"].tolist() == [1.5, 1.5]
    assert "currency" not in collect(spec, results) and "currency" not in summarise(spec, collect(spec, results))


def test_beyond_depth_reads_the_list_or_a_retrieval_records_depth():
    """The metrics a retrieval record computed on a ranking shallower than their k: the
    list it holds, or, in one written before it held one, those its top_k is shallower
    than; none where the ranking held every document, nor in another stage's record."""
    from shardflow.sweep.table import beyond_depth

    old = {"ndcg_at_10": 0.5, "all": {"ndcg_at_100": 0.5, "recall_at_1000": 0.9}, "top_k": 100, "n_documents": 500}
    assert beyond_depth(old) == {"all.recall_at_1000"}
    assert run_result("p", 0, old).beyond_depth == {"all.recall_at_1000"}
    assert beyond_depth({**old, "beyond_ranking_depth": []}) == frozenset()
    assert beyond_depth({**old, "n_documents": 100}) == frozenset()  # the whole corpus ranked
    assert beyond_depth({"best_val_loss": 1.0, "steps": 10}) == frozenset()


def test_a_retrieval_sweeps_relevance_levels_are_each_runs_where_some_run_names_one():
    """A retrieval record names retrieval.relevance_level only away from 1. The runs
    table's `relevance_level` column (there only where some record names one) reads 1
    for a run whose record leaves it out, not a missing value; relevance_levels gives
    each point's levels, and nothing where every run was scored at 1, or in another stage."""
    from shardflow.sweep.table import relevance_levels

    spec = parse({"r": sweep(stage="retrieval", grid={"retrieval.top_k": [100, 1000]}, seeds=[0, 1],
                             metrics={"recall_at_10": "max"})})["r"]
    low, high = spec.ids

    def runs(level):
        return [run_result(p, s, {"recall_at_10": 0.5, **({"relevance_level": level(p, s)} if level(p, s) != 1 else {})})
                for p, s in spec.jobs()]

    at_one = runs(lambda p, s: 1)
    assert relevance_levels(spec, at_one) == {} and "relevance_level" not in collect(spec, at_one)
    assert relevance_levels(spec, runs(lambda p, s: 2)) == {low: (2,), high: (2,)}
    kept = runs(lambda p, s: 2 if (p, s) == (high, 1) else 1)  # one run scored after the config's level changed
    assert relevance_levels(spec, kept) == {low: (1,), high: (1, 2)}
    assert collect(spec, kept)["relevance_level"].tolist() == [1.0, 1.0, 1.0, 2.0]
    train = parse({"t": sweep()})["t"]
    assert relevance_levels(train, [RunResult(p, s, {"relevance_level": 2.0}) for p, s in train.jobs()]) == {}

