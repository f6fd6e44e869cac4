"""The stages' shared figures: where the bars go, and PNGs that appear whole or not at all."""

from __future__ import annotations

import pytest

from shardflow.core import figures

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def drawn(monkeypatch):
    """The figures the plot functions would save, kept open for inspection."""
    kept = []
    monkeypatch.setattr(figures, "save_figure", lambda fig, path: kept.append(fig))
    yield kept
    for fig in kept:
        figures.pyplot().close(fig)


def test_the_timeline_starts_each_bar_when_its_job_started_and_spans_the_whole_job(drawn):
    """A bar ends at the job's own end_time and is as long as Snakemake's benchmark `s`
    (model loading included), else the job's own `seconds`; time 0 is the first start."""
    stats = [
        {"chunk": 0, "end_time": 1000.0, "seconds": 8.0},
        {"chunk": 1, "end_time": 1005.0, "seconds": 3.0},  # no benchmark time: its own
    ]
    figures.plot_timeline(stats, [{"s": 10.0}, {}], "timeline.png", job="summarise")
    (ax,) = drawn[0].axes
    bars = [(p.get_x(), p.get_width()) for p in ax.patches]
    assert bars == [(0.0, 10.0), (12.0, 3.0)]
    assert ax.get_xlabel().startswith("seconds since the first summarise job started")


def test_the_timeline_refuses_stats_and_benchmarks_that_do_not_pair_up(drawn):
    with pytest.raises(ValueError):
        figures.plot_timeline([{"chunk": 0, "end_time": 1.0, "seconds": 1.0}], [], "timeline.png")


def test_a_figure_is_a_whole_png_and_a_failed_one_leaves_the_last_in_place(tmp_path, monkeypatch):
    path = tmp_path / "throughput.png"
    figures.plot_throughput([{"chunk": 0, "items_per_s": 12.5}], str(path), stage="Summarisation")
    first = path.read_bytes()
    assert first.startswith(PNG)
    plt = figures.pyplot()
    fig = plt.figure()

    def fail(tmp, **kwargs):
        with open(tmp, "wb") as fh:
            fh.write(PNG + b"half")
        raise RuntimeError("renderer died")

    monkeypatch.setattr(fig, "savefig", fail)
    with pytest.raises(RuntimeError, match="renderer died"):
        figures.save_figure(fig, str(path))
    plt.close(fig)
    assert path.read_bytes() == first and [p.name for p in tmp_path.iterdir()] == ["throughput.png"]


def test_a_figure_whose_save_fails_is_closed_all_the_same(tmp_path, monkeypatch):
    """pyplot keeps a figure until it is closed (and warns past 20): a failed save must
    not leave one open in a long process."""
    plt = figures.pyplot()
    fig = plt.figure()
    before = plt.get_fignums()

    def fail(tmp, **kwargs):
        raise RuntimeError("renderer died")

    monkeypatch.setattr(fig, "savefig", fail)
    try:
        with pytest.raises(RuntimeError, match="renderer died"):
            figures.save_figure(fig, str(tmp_path / "x.png"))
        assert fig.number in before and fig.number not in plt.get_fignums()
    finally:
        plt.close(fig)


def test_past_sixty_chunks_the_figures_keep_their_size_and_draw_every_chunk(drawn):
    """One labelled bar a chunk grew the figures by 0.35 inches a chunk across and 0.3
    down: 5,000 chunks drew 149,527 px wide in 16 s. Past LABELLED_CHUNKS the chunks go on
    a numeric axis of a figure of fixed size, each chunk still drawn where it belongs."""
    n = figures.LABELLED_CHUNKS + 1
    stats = [{"chunk": i, "items_per_s": 10.0 + (i == 7) * 5, "end_time": 100.0 + i, "seconds": 4.0} for i in range(n)]
    figures.plot_throughput(stats, "throughput.png")
    figures.plot_timeline(stats, [{"s": 5.0}] * n, "timeline.png")
    throughput, timeline = drawn
    assert tuple(throughput.get_size_inches()) == (10, 3.5) and tuple(timeline.get_size_inches()) == (8, 6)
    (ax,) = throughput.axes
    points, median = ax.lines
    assert list(points.get_xdata()) == list(range(n)) and points.get_ydata()[7] == 15.0
    assert list(median.get_ydata()) == [10.0, 10.0] and ax.get_legend().get_texts()[0].get_text() == "median 10"
    assert median.get_zorder() > points.get_zorder()  # drawn over the points, not hidden under them
    (ax,) = timeline.axes
    bars = [(p.get_y() + p.get_height() / 2, p.get_x(), p.get_width()) for p in ax.patches]
    assert bars == [(float(i), float(i), 5.0) for i in range(n)]  # chunk i started i s after chunk 0


def test_up_to_sixty_chunks_each_has_its_labelled_bar(drawn):
    n = figures.LABELLED_CHUNKS
    stats = [{"chunk": i, "items_per_s": 10.0, "end_time": 100.0 + i, "seconds": 4.0} for i in range(n)]
    figures.plot_throughput(stats, "throughput.png")
    figures.plot_timeline(stats, [{"s": 5.0}] * n, "timeline.png")
    throughput, timeline = drawn
    assert tuple(throughput.get_size_inches()) == (0.35 * n + 3, 3.5)
    assert tuple(timeline.get_size_inches()) == (8, 0.3 * n + 1)
    assert [t.get_text() for t in throughput.axes[0].get_xticklabels()] == [str(i) for i in range(n)]
