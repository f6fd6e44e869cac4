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


def plot_throughput(stats: list[dict], path: str, stage: str = "Embedding") -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(max(5, 0.35 * len(stats) + 3), 3.5))
    chunks = [s["chunk"] for s in stats]
    ax.bar([str(c) for c in chunks], [s["items_per_s"] for s in stats], color="#3b75af")
    ax.set_xlabel("chunk")
    ax.set_ylabel("items / s")
    ax.set_title(f"{stage} throughput per chunk")
    save_figure(fig, path)


def plot_timeline(stats: list[dict], benches: list[dict], path: str, job: str = "embed") -> None:
    plt = pyplot()
    t0 = min(s["end_time"] - b.get("s", s["seconds"]) for s, b in zip(stats, benches, strict=True))
    fig, ax = plt.subplots(figsize=(8, max(2.5, 0.3 * len(stats) + 1)))
    for s, b in zip(stats, benches, strict=True):
        # Start from the job's own clock; length from Snakemake's benchmark (whole job).
        duration = b.get("s", s["seconds"])  # the whole job, model loading included
        ax.barh(str(s["chunk"]), duration, left=s["end_time"] - duration - t0, color="#e8833a")
    ax.set_xlabel(f"seconds since the first {job} job started (bars: whole jobs)")
    ax.set_ylabel("chunk")
    ax.set_title(f"{job} jobs over time")
    save_figure(fig, path)
