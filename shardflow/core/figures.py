"""Figures shared by the stages' reports: matplotlib off-screen, PNGs written atomically,
and the per-chunk throughput and timeline of any stage's chunk jobs (from its job table).
"""

from __future__ import annotations

from shardflow.core.atomic import atomic_path


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path: str, dpi: int = 110, crop: bool = True) -> None:
    """Write `fig` as a PNG at `path` atomically, and close it, also when saving fails:
    pyplot keeps every open figure, so a long process leaked one per failure. `crop`:
    to what is drawn (bbox_inches="tight"); the training curve keeps its whole canvas at
    dpi 120, as its loss.png always had it."""
    try:
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format="png", dpi=dpi, **({"bbox_inches": "tight"} if crop else {}))
    finally:
        pyplot().close(fig)


# Chunks up to which each gets its own labelled bar (the figure grows with them: 0.35
# inches a chunk across, 0.3 down). Past it a figure of fixed size draws the chunks on a
# numeric axis: one bar a chunk had drawn 5,000 chunks 149,527 px wide in 16 s (the
# timeline 127,227 px tall in 27 s), a figure no report shows.
LABELLED_CHUNKS = 60


def plot_throughput(stats: list[dict], path: str, stage: str = "Embedding") -> None:
    plt = pyplot()
    chunks = [s["chunk"] for s in stats]
    rates = [s["items_per_s"] for s in stats]
    if len(stats) <= LABELLED_CHUNKS:
        fig, ax = plt.subplots(figsize=(max(5, 0.35 * len(stats) + 3), 3.5))
        ax.bar([str(c) for c in chunks], rates, color="#3b75af")
    else:
        import statistics

        fig, ax = plt.subplots(figsize=(10, 3.5))
        ax.plot(chunks, rates, ".", markersize=3, color="#3b75af")
        middle = statistics.median(rates)  # a slow chunk (a slow node, a retried job) stands below it
        # over the points, which would hide a thin line through thousands of them
        ax.axhline(middle, color="#c0392b", linewidth=1.5, linestyle="--", zorder=3, label=f"median {middle:,.4g}")
        ax.legend(loc="lower right", fontsize="small")
        ax.set_xlim(min(chunks) - 0.5, max(chunks) + 0.5)
    ax.set_xlabel("chunk")
    ax.set_ylabel("items / s")
    ax.set_title(f"{stage} throughput per chunk")
    save_figure(fig, path)


def plot_timeline(stats: list[dict], benches: list[dict], path: str, job: str = "embed") -> None:
    plt = pyplot()
    t0 = min(s["end_time"] - b.get("s", s["seconds"]) for s, b in zip(stats, benches, strict=True))
    labelled = len(stats) <= LABELLED_CHUNKS
    fig, ax = plt.subplots(figsize=(8, max(2.5, 0.3 * len(stats) + 1)) if labelled else (8, 6))
    # Start from the job's own clock; length from Snakemake's benchmark (whole job, model
    # loading included), else the job's own seconds.
    durations = [b.get("s", s["seconds"]) for s, b in zip(stats, benches, strict=True)]
    starts = [s["end_time"] - d - t0 for s, d in zip(stats, durations, strict=True)]
    if labelled:
        for s, duration, start in zip(stats, durations, starts, strict=True):
            ax.barh(str(s["chunk"]), duration, left=start, color="#e8833a")
    else:
        chunks = [s["chunk"] for s in stats]
        # Each bar a chunk's row tall, outlined in its own colour: at thousands of rows a
        # row is under a pixel, and a bar without an edge drew as a faint hairline.
        ax.barh(chunks, durations, left=starts, height=1.0, color="#e8833a", edgecolor="#e8833a", linewidth=0.6)
        ax.set_ylim(min(chunks) - 0.5, max(chunks) + 0.5)
    ax.set_xlabel(f"seconds since the first {job} job started (bars: whole jobs)")
    ax.set_ylabel("chunk")
    ax.set_title(f"{job} jobs over time")
    save_figure(fig, path)
