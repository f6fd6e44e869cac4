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
