"""Validation and parse-time helpers shared by every stage.

Needs: the config. Provides: DATASET (the main corpus), RETRIEVAL (the
evaluation name, or None), N_CHUNKS per data set, and the input functions the
rules use. Logic lives in shardflow.workflow.plan and shardflow.retrieval.pipeline.
"""

import functools
import os

from snakemake.exceptions import WorkflowError

from shardflow.core import gpu_slots
from shardflow.workflow import plan
from shardflow.core.config import load_schema, validate_config
from shardflow.retrieval import pipeline as retrieval

validate_config(
    config, load_schema(workflow.source_path("../config/config.schema.yaml"))
)

DATASET = config["dataset"]
N_CHUNKS = {DATASET: plan.plan_n_chunks(config)}
RETRIEVAL = config["retrieval"]["name"] if config["retrieval"]["path"] else None
if RETRIEVAL is not None:
    if RETRIEVAL == DATASET:
        raise ValueError(
            f"retrieval.name and dataset are both {DATASET!r}: give them different names"
        )
    N_CHUNKS[RETRIEVAL] = retrieval.plan_corpus_chunks(config)


wildcard_constraints:
    dataset="|".join(N_CHUNKS),
    chunk=r"\d+",


def corpus_files():
    """The corpus files to split. s3:// objects go through Snakemake storage, which
    downloads each one before the job; the script reads that local copy."""
    files = plan.corpus_inputs(config)
    return [storage(f) if f.startswith("s3://") else f for f in files]


def chunk_list(dataset, pattern):
    return expand(pattern, dataset=dataset, chunk=range(N_CHUNKS[dataset]))


def chunk_embeddings(wildcards):
    return chunk_list(wildcards.dataset, "results/{dataset}/embed/embed_{chunk}.npy")


def chunk_ids(wildcards):
    return chunk_list(
        wildcards.dataset, "results/{dataset}/embed/embed_{chunk}.ids.parquet"
    )


def chunk_stats(wildcards):
    return chunk_list(
        wildcards.dataset, "results/{dataset}/embed/embed_{chunk}.stats.json"
    )


def chunk_benchmarks(wildcards):
    return chunk_list(wildcards.dataset, "benchmarks/embed/{dataset}/chunk_{chunk}.tsv")


@functools.cache
def local_gpus():
    """This host's GPUs for the embed jobs (none under CUDA_VISIBLE_DEVICES="")."""
    emb = config["embedding"]
    return gpu_slots.resolve_devices(emb["gpu_devices"], mode=emb["gpu_pinning"])


def runs_on_cpu():
    """True when the GPU rules' jobs run on the CPU: `device: cpu`, or `device: auto`
    with the local executor on a host without GPUs. Evaluated per job (the executor
    is known by then); a cluster executor, a dry run or a job inside a cluster job
    count as GPU runs under `auto`, so a dry run shows what a cluster gets."""
    device = config["embedding"]["device"]
    if device == "cpu":
        return True
    return device == "auto" and local_main_process() and not local_gpus()


def local_main_process():
    """The Snakemake that schedules the jobs and runs them on this host itself."""
    plugin = workflow.executor_plugin
    return workflow.is_main_process and plugin is not None and plugin.name == "local"


def gpu_job_threads(wildcards):
    """`embedding.threads` for the GPU rules (embed, embed_queries, retrieval_evaluate):
    `auto` shares this host's cores only where this Snakemake runs the CPU jobs."""
    try:
        cores = workflow.cores
    except WorkflowError:  # no --cores: a cluster run
        cores = None
    return plan.job_threads(
        config["embedding"]["threads"],
        local_cpu=runs_on_cpu() and local_main_process(),
        cores=cores,
        jobs=max(N_CHUNKS.values()),
    )


def gpu_request(wildcards):
    """GPUs per job of the GPU rules: none when the job runs on the CPU, so CPU
    jobs are not queued behind the local profile's `gpu` pool. The scripts run a
    job that got no GPU on the CPU, whatever `device: auto` would find."""
    return 0 if runs_on_cpu() else 1


# Inside a job that SLURM runs for the slurm executor, the controller resubmits a
# failed job itself (`retries`, with mem_mb growing per attempt); retrying in place
# as well would multiply the attempts on the first allocation. In a Kubernetes pod
# the in-place retry is the guard against the plugin's abort (profiles/README.md).
IN_SLURM_JOB = workflow.remote_exec and "SLURM_JOB_ID" in os.environ


def rule_retries(n):
    return 0 if IN_SLURM_JOB else n


def embed_mem_mb(wildcards, attempt):
    emb = config["embedding"]
    return emb["mem_mb"] + (attempt - 1) * emb["mem_mb_per_attempt"]


def resume_root(dataset):
    """Undeclared folder of a data set's finished parts (Snakemake deletes declared
    outputs of failed jobs); `embedding.resume_dir` moves it off the workdir."""
    base = config["embedding"]["resume_dir"]
    return os.path.join(base, dataset) if base else f"results/{dataset}/.resume"


def embedding_params(**overrides):
    """The engine's settings from config (resources and places are not engine settings)."""
    skip = ("mem_mb", "mem_mb_per_attempt", "runtime", "resume_dir", "threads")
    params = {k: v for k, v in config["embedding"].items() if k not in skip}
    params.update(overrides)
    return params


def final_targets():
    targets = [
        f"results/{DATASET}/verification.json",
        f"results/{DATASET}/report/summary.json",
    ]
    if RETRIEVAL is not None:
        targets.append(f"results/{RETRIEVAL}/retrieval/metrics.json")
    targets += [f"results/{ds}/provenance.json" for ds in N_CHUNKS]
    if config["reproduce"]["name"]:
        targets.append(f"results/{REPRO_DATASET}/reproduction.json")
    return targets


REPRO_DATASET = RETRIEVAL if RETRIEVAL is not None else DATASET


def provenance_inputs(wildcards):
    ds = wildcards.dataset
    outputs = [
        f"results/{ds}/embeddings.npy",
        f"results/{ds}/ids.parquet",
        f"results/{ds}/verification.json",
    ]
    benchmarks = [f"benchmarks/split/{ds}.tsv", f"benchmarks/merge/{ds}.tsv"]
    benchmarks += chunk_list(ds, "benchmarks/embed/{dataset}/chunk_{chunk}.tsv")
    if ds == RETRIEVAL:
        sources = retrieval.RetrievalSpec.from_config(config).source_files()
        outputs += [
            f"results/{ds}/retrieval/metrics.json",
            f"results/{ds}/retrieval/run.parquet",
        ]
        benchmarks += [
            f"benchmarks/embed_queries/{ds}.tsv",
            f"benchmarks/retrieval_evaluate/{ds}.tsv",
        ]
    else:
        sources = corpus_files()
    return {
        "sources": sources,
        "chunks": chunk_list(ds, "results/{dataset}/chunks/chunk_{chunk}.jsonl"),
        "outputs": outputs,
        "benchmarks": benchmarks,
    }


def reproduction_metrics():
    if RETRIEVAL is not None:
        return f"results/{RETRIEVAL}/retrieval/metrics.json"
    return f"results/{DATASET}/verification.json"
