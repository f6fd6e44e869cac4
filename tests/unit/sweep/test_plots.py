"""Figures: which files a sweep gets (known at parse time), and that they are written."""

from __future__ import annotations

import os

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



def _drawn(monkeypatch) -> dict:
    """{file name: figure} of what plot_sweep draws, each figure kept rather than saved."""
    import shardflow.sweep.plots as plots

    figures = {}

    def keep(fig, path):
        figures[os.path.basename(path)] = fig
        plots.pyplot().close(fig)

    monkeypatch.setattr(plots, "save_figure", keep)
    return figures


def _lines(ax) -> list[tuple[str, list[float], list[float]]]:
    return [(line.get_marker(), [float(v) for v in line.get_xdata()], [float(v) for v in line.get_ydata()])
            for line in ax.lines]


def test_a_grid_sweeps_figures_are_its_lines_and_heatmaps_as_before(tmp_path, monkeypatch):
    """Pinned: a grid's (and a list's) figures are drawn as before sampled sweeps got
    scatters: a line per combination of the others with std bars, a heatmap per pair."""
    figures = _drawn(monkeypatch)
    spec = parse({"s": sweep(grid={"train.lr": [1e-5, 1e-4, 1e-3], "train.n_layer": [2, 4]})})["s"]
    plot_sweep(spec, summary_of(spec), tmp_path / "plots")
    assert {name: kind for name, (kind, _, _) in plot_files(spec).items()} == {
        "best_val_loss_vs_lr.png": "line", "best_val_loss_vs_n_layer.png": "line",
        "best_val_loss_lr_x_n_layer.png": "heatmap"}
    line = figures["best_val_loss_vs_lr.png"].axes[0]
    assert (line.get_title(), line.get_xlabel(), line.get_ylabel(), line.get_xscale()) == (
        "s: best_val_loss (mean ± sample std over 2 seeds)", "lr", "best_val_loss (lower is better)", "log")
    drawn = _lines(line)
    assert [marker for marker, _, _ in drawn] == ["o", "_", "_", "o", "_", "_", "*"]
    assert drawn[0][1:] == ([1e-5, 1e-4, 1e-3], [1.0, 5.0, 9.0]) and drawn[-1][1:] == ([1e-5], [1.0])
    assert [t.get_text() for t in line.get_legend().get_texts()] == ["best", "n_layer=2", "n_layer=4"]
    heat = figures["best_val_loss_lr_x_n_layer.png"].axes[0]
    assert heat.get_title() == "s: best_val_loss, best outlined"
    assert [t.get_text() for t in heat.texts] == ["1", "5", "9", "3", "7", "11"]
    listed = parse({"s": sweep(grid=None, points=[{"train.lr": 0.1}, {"train.lr": 0.01, "train.n_layer": 2}])})["s"]
    assert {kind for kind, _, _ in plot_files(listed).values()} == {"line", "heatmap"}


RANGES = {"train.lr": {"log_uniform": [1.0e-4, 1.0e-2]}, "train.dropout": {"uniform": [0.0, 0.5]},
          "train.n_layer": {"int_uniform": [2, 8]}, "train.dtype": ["float32", "bfloat16"]}


def test_a_sampled_sweep_gets_a_scatter_of_its_points_per_parameter(tmp_path, monkeypatch):
    """A sample's points share no grid: per parameter, one marker per point at its mean,
    the std over seeds as error bars, the best point starred, the whole range on the axis
    (log for log_uniform), and no heatmap, whose cells would each hold one point."""
    spec = parse({"s": sweep(grid=RANGES, sample={"points": 12, "seed": 7})})["s"]
    summary = summary_of(spec)
    assert plot_files(spec) == {f"best_val_loss_vs_{name}.png": ("scatter", "best_val_loss", (key,))
                                for key, name in spec.names.items()}
    paths = plot_sweep(spec, summary, tmp_path / "written")
    assert sorted(os.listdir(tmp_path / "written")) == sorted(plot_files(spec))
    assert all(open(p, "rb").read(8) == PNG for p in paths)

    figures = _drawn(monkeypatch)
    plot_sweep(spec, summary, tmp_path / "plots")
    lr = figures["best_val_loss_vs_lr.png"].axes[0]
    assert lr.get_xscale() == "log" and lr.get_xlabel() == "lr log-uniform between 1e-4 and 1e-2"
    low, high = lr.get_xlim()
    assert low < 1e-4 and high > 1e-2 and high / low < 2e2  # the range, a margin beyond each end
    assert lr.get_title() == "s: best_val_loss, 12 sampled points (mean ± sample std over 2 seeds)"
    (points,) = lr.containers  # one errorbar series: every point, its bars
    assert points.has_yerr and len(points.lines[0].get_xdata()) == 12
    assert sorted(points.lines[0].get_xdata()) == sorted(p["train.lr"] for p in spec.points)
    top = summary.loc[summary["best"]].iloc[0]
    assert _lines(lr)[-1] == ("*", [spec.by_id[top["point"]]["train.lr"]], [top["best_val_loss_mean"]])
    assert [t.get_text() for t in lr.get_legend().get_texts()] == ["best", "12 points"]
    dropout = figures["best_val_loss_vs_dropout.png"].axes[0]
    assert dropout.get_xscale() == "linear" and dropout.get_xlabel() == "dropout uniform between 0.0 and 0.5"
    layers = figures["best_val_loss_vs_n_layer.png"].axes[0]
    assert layers.get_xlabel() == "n_layer uniform over the integers 2 to 8" and layers.get_xlim() == (1.5, 8.5)
    dtype = figures["best_val_loss_vs_dtype.png"].axes[0]
    assert dtype.get_xlabel() == "dtype" and {t.get_text() for t in dtype.get_xticklabels()} == {"float32", "bfloat16"}

    # One seed: no spread to show.
    one = parse({"s": sweep(grid=RANGES, sample={"points": 5, "seed": 7}, seeds=[0])})["s"]
    figures.clear()
    plot_sweep(one, summary_of(one), tmp_path / "one")
    (points,) = figures["best_val_loss_vs_lr.png"].axes[0].containers
    assert not points.has_yerr and figures["best_val_loss_vs_lr.png"].axes[0].get_title().endswith("(one seed)")
    # A shown metric no point has a value for (mfu on the CPU): nothing to place, and no best.
    import math

    nan = parse({"s": sweep(grid=RANGES, sample={"points": 5, "seed": 7}, metrics={"best_val_loss": "min", "mfu": "max"})})["s"]
    figures.clear()
    plot_sweep(nan, summarise(nan, collect(nan, [RunResult(p, s, {"best_val_loss": 1.0, "mfu": math.nan})
                                                 for p, s in nan.jobs()])), tmp_path / "nan")
    empty = figures["mfu_vs_lr.png"].axes[0]
    assert not empty.containers and not empty.lines and empty.get_legend() is None


def test_a_sweep_with_a_hundred_values_on_an_axis_draws_figures_of_a_bounded_size(tmp_path, monkeypatch):
    """A heatmap was 1.1 inches a value wide and 0.6 high: ~100 values per axis made an
    8501x5140 px PNG at 2.1 GB, 600 were killed at 24 GB, and the collection drawing it
    failed after every job ran. Above MAX_HEATMAP_VALUES on an axis, a pair is a scatter
    coloured by the metric; a line plot is 6.5x4 inches however many lines it holds."""
    import matplotlib.backends.backend_agg as agg

    import shardflow.sweep.plots as plots
    from shardflow.core.figures import save_figure

    points = [{"train.lr": round(1e-4 * (1 + i), 6), "train.dropout": i / 1000} for i in range(100)]
    spec = parse({"s": sweep(grid=None, points=points, seeds=[0])})["s"]
    summary = summary_of(spec)
    figures = _drawn(monkeypatch)
    plot_sweep(spec, summary, tmp_path / "kept")
    assert set(figures) == set(plot_files(spec)) and len(figures) == 3
    assert all(w <= 20 and h <= 15 for w, h in (fig.get_size_inches() for fig in figures.values()))
    pair = figures["best_val_loss_lr_x_dropout.png"].axes
    (cells,) = pair[0].collections  # one marker per (lr, dropout), coloured by its mean
    assert len(cells.get_offsets()) == 100 and len(cells.get_array()) == 100 and not pair[0].texts
    assert pair[0].get_xscale() == "log" and pair[1].get_ylabel() == "best_val_loss"  # the colour bar
    assert pair[0].get_title() == "s: best_val_loss, best starred"

    canvases = []
    allocate = agg.RendererAgg.__init__

    def recorded(self, width, height, dpi):
        canvases.append((width, height))
        allocate(self, width, height, dpi)

    monkeypatch.setattr(agg.RendererAgg, "__init__", recorded)
    monkeypatch.setattr(plots, "save_figure", save_figure)  # written, as the collection writes them
    plot_sweep(spec, summary, tmp_path / "plots")
    assert canvases and max(w * h for w, h in canvases) <= 20 * 15 * 110**2  # inches at save_figure's dpi
    assert sorted(os.listdir(tmp_path / "plots")) == sorted(plot_files(spec))


def test_a_pair_is_a_heatmap_up_to_30_values_a_side_and_a_scatter_above(tmp_path, monkeypatch):
    """The kind is known at parse time (plot_files); a many-valued axis of strings is
    labelled at most 30 times; plot_heatmap refuses a pair it would draw too large."""
    import pytest

    import shardflow.sweep.plots as plots

    def kinds(n):
        lrs = [round(1e-4 * (1 + i), 6) for i in range(n)]
        return parse({"s": sweep(grid={"train.lr": lrs, "train.n_layer": [2, 4]}, seeds=[0])})["s"]

    assert plot_files(kinds(30))["best_val_loss_lr_x_n_layer.png"][0] == "heatmap"
    above = kinds(31)
    assert plot_files(above)["best_val_loss_lr_x_n_layer.png"][0] == "pair"
    with pytest.raises(ValueError, match="train.lr x train.n_layer takes more than 30 values on an axis"):
        plot_heatmap(above, summary_of(above), "best_val_loss", "train.lr", "train.n_layer", tmp_path / "heat.png")

    figures = _drawn(monkeypatch)
    models = parse({"r": sweep(stage="retrieval", grid={"embedding.model": [f"m{i:02d}" for i in range(45)],
                                                        "embedding.max_length": [64, 128]}, seeds=[0])})["r"]
    plots.plot_sweep(models, summary_of(models), tmp_path / "plots")
    pair = figures["best_val_loss_model_x_max_length.png"].axes[0]
    assert [t.get_text() for t in pair.get_xticklabels()] == [f"m{i:02d}" for i in range(0, 45, 2)]
    assert len(pair.collections[0].get_offsets()) == 90
