"""Validation and parse-time helpers shared by every stage.

Needs: the config. Provides: DATASETS (every data set the run splits, from
shardflow.workflow.plan), DATASET (the main corpus), RETRIEVAL (the evaluation's
data set, or None), and the getters the rules use: chunk lists, per-rule
resources (`resources.<rule>` in the config), stage parameters and GPU-job
settings. Getters take `wildcards`, so a value can depend on the job; logic
lives in the package.
"""

import functools
import os

from snakemake.exceptions import WorkflowError

from shardflow.core import gpu_slots
from shardflow.core.config import load_schema, validate_config
from shardflow.retrieval.pipeline import RetrievalSpec
from shardflow.workflow import plan

validate_config(
    config, load_schema(workflow.source_path("../config/config.schema.yaml"))
)

DATASETS = plan.datasets(config)
DATASET = config["dataset"]
RETRIEVAL = plan.retrieval_name(config)


wildcard_constraints:
    dataset="|".join(DATASETS),
    chunk=r"\d+",


# --------------------------------------------------------------------- chunks


def split_inputs(ds):
    """The files a data set's split reads. s3:// objects go through Snakemake
    storage, which downloads each one before the job; the script reads that copy."""
    return [storage(f) if f.startswith("s3://") else f for f in ds.sources]


def chunk_list(dataset, pattern):
    return expand(pattern, dataset=dataset, chunk=range(DATASETS[dataset].n_chunks))


def per_chunk(pattern):
    """Input function: `pattern` expanded over the job's data set's chunks."""

    def inputs(wildcards):
        return chunk_list(wildcards.dataset, pattern)

    return inputs


# ------------------------------------------------------------------ GPU jobs


@functools.cache
def local_gpus():
    """This host's GPUs for the GPU jobs (none under CUDA_VISIBLE_DEVICES="")."""
    gj = config["gpu_jobs"]
    return gpu_slots.resolve_devices(gj["devices"], mode=gj["pinning"])


def local_main_process():
    """The Snakemake that schedules the jobs and runs them on this host itself."""
    plugin = workflow.executor_plugin
    return workflow.is_main_process and plugin is not None and plugin.name == "local"


def runs_on_cpu():
    """True when the GPU rules' jobs run on the CPU: `gpu_jobs.device: cpu`, or `auto`
    with the local executor on a host without GPUs. Evaluated per job (the executor
    is known by then); a cluster executor, a dry run or a job inside a cluster job
    count as GPU runs under `auto`, so a dry run shows what a cluster gets."""
    device = config["gpu_jobs"]["device"]
    if device == "cpu":
        return True
    return device == "auto" and local_main_process() and not local_gpus()


def gpu_job_settings():
    """What every GPU script needs besides its stage's parameters (shardflow.core.gpujob)."""
    return {k: config["gpu_jobs"][k] for k in ("device", "pinning", "devices")}


def resume_root(dataset):
    """Undeclared folder of a data set's finished parts (Snakemake deletes declared
    outputs of failed jobs); `gpu_jobs.resume_dir` moves it off the workdir."""
    base = config["gpu_jobs"]["resume_dir"]
    return os.path.join(base, dataset) if base else f"results/{dataset}/.resume"


def job_resume_root(wildcards):
    return resume_root(wildcards.dataset)


# ----------------------------------------------------------------- resources


def rule_resources(rule, wildcards):
    """`resources.<rule>` for one job. The single place a future per-job override
    (a sweep point) would apply."""
    return config["resources"][rule]


def job_threads(rule):
    """`threads:` of a GPU rule: `auto` shares this host's cores only where this
    Snakemake runs the CPU jobs itself (shardflow.workflow.plan.job_threads)."""

    def threads(wildcards):
        try:
            cores = workflow.cores
        except WorkflowError:  # no --cores: a cluster run
            cores = None
        return plan.job_threads(
            rule_resources(rule, wildcards)["threads"],
            local_cpu=runs_on_cpu() and local_main_process(),
            cores=cores,
            jobs=max(ds.n_chunks for ds in DATASETS.values()),
        )

    return threads


def job_resources(rule):
    """`resources:` of a GPU rule: gpu (none when the job runs on the CPU, so CPU jobs
    are not queued behind the local profile's `gpu` pool), mem_mb growing with each
    attempt, runtime."""

    def gpu(wildcards):
        return 0 if runs_on_cpu() else rule_resources(rule, wildcards)["gpu"]

    def mem_mb(wildcards, attempt):
        r = rule_resources(rule, wildcards)
        return r["mem_mb"] + (attempt - 1) * r["mem_mb_per_attempt"]

    def runtime(wildcards):
        return rule_resources(rule, wildcards)["runtime"]

    return {"gpu": gpu, "mem_mb": mem_mb, "runtime": runtime}


# Inside a job that SLURM runs for the slurm executor, the controller resubmits a
# failed job itself (`retries`, with mem_mb growing per attempt); retrying in place
# as well would multiply the attempts on the first allocation. In a Kubernetes pod
# the in-place retry is the guard against the plugin's abort (profiles/README.md).
IN_SLURM_JOB = workflow.remote_exec and "SLURM_JOB_ID" in os.environ


def rule_retries(n):
    return 0 if IN_SLURM_JOB else n


# ---------------------------------------------------------------- parameters


def stage_params(section, **overrides):
    """Params function: config[section] (plus overrides) for one job. Params reach
    the scripts only this way, so a changed value reruns exactly the jobs it affects."""

    def params(wildcards):
        return {**config[section], **overrides}

    return params


# ------------------------------------------------------------------- targets


def final_targets():
    targets = [
        f"results/{DATASET}/verification.json",
        f"results/{DATASET}/report/summary.json",
    ]
    if RETRIEVAL is not None:
        targets.append(f"results/{RETRIEVAL}/retrieval/metrics.json")
    targets += [f"results/{ds}/provenance.json" for ds in DATASETS]
    targets.append(LANDING)
    if config["reproduce"]["name"]:
        targets.append(f"results/{REPRO_DATASET}/reproduction.json")
    return targets


REPRO_DATASET = RETRIEVAL if RETRIEVAL is not None else DATASET


def provenance_inputs(wildcards):
    """What provenance records: the split's checksums (sources and chunks), the
    job table merge wrote (per-chunk timings), and the stage outputs; so its DAG
    edges come from split, merge and verify, not from every chunk job."""
    ds = wildcards.dataset
    outputs = [
        f"results/{ds}/embeddings.npy",
        f"results/{ds}/ids.parquet",
        f"results/{ds}/verification.json",
    ]
    benchmarks = [f"benchmarks/split/{ds}.tsv", f"benchmarks/merge/{ds}.tsv"]
    raw = []  # inputs no rule writes, hashed by provenance itself
    if ds == RETRIEVAL:
        raw = RetrievalSpec.from_config(config).source_files()
        outputs += [
            f"results/{ds}/retrieval/metrics.json",
            f"results/{ds}/retrieval/run.parquet",
        ]
        benchmarks += [
            f"benchmarks/embed_queries/{ds}.tsv",
            f"benchmarks/retrieval_evaluate/{ds}.tsv",
        ]
    return {
        "manifest": f"results/{ds}/chunks/manifest.json",
        "jobs": f"results/{ds}/embed/jobs.json",
        "raw": raw,
        "outputs": outputs,
        "benchmarks": benchmarks,
    }


# The report's first screen, written by rule landing once the stages have run.
LANDING = "results/report.rst"


def landing_sections():
    """Per stage that runs: (stage, data set, {name: file}); rule landing reads them."""
    sections = []
    for ds in DATASETS:
        files = {
            "manifest": f"results/{ds}/chunks/manifest.json",
            "jobs": f"results/{ds}/embed/jobs.json",
            "verification": f"results/{ds}/verification.json",
        }
        sections.append(("embedding", ds, files))
    if RETRIEVAL is not None:
        metrics = f"results/{RETRIEVAL}/retrieval/metrics.json"
        sections.append(("retrieval", RETRIEVAL, {"metrics": metrics}))
    return sections


def landing_inputs(wildcards):
    return {
        f"{stage}_{ds}_{name}": path
        for stage, ds, files in landing_sections()
        for name, path in files.items()
    }


def landing_text():
    """The global report description: the run's landing page once it exists (the
    report is made after the run, in its working directory), else a placeholder."""
    if os.path.exists(LANDING):
        return os.path.abspath(LANDING)
    return "rules/captions/landing_pending.rst"


def reproduction_metrics():
    if RETRIEVAL is not None:
        return f"results/{RETRIEVAL}/retrieval/metrics.json"
    return f"results/{DATASET}/verification.json"
