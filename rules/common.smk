"""Validation and parse-time helpers shared by every stage.

Needs: the config. Provides: DATASETS (every data set the run splits, from
shardflow.workflow.plan), DATASET (the main corpus), RETRIEVAL (the evaluation's
data set, or None), and the getters the rules use: chunk lists, per-rule
resources (`resources.<rule>` in the config), stage parameters and GPU-job
settings. Getters take `wildcards`, so a value can depend on the job; logic
lives in the package.
"""

import functools
import json
import os
import re
import sys
import warnings

from snakemake.exceptions import WorkflowError
from snakemake.io import IOFile, apply_wildcards, update_wildcard_constraints
from snakemake.logging import logger

from shardflow.core import gpu_slots, kube, parsecache, s3
from shardflow.core.config import (
    canonical_order,
    command_line_config_problems,
    load_schema,
    profile_config_problems,
    read_yaml,
    recorded,
    repeated_keys,
    validate_config,
)
from shardflow.core.hashing import config_sha256
from shardflow.corpus.chunks import SOURCE_PART as SOURCE_PARTS
from shardflow.retrieval.pipeline import RetrievalSpec
from shardflow.summarise.params import (
    METHOD_KEYS,
    ignored_by,
    method_params,
    score_params,
    without_effect,
)
from shardflow.sweep import POINT_ID_REGEX, SEED_REGEX, parse_sweeps
from shardflow.sweep.adopt import unadopted_points_warning
from shardflow.sweep.cost import PRICED_STAGES
from shardflow.sweep.metrics import incomparable_points, loads_model, unknown_metrics
from shardflow.sweep.paths import job_metrics
from shardflow.sweep.spec import (
    collection_rule,
    seeds_without_effect,
    sweeps_in_files,
)
from shardflow.sweep.report import output_files as sweep_output_files
from shardflow.sweep.shared import SHARED_FOLDER, set_folder
from shardflow.workflow import disk, landing, plan, site, tasks

# A profile value whose $VARIABLE was unset stays literal and fails much later (an
# S3 exception group, an sbatch error): stop here with one line naming it.
_DEFAULTS = workflow.resource_settings.default_resources or {}
_SET = workflow.resource_settings.overwrite_resources or {}
_UNEXPANDED = site.unexpanded(
    {
        "default-storage-prefix": workflow.storage_settings.default_storage_prefix,
        **{
            f"default-resources {n}": getattr(_DEFAULTS[n], "raw", None)
            for n in _DEFAULTS
        },
        **{
            f"set-resources {rule}:{n}": getattr(value, "raw", value)
            for rule, values in _SET.items()
            for n, value in values.items()
        },
    }
)
if _UNEXPANDED:
    sys.exit(site.unexpanded_message(_UNEXPANDED))
# A value Python reads as a function (a partition or account named `all` or `open`)
# stopped every job with an error that named neither: here, naming it.
_AS_FUNCTIONS = site.read_as_functions(
    {
        **{f"default-resources {n}": _DEFAULTS[n] for n in _DEFAULTS},
        **{
            f"set-resources {rule}:{n}": value
            for rule, values in _SET.items()
            for n, value in values.items()
        },
    }
)
if _AS_FUNCTIONS:
    sys.exit(site.read_as_functions_message(_AS_FUNCTIONS))

SCHEMA = load_schema(workflow.source_path("../config/config.schema.yaml"))
# The shipped config, as written: its key order is the order jobs record their sections
# in (core.config.canonical_order).
SHIPPED_CONFIG = read_yaml(workflow.source_path("../config/config.yaml"))


def validate(cfg):
    validate_config(cfg, SCHEMA)
    canonical_order(cfg, SHIPPED_CONFIG, SCHEMA)
    return cfg


# --config values (nested ones arrive as strings) are read as YAML would read them.
validate_config(config, SCHEMA, workflow.config_settings.config)
canonical_order(config, SHIPPED_CONFIG, SCHEMA)


def s3_settings():
    """The run's S3 storage settings (--storage-s3-* or SNAKEMAKE_STORAGE_S3_*)."""
    found = (workflow.storage_provider_settings or {}).get("s3")
    settings = found.get_settings() if found else None
    return {n: getattr(settings, n, None) for n in s3.SETTING_NAMES} if settings else {}


@functools.cache
def list_s3(pattern):
    """An s3:// glob in input.path -> its objects, listed with the run's S3 settings
    (else boto3's chain). Every job re-parses and lists again: a corpus under a glob
    must not change while a run goes on."""
    return s3.expand(pattern, s3.client(s3_settings()))


@functools.cache
def list_s3_folder(url):
    """An s3:// folder (retrieval.path) -> its objects and their ETags, listed once per
    parse with the run's S3 settings."""
    return s3.list_folder(url, s3.client(s3_settings()))


def stored(path):
    """A source the rules read: an s3:// object goes through Snakemake storage."""
    return storage(path) if path.startswith("s3://") else path


DATASETS = plan.datasets(config, list_s3)
DATASET = config["dataset"]
RETRIEVAL = plan.retrieval_name(config)
RETRIEVAL_SPEC = (
    RetrievalSpec.from_config(config, list_s3_folder) if RETRIEVAL is not None else None
)
# Every configured sweep, each point checked against the schema (shardflow.sweep); what
# is wrong with any of them stops the parse below, in one error with the checks after.
# Stop once, naming every one.
_PROBLEMS = plan.reproduction_pins_nothing(config)
_PROBLEMS += plan.reproduction_unnamed(config)
_PROBLEMS += plan.unknown_reproduction_metrics(config, DATASETS)
_PROBLEMS += plan.unknown_reproduction_packages(config)
# The data set whose provenance and metrics rule verify_reproduction reads.
REPRO_DATASET = RETRIEVAL if RETRIEVAL is not None else DATASET
_PROBLEMS += plan.unknown_reproduction_outputs(
    config, REPRO_DATASET, DATASETS[REPRO_DATASET].tasks
)
_PROBLEMS += plan.memory_cap_problems(config)
SWEEPS = parse_sweeps(
    config["sweeps"], config, validate, root=workflow.basedir, problems=_PROBLEMS
)
# A literal and a named prompt set together, in the config or at a sweep point (the
# points in the main process only: every job's re-parse built each point's config).
_PROBLEMS += plan.prompt_conflicts(
    config, SWEEPS.values() if workflow.is_main_process else ()
)
if workflow.is_main_process:
    # What the config files write that their merge hides: a key written twice in one
    # mapping (YAML keeps the last), one sweep defined in two files (merged key by key);
    # what the command line's --config drops (all but the last --config), and what it,
    # or a later profile's, drops of a profile's config: (replaced whole).
    _PROBLEMS += repeated_keys(workflow.configfiles)
    _PROBLEMS += command_line_config_problems(site.config_arguments())
    _PROBLEMS += profile_config_problems(
        *site.profile_config(), actual=workflow.config_settings.config
    )
    _PROBLEMS += sweeps_in_files(workflow.configfiles)
SWEEPS_BY_FOLDER = {spec.folder: spec for spec in SWEEPS.values()}
if workflow.is_main_process and not workflow.storage_settings.default_storage_provider:
    # A finished sweep whose grid gained or lost a key has its jobs under other point
    # ids: say so before they all run again (shardflow.sweep.adopt; one listing each).
    for _line in filter(None, map(unadopted_points_warning, SWEEPS.values())):
        logger.warning(_line)
SWEEP_NEEDS = {
    "train": None,
    "embed": None,
    "retrieval": (RETRIEVAL is not None, "retrieval.path (the data set it evaluates)"),
    "summarise": (
        bool(config["summarise"]["reference_field"]),
        "summarise.reference_field (its ROUGE references)",
    ),
}
for _ds in DATASETS.values():
    for _why in (
        (plan.path_dependent_split(config, _ds), plan.many_chunks(config, _ds))
        if workflow.is_main_process
        else ()
    ):
        if _why:
            logger.warning(f"data set {_ds.name!r}: {_why}")
# Snakemake 9.27 sizes a job's disk_mb from its inputs inside its event loop where they
# are yet to be written (a dry run, with a disk_mb computed from input.size: the eks
# profile's, or --default-resources), and drops the coroutine it made: Python warned
# "coroutine ... was never awaited" once per DAG, about nothing to act on (the job is
# sized again when it is scheduled; profiles/README.md). That one warning only.
warnings.filterwarnings(
    "ignore",
    message=r"coroutine 'InputFiles\._predicated_size_files\.<locals>\.sizes' was never awaited",
    category=RuntimeWarning,
)
MODEL_CHECK_OFF = "SHARDFLOW_SKIP_MODEL_CHECK"
for _spec in SWEEPS.values():
    # A metric its stage's jobs do not write: here, not at the collection after every job.
    _PROBLEMS += unknown_metrics(_spec)
    _PROBLEMS += incomparable_points(_spec, config["embedding"]["model"])
    # Each point's job config, built in the main process only, as for prompt_conflicts.
    _point_problems = (
        plan.summarise_point_problems(_spec) if workflow.is_main_process else []
    )
    _PROBLEMS += _point_problems
    if SWEEP_NEEDS[_spec.stage] and not SWEEP_NEEDS[_spec.stage][0]:
        _PROBLEMS.append(
            f"sweep {_spec.name!r} (stage {_spec.stage}) needs {SWEEP_NEEDS[_spec.stage][1]}"
        )
    # Points that cannot run stop the parse: their seeds repeat nothing.
    _why = (
        seeds_without_effect(_spec)
        if workflow.is_main_process and not _point_problems
        else None
    )
    if _why:
        logger.warning(
            f"sweep {_spec.name!r}: {_why}, so its {len(_spec.seeds)} seeds run each point "
            f"{len(_spec.seeds)} times for the same numbers; `seeds: [{_spec.seeds[0]}]` runs it once"
        )
    _method = config["summarise"]["method"]
    _ignored = ignored_by(_method, _spec.params) if _spec.stage == "summarise" else []
    _neutral = (
        without_effect(_method, _spec.params) if _spec.stage == "summarise" else []
    )
    if _spec.stage == "summarise" and _method == "stored":
        _PROBLEMS.append(
            f"sweep {_spec.name!r}: summarise.method is stored, which scores the summaries the "
            "corpus holds and runs no summarise job: there is nothing to sweep (a summarise sweep "
            "needs method lead, extractive or abstractive)"
        )
    elif _ignored:
        _PROBLEMS.append(
            f"sweep {_spec.name!r}: summarise.method {_method} does not read {', '.join(_ignored)}: every "
            f"point would be the same run (it reads: {', '.join(METHOD_KEYS[_method])})"
        )
    elif _neutral:
        _PROBLEMS.append(
            f"sweep {_spec.name!r}: {', '.join(_neutral)} only sizes the resumable parts of "
            f"summarise.method {_method}, whose summaries each depend on their document alone: "
            "every point would be the same run"
        )
# The models the jobs load, looked for now where the jobs see this machine's files
# (local, SLURM); with default storage (EKS) they live in the image, not here. Not in
# modes that run no job (--unlock, --report, ...), nor with SHARDFLOW_SKIP_MODEL_CHECK=1
# (models that only the nodes have). One missing stops the run once the rules are
# defined (check_models), unless every output of the jobs that load it exists; with
# other problems, here, named with them. So is a prompt name the embedding model lacks.
MISSING_MODELS = []
MODELS_CHECKED = (
    workflow.is_main_process
    and not workflow.storage_settings.default_storage_provider
    and not site.runs_no_jobs()
    and os.environ.get(MODEL_CHECK_OFF, "") in ("", "0")
)
if MODELS_CHECKED:
    MISSING_MODELS = plan.unavailable_models(config, DATASETS.values(), SWEEPS.values())
    _PROBLEMS += plan.unknown_prompts(
        config, DATASETS.values(), SWEEPS.values(), MISSING_MODELS
    )
if _PROBLEMS:
    raise ValueError("\n".join(_PROBLEMS + plan.model_verdicts(MISSING_MODELS)[0]))
# chunking.by: source leaves a grown corpus's finished embed jobs done, unless temp()
# chunk vectors (embedding.keep_chunk_vectors: false) make merge's rerun remake them all:
# say so, once, where jobs are run (not an error).
if workflow.is_main_process and not site.runs_no_jobs():
    _TEMP_VECTORS = plan.temp_vectors_rerun_growth(config, DATASETS.values())
    if _TEMP_VECTORS:
        logger.warning(_TEMP_VECTORS)
# A retrieval run that leaves unset the query or document prompt MTEB takes from the
# model's config scores another setting than MTEB's: say so, once (not an error).
_MTEB_PROMPTS = (
    plan.prompts_unlike_mteb(config, MISSING_MODELS) if MODELS_CHECKED else None
)
if _MTEB_PROMPTS:
    logger.warning(_MTEB_PROMPTS)
# Task search's queries embedded without the model's query prompt: say so, once.
_SEARCH_PROMPT = (
    plan.search_prompt_unset(config, MISSING_MODELS) if MODELS_CHECKED else None
)
if _SEARCH_PROMPT:
    logger.warning(_SEARCH_PROMPT)
SWEEP_FOLDERS = "|".join(re.escape(f) for f in SWEEPS_BY_FOLDER) or "(?!)"


wildcard_constraints:
    dataset="|".join(DATASETS),
    chunk=r"\d+",


# --------------------------------------------------------------------- chunks


def split_inputs(ds):
    """The files a data set's split reads. s3:// objects go through Snakemake
    storage, which downloads each one before the job; the script reads that copy."""
    return [stored(f) for f in ds.sources]


# chunking.by: source (rules/split.smk): the data sets split per source, and each one's
# sources as the split_source jobs read them.
BY_SOURCE = {name: ds for name, ds in DATASETS.items() if ds.by == "source"}
SOURCE_INPUTS = {
    name: [stored(f) for f in ds.sources] for name, ds in BY_SOURCE.items()
}


def source_input(wildcards):
    """The one source of a split_source job's chunk."""
    sources = SOURCE_INPUTS[wildcards.dataset]
    if int(wildcards.chunk) >= len(sources):
        raise WorkflowError(
            f"chunk {wildcards.chunk} of data set {wildcards.dataset!r}: chunking.by: source "
            f"makes {len(sources)} chunks, one per source (0 to {len(sources) - 1})"
        )
    return sources[int(wildcards.chunk)]


def chunk_list(dataset, pattern):
    return expand(pattern, dataset=dataset, chunk=range(DATASETS[dataset].n_chunks))


def per_chunk(pattern, dataset=None):
    """Input function: `pattern` expanded over the chunks of the job's data set (or of
    `dataset`), its other wildcards (a sweep job's) filled from the job's."""

    def inputs(wildcards):
        ds = dataset or wildcards.dataset
        fill = {k: v for k, v in wildcards.items() if k != "chunk"}
        return expand(pattern, chunk=range(DATASETS[ds].n_chunks), **fill)

    return inputs


def chunk_vectors(path):
    """An embed rule's per-chunk .npy output: `path`, or temp(path) under
    `embedding.keep_chunk_vectors: false`, so that Snakemake deletes it once every job
    reading it (merge) has run. An output flag is no rerun trigger: toggling the key
    reruns nothing; a later rerun of merge, the file gone, reruns the embed jobs.
    make status reads the rule's pattern through this call (status._FLAGS)."""
    return path if config["embedding"]["keep_chunk_vectors"] else temp(path)


# ------------------------------------------------------------------ GPU jobs


@functools.cache
def local_gpus():
    """This host's GPUs for the GPU jobs (none under CUDA_VISIBLE_DEVICES="" or -1)."""
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


def gpu_job_params(as_json=False, device_decides=True):
    """The params of every GPU job besides its stage's, given as `**gpu_job_params()`:
    - `gpu_jobs` (device, pinning, devices: what shardflow.core.gpujob reads; JSON for a
      shell rule, with the job's `attempt` resource added: the train launcher's guard
      against repeating an input error, shardflow.core.failures), untracked: which GPUs
      a job gets changes none of its outputs;
    - `device`, recorded: it decides the dtype under `auto` and the kernels, so changing
      it reruns the GPU jobs; untracked for a job whose output it does not decide
      (`device_decides=False`: summarise with method lead, which runs on the CPU)."""
    settings = {k: config["gpu_jobs"][k] for k in ("device", "pinning", "devices")}
    device = settings["device"] if device_decides else untracked(settings["device"])
    if not as_json:
        return {"gpu_jobs": untracked(settings), "device": device}

    def gpu_jobs(wildcards, resources):
        # A function of `resources`, so unrecorded, as `untracked`. Snakemake evaluates
        # params once per run: a retry in place still reads attempt 1 here (the launcher
        # knows it by the Snakemake process instead); a SLURM resubmission's own
        # Snakemake (--attempt N) reads N.
        return json.dumps(
            {**settings, "attempt": resources.get("attempt")}, sort_keys=True
        )

    return {"gpu_jobs": gpu_jobs, "device": device}


def chunk_logs(rule):
    """Params function: the log of `rule`'s chunk jobs as the rule declares it, the job's
    own wildcards filled in and `{chunk}` left for a chunk's index: what a verify job
    names for a failed row (shardflow.embed.verify). Read from the rule (`rules.<rule>`)
    when the job is planned, so no second copy of the pattern can drift from it."""

    def pattern(wildcards):
        return apply_wildcards(
            str(getattr(rules, rule).log[0]),
            {**dict(wildcards.items()), "chunk": "{chunk}"},
        )

    return pattern


def untracked(value):
    """A params entry the job gets but Snakemake does not record: `value`, or
    `value(wildcards)` when it is a function.

    Snakemake records each job's params and reruns a finished job whose params changed
    (rerun trigger `params`, on by default). A params function that takes `resources`
    counts as derived from the job's resources, and is not recorded (Snakemake 9:
    `Rule._is_deriving_function`), as resources are not. Where and how a job runs goes
    this way (GPU pinning, resume folders, compile caches): moving jobs to other GPUs or
    their state to another folder reruns nothing. What a job computes (its stage's
    section, the device) is recorded, so a changed value reruns exactly the jobs it
    affects."""

    def param(wildcards, resources):
        return value(wildcards) if callable(value) else value

    return param


# With S3 as the default storage (the eks profile: pods share no volume) and no
# gpu_jobs.resume_dir, finished parts go to the same place under the storage prefix,
# where the rerun of a killed pod finds them (shardflow.core.parts). Training
# checkpoints stay on a local path: they need gpu_jobs.resume_dir on a mounted volume.
S3_PARTS_PREFIX = (
    workflow.storage_settings.default_storage_prefix.rstrip("/")
    if workflow.storage_settings.default_storage_provider == "s3"
    else None
)


# Local jobs read and write those parts with the run's S3 settings: they inherit them
# as the SNAKEMAKE_STORAGE_S3_* variables a pod gets (never as params, which Snakemake
# records in .snakemake/metadata).
if S3_PARTS_PREFIX:
    s3.export_settings(s3_settings())
    s3.fresh_folder_checks()  # folder outputs that a pod uploaded are seen
# A failed pod is reported as a failed job, retried and run around (keep-going), not
# the end of the run: the Kubernetes plugin's read of its log is made readable
# (shardflow.core.kube). The plugin is imported before the parse in every run, so this
# costs nothing where another executor runs the jobs, and changes nothing there.
if workflow.is_main_process:
    kube.failed_pod_logs_readable()
# The jobs' records name files they got through storage as the workflow does
# (shardflow.core.s3.logical_path); set here, it reaches each job, in a pod too. Not
# inherited from elsewhere: without default storage, nothing is renamed but copies of
# s3:// inputs.
os.environ[s3.LOCAL_VARIABLE] = str(workflow.storage_settings.local_storage_prefix)
if workflow.storage_settings.default_storage_provider:
    os.environ[s3.PREFIX_VARIABLE] = (
        workflow.storage_settings.default_storage_prefix or ""
    )
else:
    os.environ.pop(s3.PREFIX_VARIABLE, None)


def resume_path(local, under_base, parts=True):
    """Where undeclared resume state lives (plan.resume_path), for parts under the S3
    storage prefix when that is the default (`parts=False`: a local path)."""
    prefix = S3_PARTS_PREFIX if parts else None
    return plan.resume_path(config["gpu_jobs"]["resume_dir"], local, under_base, prefix)


def resume_root(dataset, parts=True):
    """A data set's resume parts (embed, summarise; `parts=False`: a local path)."""
    prefix = S3_PARTS_PREFIX if parts else None
    return plan.resume_root(config["gpu_jobs"]["resume_dir"], dataset, prefix)


def job_resume_root(wildcards):
    return resume_root(wildcards.dataset)


# ----------------------------------------------------------------- resources


def rule_resources(rule, wildcards):
    """`resources.<rule>` for one job: every resource getter reads it here. Sweeps vary
    a stage's settings, not its resources (shardflow.sweep.spec.STAGES)."""
    return config["resources"][rule]


def chunk_jobs(wildcards):
    """How many of a chunk rule's jobs can run at once: the largest chunk count."""
    return max(ds.n_chunks for ds in DATASETS.values())


def job_threads(rule, uses_gpu=True, jobs=chunk_jobs, processes=None):
    """`threads:` of a GPU rule: `auto` shares this host's cores among the rule's
    `jobs(wildcards)` jobs that can run at once, only where this Snakemake runs the CPU
    jobs itself; elsewhere it gives each of the job's `processes(wildcards)` processes
    (train's: one per GPU; default one) the threads of one GPU job
    (shardflow.workflow.plan.job_threads). `uses_gpu=False`: the configured method
    needs no GPU (Lead-k): `auto` is 1, as for a CPU rule."""

    def threads(wildcards):
        try:
            cores = workflow.cores
        except WorkflowError:  # no --cores: a cluster run
            cores = None
        return plan.job_threads(
            rule_resources(rule, wildcards)["threads"],
            local_cpu=runs_on_cpu() and local_main_process(),
            cores=cores,
            jobs=jobs(wildcards),
            uses_gpu=uses_gpu,
            processes=processes(wildcards) if processes else 1,
        )

    return threads


def user_sets(*path):
    """Whether the run's own config (--configfile, --config) sets this key, rather than
    config/config.yaml or the schema's default."""
    from shardflow.core.config import user_sets as sets

    return sets(workflow.config_settings.overwrite_config, path)


@functools.cache
def rule_runs_on_cpu(name):
    """Whether the jobs of GPU rule `name` (its resources key) run on the CPU whatever the
    executor (plan.gpu_rules_on_cpu: gpu_jobs.device cpu, summarise.method lead,
    retrieval.backend faiss, a resources.<rule>.gpu of 0): they request no GPU."""
    on_cpu = plan.gpu_rules_on_cpu(config, DATASETS.values(), SWEEPS.values())
    return name in {plan.resources_key(r) for r in on_cpu}


def job_resources(rule, uses_gpu=True):
    """`resources:` of a GPU rule: gpu, mem_mb growing with each attempt up to
    mem_mb_max (plan.job_mem_mb), runtime, and the attempt itself (job_attempt).

    A job that runs on the CPU (device cpu, a local host without GPUs, a method that needs
    no GPU, retrieval.backend faiss or a gpu of 0: rule_runs_on_cpu) has no `gpu` resource at all (None drops it): it is not queued behind
    the local profile's `gpu` pool, and executors that key on the resource being there
    give it nothing of a GPU job's: a `gpu` of 0 still gets the EKS pod the GPU
    toleration and an nvidia.com/gpu request of 0 (kubernetes plugin 0.5.1), and
    `--gpus=<model>:0` on SLURM when a gpu_model is set. Except what a profile gives the
    rule: in set-resources (or default-resources) a gpu_model still gets the job one GPU
    on SLURM (slurm plugin 2.8 counts a missing `gpu` as 1: `--gpus=<model>:1`), as does
    a gres naming gpu or a `gpu` above 0 (on EKS too), a `gpus` or `nvidia_gpu` above 0
    asks the SLURM job step's srun for GPUs, and a set-resources `gpu` of 0 brings the
    EKS toleration back; the parse names each such value (name_gpu_requests). The job
    reads a missing `gpu` as 0 (shardflow.core.gpujob); with gpu_jobs.device cpu it runs
    on the CPU whatever its `gpu`.

    `uses_gpu=False` (a method that needs no GPU, Lead-k): the job asks for what a CPU
    rule asks for, the profile's default-resources mem_mb and runtime (the sizes in
    config/config.yaml are the model methods'), unless the run's own config sets
    resources.<rule>.mem_mb (or mem_mb_per_attempt, mem_mb_max) or runtime."""

    def gpu(wildcards):
        if runs_on_cpu() or not uses_gpu or rule_runs_on_cpu(rule):
            return None
        return rule_resources(rule, wildcards)["gpu"]

    def mem_mb(wildcards, attempt):
        return plan.job_mem_mb(rule_resources(rule, wildcards), attempt)

    def runtime(wildcards):
        return rule_resources(rule, wildcards)["runtime"]

    if uses_gpu:
        return {
            "gpu": gpu,
            "mem_mb": mem_mb,
            "runtime": runtime,
            "attempt": job_attempt,
        }
    memory = any(
        user_sets("resources", rule, key)
        for key in ("mem_mb", "mem_mb_per_attempt", "mem_mb_max")
    )
    return {
        "gpu": gpu,
        "attempt": job_attempt,
        **({"mem_mb": mem_mb} if memory else {}),
        **({"runtime": runtime} if user_sets("resources", rule, "runtime") else {}),
    }


def job_attempt(wildcards, attempt):
    """The `attempt` resource of a GPU rule: which attempt at the job this is (1, then 2
    on a retry, ...), for the job itself (shardflow.core.failures: a retry that would
    repeat an input or config error stops at once). A script's Snakemake object has no
    attempt of its own; no executor or scheduler reads this resource, and a resource
    reruns nothing."""
    return attempt


def job_disk(need):
    """`resources:` disk_mb of the split and embed rules, whose jobs write more than
    they read: the larger of `need(wildcards, [(input, bytes), ...])` and the profile's
    default-resources disk_mb for the job (shardflow.workflow.disk). Only where each job
    holds its files on a disk of its own: with default storage (the eks profile: a pod,
    whose ephemeral storage disk_mb requests and limits). Elsewhere the profile's
    default-resources stays, and no input is sized (the SLURM plugin requests no disk;
    a SLURM job without S3 credentials fails sizing an s3:// corpus)."""
    if not workflow.storage_settings.default_storage_provider:
        return {}
    return {"disk_mb": disk.job_disk_mb(need, _DEFAULTS.get("disk_mb"))}


def split_disk(ds=None):
    """job_disk of split_<dataset> (`ds`), or of split_source (its {dataset})."""
    return job_disk(
        disk.split_need(lambda wildcards: (ds or DATASETS[wildcards.dataset]).reader)
    )


@functools.cache
def warn_once(message):
    if workflow.is_main_process:
        logger.warning(message)


def stored_url(path):
    """The S3 default storage's object of the file the workflow names `path`; None where
    the default storage is not S3."""
    return f"{s3.stored_prefix(S3_PARTS_PREFIX)}/{path}" if S3_PARTS_PREFIX else None


def read_stored_json(path):
    """A JSON file the workflow names `path`, from the S3 default storage; None where
    there is none (or the default storage is not S3)."""
    from shardflow.core.files import read_json

    url = stored_url(path)
    if url is None:
        return None
    copy = os.path.join(parsecache.FOLDER, "stored", path)
    return read_json(copy) if s3.fetch(url, copy, stored_client()) else None


def stored_queries_records(path, n_bytes):
    """The records of a queries file the workflow names `path` (a record a line, as a
    chunk: no split's manifest counts them), its lines counted in the S3 default storage;
    None where there is none (or the default storage is not S3), or it is not the
    `n_bytes` the job gets."""
    url = stored_url(path)
    return stored_lines(url, n_bytes) if url else None


# Snakemake evaluates a job's resources more than once, and each sweep_embed_queries
# point embeds the same file: each file of a size is streamed once per process.
@functools.cache
def stored_lines(url, n_bytes):
    return s3.count_lines(url, stored_client(), n_bytes)


@functools.cache
def stored_client():
    return s3.client(s3_settings())


def job_embedding(wildcards, kind="corpus"):
    """The `embedding` section an embed rule's job runs with (a sweep's point, or a
    shared set's {settings}, of `kind`: corpus or queries)."""
    if "settings" in wildcards.keys():
        return sweep_embeddings().computed(kind, wildcards.settings).params
    return stage_section("embedding", wildcards)


def embed_disk(kind="corpus"):
    """job_disk of the embed rules: the input and its vectors. A chunk's records
    (`kind` corpus) as the split's manifest counts them; a queries file's (`kind`
    queries: embed_queries, embed_search_queries, sweep_embed_queries) counted in the
    file, which its rule's one job is scheduled once it is written."""
    if kind == "corpus":
        counts = disk.ChunkCounts(read_stored_json)
    else:  # all embed_need asks of its counts
        counts = disk.QueryCounts(stored_queries_records)
    return job_disk(
        disk.embed_need(
            counts,
            functools.partial(job_embedding, kind=kind),
            functools.cache(disk.model_dim),
            warn_once,
        )
    )


# Inside a job that SLURM runs for the slurm executor, the controller resubmits a
# failed job itself (`retries`, with mem_mb growing per attempt); a rule's own
# `retries:` would also make the Snakemake inside the job retry in place, multiplying
# the attempts on the first allocation. In a Kubernetes pod the in-place retry stays:
# it is quick (no new pod, the record of an input error seen), while the controller's
# resubmission (shardflow.core.kube) brings a new node and more memory.
IN_SLURM_JOB = workflow.remote_exec and "SLURM_JOB_ID" in os.environ


def constraints_in_storage():
    """Make the wildcard constraints hold for outputs in default storage (the eks profile:
    S3). Snakemake 9.27 with snakemake-storage-plugin-s3 0.3.6 matches a requested file
    against the output's local path, which the storage object derives from its query
    before any constraint is applied, and never again (also not in
    Rule.update_wildcard_constraints). Unconstrained, `results/{dataset}/report/summary.json`
    (report) also matches summarise_report's `results/tr/summarise/report/summary.json`,
    with dataset `tr/summarise`, and the run stops as ambiguous. Here each such output
    gets a storage object made from the constrained query, as Snakemake makes one per job
    (IOFile.apply_wildcards). The Snakefile calls this once, after the last rule; outputs
    not in storage are left as they are."""
    for r in workflow.rules:
        for i, item in enumerate(r.output):
            if not item.is_storage:
                continue
            old = item.storage_object
            query = update_wildcard_constraints(
                old.query, r.wildcard_constraints, workflow.wildcard_constraints
            )
            fresh = type(old)(
                query=query,
                provider=old.provider,
                keep_local=old.keep_local,
                retrieve=old.retrieve,
            )
            constrained = IOFile(fresh.local_path(), rule=r)
            constrained.clone_flags(item, skip_storage_object=True)
            constrained.flags["storage_object"] = fresh
            r.output[i] = constrained
        # output.<name> refers to the new items too
        for name, (start, end) in list(r.output._get_names()):
            r.output._set_name(name, start, end)


def name_gpu_requests():
    """Warn, naming rule, key and value, where a profile's set-resources or
    default-resources gets a GPU, or a GPU node, for jobs that use none: a gpu_model, a
    gres naming gpu or a `gpu` (also `gpus`, `nvidia_gpu` for the SLURM job step) still
    gets the job one from the executor, and a `gpu` of 0 with a gpu_manufacturer the EKS
    pod's GPU toleration (shardflow.workflow.site.gpu_asks), train's own 0 on the CPU
    included (plan.GPU_ON_CPU). Asked of the GPU rules of this run whose jobs run on the
    CPU (their `gpu` is none; train's is 0), of every rule that is no GPU rule and, for a
    set-resources `gpu` of 0, of the other GPU rules; a value the parse cannot evaluate
    (it reads the job's attempt, ...) is named as not checked (site.known_value). The
    Snakefile calls it after the last rule, when all the run's rules are defined.
    Not checked: a slurm_partition or an EKS machine_type, as nothing the parse reads says
    which partitions or instance types have GPUs. The SLURM plugin's partition file, whose
    max_gpu would, comes with the executor settings after the parse; the variable
    SNAKEMAKE_SLURM_PARTITIONS may name one, but a --slurm-partition-config that the parse
    cannot see (a profile key) overrides it."""
    if not workflow.is_main_process:
        return
    # The profile check counts the rules given gpu 0 as GPU rules, since set-resources
    # may give their jobs GPUs (plan.gpu_rules_on_cpu, gpu_0)
    profile_on_cpu = plan.gpu_rules_on_cpu(
        config, DATASETS.values(), SWEEPS.values(), gpu_0=False
    )
    rules = [r.name for r in workflow.rules]
    cpu_rules = plan.cpu_rules(rules)
    gpu_rules = [r for r in rules if r not in cpu_rules]
    for line in site.gpu_request_warnings(
        _SET, profile_on_cpu, cpu_rules, gpu_rules, _DEFAULTS, gpu=plan.GPU_ON_CPU
    ):
        logger.warning(line)
    on_cpu = plan.gpu_rules_on_cpu(config, DATASETS.values(), SWEEPS.values())
    for line in plan.idle_gpus(config, DATASETS.values(), SWEEPS.values(), on_cpu):
        logger.warning(line)


def check_models():
    """Stop on a model this machine lacks (MISSING_MODELS) while a job that loads it has
    work to do; warn instead where every output of those jobs exists: a finished run
    whose model has since moved still dry-runs, and runs targets that need no model
    (shardflow.workflow.plan.model_verdicts). Then the same for a model changed in place
    since jobs that load it ran, which Snakemake does not see (plan.changed_model): it
    stops a run that would mix the two models' outputs, and is left to a run that
    remakes those jobs (--forcerun, --forceall). The jobs are plan.model_jobs, their
    files the rules' own output patterns, so the Snakefile calls this after the last
    rule. In the main process only, where MISSING_MODELS is looked for: remote jobs
    re-parse, and each remakes its own outputs."""
    if not MODELS_CHECKED:
        return
    jobs = plan.model_jobs(
        config, DATASETS.values(), SWEEPS.values(), sweep_embeddings()
    )

    def outputs(key, name):
        return [
            apply_wildcards(pattern, wildcards)
            for rule, wildcards in jobs[(key, name)]
            for pattern in workflow.get_rule(rule).output
        ]

    def stats(key, name):  # (rule, file) of each job's stats, which record its model
        for rule, wildcards in jobs[(key, name)]:
            output = workflow.get_rule(rule).output
            if "stats" in output.keys() and isinstance(output.stats, str):
                yield rule, apply_wildcards(output.stats, wildcards)

    errors, warnings = plan.model_verdicts(MISSING_MODELS, outputs, os.path.exists)
    missing = {(m.key, m.name) for m in MISSING_MODELS}
    changed = [
        plan.changed_model(key, name, stats(key, name))
        for key, name in jobs
        if (key, name) not in missing
    ]
    forced_by = functools.cache(site.forced_rules)  # read only where a model changed
    forced = lambda rule: forced_by()[0] or rule in forced_by()[1]
    more = plan.changed_model_verdicts(filter(None, changed), forced)
    for line in warnings + more[1]:
        logger.warning(line)
    if errors or more[0]:
        raise ValueError("\n".join(errors + more[0]))


def one_retry_layer():
    """Inside a SLURM job, turn every rule's in-place retries off: rules write plain
    `retries: N`, and this one pass (the Snakefile calls it after the last rule)
    covers them all, new rules included."""
    if IN_SLURM_JOB:
        for r in workflow.rules:
            r.restart_times = 0


# ---------------------------------------------------------------- parameters


def stage_section(section, wildcards):
    """config[section] as one job sees it: a sweep job's point and seed applied."""
    if "sweep" in wildcards.keys():
        spec = SWEEPS_BY_FOLDER[wildcards.sweep]
        return spec.job_config(wildcards.point, int(wildcards.seed))[section]
    return config[section]


def stage_params(section, **overrides):
    """Params function: config[section] (plus overrides) for one job, as recorded
    (core.config.recorded: less its untracked keys). Params reach the scripts only this
    way, so a changed value reruns exactly the jobs it affects."""

    def params(wildcards):
        return {**recorded(section, stage_section(section, wildcards)), **overrides}

    return params


def retrieval_scoring():
    """The scoring settings of retrieval_evaluate (and sweep_retrieval_evaluate) added
    since its first params, as `**retrieval_scoring()`: `relevance_level` only away from
    1, the level every job scored with before the key existed, so an upgrade reruns no
    finished job for it. Not swept (shardflow.sweep.spec: how a data set is scored)."""
    level = config["retrieval"]["relevance_level"]
    return {} if level == 1 else {"relevance_level": level}


def stage_value(section, key):
    """Params function: one key of a stage's section, as the job sees it."""

    def value(wildcards):
        return stage_section(section, wildcards)[key]

    return value


# ------------------------------------------------------------------ sweeps


def sweeps_of_stage(stage):
    return [spec for spec in SWEEPS.values() if spec.stage == stage]


def stage_sweep_job(stage):
    """A `stage` sweep job's folder for its rules' outputs: {sweep} matches that stage's
    sweeps only. The stages' jobs write the same names (metrics.json), so sweeps of two
    stages in one config would otherwise be ambiguous."""
    folders = "|".join(re.escape(s.folder) for s in sweeps_of_stage(stage)) or "(?!)"
    return f"results/sweeps/{{sweep,{folders}}}/{{point}}/seed={{seed}}"


def sweep_job(wildcards):
    return f"{wildcards.sweep}/{wildcards.point}/seed={wildcards.seed}"


def sweep_resume_root(wildcards, parts=True):
    prefix = S3_PARTS_PREFIX if parts else None
    return plan.sweep_resume_root(
        config["gpu_jobs"]["resume_dir"], sweep_job(wildcards), prefix
    )


def sweep_train_resume(wildcards):
    return plan.sweep_train_resume(
        config["gpu_jobs"]["resume_dir"], sweep_job(wildcards)
    )


def one_job_at_a_time(wildcards):
    """An embed sweep's chunk jobs measure speed: on this host's CPU, `threads: auto`
    gives each every core, so they run one at a time and each rate is the machine's,
    not a share of it (a GPU job holds its own GPU either way)."""
    return 1


def sweep_jobs_at_once(wildcards):
    """A sweep's jobs share the cores as chunk jobs do: small models train side by side."""
    return len(SWEEPS_BY_FOLDER[wildcards.sweep].jobs())


# Retrieval sweeps: corpus and query embeddings are named by their settings, not by the
# point (shardflow.sweep.shared), so jobs with equal settings read one set, and a set
# with the main run's settings is the main run's files.
@functools.cache
def sweep_embeddings():
    """Which corpus and query embeddings each retrieval sweep job reads, planned as status
    and estimate plan them; None without a retrieval sweep."""
    return plan.retrieval_sweep_embeddings(config, DATASETS.values(), SWEEPS.values())


def shared_embeddings(root, kind, key):
    """The folder of one set the sweeps compute, under results, logs or benchmarks
    (shardflow.sweep.shared.set_folder: status reads the sets' files through it too)."""
    return set_folder(root, RETRIEVAL, kind, key)


def shared_embedding_value(kind, name):
    """Params function of a shared set's rules: `params` (the embed jobs' recorded
    `embedding`), `compile_cache` or `model` of the set the job's {settings} names."""

    def value(wildcards):
        found = sweep_embeddings().computed(kind, wildcards.settings)
        if name == "params":
            return dict(found.params)
        return found.compile_cache if name == "compile_cache" else found.params[name]

    return value


def shared_resume_root(kind):
    def root(wildcards):
        where = f"{SHARED_FOLDER}/{RETRIEVAL}/{kind}/{wildcards.settings}"
        return resume_path(f"results/sweeps/.resume/{where}", where)

    return root


def sweep_embedding_files(folder, point, seed):
    """The embeddings one retrieval sweep job reads ({docs, doc_ids, verification,
    queries, query_ids}), and the stats and benchmarks of the jobs that made them (the
    chunks' and the queries' stats, paired in order with the first benchmarks)."""
    corpus, queries = sweep_embeddings().of_job(folder, point, seed)
    n = range(DATASETS[RETRIEVAL].n_chunks)
    if corpus.main:  # rules embed, merge, verify of the data set
        c = f"results/{RETRIEVAL}"
        chunk_bench = [f"benchmarks/embed/{RETRIEVAL}/chunk_{i}.tsv" for i in n]
        merge_bench = f"benchmarks/merge/{RETRIEVAL}.tsv"
    else:  # sweep_embed, sweep_merge, sweep_verify
        c = shared_embeddings("results", "corpus", corpus.key)
        cb = shared_embeddings("benchmarks", "corpus", corpus.key)
        chunk_bench = [f"{cb}/embed_{i}.tsv" for i in n]
        merge_bench = f"{cb}/merge.tsv"
    if queries.main:  # rule embed_queries
        q = f"results/{RETRIEVAL}/retrieval"
        query_bench = f"benchmarks/embed_queries/{RETRIEVAL}.tsv"
    else:  # sweep_embed_queries
        q = shared_embeddings("results", "queries", queries.key)
        query_bench = f"{shared_embeddings('benchmarks', 'queries', queries.key)}/embed_queries.tsv"
    files = {
        "docs": f"{c}/embeddings.npy",
        "doc_ids": f"{c}/ids.parquet",
        "verification": f"{c}/verification.json",
        "queries": f"{q}/queries.npy",
        "query_ids": f"{q}/queries.ids.parquet",
    }
    stats = [f"{c}/embed/embed_{i}.stats.json" for i in n] + [f"{q}/queries.stats.json"]
    return files, stats, chunk_bench + [query_bench, merge_bench]


def sweep_retrieval_inputs(wildcards):
    """Input function of sweep_retrieval_evaluate: the job's embeddings and the qrels."""
    files, _, _ = sweep_embedding_files(
        wildcards.sweep, wildcards.point, int(wildcards.seed)
    )
    return {**files, "qrels": f"results/{RETRIEVAL}/retrieval/qrels.json"}


# Per stage: a sweep job's metrics record, and the stats and benchmarks of its jobs
# (stats first, paired in order with the first benchmarks: GPU-hours), with the GPUs
# each stats file's job held (its rule's resources.<rule>.gpu, plan.job_gpus: the stats
# record none; train's metrics hold their world_size). A retrieval job's count the
# embeddings it reads, shared or the main run's.
def sweep_job_files(spec, point, seed):
    job = f"results/sweeps/{spec.folder}/{point}/seed={seed}"
    bench = f"benchmarks/sweeps/{spec.folder}/{point}/seed={seed}"
    metrics = job_metrics(spec.stage, spec.folder, point, seed)
    if spec.stage == "train":
        return {
            "metrics": metrics,
            "stats": [metrics],
            "benchmarks": [f"{bench}/train.tsv"],
            "gpus": [1],
        }
    if spec.stage == "summarise":
        n = range(DATASETS[DATASET].n_chunks)
        return {
            "metrics": metrics,
            "stats": [f"{job}/summarise/summaries_{i}.stats.json" for i in n],
            "benchmarks": [f"{bench}/summarise_{i}.tsv" for i in n]
            + [f"{bench}/merge_summaries.tsv", f"{bench}/evaluate_summaries.tsv"],
            "gpus": [plan.job_gpus(config, "summarise")] * len(n),
        }
    if spec.stage == "embed":
        n = range(DATASETS[DATASET].n_chunks)
        return {
            "metrics": metrics,
            "stats": [f"{job}/embed/embed_{i}.stats.json" for i in n],
            "benchmarks": [f"{bench}/embed_{i}.tsv" for i in n]
            + [f"{bench}/merge.tsv", f"{bench}/embed_metrics.tsv"],
            "gpus": [plan.job_gpus(config, "embed")] * len(n),
        }
    _, stats, benchmarks = sweep_embedding_files(spec.folder, point, seed)
    # The evaluation's metrics record its device: paired with its benchmark, right after
    # the embedding jobs' pairs (the merge's benchmark has no stats).
    paired = len(stats)
    return {
        "metrics": metrics,
        "stats": stats + [metrics],
        "benchmarks": benchmarks[:paired]
        + [f"{bench}/retrieval_evaluate.tsv"]
        + benchmarks[paired:],
        # the corpus's chunk jobs, the queries' job, the evaluation
        "gpus": [plan.job_gpus(config, "embed")] * (paired - 1)
        + [
            plan.job_gpus(config, "embed_queries"),
            plan.job_gpus(config, "retrieval_evaluate"),
        ],
    }


def embed_reference(folder, point):
    """Whether an embed sweep point's vectors compare with the main run's: it loads the
    same model, however spelt ("default" or the bundled folder; another model's vectors
    live in another space)."""
    spec = SWEEPS_BY_FOLDER[folder]
    return loads_model(spec, point, config["embedding"]["model"])


def sweep_embed_metrics_inputs(wildcards):
    """Input function of sweep_embed_metrics: the job's merged vectors, verification
    and job table, and the main run's vectors where they compare (embed_reference)."""
    job = f"results/sweeps/{wildcards.sweep}/{wildcards.point}/seed={wildcards.seed}"
    files = {
        "npy": f"{job}/embeddings.npy",
        "ids": f"{job}/ids.parquet",
        "verification": f"{job}/verification.json",
        "jobs": f"{job}/embed/jobs.json",
    }
    if embed_reference(wildcards.sweep, wildcards.point):
        files.update(
            ref_npy=f"results/{DATASET}/embeddings.npy",
            ref_ids=f"results/{DATASET}/ids.parquet",
        )
    return files


def sweep_jobs(name):
    spec = SWEEPS[name]
    return [
        {"point": p, "seed": s, **sweep_job_files(spec, p, s)} for p, s in spec.jobs()
    ]


def sweep_inputs(name):
    """Input function of collect_sweep_<name>: the sweep's spec.json (rule sweep_spec)
    and every job's metrics, stats, benchmarks."""

    def inputs(wildcards):
        jobs = sweep_jobs(name)
        return {
            "spec": f"{sweep_folder(name)}/spec.json",
            "metrics": [j["metrics"] for j in jobs],
            "stats": [f for j in jobs for f in j["stats"]],
            "benchmarks": [f for j in jobs for f in j["benchmarks"]],
        }

    return inputs


def sweep_job_shapes(name):
    """(point, seed, stats files, benchmark files, each stats file's GPUs) per job, in
    the order of the inputs (shardflow.sweep.cost.read_job_records)."""
    return [
        (j["point"], j["seed"], len(j["stats"]), len(j["benchmarks"]), tuple(j["gpus"]))
        for j in sweep_jobs(name)
    ]


def sweep_price(name):
    """collect_sweep_<name>'s price: `report.gpu_hour_price` and the `report.currency`
    its tables name, where the stage's jobs leave their cost to the collection (an embed
    sweep's, shardflow.sweep.cost.PRICED_STAGES), so a changed price or currency reruns
    the collection and not the jobs; none for other stages, whose collections show no
    money and are left alone."""
    if SWEEPS[name].stage not in PRICED_STAGES:
        return {}
    return {
        "gpu_hour_price": config["report"]["gpu_hour_price"],
        "currency": config["report"]["currency"],
    }


def sweep_spec_record(wildcards):
    """sweep_spec's params: what decides the sweep's tables, in builtins."""
    return SWEEPS_BY_FOLDER[wildcards.sweep].tables_record()


def sweep_folder(name):
    return f"results/sweeps/{SWEEPS[name].folder}"


def sweep_report_file(path, name):
    """A sweep output shown in the report, under Sweeps / <sweep>; a sampled sweep's
    caption says its figures are scatters of drawn points, not lines and cells."""
    sampled = SWEEPS[name].sample
    caption = "captions/sweep_sample.rst" if sampled else "captions/sweep.rst"
    return report(path, caption=caption, category="Sweeps", subcategory=name)


def sweep_outputs(name):
    """Every file collect_sweep_<name> writes, named for Snakemake; the figures, the
    summary table and the best point are flagged for the report (category Sweeps)."""
    files = sweep_output_files(SWEEPS[name], sweep_folder(name))
    shown = {"summary_csv", "best"}
    return {
        re.sub(r"\W", "_", key): (
            sweep_report_file(path, name)
            if key in shown or key.startswith("plot:")
            else path
        )
        for key, path in files.items()
    }


def summarise_params(wildcards):
    """The summarise keys the job's method reads (shardflow.summarise.params.METHOD_KEYS):
    changing a key the method ignores reruns nothing."""
    return method_params(stage_section("summarise", wildcards))


def summary_score_params():
    """How summaries are scored (shardflow.summarise.params.ScoreParams): the input's id
    and reference fields, how Lsum finds sentences, the bootstrap, bad records, and the
    record limit away from its default (shardflow.summarise.params.score_params)."""
    return score_params(config)


# ------------------------------------------------------------------- tasks


def task_files(ds, kind):
    """`kind` (targets, outputs, jobs, benchmarks, landing) of every task a data set
    runs (plan.datasets); each task's files come from shardflow.workflow.tasks."""
    files = tasks.task_files(DATASETS[ds].tasks, ds, config, DATASET)
    return [f for task in files for f in getattr(task, kind)]


def final_targets():
    targets = []
    for ds in DATASETS:
        targets += task_files(ds, "targets")
        targets.append(f"results/{ds}/provenance.json")
    targets += [sweep_outputs(name)["summary_parquet"] for name in SWEEPS]
    targets.append(LANDING)
    if config["reproduce"]["name"]:
        targets.append(f"results/{REPRO_DATASET}/reproduction.json")
    return targets


def provenance_inputs(wildcards):
    """What provenance records: the split's checksums (sources and chunks), the job
    tables the stages' merges wrote (per-chunk timings), the stats of single GPU jobs
    (embed_queries' and retrieval_evaluate's: what they ran with) and the stages'
    outputs; so its DAG edges come from split and the merges, not from every chunk
    job."""
    ds = wildcards.dataset
    raw = []  # inputs no rule writes, hashed by provenance itself
    if ds == RETRIEVAL:
        raw = [stored(f) for f in RETRIEVAL_SPEC.source_files()]
    return {
        "manifest": f"results/{ds}/chunks/manifest.json",
        "jobs": task_files(ds, "jobs"),
        "stats": task_files(ds, "stats"),
        "raw": raw,
        "outputs": task_files(ds, "outputs"),
        "benchmarks": [f"benchmarks/split/{ds}.tsv", *task_files(ds, "benchmarks")],
    }


def provenance_models(wildcards):
    """The models the data set's jobs ran, by role (shardflow.workflow.tasks.models)."""
    return tasks.models(DATASETS[wildcards.dataset].tasks, config)


# The report's first screen, written by rule landing once the stages have run.
LANDING = "results/report.rst"


def landing_sections():
    """Per data set and task, and per sweep: (stage, name, {name: file}); rule landing
    reads them."""
    sections = [section for ds in DATASETS for section in task_files(ds, "landing")]
    for name in SWEEPS:
        files = sweep_output_files(SWEEPS[name], sweep_folder(name))
        sections.append(
            (
                "sweep",
                name,
                {
                    **{k: files[k] for k in ("best", "points", "cost")},
                    # every point's mean: the best value's decimals are its table column's
                    "summary": files["summary_parquet"],
                },
            )
        )
    return sections


def landing_params(wildcards):
    return landing_sections()


def landing_inputs(wildcards):
    return {
        f"{stage}_{ds}_{name}": path
        for stage, ds, files in landing_sections()
        for name, path in files.items()
    }


def landing_text():
    """The global report description: the run's landing page once rule landing has
    written it (the report is made after the run, in its working directory; with S3
    as default storage, `--report` fetches it from the bucket), else a placeholder
    (shardflow.workflow.landing.first_page)."""
    return landing.first_page(
        LANDING,
        "rules/captions/landing_pending.rst",
        logger.warning,
        storage_prefix=S3_PARTS_PREFIX,
        fetch=workflow.is_main_process and site.makes_report(),
        s3_settings=s3_settings(),
        cache=os.path.join(parsecache.FOLDER, "landing.rst"),
    )


def reproduction_metrics():
    """verify_reproduction's metrics: the record of a task the run has (plan.reproduction_metrics)."""
    return plan.reproduction_metrics(config, DATASETS)
