"""write_report: every file output_files lists, from one call; the parse-time cost helper."""

from __future__ import annotations

import json
import os
from pathlib import Path

from shardflow.sweep.bench import expand_and_name
from shardflow.sweep.cost import JobCost
from shardflow.sweep.report import output_files, write_report
from shardflow.sweep.table import run_result


def test_write_report_writes_every_declared_file(spec, tmp_path):
    folder = str(tmp_path / "lr-depth")
    runs = [run_result(pid, seed, {"best_val_loss": 3.0 - i * 0.5}, {"s": 60.0}, gpus=1)
            for i, (pid, seed) in enumerate(spec.jobs())]
    costs = [[JobCost(f"benchmarks/sweeps/{spec.folder}/{r.point}/seed={r.seed}/train.tsv", r.wall_time_s, r.gpu_hours)]
             for r in runs]
    files = write_report(spec, runs, costs, folder)
    assert files == output_files(spec, folder)
    assert all(os.path.isfile(p) for p in files.values())
    assert sorted(os.listdir(folder)) == ["best.json", "cost.json", "plots", "points.json", "runs.csv", "runs.parquet",
                                          "summary.csv", "summary.parquet", "table.md", "table.tex"]
    cost = json.loads(Path(files["cost"]).read_text())
    assert cost["jobs"] == len(runs) and cost["by_origin"]["sweep"]["jobs"] == len(runs)
    assert cost["gpu_hours"] == round(len(runs) * 60.0 / 3600, 6)
    # A sweep its collection does not price (no cost.Price: not an embed sweep) shows no money, so no currency.
    assert not {"estimated_cost", "gpu_hour_price", "currency"} & set(cost)
    import pandas as pd

    assert "currency" not in pd.read_parquet(files["runs_parquet"]) and "currency" not in pd.read_csv(files["summary_csv"])
    best = json.loads(Path(files["best"]).read_text())
    assert "currency" not in best
    assert best["point"] == "lr=0.0003__n_layer=4" and best["params"] == {"train.lr": 0.0003, "train.n_layer": 4}
    assert best["mean"] == 3.0 - 6.5 / 2 + 0.0 and best["n_seeds"] == 2 and best["goal"] == "min"
    points = json.loads(Path(files["points"]).read_text())
    assert [p["id"] for p in points["points"]] == list(spec.ids) and points["seeds"] == [0, 1]
    assert points["points"][2] == {"id": "lr=0.0003__n_layer=2", "params": {"train.lr": 0.0003, "train.n_layer": 2}}


def test_expand_and_name_names_every_point():
    out = expand_and_name(1000)
    assert out["points"] == out["jobs"] == 1000 and out["longest_id"] < 120


def _retrieval_record(top_k: int, recall: float, listed: bool = True) -> dict:
    """A retrieval job's metrics.json, as search_and_score writes it over 8,674 documents
    (without beyond_ranking_depth where not `listed`: one written before it was)."""
    at_1000 = [f"all.{m}_at_1000" for m in ("ndcg", "map", "recall", "precision", "mrr")]
    scores = {"recall_at_100": recall, "recall_at_1000": recall}
    record = {"ndcg_at_10": 0.5, "all": scores, "top_k": top_k, "n_documents": 8674, "n_queries": 3}
    if listed:
        record["beyond_ranking_depth"] = at_1000 if top_k < 1000 else []
    return record


def test_metrics_beyond_the_ranking_depth_are_marked_in_the_tables_and_best_json(tmp_path):
    """retrieval.top_k 100 and all.recall_at_1000: the value is recall@100, not recall@1000;
    the tables mark its cell † with a footnote, best.json says so where it is the best,
    and a record from before beyond_ranking_depth is read from its top_k and n_documents."""
    from .conftest import parse, sweep

    metrics = {"all.recall_at_1000": "max", "ndcg_at_10": "max"}
    spec = parse({"r": sweep(stage="retrieval", grid={"retrieval.top_k": [100, 1000]}, metrics=metrics)})["r"]
    shallow, deep = spec.ids
    for listed in (True, False):
        folder = str(tmp_path / f"listed={listed}")
        records = {shallow: _retrieval_record(100, 0.95, listed), deep: _retrieval_record(1000, 0.9, listed)}
        runs = [run_result(pid, seed, records[pid], {"s": 1.0}) for pid, seed in spec.jobs()]
        files = write_report(spec, runs, [[] for _ in runs], folder)
        table = Path(files["markdown"]).read_text().splitlines()
        assert table[2:4] == [
            "| 100 | **0.950 ± 0.000**† | **0.500 ± 0.000** |",
            "| 1000 | 0.900 ± 0.000 | **0.500 ± 0.000** |",
        ]
        note = "best in bold. † computed on a ranking shallower than its k (retrieval.top_k): not the metric at k."
        assert table[-1].endswith(note)
        latex = Path(files["latex"]).read_text()
        assert "100 & $\\mathbf{0.950 \\pm 0.000}^{\\dagger}$ & $\\mathbf{0.500 \\pm 0.000}$ \\\\" in latex
        assert "$^{\\dagger}$ computed on a ranking shallower than its k (retrieval.top\\_k)" in latex
        best = json.loads(Path(files["best"]).read_text())
        assert best["point"] == shallow and best["beyond_ranking_depth"] is True
    # Every point ranked 1000 deep: nothing marked, no footnote.
    runs = [run_result(pid, seed, _retrieval_record(1000, 0.9), {"s": 1.0}) for pid, seed in spec.jobs()]
    files = write_report(spec, runs, [[] for _ in runs], str(tmp_path / "deep"))
    assert "†" not in Path(files["markdown"]).read_text() and "dagger" not in Path(files["latex"]).read_text()
    assert "beyond_ranking_depth" not in json.loads(Path(files["best"]).read_text())


def test_a_retrieval_sweep_scored_away_from_relevance_level_1_names_it_in_its_tables_and_figures(tmp_path, monkeypatch):
    """write_report reads each run's level from its record (metrics.json names it only
    away from 1) and hands it to the tables and figures; scored at 1, they name none."""
    import shardflow.sweep.plots as plots

    from .conftest import parse, sweep

    ylabels = []
    save = plots.save_figure

    def saved(fig, path):
        ylabels.extend(ax.get_ylabel() for ax in fig.axes)
        save(fig, path)

    monkeypatch.setattr(plots, "save_figure", saved)
    spec = parse({"r": sweep(stage="retrieval", grid={"retrieval.top_k": [100, 1000]},
                             metrics={"recall_at_10": "max", "ndcg_at_10": "max"})})["r"]

    def report(folder, level):
        record = {"recall_at_10": 0.5, "ndcg_at_10": 0.4, **({"relevance_level": level} if level != 1 else {})}
        runs = [run_result(pid, seed, record, {"s": 1.0}) for pid, seed in spec.jobs()]
        ylabels.clear()
        return write_report(spec, runs, [[] for _ in runs], str(tmp_path / folder))

    files = report("one", 1)
    tables = Path(files["markdown"]).read_text() + Path(files["latex"]).read_text()
    assert "relevance" not in tables and not any("relevance" in y for y in ylabels)
    assert "relevance_levels" not in json.loads(Path(files["best"]).read_text())  # best.json as before
    files = report("two", 2)
    # For the report's first page, which reads best.json and not the tables.
    assert json.loads(Path(files["best"]).read_text())["relevance_levels"] == [2]
    # Runs kept from before the level changed (--touch): best.json gives the best point's own
    # level, the one its value was scored at, not every level of the sweep ("1 or 2").
    runs = [run_result(pid, seed, {"recall_at_10": 0.5 + 0.1 * i, "ndcg_at_10": 0.4,
                                   **({"relevance_level": 2} if i == 0 else {})}, {"s": 1.0})
            for i, (pid, seed) in enumerate(spec.jobs())]
    best = json.loads(Path(write_report(spec, runs, [[] for _ in runs], str(tmp_path / "mixed"))["best"]).read_text())
    assert best["point"] == spec.jobs()[-1][0] and best["relevance_levels"] == [1]
    assert Path(files["markdown"]).read_text().rstrip().endswith(
        "count grades of 2 and above as relevant (retrieval.relevance_level), nDCG the grades themselves.")
    assert "count grades of 2 and above as relevant" in Path(files["latex"]).read_text()
    assert "recall_at_10 (relevance >= 2; higher is better)" in ylabels and "ndcg_at_10 (higher is better)" in ylabels
