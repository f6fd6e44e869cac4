"""A sweep's figures: each metric against each parameter, and a heatmap per pair.

Which files a sweep gets is a pure function of its spec (`plot_files`), so a rule can
declare them at parse time: for every metric of spec.metrics, one line plot per
parameter with at least two values, and one heatmap per pair of such parameters. A
heatmap gets room for each cell's label, so its size grows with the values on its axes:
a pair with more than MAX_HEATMAP_VALUES on either is a scatter coloured by the metric
instead (plot_pair), of a fixed size, and no figure grows past about 36 x 20 inches. A
sampled sweep's points (spec `sample:`) share no grid: it gets one scatter per such
parameter instead (plot_scatter), and no heatmap, which would hold one point per cell.
The best point of each figure's metric is starred or outlined; a metric no point has
a value for (every point has a run that wrote it as null: table.best) has none to mark.
A priced sweep's cost metrics say their currency on the axis (cost.money_label). A
heatmap's cells are labelled at 3 significant digits, more where every cell would read
the same (cell_digits), as the tables' columns get decimals. Parameter values on the axes
and in the legends read as in the tables: one notation a parameter (export.value_labels).
A retrieval sweep scored away from retrieval.relevance_level 1 names the level on the
value axis of the metrics it decides (export.level_phrase: "relevance >= 2").
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

import pandas as pd

from shardflow.core.figures import pyplot, save_figure
from shardflow.sweep.cost import metric_currency, money_label
from shardflow.sweep.export import drawn_from, level_phrase, value_labels
from shardflow.sweep.paths import format_value
from shardflow.sweep.sample import Range, drawn_range
from shardflow.sweep.spec import SweepSpec
from shardflow.sweep.table import best


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-") or "x"


def _labels(spec: SweepSpec, param: str) -> dict[str, str]:
    """{format_value(v): label} of the parameter's values, as the tables show them."""
    return value_labels(p[param] for p in spec.points)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _axis_values(spec: SweepSpec, param: str) -> list[Any]:
    """The parameter's distinct values: sorted when all numbers, else in the order given."""
    seen = {format_value(p[param]): p[param] for p in spec.points}
    values = list(seen.values())
    return sorted(values) if all(_is_number(v) for v in values) else values


def varied(spec: SweepSpec) -> list[str]:
    """Parameters that take at least two values."""
    return [p for p in spec.params if len(_axis_values(spec, p)) > 1]


# The most values on either axis of a heatmap: 1.1 x 0.6 inches a cell, room for its label,
# so 35.5 x 20 inches at most. Drawn at a value's size, ~100 values a side made an
# 8501x5140 px PNG at 2.1 GB, and 600 were killed at 24 GB, failing the collection.
MAX_HEATMAP_VALUES = 30


def plot_files(spec: SweepSpec) -> dict[str, tuple[str, str, tuple[str, ...]]]:
    """{file name: (kind, metric, parameters)} of every figure of the sweep; kind: line,
    heatmap, pair (a heatmap's pair with too many values for cells), or a sampled
    sweep's scatter."""
    params = varied(spec)
    files = {}
    if spec.sample:  # drawn values: a scatter per parameter, no grid to draw lines or cells over
        for metric in spec.metrics:
            for p in params:
                files[f"{_slug(metric)}_vs_{_slug(spec.names[p])}.png"] = ("scatter", metric, (p,))
        return files
    for metric in spec.metrics:
        for p in params:
            files[f"{_slug(metric)}_vs_{_slug(spec.names[p])}.png"] = ("line", metric, (p,))
        for i, x in enumerate(params):
            for y in params[i + 1:]:
                name = f"{_slug(metric)}_{_slug(spec.names[x])}_x_{_slug(spec.names[y])}.png"
                files[name] = ("heatmap" if _fits_cells(spec, x, y) else "pair", metric, (x, y))
    return files


def _fits_cells(spec: SweepSpec, x: str, y: str) -> bool:
    return max(len(_axis_values(spec, x)), len(_axis_values(spec, y))) <= MAX_HEATMAP_VALUES


def _best_point(summary: pd.DataFrame, metric: str, maximize: bool) -> pd.Series | None:
    """The summary row of `metric`'s best point, or None where no point has a mean of it.

    Only spec.best must have one (table.summarise refuses a sweep ranked by a metric no
    point has); another shown metric without any (mfu on a GPU its peak table lacks, a
    final_val_loss where each point has a diverged seed) reads – in the tables, and its
    figures are drawn without a best point rather than stopping the collection.
    """
    if summary[f"{metric}_mean"].isna().all():
        return None
    return best(summary, metric, maximize)


# Significant digits of a heatmap's cell labels, and the most they get to tell cells apart.
CELL_DIGITS, MOST_CELL_DIGITS = 3, 6


def cell_digits(values: Iterable[float]) -> int:
    """CELL_DIGITS, or more (up to MOST_CELL_DIGITS) where the cells differ but every one
    would read the same: cosines of 0.99962 and 0.99996 are both "1" at 3 digits. As the
    tables' columns (export.metric_decimals): where some cells differ, two that read the
    same are a tie."""
    finite = {float(v) for v in values if not math.isnan(v)}
    for digits in range(CELL_DIGITS, MOST_CELL_DIGITS + 1):
        if len({f"{v:.{digits}g}" for v in finite}) > 1:
            return digits
    return CELL_DIGITS


def _rows(spec: SweepSpec, summary: pd.DataFrame, metric: str) -> list[tuple[dict, float, float]]:
    """(point, mean, std) per point, in the spec's order."""
    by_point = summary.set_index("point")
    out = []
    for pid in spec.ids:
        mean = float(by_point.at[pid, f"{metric}_mean"])
        std = float(by_point.at[pid, f"{metric}_std"])
        out.append((spec.by_id[pid], mean, 0.0 if math.isnan(std) else std))
    return out


def _cells(spec: SweepSpec, summary: pd.DataFrame, metric: str, x: str, y: str) -> dict[tuple[str, str], float]:
    """{(x's format_value, y's): mean} of each pair of values, the best over the other
    parameters; NaN where no point of it has a mean."""
    maximize = spec.goals[metric] == "max"
    cells: dict[tuple[str, str], float] = {}
    for point, mean, _ in _rows(spec, summary, metric):
        key = (format_value(point[x]), format_value(point[y]))
        old = cells.get(key, math.nan)
        cells[key] = mean if math.isnan(old) or (mean > old if maximize else mean < old) else old
    return cells


def _by_factors(xs: list[float]) -> bool:
    """Whether numbers are spaced by factors (learning rates, sizes): a log axis shows them."""
    return min(xs) > 0 and max(xs) / min(xs) >= 10


def _value_axis(spec: SweepSpec, metric: str, currency: str | None, levels: Mapping[str, Iterable[int]] | None) -> str:
    """The label of `metric`'s axis: its currency, relevance level and which way is better."""
    unit = metric_currency(metric, currency)
    level = level_phrase(metric, levels or {})
    return (f"{metric} ({f'{unit}; ' if unit else ''}{f'{level}; ' if level else ''}"
            f"{'higher' if spec.goals[metric] == 'max' else 'lower'} is better)")


def _over_seeds(spec: SweepSpec) -> str:
    seeds = len(spec.seeds)
    return f"(mean ± sample std over {seeds} seeds)" if seeds > 1 else "(one seed)"


def plot_metric(spec: SweepSpec, summary: pd.DataFrame, metric: str, param: str, path: str | os.PathLike,
                currency: str | None = None, levels: Mapping[str, Iterable[int]] | None = None) -> None:
    """Mean of `metric` against `param`, std error bars, one line per combination of the
    others; `currency`: a priced sweep's; `levels`: a retrieval sweep's relevance levels
    by point (table.relevance_levels)."""
    plt = pyplot()
    xs = _axis_values(spec, param)
    numeric = all(_is_number(v) for v in xs)
    position = {format_value(v): (v if numeric else i) for i, v in enumerate(xs)}
    others = [p for p in spec.params if p != param]
    labels = {p: _labels(spec, p) for p in spec.params}
    lines: dict[str, list[tuple[float, float, float]]] = {}
    for point, mean, std in _rows(spec, summary, metric):
        label = ", ".join(f"{spec.names[o]}={labels[o][format_value(point[o])]}" for o in others)
        lines.setdefault(label, []).append((position[format_value(point[param])], mean, std))
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for label, pts in lines.items():
        pts.sort()
        ax.errorbar([p[0] for p in pts], [p[1] for p in pts], yerr=[p[2] for p in pts],
                    marker="o", capsize=3, label=label or None)
    top_row = _best_point(summary, metric, spec.goals[metric] == "max")
    if top_row is not None:
        top = spec.point(top_row["point"])
        ax.plot([position[format_value(top[param])]], [float(top_row[f"{metric}_mean"])], marker="*", markersize=16,
                color="gold", markeredgecolor="black", linestyle="none", zorder=5, label="best")
    if numeric and _by_factors(xs):
        ax.set_xscale("log")
    if not numeric:
        ax.set_xticks(range(len(xs)), [labels[param][format_value(v)] for v in xs], rotation=30 if len(xs) > 4 else 0)
    ax.set_xlabel(spec.names[param])
    ax.set_ylabel(_value_axis(spec, metric, currency, levels))
    ax.set_title(f"{spec.name}: {metric} {_over_seeds(spec)}")
    if len(lines) <= 12:
        ax.legend(fontsize="small")
    save_figure(fig, str(path))


# The margin a scatter's axis leaves beyond each end of a range, as a fraction of its span.
RANGE_MARGIN = 0.03


def _range_limits(drawn: Range) -> tuple[float, float]:
    """Axis limits that show range `drawn` whole: its ends and a margin (on a log axis, a
    factor; an int_uniform one's half a step at least, as its ends are values)."""
    low, high = drawn.low, drawn.high
    if drawn.kind == "log_uniform":
        factor = (high / low) ** RANGE_MARGIN
        return low / factor, high * factor
    margin = max(RANGE_MARGIN * (high - low), 0.5 if drawn.kind == "int_uniform" else 0.0)
    return low - margin, high + margin


def plot_scatter(spec: SweepSpec, summary: pd.DataFrame, metric: str, param: str, path: str | os.PathLike,
                 currency: str | None = None, levels: Mapping[str, Iterable[int]] | None = None) -> None:
    """A sampled sweep's `metric` against `param`: one marker per point at its mean, the
    std over seeds as error bars where there are several, the best point starred. A
    sample draws every parameter at once, so no two points need share the others' values:
    plot_metric's lines (one per combination of the others) would each hold one point.
    A log_uniform parameter is on a log axis, a uniform or int_uniform one on a linear
    axis (a list's numbers as plot_metric has them); the axis names the range.
    `currency` and `levels`: as plot_metric's."""
    plt = pyplot()
    xs = _axis_values(spec, param)
    numeric = all(_is_number(v) for v in xs)
    position = {format_value(v): (v if numeric else i) for i, v in enumerate(xs)}
    # A point without a mean (a run of it wrote no value) has nothing to place.
    placed = [(position[format_value(point[param])], mean, std)
              for point, mean, std in _rows(spec, summary, metric) if not math.isnan(mean)]
    fig, ax = plt.subplots(figsize=(6.5, 4))
    if placed:
        ax.errorbar([p[0] for p in placed], [p[1] for p in placed],
                    yerr=[p[2] for p in placed] if len(spec.seeds) > 1 else None,
                    fmt="o", capsize=3, alpha=0.8, label=f"{len(placed)} points")
    top_row = _best_point(summary, metric, spec.goals[metric] == "max")
    if top_row is not None:
        top = spec.point(top_row["point"])
        ax.plot([position[format_value(top[param])]], [float(top_row[f"{metric}_mean"])], marker="*", markersize=16,
                color="gold", markeredgecolor="black", linestyle="none", zorder=5, label="best")
    drawn = drawn_range(spec.sample, param)
    if (drawn.kind == "log_uniform") if drawn is not None else (numeric and _by_factors(xs)):
        ax.set_xscale("log")
    if drawn is not None:  # the whole range, so that a reader sees which part of it the points cover
        ax.set_xlim(*_range_limits(drawn))
    if not numeric:
        labels = _labels(spec, param)
        ax.set_xticks(range(len(xs)), [labels[format_value(v)] for v in xs], rotation=30 if len(xs) > 4 else 0)
    ax.set_xlabel(drawn_from(spec.sample, param, spec.names[param]) if drawn is not None else spec.names[param])
    ax.set_ylabel(_value_axis(spec, metric, currency, levels))
    ax.set_title(f"{spec.name}: {metric}, {len(spec.ids):,} sampled points {_over_seeds(spec)}")
    if placed or top_row is not None:
        ax.legend(fontsize="small")
    save_figure(fig, str(path))


def plot_heatmap(spec: SweepSpec, summary: pd.DataFrame, metric: str, x: str, y: str, path: str | os.PathLike,
                 currency: str | None = None, levels: Mapping[str, Iterable[int]] | None = None) -> None:
    """Mean of `metric` over two parameters (best over any others); the best cell
    outlined; `currency`: a priced sweep's; `levels`: as plot_metric's."""
    import numpy as np

    plt = pyplot()
    maximize = spec.goals[metric] == "max"
    if not _fits_cells(spec, x, y):
        raise ValueError(f"sweep {spec.name!r}: {x} x {y} takes more than {MAX_HEATMAP_VALUES} values on an axis, too "
                         "many for a heatmap's labelled cells: plot_pair draws it")
    xs, ys = _axis_values(spec, x), _axis_values(spec, y)
    col = {format_value(v): i for i, v in enumerate(xs)}
    row = {format_value(v): i for i, v in enumerate(ys)}
    grid = np.full((len(ys), len(xs)), np.nan)
    for (vx, vy), mean in _cells(spec, summary, metric, x, y).items():
        grid[row[vy], col[vx]] = mean
    fig, ax = plt.subplots(figsize=(1.1 * len(xs) + 2.5, 0.6 * len(ys) + 2))
    image = ax.imshow(np.ma.masked_invalid(grid), cmap="viridis" if maximize else "viridis_r", aspect="auto")
    level = level_phrase(metric, levels or {})
    fig.colorbar(image, ax=ax, label=money_label(metric, currency) + (f" ({level})" if level else ""))
    digits = cell_digits(grid.flat)
    for r in range(len(ys)):
        for c in range(len(xs)):
            if not math.isnan(grid[r, c]):
                red, green, blue, _ = image.cmap(image.norm(grid[r, c]))
                light = 0.299 * red + 0.587 * green + 0.114 * blue > 0.5  # dark text on light cells
                ax.text(c, r, f"{grid[r, c]:.{digits}g}", ha="center", va="center", fontsize="small",
                        color="black" if light else "white")
    top_row = _best_point(summary, metric, maximize)
    if top_row is not None:
        top = spec.point(top_row["point"])
        r, c = row[format_value(top[y])], col[format_value(top[x])]
        ax.add_patch(plt.Rectangle((c - 0.5, r - 0.5), 1, 1, fill=False, edgecolor="red", linewidth=2.5))
    x_labels, y_labels = _labels(spec, x), _labels(spec, y)
    ax.set_xticks(range(len(xs)), [x_labels[format_value(v)] for v in xs])
    ax.set_yticks(range(len(ys)), [y_labels[format_value(v)] for v in ys])
    _name_pair(ax, spec, metric, x, y, top_row is not None, "outlined")
    save_figure(fig, str(path))


def _name_pair(ax, spec: SweepSpec, metric: str, x: str, y: str, found: bool, marked: str) -> None:
    """A pair's axis labels and title: the metric, whether it is the best over the other
    parameters, how the best point is `marked`; or that no point has a value."""
    ax.set_xlabel(spec.names[x])
    ax.set_ylabel(spec.names[y])
    rest = len(spec.params) > 2
    if not found:
        ax.set_title(f"{spec.name}: {metric}: no point has a value")
    else:
        ax.set_title(f"{spec.name}: {metric}" + (" (best over the other parameters)" if rest else "") + f", best {marked}")


def _place(spec: SweepSpec, param: str, set_scale, set_ticks) -> dict[str, Any]:
    """{format_value: position} of a pair's axis (`set_scale`, `set_ticks`: ax.set_xscale
    and ax.set_xticks, or y's): numbers at themselves, on a log scale where spaced by
    factors; anything else at its index, labelled at most MAX_HEATMAP_VALUES times."""
    values = _axis_values(spec, param)
    if all(_is_number(v) for v in values):
        if _by_factors(values):
            set_scale("log")
        return {format_value(v): v for v in values}
    labels = _labels(spec, param)
    shown = range(0, len(values), math.ceil(len(values) / MAX_HEATMAP_VALUES))
    set_ticks(list(shown), [labels[format_value(values[i])] for i in shown])
    return {format_value(v): i for i, v in enumerate(values)}


def plot_pair(spec: SweepSpec, summary: pd.DataFrame, metric: str, x: str, y: str, path: str | os.PathLike,
              currency: str | None = None, levels: Mapping[str, Iterable[int]] | None = None) -> None:
    """A heatmap's pair with too many values for labelled cells: a marker per pair of
    values at its mean (the best over any others), coloured as the heatmap's cells, on a
    figure of a fixed size however many values; the best point starred; `currency`,
    `levels`: as plot_heatmap's."""
    plt = pyplot()
    maximize = spec.goals[metric] == "max"
    fig, ax = plt.subplots(figsize=(8, 6))
    columns = _place(spec, x, ax.set_xscale, ax.set_xticks)
    rows = _place(spec, y, ax.set_yscale, ax.set_yticks)
    cells = [(columns[vx], rows[vy], mean) for (vx, vy), mean in _cells(spec, summary, metric, x, y).items()
             if not math.isnan(mean)]
    if cells:
        image = ax.scatter([c[0] for c in cells], [c[1] for c in cells], c=[c[2] for c in cells], s=16,
                           cmap="viridis" if maximize else "viridis_r", linewidths=0)
        level = level_phrase(metric, levels or {})
        fig.colorbar(image, ax=ax, label=money_label(metric, currency) + (f" ({level})" if level else ""))
    top_row = _best_point(summary, metric, maximize)
    if top_row is not None:
        top = spec.point(top_row["point"])
        ax.plot([columns[format_value(top[x])]], [rows[format_value(top[y])]], marker="*", markersize=16,
                color="gold", markeredgecolor="black", linestyle="none", zorder=5)
    _name_pair(ax, spec, metric, x, y, top_row is not None, "starred")
    save_figure(fig, str(path))


def plot_sweep(spec: SweepSpec, summary: pd.DataFrame, folder: str | os.PathLike,
               currency: str | None = None, levels: Mapping[str, Iterable[int]] | None = None) -> list[str]:
    """Every figure of plot_files(spec), written into `folder`; their paths. Figures of an
    earlier collection that the spec no longer makes (a metric or parameter dropped) are
    removed, so the folder holds this table's figures only. `currency`: a priced sweep's;
    `levels`: a retrieval sweep's relevance levels by point (table.relevance_levels)."""
    files = plot_files(spec)
    if os.path.isdir(folder):
        for stale in sorted(set(os.listdir(folder)) - set(files)):
            if stale.endswith(".png"):
                os.remove(os.path.join(folder, stale))
    paths = []
    for name, (kind, metric, params) in files.items():
        path = os.path.join(folder, name)
        if kind == "line":
            plot_metric(spec, summary, metric, params[0], path, currency, levels)
        elif kind == "scatter":
            plot_scatter(spec, summary, metric, params[0], path, currency, levels)
        elif kind == "pair":
            plot_pair(spec, summary, metric, params[0], params[1], path, currency, levels)
        else:
            plot_heatmap(spec, summary, metric, params[0], params[1], path, currency, levels)
        paths.append(path)
    return paths
