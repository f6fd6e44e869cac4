"""Helpers of rules/train.smk (a rules file holds rules only): parse-time checks, the
rules' input, params, threads and resources functions, and what the training task
contributes to `all`, provenance and the landing page (shardflow.workflow.tasks.training).
"""

import json

from snakemake.logging import logger

from shardflow.train.params import job_params
from shardflow.train.prepare import tokenizer_params
from shardflow.train.tokenizer import META_FILE, pretrained_files, vocabulary_file

# train is a shell rule: its `python` must be the interpreter running this workflow, as
# for the script rules (shardflow.workflow.site.python_first_on_path). The command's
# text stays as it was: a changed command reruns finished train jobs.
site.python_first_on_path()

# A saved tokenizer is two files, both declared (tokenizer_files): jobs that share no
# filesystem (S3 storage) get only declared files.
TOKENIZER_VOCABULARY = vocabulary_file(config["shards"]["tokenizer"])
TRAINING = [ds for ds in DATASETS.values() if "training" in ds.tasks]
POSITION_SPLIT = config["shards"]["split"] == "position"
if TRAINING:  # contradictions stop the run at parse time, naming the keys
    plan.train_gpus(config)
    plan.train_settings(config["train"], shards=config["shards"])
    if POSITION_SPLIT:
        for ds in TRAINING:
            plan.position_source(ds)
if TRAINING or sweeps_of_stage("train"):
    plan.shards_settings(config)
for _spec in sweeps_of_stage("train"):  # each point's train section, as its jobs get it
    for _point in _spec.ids:
        plan.train_settings(
            _spec.job_config(_point, _spec.seeds[0], ("train",))["train"],
            f"sweep '{_spec.name}', point {_point}",
            shards=config["shards"],
        )


def tokenizer_inputs(wildcards):
    """The texts the vocabulary is built from; for a pretrained one given by path, the
    files it is copied from (pretrained_files), so that one edited in place reruns the
    copy and every job after it. Those are declared only where the jobs read this
    machine's files, as the model check looks for them: with S3 as the default storage
    (EKS) they come from the image, and with SHARDFLOW_SKIP_MODEL_CHECK=1 only the nodes
    may have them. `default` (the bundled MiniLM) changes with the package alone."""
    name = config["shards"]["tokenizer"]
    if name not in ("char", "bpe"):
        local = not workflow.storage_settings.default_storage_provider
        checked = os.environ.get(MODEL_CHECK_OFF, "") in ("", "0")
        if local and checked and plan.tokenizer_is_path(name):
            return pretrained_files(name)
        return []
    if POSITION_SPLIT:
        return [plan.position_source(DATASETS[wildcards.dataset])]
    return per_chunk("results/{dataset}/chunks/chunk_{chunk}.jsonl")(wildcards)


def tokenizer_files(ds):
    """The saved tokenizer's two files, named `tokenizer` (the meta file, whose folder
    the scripts read) and `vocabulary`: train_tokenizer's outputs (ds "{dataset}") and
    its consumers' inputs."""
    return {
        "tokenizer": f"results/{ds}/tokenizer/{META_FILE}",
        "vocabulary": f"results/{ds}/tokenizer/{TOKENIZER_VOCABULARY}",
    }


def train_tokenizer_params(wildcards):
    """train_tokenizer's params: vocab_size and min_frequency as bpe reads them, at their
    defaults for another tokenizer, where they change nothing (tokenizer_params)."""
    return tokenizer_params(config["shards"])


def tokenize_inputs(wildcards):
    return {
        "chunk": f"results/{wildcards.dataset}/chunks/chunk_{wildcards.chunk}.jsonl",
        **tokenizer_files(wildcards.dataset),
    }


def gather_inputs(wildcards):
    ds = wildcards.dataset
    inputs = tokenizer_files(ds)
    if POSITION_SPLIT:
        return {
            **inputs,
            "text": plan.position_source(DATASETS[ds]),
            "tokens": [],
            "docs": [],
            "stats": [],
            "benchmarks": [],
        }
    return {
        **inputs,
        "tokens": per_chunk("results/{dataset}/tokenize/chunk_{chunk}.bin")(wildcards),
        # read beside each .bin (not named by the script, but declared: see above)
        "docs": per_chunk("results/{dataset}/tokenize/chunk_{chunk}.bin.docs.jsonl")(
            wildcards
        ),
        "stats": per_chunk("results/{dataset}/tokenize/chunk_{chunk}.stats.json")(
            wildcards
        ),
        "benchmarks": per_chunk("benchmarks/tokenize/{dataset}/chunk_{chunk}.tsv")(
            wildcards
        ),
    }


def shards_params(*keys):
    """Params function: the named `shards` keys, so a changed key reruns only the jobs
    that use it."""

    def params(wildcards):
        return {k: config["shards"][k] for k in keys}

    return params


def gather_params(wildcards):
    keys = ("split", "val_fraction", "tokens_per_shard", "shard_mb", "dedup", "dtype")
    return {
        **shards_params(*keys)(wildcards),
        "group_field": config["chunking"]["group_by"],
    }


def train_params(wildcards):
    """TrainParams as JSON for the command line, as recorded (job_params: no untracked
    keys nor sample_tokens, gpus where it is not 1, compile false on the CPU)."""
    train = stage_section("train", wildcards)  # a sweep job's point and seed applied
    return json.dumps(job_params(train, config["gpu_jobs"]["device"]), sort_keys=True)


_WARNED = set()


def warn_once(message):
    """A warning printed once per run, however many jobs evaluate it."""
    if message not in _WARNED:
        _WARNED.add(message)
        logger.warning(message)


def train_resources():
    """resources.train, with gpu = train.gpus (0 when the job runs on the CPU: the shell
    command passes it to the launcher, so it stays, unlike the other GPU rules'). More
    than the run's `gpu` resource offers (the local profile's GPUs, --resources gpu=N)
    stops the run before any job starts: Snakemake would scale the request down
    silently, and the launcher would refuse the job only once it held its GPUs
    (shardflow.train.launch). A dry run on a host without GPUs only warns: it cannot
    know the executor, and the local run it previews puts the job on the CPU."""

    def gpu(wildcards):
        gpus = train_job_gpus(wildcards)
        if not gpus:
            return 0
        offered = workflow.global_resources.get("gpu")
        offered = getattr(offered, "value", offered)  # a Resource in Snakemake 9
        if workflow.is_main_process and isinstance(offered, int) and gpus > offered:
            message = (
                f"train.gpus is {gpus} but this run offers gpu={offered} (the local profile's GPUs, or "
                f"--resources gpu=N): lower train.gpus, or run where {gpus} GPUs are free"
            )
            if workflow.dryrun and not local_gpus():
                warn_once(
                    f"{message}. (Dry run on a host without GPUs: a local run trains on the CPU, "
                    "one process; a cluster run stops here.)"
                )
            else:
                raise WorkflowError(message)
        return gpus

    return {**job_resources("train"), "gpu": gpu}


def train_job_gpus(wildcards):
    """The GPUs a train job runs on: train.gpus (a sweep point's for sweep_train), 0
    where it runs on the CPU."""
    return 0 if runs_on_cpu() else stage_section("train", wildcards)["gpus"]


def train_processes(wildcards):
    """The train job's processes: one per GPU, one on the CPU (shardflow.train.launch).
    `threads: auto` gives each the threads of one GPU job: a cluster gives a job of N
    ranks N times the CPUs."""
    return max(1, train_job_gpus(wildcards))


def one_job(wildcards):
    """The train job runs alone at its stage: `auto` gives it every core."""
    return 1


def train_inputs(wildcards):
    """The shard folder and the tokenizer (its sample is decoded, and hf/ gets a copy)."""
    return {
        "shards": f"results/{wildcards.dataset}/shards",
        **tokenizer_files(wildcards.dataset),
    }


def output_folder(wildcards, output):
    """The train job's output folder, where its declared outputs are: in S3 storage,
    their local copies (`results/<dataset>/train` on a shared filesystem)."""
    return os.path.dirname(output.metrics)


def train_resume(wildcards):
    return plan.train_resume(config["gpu_jobs"]["resume_dir"], wildcards.dataset)


def tokenizer_folder(wildcards, input):
    """The folder of the tokenizer's files where this job finds them (see output_folder)."""
    return os.path.dirname(input.tokenizer)
