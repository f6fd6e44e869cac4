"""Figures: which files a sweep gets (known at parse time), and that they are written."""

from __future__ import annotations

from shardflow.sweep.plots import plot_files, plot_heatmap, plot_metric, plot_sweep
from shardflow.sweep.table import RunResult, collect, summarise

from .conftest import parse, sweep

PNG = b"\x89PNG\r\n\x1a\n"


def summary_of(spec):
    runs = collect(spec, [RunResult(pid, s, {"best_val_loss": float(i + s), "acc": 1.0 / (i + 1)})
                          for i, (pid, s) in enumerate(spec.jobs())])
    return summarise(spec, runs)


def test_plot_files_follow_from_the_spec():
    spec = parse({"s": sweep(grid={"train.lr": [0.1, 0.01], "train.n_layer": [2, 4], "train.dropout": [0.0]},
                             metrics={"best_val_loss": "min", "acc": "max"})})["s"]
    assert list(plot_files(spec)) == [
        "best_val_loss_vs_lr.png", "best_val_loss_vs_n_layer.png", "best_val_loss_lr_x_n_layer.png",
        "acc_vs_lr.png", "acc_vs_n_layer.png", "acc_lr_x_n_layer.png",
    ]  # dropout takes one value: nothing to plot against
    assert plot_files(parse({"s": sweep(grid=None, points=[{}])})["s"]) == {}


def test_figures_are_written(tmp_path):
    spec = parse({"s": sweep(grid={"train.lr": [0.1, 0.01, 0.001], "train.n_layer": [2, 4],
                                   "train.dtype": ["auto", "float32"]},
                             metrics={"acc": "max"})})["s"]
    paths = plot_sweep(spec, summary_of(spec), tmp_path / "plots")
    assert len(paths) == 3 + 3
    for path in paths:
        with open(path, "rb") as fh:
            assert fh.read(8) == PNG
    # Collected again with another metric: the old metric's figures go, other files stay.
    (tmp_path / "plots" / "notes.txt").write_text("mine")
    other = parse({"s": sweep(grid={"train.lr": [0.1, 0.01, 0.001], "train.n_layer": [2, 4],
                                    "train.dtype": ["auto", "float32"]},
                              metrics={"best_val_loss": "min"})})["s"]
    plot_sweep(other, summary_of(other), tmp_path / "plots")
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == sorted([*plot_files(other), "notes.txt"])


def test_string_and_null_values_plot_as_categories(tmp_path):
    spec = parse({"s": sweep(stage="retrieval", grid={"embedding.model": ["a/b", "c d"],
                                                      "embedding.max_length": [None, 128]},
                             metrics={"best_val_loss": "min"})})["s"]
    summary = summary_of(spec)
    plot_metric(spec, summary, "best_val_loss", "embedding.max_length", tmp_path / "line.png")
    plot_heatmap(spec, summary, "best_val_loss", "embedding.model", "embedding.max_length", tmp_path / "heat.png")
    assert (tmp_path / "line.png").read_bytes()[:8] == PNG == (tmp_path / "heat.png").read_bytes()[:8]


def test_a_priced_sweeps_cost_axes_name_their_currency(tmp_path, monkeypatch):
    """The figures of an embed sweep's cost metric say its currency (report.currency) on
    the axis that shows money: the line plot's y axis, the heatmap's colour bar."""
    import shardflow.sweep.plots as plots

    figures = []
    monkeypatch.setattr(plots, "save_figure", lambda fig, path: figures.append(fig))
    spec = parse({"speed": sweep(stage="embed", grid={"embedding.max_length": [64, 128], "embedding.model": ["a", "b"]},
                                 seeds=[0], metrics={"estimated_cost": "min", "items_per_s": "max"})})["speed"]
    runs = collect(spec, [RunResult(p, s, {"estimated_cost": 1.0 + i, "items_per_s": 2.0 + i})
                          for i, (p, s) in enumerate(spec.jobs())], currency="EUR")
    plot_sweep(spec, summarise(spec, runs), tmp_path / "plots", currency="EUR")
    labels = [ax.get_ylabel() for fig in figures for ax in fig.axes]
    assert "estimated_cost (EUR; lower is better)" in labels and "items_per_s (higher is better)" in labels
    assert "estimated_cost (EUR)" in labels  # the heatmap's colour bar
    assert not any("EUR" in label for label in labels if label.startswith("items_per_s"))


def test_a_metric_no_point_has_a_value_for_is_plotted_without_a_best_point(tmp_path):
    """A shown metric that every point has a run without (mfu on a GPU the peak table
    lacks, a final_val_loss where every point has a diverged seed) reads – in the tables;
    its figures were the one thing that stopped the collection, after every job ran,
    looking for its best point. Only spec.best must have a value (table.best)."""
    import math

    spec = parse({"s": sweep(grid={"train.lr": [0.1, 0.01], "train.n_layer": [2, 4]},
                             metrics={"best_val_loss": "min", "mfu": "max"})})["s"]
    runs = collect(spec, [RunResult(pid, s, {"best_val_loss": float(i + s), "mfu": math.nan})
                          for i, (pid, s) in enumerate(spec.jobs())])
    paths = plot_sweep(spec, summarise(spec, runs), tmp_path / "plots")
    assert len(paths) == 6
    for path in paths:
        with open(path, "rb") as fh:
            assert fh.read(8) == PNG


def test_heatmap_cells_get_the_digits_that_tell_them_apart(tmp_path, monkeypatch):
    """An embed sweep's cosines with the main run's vectors (0.99962, 0.99996, ...) were
    written "1" in every heatmap cell at 3 significant digits, as the tables once read
    1.000 (export.metric_decimals); the cells get digits until they differ (at most 6).
    Cells where some already differ keep 3, a tie where they read the same."""
    import shardflow.sweep.plots as plots

    figures = []
    monkeypatch.setattr(plots, "save_figure", lambda fig, path: figures.append(fig))
    spec = parse({"s": sweep(stage="embed", grid={"embedding.max_length": [64, 128], "embedding.model": ["a", "b"]},
                             seeds=[0], metrics={"agreement.cosine_mean": "max"})})["s"]

    def cells(values):
        runs = collect(spec, [RunResult(p, s, {"agreement.cosine_mean": v})
                              for (p, s), v in zip(spec.jobs(), values, strict=True)])
        figures.clear()
        plot_heatmap(spec, summarise(spec, runs), "agreement.cosine_mean", "embedding.max_length",
                     "embedding.model", tmp_path / "heat.png")
        return sorted(t.get_text() for t in figures[0].axes[0].texts)

    assert cells([0.99962, 0.99996, 0.99981, 0.99990]) == ["0.9996", "0.9998", "0.9999", "1"]
    assert cells([0.99962, 0.99996, 0.5, 0.25]) == ["0.25", "0.5", "1", "1"]


def test_a_float_parameter_reads_in_one_notation_on_axes_and_legends(tmp_path, monkeypatch):
    """As in the tables (export.value_labels): a learning rate's legend entries and heatmap
    ticks read 1e-5 ... 1e-3, not repr's 1e-05, 0.0001, 0.001."""
    import shardflow.sweep.plots as plots

    figures = []
    monkeypatch.setattr(plots, "save_figure", lambda fig, path: figures.append(fig))
    spec = parse({"s": sweep(grid={"train.lr": [1e-5, 1e-4, 1e-3], "train.n_layer": [2, 4]},
                             metrics={"best_val_loss": "min"})})["s"]
    summary = summary_of(spec)
    plot_metric(spec, summary, "best_val_loss", "train.n_layer", tmp_path / "line.png")
    legend = [t.get_text() for t in figures[0].axes[0].get_legend().get_texts()]
    assert sorted(legend) == ["best", "lr=1e-3", "lr=1e-4", "lr=1e-5"]
    plot_heatmap(spec, summary, "best_val_loss", "train.lr", "train.n_layer", tmp_path / "heat.png")
    axes = figures[1].axes[0]
    assert [t.get_text() for t in axes.get_xticklabels()] == ["1e-5", "1e-4", "1e-3"]
    assert [t.get_text() for t in axes.get_yticklabels()] == ["2", "4"]


def test_a_line_break_and_a_backslash_before_n_are_two_lines(tmp_path, monkeypatch):
    """Their labels read alike ("Query:\\n"), and plot_metric drew one line through both
    values' points; labelled apart (export.value_labels), they are two lines."""
    import shardflow.sweep.plots as plots

    figures = []
    monkeypatch.setattr(plots, "save_figure", lambda fig, path: figures.append(fig))
    spec = parse({"s": sweep(stage="retrieval", grid={"embedding.model": ["Query:\n", "Query:\\n"],
                                                      "embedding.max_length": [64, 128]},
                             metrics={"best_val_loss": "min"})})["s"]
    plot_metric(spec, summary_of(spec), "best_val_loss", "embedding.max_length", tmp_path / "line.png")
    legend = [t.get_text() for t in figures[0].axes[0].get_legend().get_texts()]
    assert sorted(legend) == ['best', 'model="Query:\\\\n"', 'model="Query:\\n"']


def test_a_retrieval_sweeps_relevance_level_is_named_on_the_axes_of_the_metrics_it_decides(tmp_path, monkeypatch):
    """Scored away from retrieval.relevance_level 1, a recall (precision, MRR, MAP) figure
    says the level on its value axis: the line plot's y axis, the heatmap's colour bar;
    nDCG's, which reads the grades, and every figure at level 1, as before."""
    import shardflow.sweep.plots as plots

    drawn = []

    def ylabels(fig, path):
        drawn.extend(ax.get_ylabel() for ax in fig.axes)
        plots.pyplot().close(fig)

    monkeypatch.setattr(plots, "save_figure", ylabels)
    spec = parse({"r": sweep(stage="retrieval", grid={"retrieval.top_k": [100, 1000], "embedding.max_length": [64, 128]},
                             seeds=[0], metrics={"all.recall_at_10": "max", "ndcg_at_10": "max"})})["r"]
    summary = summarise(spec, collect(spec, [RunResult(p, s, {"all.recall_at_10": 0.5 + i, "ndcg_at_10": 0.4 + i})
                                             for i, (p, s) in enumerate(spec.jobs())]))

    def labels(levels):
        drawn.clear()
        plot_sweep(spec, summary, tmp_path / "plots", levels=levels)
        return list(drawn)

    at_one = labels({})
    assert "all.recall_at_10 (higher is better)" in at_one and not any("relevance" in label for label in at_one)
    at_two = labels(dict.fromkeys(spec.ids, (2,)))
    assert "all.recall_at_10 (relevance >= 2; higher is better)" in at_two
    assert "all.recall_at_10 (relevance >= 2)" in at_two  # the heatmap's colour bar
    assert "ndcg_at_10 (higher is better)" in at_two and "ndcg_at_10" in at_two
    assert not any("relevance" in label for label in at_two if label.startswith("ndcg"))
    mixed = labels({**dict.fromkeys(spec.ids, (1,)), spec.ids[0]: (2,)})
    assert "all.recall_at_10 (relevance >= 1 or 2, by point; higher is better)" in mixed

