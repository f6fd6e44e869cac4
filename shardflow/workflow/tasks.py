"""What each task contributes to the run, per data set: the files `all` asks for, the
outputs provenance hashes, the job tables (per-chunk timings), single-job stats and
benchmarks provenance reads, and the landing page's sections.

A new capability adds one function here (and its name to `TASKS`); rules/common.smk
asks `task_files` for every data set and task of the run.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from shardflow.core.jobs import PEAK_GPU_KEYS


@dataclass(frozen=True)
class TaskFiles:
    targets: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    # Those of `outputs` that are folders: provenance hashes each file in them, under its
    # own path (provenance.output_sha256).
    folders: list[str] = field(default_factory=list)
    jobs: list[str] = field(default_factory=list)
    # The stats of a single GPU job that no job table holds (embed_queries',
    # retrieval_evaluate's): provenance reads the `made_with` in them into jobs_made_with,
    # as it reads the job tables', and does not hash them (they hold the job's times).
    stats: list[str] = field(default_factory=list)
    benchmarks: list[str] = field(default_factory=list)
    # Those of `outputs` that hold figures measured as the job ran (wall-clock times,
    # speeds, peak memory), by the keys (a table's columns) that hold them: no rerun writes
    # the same bytes, so their hash is no pin (plan.unknown_reproduction_outputs).
    timed: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # (stage, data set, {name: file}) for shardflow.workflow.landing
    landing: list[tuple[str, str, dict]] = field(default_factory=list)


def embedding(ds: str, cfg: dict, main: str) -> TaskFiles:
    """verify for every embedded data set; figures and summary for the main corpus."""
    r = f"results/{ds}"
    targets = [f"{r}/verification.json"]
    if ds == main:
        targets.append(f"{r}/report/summary.json")
    files = {"manifest": f"{r}/chunks/manifest.json", "jobs": f"{r}/embed/jobs.json", "verification": f"{r}/verification.json"}
    return TaskFiles(
        targets=targets,
        outputs=[f"{r}/embeddings.npy", f"{r}/ids.parquet", f"{r}/verification.json"],
        jobs=[f"{r}/embed/jobs.json"],
        benchmarks=[f"benchmarks/merge/{ds}.tsv"],
        landing=[("embedding", ds, files)],
    )


def retrieval(ds: str, cfg: dict, main: str) -> TaskFiles:
    metrics = f"results/{ds}/retrieval/metrics.json"
    return TaskFiles(
        targets=[metrics],
        outputs=[metrics, f"results/{ds}/retrieval/run.parquet"],
        # The evaluation's record names the device it searched on: ties and float sums, so
        # the metrics, differ between the CPU and a GPU.
        stats=[f"results/{ds}/retrieval/queries.stats.json", f"results/{ds}/retrieval/evaluate.stats.json"],
        benchmarks=[f"benchmarks/embed_queries/{ds}.tsv", f"benchmarks/retrieval_evaluate/{ds}.tsv"],
        landing=[("retrieval", ds, {"metrics": metrics})],
    )


def neighbours(ds: str, cfg: dict, main: str) -> TaskFiles:
    """Each document's nearest in its corpus and the near-duplicates (rules/neighbours.smk)."""
    r = f"results/{ds}/neighbours"
    found = [f"results/{ds}/neighbours.parquet", f"{r}/near_duplicates.parquet", f"{r}/duplicate_groups.parquet"]
    return TaskFiles(
        targets=[f"{r}/summary.json", f"{r}/nearest.png"],
        outputs=[*found, f"{r}/summary.json"],
        jobs=[f"{r}/jobs.json"],
        benchmarks=[f"benchmarks/merge_neighbours/{ds}.tsv"],
        landing=[("neighbours", ds, {"summary": f"{r}/summary.json", "jobs": f"{r}/jobs.json"})],
    )


def search(ds: str, cfg: dict, main: str) -> TaskFiles:
    """A file of queries searched against the corpus (rules/search.smk)."""
    r = f"results/{ds}/search"
    return TaskFiles(
        targets=[f"{r}/summary.json", f"{r}/best_scores.png"],
        outputs=[f"{r}/hits.parquet", f"{r}/summary.json"],
        # The search's record names the device it ran on (its ties and float sums decide
        # the hits), as the query embedding's names the embed job's.
        stats=[f"{r}/queries.stats.json", f"{r}/search.stats.json"],
        benchmarks=[f"benchmarks/embed_search_queries/{ds}.tsv", f"benchmarks/search/{ds}.tsv"],
        landing=[("search", ds, {"summary": f"{r}/summary.json", "stats": f"{r}/search.stats.json"})],
    )


def summarisation(ds: str, cfg: dict, main: str) -> TaskFiles:
    """Method `stored` has no chunk jobs: its one scoring job is the task."""
    r = f"results/{ds}"
    sm = cfg["summarise"]
    metrics = f"{r}/summarise/metrics.json"
    landing = {"manifest": f"{r}/chunks/manifest.json"}
    if sm["method"] == "stored":
        landing["metrics"] = metrics
        return TaskFiles(
            targets=[metrics],
            outputs=[metrics],
            benchmarks=[f"benchmarks/score_stored_summaries/{ds}.tsv"],
            landing=[("summarisation", ds, landing)],
        )
    summary = f"{r}/summarise/report/summary.json"
    landing["summary"] = summary
    scored = [metrics] if sm["reference_field"] else []
    if scored:
        landing["metrics"] = metrics
    return TaskFiles(
        targets=[summary, *scored],
        outputs=[f"{r}/summaries.jsonl", *scored],
        jobs=[f"{r}/summarise/jobs.json"],
        benchmarks=[f"benchmarks/merge_summaries/{ds}.tsv"],
        landing=[("summarisation", ds, landing)],
    )


def training(ds: str, cfg: dict, main: str) -> TaskFiles:
    r = f"results/{ds}"
    landing = {
        "shards": f"{r}/shards",
        "jobs": f"{r}/tokenize/jobs.json",
        "metrics": f"{r}/train/metrics.json",
        "benchmark": f"benchmarks/train/{ds}.tsv",
    }
    weights = ("best.safetensors", "last.safetensors", "losses.parquet", "metrics.json")
    timed = {  # shardflow.train.trainer's metrics and loss history
        f"{r}/train/metrics.json": ("wall_seconds", "train_seconds_total", "tokens_per_second", "mfu",
                                    *PEAK_GPU_KEYS, "peak_gpu_mem_mib_by_rank", "made_with"),
        f"{r}/train/losses.parquet": ("seconds",),
    }
    return TaskFiles(
        targets=[f"{r}/train/{f}" for f in ("metrics.json", "loss.png", "sample.txt")],
        outputs=[f"{r}/shards"] + [f"{r}/train/{f}" for f in weights],
        folders=[f"{r}/shards"],
        timed=timed,
        jobs=[f"{r}/tokenize/jobs.json"],
        benchmarks=[f"benchmarks/{stage}/{ds}.tsv" for stage in ("train_tokenizer", "gather_shards", "train")],
        landing=[("training", ds, landing)],
    )


TASKS = {"embedding": embedding, "retrieval": retrieval, "neighbours": neighbours, "search": search,
         "summarisation": summarisation, "training": training}


def task_files(tasks: tuple[str, ...], ds: str, cfg: dict, main: str) -> list[TaskFiles]:
    unknown = [t for t in tasks if t not in TASKS]
    if unknown:
        raise ValueError(f"data set {ds!r}: unknown tasks {unknown}; known: {sorted(TASKS)}")
    return [TASKS[t](ds, cfg, main) for t in tasks]


def models(tasks: tuple[str, ...], cfg: dict) -> dict[str, str]:
    """The models a data set's jobs ran, by role, for provenance to hash: the embedding
    model (tasks embedding, retrieval, neighbours and search: its similarity), summarisation's generator (method abstractive)
    or sentence encoder (extractive). Lead and stored summaries run none, and training
    trains its own (its weights are among the outputs)."""
    out = {}
    if {"embedding", "retrieval", "neighbours", "search"} & set(tasks):
        out["embedding"] = cfg["embedding"]["model"]
    if "summarisation" in tasks:
        sm = cfg["summarise"]
        if sm["method"] == "abstractive" and sm["model"]:
            out["summarise"] = sm["model"]
        elif sm["method"] == "extractive":
            out["summarise_encoder"] = sm["encoder"]
    return out
