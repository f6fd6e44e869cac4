"""Parse-time planning: everything the Snakefile must know before any job runs.

`datasets(config)` lists every data set the run splits into chunks (the main
corpus, a retrieval corpus, and the inputs of later stages), each with its
chunk count, the files its split reads and how to read them: one split rule
serves them all.

These functions run in every Snakemake invocation (and in every remote job's
re-parse), so they are cheap, deterministic and do no heavy imports.

The chunk-count rule for `n_chunks: auto`
    by=records:  N = ceil(R / items_per_chunk), R = expected_records or a cheap
                 count of the input (newline counts, Parquet metadata)
    by=size:     N = ceil(input bytes / (chunk_mb * 2**20))
    then, with G = chunking.gpus and N > 1, N is rounded up to a multiple of G
    so every GPU gets the same number of chunks; never fewer than min(G, R).
"""

from __future__ import annotations

import contextlib
import difflib
import json
import math
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from shardflow.core.atomic import write_json
from shardflow.core.models import unavailable as model_unavailable
from shardflow.core.parsecache import cache_file, cached
from shardflow.core.s3 import S3Url, glob_regex, has_magic, logical_path
from shardflow.corpus.readers import (
    ReaderOptions,
    count_records_cheap,
    detect_format,
    expand_inputs,
    real_path,
    record_limit_bytes,
)
from shardflow.retrieval.pipeline import RetrievalSpec
from shardflow.summarise.generate_params import unread_sampling
from shardflow.sweep import shared
from shardflow.sweep.metrics import describe, loads_model, stage_metrics, summary_report_metrics
from shardflow.train.tokenizer import pretrained_unavailable
from shardflow.workflow.tasks import models as task_models
from shardflow.workflow.tasks import task_files

if TYPE_CHECKING:  # the sweep package imports pandas: parse-time code here does not
    from shardflow.sweep.spec import SweepSpec

DEMO_CORPUS = "resources/demo/corpus.jsonl"
COUNT_CACHE = "record-counts"  # core.parsecache.cache_file(COUNT_CACHE)


def reader_params(cfg: dict) -> dict:
    """The reader settings of the main corpus's split (its recorded `reader` params):
    ReaderOptions' fields from the config. keep_empty_text (false) and section ("input":
    the keys errors name) are left out: a field added to ReaderOptions would otherwise
    rerun every finished split."""
    opts = reader_options(cfg).__dict__
    return {k: v for k, v in opts.items() if k not in ("keep_empty_text", "section")}


def reader_options(cfg: dict) -> ReaderOptions:
    inp = cfg["input"]
    return ReaderOptions(
        format=inp["format"],
        id_field=inp["id_field"],
        text_field=inp["text_field"],
        group_field=cfg["chunking"]["group_by"],
        text_mode=inp["text_mode"],
        on_bad_record=inp["on_bad_record"],
        max_record_bytes=record_limit_bytes(inp["max_record_mb"]),
    )


# Chunks of one data set past which a parse is slow (README, Benchmarks: snakemake -n
# 8.8 s at 2,000 chunks, 81 s at 10,000; Snakemake's own work, faster than linear).
MANY_CHUNKS = 2000


def many_chunks(cfg: dict, ds: DataSet) -> str | None:
    """Why `ds`'s chunk count will make every parse slow, or None: each `snakemake -n`,
    each start of the run, and the dry run a user reads before spending GPU money, at
    the 100M records `n_chunks: auto` gives 5,000 chunks of 20,000 records. Fewer,
    larger chunks also load the model fewer times."""
    if ds.n_chunks <= MANY_CHUNKS:
        return None
    key = "retrieval.n_chunks" if ds.role == "retrieval" else "n_chunks"
    setting = cfg["retrieval"]["n_chunks"] if ds.role == "retrieval" else cfg["n_chunks"]
    if ds.by == "source":  # a chunk per source file: nothing else sets the count
        how = "join the source files into fewer, larger ones, or set chunking.by to records or size"
    elif setting == "auto":
        chunking = cfg["chunking"]
        per_chunk = "chunk_mb" if ds.by == "size" else "items_per_chunk"
        how = f"raise chunking.{per_chunk} (now {chunking[per_chunk]:,})"
    else:
        how = f"set {key} lower or to auto"
    return (
        f"{ds.n_chunks:,} chunks: Snakemake's parse slows faster than the chunk count grows (snakemake -n took "
        f"8.8 s at 2,000 chunks and 81 s at 10,000 on a development machine: README, Benchmarks), at every dry run "
        f"and start of the run. Fewer, larger chunks: {how} (each job loads its model once: they cost less too)"
    )


def path_dependent_split(cfg: dict, ds: DataSet) -> str | None:
    """Why the train/val split of `ds` would change with the path its input is found at,
    or None. The hash split keys on the record id (or group); ids the reader makes from
    positions (`<path>:<line>`: text, or input.id_field null; the path: one document per
    file) hold the input path as given, so an absolute path splits the same corpus
    differently on another machine or in another folder."""
    if "training" not in ds.tasks or cfg["shards"]["split"] != "hash" or ds.reader["group_field"]:
        return None
    absolute = [s for s in ds.sources if os.path.isabs(s)]
    if not absolute:
        return None
    try:
        positional = ds.reader["id_field"] is None or any(detect_format(s, ReaderOptions(**ds.reader)) == "text" for s in absolute)
    except ValueError:
        return None  # a format the split names itself
    if not positional:
        return None
    return (
        f"the train/val split hashes record ids, and those of {absolute[0]} are made from its path "
        "('<path>:<line>'): the same corpus under another path (another machine, a moved folder) gets another "
        "val split and other losses. Give input.path relative to the working directory, give the records ids "
        "(input.id_field), or group them (chunking.group_by)"
    )


def _local_inputs(pattern) -> list[str]:
    """expand_inputs, its error naming the config key."""
    try:
        return expand_inputs(pattern)
    except FileNotFoundError as exc:
        raise FileNotFoundError(f"input.path: {exc}") from None


def corpus_inputs(cfg: dict, list_s3: Callable[[str], list[str]] | None = None) -> list[str]:
    """Files the split rule reads: the user's corpus, or the demo corpus to build.

    `input.path` is a path, a glob, or a list of either; local and s3:// entries may
    mix. An s3:// glob is listed with `list_s3(pattern)` (the rules pass one that uses
    the run's S3 settings: shardflow.core.s3.expand); the order is that of the list,
    each glob sorted, every file once."""
    path = cfg["input"]["path"]
    if path is None:
        return [DEMO_CORPUS]
    patterns = [path] if isinstance(path, str) else list(path)
    if not any(p.startswith("s3://") for p in patterns):
        return _local_inputs(path)
    found: list[str] = []
    seen: set[str] = set()  # a local file by its real path (as expand_inputs keys it), an object by its URL
    folders: dict[str, str] = {}
    for pattern in patterns:
        if not pattern.startswith("s3://"):
            matches = _local_inputs(pattern)
        elif has_magic(pattern):
            if list_s3 is None:
                raise ValueError(f"input.path {pattern!r}: an s3:// glob needs the run's S3 settings to list it")
            matches = list_s3(pattern)
        else:
            matches = [pattern]
        for m in matches:
            key = m if m.startswith("s3://") else real_path(m, folders)
            if key not in seen:
                seen.add(key)
                found.append(m)
    return found


def unlisted(pattern: str) -> list[str]:
    """An s3:// glob taken as written, for `corpus_inputs`' `list_s3` where listing the
    bucket is not wanted (make status, make estimate: they download nothing and have no
    S3 settings): the glob stands for its objects (`matches_sources` compares a split's
    recorded sources with it)."""
    return [pattern]


def matches_sources(recorded: list[str], sources: Iterable[str]) -> bool:
    """Whether the files a split recorded (its manifest's `sources`, logical paths) are
    the data set's `sources`: the same list, where an s3:// glob taken as written
    (`unlisted`) stands for the run of objects it matches (core.s3.expand's matching, in
    its sorted order). Objects added under the glob since the split cannot be seen
    without listing the bucket; the rules ask that it not change during a run."""
    at = 0
    for source in sources:
        if source.startswith("s3://") and has_magic(source):
            glob = S3Url.parse(source)
            regex = glob_regex(glob.key)
            while at < len(recorded) and recorded[at].startswith(f"s3://{glob.bucket}/"):
                if not regex.match(S3Url.parse(recorded[at]).key):
                    break
                at += 1
        else:
            if at >= len(recorded) or os.path.normpath(recorded[at]) != os.path.normpath(logical_path(source)):
                return False
            at += 1
    return at == len(recorded)


def count_records(paths: list[str], opts: ReaderOptions) -> int:
    """Cheap count, kept between parses (core.parsecache) so re-parses do not re-read."""
    return cached(COUNT_CACHE, paths, [opts.format, opts.text_mode], lambda: count_records_cheap(paths, opts))


def plan_n_chunks(
    cfg: dict, list_s3: Callable[[str], list[str]] | None = None, inputs: list[str] | None = None
) -> int:
    """The main data set's chunk count. `inputs`: its files as corpus_inputs listed them,
    where the caller has the list already (datasets): listed again, a file added or
    removed in between (a corpus that grows while the workflow parses) gave a count other
    than the sources the rules map to chunks."""
    n = cfg["n_chunks"]
    ch = cfg["chunking"]
    if inputs is None and (ch["by"] == "source" or n == "auto"):
        inputs = corpus_inputs(cfg, list_s3)
    if ch["by"] == "source":  # one chunk per source (corpus.by_source)
        globs = [p for p in inputs if p.startswith("s3://") and has_magic(p)]
        if globs:  # taken as written (`unlisted`): its objects, the chunks, are not known here
            raise ValueError(
                f"chunking.by: source makes a chunk of each object of {globs[0]}, which is not listed here "
                "(no S3 settings): `snakemake -n` with the run's profile lists them"
            )
        sources = len(inputs)
        if n not in ("auto", sources):
            raise ValueError(
                f"n_chunks is {n}, but chunking.by: source makes one chunk per source and input.path names "
                f"{sources}: set n_chunks: auto"
            )
        return sources
    if n != "auto":
        return int(n)
    remote = any(p.startswith("s3://") for p in inputs)
    if ch["by"] == "size":
        if remote or cfg["input"]["path"] is None:
            raise ValueError("n_chunks: auto with chunking.by=size needs local input files; set n_chunks")
        total = sum(os.path.getsize(p) for p in inputs)
        n = math.ceil(total / (ch["chunk_mb"] * 2**20))
        records = None
    else:
        records = ch["expected_records"]
        if records is None:
            if remote or cfg["input"]["path"] is None:
                raise ValueError(
                    "n_chunks: auto cannot count a corpus that does not exist yet (demo or s3://): "
                    "set chunking.expected_records or n_chunks"
                )
            records = count_records(inputs, reader_options(cfg))
        n = math.ceil(records / ch["items_per_chunk"])
    return round_to_gpus(n, ch["gpus"], records)


def round_to_gpus(n: int, gpus: int, records: int | None = None) -> int:
    """The last step of the auto rule: at least 1; when above 1, a multiple of
    `gpus`; never fewer than min(gpus, records) when the record count is known."""
    n = max(n, 1)
    if n > 1:
        n = math.ceil(n / gpus) * gpus
    if records is not None:
        n = max(n, min(gpus, records))
    return n


# CPU threads of a GPU job's process (or of any job a cluster scheduler places) under
# `resources.<rule>.threads: auto`: the tokenizer and collation threads feed the GPU.
GPU_JOB_THREADS = 2


def job_threads(
    setting: int | str, *, local_cpu: bool, cores: int | None, jobs: int, uses_gpu: bool = True, processes: int = 1
) -> int:
    """CPU threads per job of a GPU rule for `resources.<rule>.threads`.

    An integer is used as given (the job's whole, shared by its processes). `auto`: 1
    for a method that needs no GPU (`uses_gpu=False`: Lead-k, one Python thread), as for
    a CPU rule; else, when Snakemake runs the jobs on this host on the CPU (`local_cpu`),
    the host's `cores` are shared by the jobs that can run at once, min(jobs, cores) of
    them, so several chunks are in flight and one job's start-up (imports, model load)
    overlaps another's compute; otherwise GPU_JOB_THREADS for each of the job's
    `processes` (a train job's: one per GPU, each loading its own batches). The threads
    are what a cluster gives the job: the Kubernetes plugin's CPU request and limit, the
    SLURM plugin's --cpus-per-task where no cpus_per_gpu is set.
    """
    if setting != "auto":
        return int(setting)
    if not uses_gpu:
        return 1
    if not local_cpu or not cores:
        return GPU_JOB_THREADS * max(1, processes)
    return max(1, cores // max(1, min(jobs, cores)))


def job_mem_mb(resources: dict, attempt: int) -> int:
    """Host memory (MB) of a GPU rule's job at `attempt` (1, 2, ...), from its
    `resources.<rule>` (`resources`): mem_mb, plus mem_mb_per_attempt for each retry, up
    to mem_mb_max where set. The cap is what a node can give: on EKS a pod that asks more
    memory than any node's allocatable stays Pending, and the kubernetes plugin (0.5.1)
    reports it as running for as long as it waits (profiles/README.md, eks)."""
    mem = resources["mem_mb"] + (attempt - 1) * resources["mem_mb_per_attempt"]
    cap = resources.get("mem_mb_max")
    return mem if cap is None else min(mem, cap)


def memory_cap_problems(cfg: dict) -> list[str]:
    """One line per `resources.<rule>.mem_mb_max` below that rule's mem_mb: such a cap
    would shrink the first attempt rather than stop the growth of later ones."""
    return [
        f"resources.{rule}.mem_mb_max is {r['mem_mb_max']}, below resources.{rule}.mem_mb ({r['mem_mb']}), "
        "the first attempt's memory: raise mem_mb_max, or lower mem_mb"
        for rule, r in cfg["resources"].items()
        if r.get("mem_mb_max") is not None and r["mem_mb_max"] < r["mem_mb"]
    ]


def resume_path(resume_dir: str | None, local: str, under_base: str, s3_prefix: str | None = None) -> str:
    """Where undeclared resume state lives (Snakemake deletes declared outputs of failed
    jobs): `under_base` in `resume_dir` (gpu_jobs.resume_dir) if set; else `local`
    (relative to the workdir), under `s3_prefix` where given: the S3 default storage's,
    for parts (core.parts reads and writes them there; rules/common.smk passes it)."""
    if resume_dir:
        return os.path.join(resume_dir, under_base)
    if s3_prefix:
        return f"{s3_prefix}/{local}"
    return local


def resume_root(resume_dir: str | None, dataset: str, s3_prefix: str | None = None) -> str:
    """A data set's resume root: its embed and summarise parts (resume_path), and, on a
    local path, its training checkpoints under train/."""
    return resume_path(resume_dir, f"results/{dataset}/.resume", dataset, s3_prefix)


def train_resume(resume_dir: str | None, dataset: str) -> str:
    """A data set's train job's local resume folder (its checkpoints; its failure record
    train.failure.json beside it): train/ under its resume root (rules/train_common.smk
    train_resume, make status)."""
    return os.path.join(resume_root(resume_dir, dataset), "train")


def sweep_resume_root(resume_dir: str | None, job: str, s3_prefix: str | None = None) -> str:
    """A sweep job's resume root (`job`: <sweep folder>/<point>/seed=<n>, sweep.paths.
    job_dir), as `resume_root` is a data set's (rules/common.smk sweep_resume_root)."""
    return resume_path(resume_dir, f"results/sweeps/.resume/{job}", job, s3_prefix)


def sweep_train_resume(resume_dir: str | None, job: str) -> str:
    """A sweep's train job's local resume folder, as `train_resume` is a data set's."""
    return os.path.join(sweep_resume_root(resume_dir, job), "train")


# Reader settings for files this workflow wrote itself in the chunk format
# (the retrieval corpus): {"id": ..., "text": ...} JSON lines. The retrieval corpus's
# empty documents are embedded and searched, as MTEB does (FiQA has some). text_mode
# reads plain text only: the main corpus's (input.text_mode) would be recorded in this
# split's params, so a change of it reran the split and every embed job of the
# retrieval data set for the same bytes; it stays at the shipped value, in its place
# in the record, so that no finished split reruns. input.max_record_mb applies here as
# documented (config/README.md).
CHUNK_READER = {"format": "jsonl", "id_field": "id", "text_field": "text", "group_field": None, "text_mode": "lines",
                "on_bad_record": "error", "keep_empty_text": True}


@dataclass(frozen=True)
class DataSet:
    """A corpus the workflow splits into `n_chunks` chunk files.

    sources: the files the split reads (s3:// objects included: the rules fetch
        them through Snakemake storage); reader: `ReaderOptions` fields for them;
    by: "records" or "size"; role: what the data set is for ("main", "retrieval");
    tasks: the stages that run on its chunks (config `tasks` for the main corpus).
    """

    name: str
    role: str
    tasks: tuple[str, ...]
    n_chunks: int
    sources: tuple[str, ...]
    reader: dict
    by: str
    rate_items_per_s: float


def retrieval_name(cfg: dict) -> str | None:
    """The retrieval evaluation's data set name, or None when none is configured."""
    return cfg["retrieval"]["name"] if cfg["retrieval"]["path"] else None


def retrieval_corpus(name: str) -> str:
    """The retrieval corpus in the chunk format, written by retrieval_prepare."""
    return f"results/{name}/retrieval/corpus.jsonl"


def plan_retrieval_chunks(cfg: dict) -> int:
    """retrieval.n_chunks, or `auto` with the chunking rule over the corpus line count."""
    n = cfg["retrieval"]["n_chunks"]
    if n != "auto":
        return int(n)
    if RetrievalSpec.from_config(cfg).in_s3:
        raise ValueError(
            f"retrieval.n_chunks: auto cannot count a corpus in S3 ({cfg['retrieval']['path']}): set retrieval.n_chunks"
        )
    corpus = RetrievalSpec.from_config(cfg).source_files()[0]
    fmt = "jsonl" if cfg["retrieval"]["format"] == "beir" else "text"
    records = count_records([corpus], ReaderOptions(format=fmt))
    n = math.ceil(records / cfg["chunking"]["items_per_chunk"])
    return round_to_gpus(n, cfg["chunking"]["gpus"], records)


def datasets(cfg: dict, list_s3: Callable[[str], list[str]] | None = None) -> dict[str, DataSet]:
    """Every data set of this run by name, main corpus first (`list_s3`: corpus_inputs)."""
    rate = cfg["chunking"]["rate_items_per_s"]
    if "neighbours" in cfg["tasks"] and "embedding" not in cfg["tasks"]:
        # Its jobs search the embedding task's vectors; every count of that task's jobs
        # (GPU rules, status, estimate) reads `embedding` in the tasks.
        raise ValueError(f"tasks {cfg['tasks']}: neighbours searches the embedding task's vectors; list both: "
                         "tasks: [embedding, neighbours]")
    if "search" in cfg["tasks"]:
        if "embedding" not in cfg["tasks"]:
            raise ValueError(f"tasks {cfg['tasks']}: search searches the embedding task's vectors; list both: "
                             "tasks: [embedding, search]")
        if cfg["search"]["queries"] is None:
            raise ValueError("tasks lists search, but search.queries is null: set it to the queries file "
                             "(local or s3://), e.g. --config 'search={queries: queries.jsonl}'")
    sources = corpus_inputs(cfg, list_s3)  # listed once: the chunk count is planned over these
    main = DataSet(
        name=cfg["dataset"],
        role="main",
        tasks=tuple(cfg["tasks"]),
        n_chunks=plan_n_chunks(cfg, list_s3, sources),
        sources=tuple(sources),
        reader=reader_params(cfg),
        by=cfg["chunking"]["by"],
        rate_items_per_s=rate,
    )
    out = {main.name: main}
    name = retrieval_name(cfg)
    if name is not None:
        if name == main.name:
            raise ValueError(f"retrieval.name and dataset are both {name!r}: give them different names")
        out[name] = DataSet(
            name=name,
            role="retrieval",
            tasks=("embedding", "retrieval"),
            n_chunks=plan_retrieval_chunks(cfg),
            sources=(retrieval_corpus(name),),
            reader={**reader_params(cfg), **CHUNK_READER},
            by="records",
            rate_items_per_s=rate,
        )
    return out


def position_source(ds: DataSet) -> str:
    """The one text file a position split (`shards.split: position`) reads directly.

    nanoGPT's split is by character position in one file. The chunks' records drop
    newlines (and empty lines are bad records), so that exact character sequence
    exists only in the file itself: the split still runs (its manifest carries the
    checksums), but the shards are cut from the file.
    """
    src = ds.sources[0] if len(ds.sources) == 1 else ""
    fmt = None
    if src and not src.startswith("s3://") and not src.endswith(".gz"):
        try:
            fmt = detect_format(src, ReaderOptions(**ds.reader))
        except ValueError:
            pass
    if fmt != "text":
        raise ValueError(
            f"shards.split: position reads one local, uncompressed plain-text file, but data set {ds.name!r} "
            f"reads {list(ds.sources)}; use shards.split: hash for records"
        )
    return src


def train_gpus(cfg: dict) -> int:
    """GPUs (= processes) of the train job: `train.gpus`. `resources.train.gpu` follows
    it; a different value there (other than the schema default 1) is a contradiction."""
    gpus = cfg["train"]["gpus"]
    set_there = cfg["resources"]["train"]["gpu"]
    if set_there not in (1, gpus):
        raise ValueError(
            f"resources.train.gpu is {set_there} but train.gpus is {gpus}: the train job requests "
            "train.gpus GPUs (one process each); set train.gpus and leave resources.train.gpu out"
        )
    return gpus


def train_settings(train: dict, where: str = "train", shards: dict | None = None) -> None:
    """Stop at parse time on training settings the trainer would refuse (n_embd not a
    multiple of n_head, min_lr above lr, ...), instead of after the data preparation,
    with the train job retried. `train`: a config `train` section (a sweep job's, with
    its point applied); `where` names it in the message. `shards`: the config's `shards`
    section, whose shard size must hold a window of block_size + 1 tokens (shard_windows)."""
    from shardflow.train.params import TrainParams  # no torch

    values = {k: v for k, v in train.items() if k not in ("gpus", "sample_tokens")}
    try:
        TrainParams(**values)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where}: {exc}") from None
    if shards is not None and (problem := shard_windows(shards, train["block_size"])):
        raise ValueError(f"{where}: {problem}")


def shard_windows(shards: dict, block_size: int) -> str | None:
    """Why shards of the configured size hold no training window, or None. A window is
    block_size + 1 tokens within one shard (trainer.WindowSampler), and the gather packs
    a shard up to shards.tokens_per_shard (or what shards.shard_mb holds): at or below
    block_size, no packed shard is ever read. Under split: hash only a document (or
    group) longer than block_size, which gets a shard of its own, is trained on, with a
    warning in the train job's log; under split: position the train job stops. A size
    given as shard_mb is counted in uint16 tokens unless shards.dtype is uint32: the
    most it can hold, so only a size too small under either type stops the parse."""
    from shardflow.train.prepare import shard_target_tokens  # no torch

    dtype = "uint32" if shards["dtype"] == "uint32" else "uint16"
    target = shard_target_tokens(shards["tokens_per_shard"], shards["shard_mb"], dtype)
    if target > block_size:
        return None
    size = (
        f"shards.tokens_per_shard {target}"
        if shards["shard_mb"] is None
        else f"shards.shard_mb {shards['shard_mb']} ({target} {dtype} tokens at most)"
    )
    return (
        f"block_size ({block_size}) needs shards of more tokens: a training window is block_size + 1 = "
        f"{block_size + 1} tokens within one shard, and {size} packs none that long, so only documents of more "
        f"than {block_size} tokens (each a shard of its own) would be trained on, the rest never "
        f"(under shards.split: position, none); raise shards.tokens_per_shard above {block_size}, or lower "
        f"train.block_size"
    )


TOKENIZER_NAMES = ("char", "bpe", "default")


def tokenizer_is_path(name: str) -> bool:
    """Whether shards.tokenizer names a file or folder: a path has a folder or ends in
    .json, or exists here; a bare word is a name (a misspelt one is shards_settings')."""
    return name not in TOKENIZER_NAMES and ("/" in name or name.endswith(".json") or os.path.exists(name))


def shards_settings(cfg: dict) -> None:
    """Stop at parse time on shard settings that cannot give a training run: no
    validation split, or a tokenizer name mistyped (a path is looked for by
    unavailable_models where the jobs share this filesystem, else by its job)."""
    sh = cfg["shards"]
    if sh["tokens_per_shard"] is not None and sh["shard_mb"] is not None:
        raise ValueError("shards.tokens_per_shard and shards.shard_mb are both set: give one (the other null)")
    if sh["val_fraction"] <= 0:
        raise ValueError(
            "shards.val_fraction is 0: training evaluates on the validation split (best weights, val loss); "
            "set it above 0, e.g. 0.1"
        )
    name = sh["tokenizer"]
    if name not in TOKENIZER_NAMES and name.lower() in TOKENIZER_NAMES:
        raise ValueError(f"shards.tokenizer {name!r}: did you mean {name.lower()!r}? (names are lower case)")
    if name not in TOKENIZER_NAMES and not tokenizer_is_path(name):
        # A bare word that is no file here: a misspelt name, not a path (one that exists
        # only in a cluster image is still accepted).
        raise ValueError(
            f"shards.tokenizer {name!r} is neither char, bpe, default, nor a tokenizer.json or model folder"
        )


def prompt_conflicts(cfg: dict, sweeps: Iterable[SweepSpec] = ()) -> list[str]:
    """One line per pair of prompt keys set together (a literal prompt and a named one),
    in the config or at a sweep point of `sweeps` (a point that sets one where the config
    sets the other): the embed jobs refuse both, each after queueing for a GPU and being
    retried. A pair the config sets both of is named once, for the config."""
    pairs = [("embedding", "prompt", "prompt_name")]
    if cfg["retrieval"]["path"]:
        pairs.append(("retrieval", "query_prompt", "query_prompt_name"))
    if "search" in cfg["tasks"]:
        pairs.append(("search", "query_prompt", "query_prompt_name"))

    def both(job: dict, pair: tuple[str, str, str]) -> bool:
        section, literal, named = pair
        return job[section][literal] is not None and job[section][named] is not None

    found = [("", pair) for pair in pairs if both(cfg, pair)]
    for where, job, tasks in _sweep_points(cfg, sweeps):
        read = sorted({pair for task in tasks for pair in PROMPT_KEYS.get(task, ())})
        found += [(where, pair) for pair in read if not both(cfg, pair) and both(job, pair)]
    return [
        f"{section}.{literal} and {section}.{named} are both set{where}: give one (a literal prompt, or the name of "
        "one in the model's config)"
        for where, (section, literal, named) in found
    ]


def reproduction_pins_nothing(cfg: dict) -> list[str]:
    """One line where a reproduction is named but its expectations pin nothing the check
    can fail on (no metric, data, model or output hash; package versions only drift unless
    strict_packages): its check would pass having compared nothing."""
    rp = cfg["reproduce"]
    expect = rp.get("expect") or {}
    pins = ("metrics", "data_sha256", "model_sha256", "outputs_sha256") + (("packages",) if rp.get("strict_packages") else ())
    if not rp.get("name") or any(expect.get(key) for key in pins):
        return []
    return [
        f"reproduce.name is {rp['name']!r} but reproduce.expect pins nothing its check can fail on (metrics, "
        "data_sha256, model_sha256 or outputs_sha256; packages with strict_packages): the check would pass having "
        "compared nothing"
    ]


def reproduction_unnamed(cfg: dict) -> list[str]:
    """One line where `reproduce.expect` pins something but `reproduce.name` is null:
    rule verify_reproduction is made for a named experiment only, so nothing pinned would
    be compared and the run would pass as though it held."""
    rp = cfg["reproduce"]
    expect = rp.get("expect") or {}
    if rp.get("name"):
        return []
    pinned = []
    for key, value in expect.items():
        if value:
            names = f" ({', '.join(repr(name) for name in value)})" if key == "metrics" else ""
            pinned.append(f"reproduce.expect.{key}{names}")
    if not pinned:
        return []
    keys = pinned[0] if len(pinned) == 1 else f"{', '.join(pinned[:-1])} and {pinned[-1]}"
    return [
        f"{keys} {'is' if len(pinned) == 1 else 'are'} set but reproduce.name is null: no reproduction check runs "
        "(rule verify_reproduction is made for a named experiment), so none of it would be compared; name the "
        "experiment in reproduce.name, or remove the expectations"
    ]


def reproduction_metrics(cfg: dict, data_sets: dict[str, DataSet]) -> str:
    """The record whose values a reproduction's `reproduce.expect.metrics` are compared
    with (rule verify_reproduction): the retrieval evaluation's where one is configured,
    else that of the main data set's first task in the order training, embedding,
    summarisation (its ROUGE record, or without references the stage's summary). Always
    a task the run has: a summarisation-only run's reproduction read verification.json,
    so the run embedded its corpus for it (GPU jobs no task asked for) and then compared
    ROUGE with a file that holds none, failing after every job had run."""
    name = retrieval_name(cfg)
    if name is not None:
        return f"results/{name}/retrieval/metrics.json"
    main = data_sets[cfg["dataset"]]
    if "training" in main.tasks:
        return f"results/{main.name}/train/metrics.json"
    if "embedding" in main.tasks or "summarisation" not in main.tasks:
        return f"results/{main.name}/verification.json"
    if cfg["summarise"]["reference_field"]:  # method stored needs one (summarise_model)
        return f"results/{main.name}/summarise/metrics.json"
    return f"results/{main.name}/summarise/report/summary.json"


# The records a reproduction reads whose names a stage's metrics list holds (sweep.metrics:
# the same writers); verification.json's are embed.verify's, a summary's without references
# sweep.metrics.summary_report_metrics.
REPRODUCTION_STAGES = {"retrieval/metrics.json": "retrieval", "train/metrics.json": "train",
                       "summarise/metrics.json": "summarise"}


def unknown_reproduction_metrics(cfg: dict, data_sets: dict[str, DataSet]) -> list[str]:
    """One line per `reproduce.expect.metrics` name that the record the check reads
    (`reproduction_metrics`) never holds, each record's names kept beside its writer or
    listed from it in sweep.metrics: a misspelt name failed its row only after every job
    had run."""
    names = (cfg["reproduce"].get("expect") or {}).get("metrics") or {}
    if not cfg["reproduce"].get("name") or not names:
        return []
    record = reproduction_metrics(cfg, data_sets)
    if record.endswith("/verification.json"):
        from shardflow.embed.verify import record_metrics

        known = record_metrics(_normalises(cfg["embedding"]["model"]))
    elif record.endswith("/summarise/report/summary.json"):
        known = summary_report_metrics(cfg)
    else:
        stage = next((st for end, st in REPRODUCTION_STAGES.items() if record.endswith("/" + end)), None)
        systems = stored_systems(cfg, data_sets[cfg["dataset"]].sources) if stage == "summarise" else None
        known = stage_metrics(stage, cfg, systems) if stage else None
    if not known:
        return []
    out = []
    for name in names:
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            out.append(
                f"reproduce.expect.metrics: '{name}' is not a metric of {record}{hint} (its metrics: {describe(known)})"
            )
    return out


def unknown_reproduction_packages(cfg: dict) -> list[str]:
    """One line per `reproduce.expect.packages` name that provenance never records (it
    records core.runlog.PACKAGES and Python, whose versions move output bits; a name is
    matched however it is spelt: runlog.recorded_package): its row drifted whatever was
    installed, never compared by a default check and failing a strict one after every
    job had run."""
    from shardflow.core.runlog import PACKAGES, recorded_package

    pinned = (cfg["reproduce"].get("expect") or {}).get("packages") or {}
    if not cfg["reproduce"].get("name"):
        return []
    known = ", ".join(("python", *PACKAGES))
    return [
        f"reproduce.expect.packages: '{name}' is not a package provenance records, so no run can match its version "
        f"(it records {known}): remove it"
        for name in sorted(pinned)
        if recorded_package(name) is None
    ]


def unknown_reproduction_outputs(cfg: dict, ds: str, tasks: tuple[str, ...]) -> list[str]:
    """One line per `reproduce.expect.outputs_sha256` path that the provenance record of
    data set `ds` (the one rule verify_reproduction reads) never holds: it hashes the
    outputs of the data set's `tasks` (tasks.task_files), a folder's files each under its
    own path. A misspelt path, or the shard folder pinned whole, read "missing" and failed
    the check after every job had run. So did, always, a pin of an output that holds
    figures measured as it ran (TaskFiles.timed: train/metrics.json's wall_seconds, the
    loss history's seconds): its line names the file and those keys, and says what to pin."""
    pinned = (cfg["reproduce"].get("expect") or {}).get("outputs_sha256") or {}
    if not cfg["reproduce"].get("name") or not pinned:
        return []
    files = task_files(tasks, ds, cfg, cfg["dataset"])
    outputs = [path for task in files for path in task.outputs]
    folders = {path for task in files for path in task.folders}
    timed = {path: keys for task in files for path, keys in task.timed.items()}
    hashed = sorted(f"{path}/<file>" if path in folders else path for path in outputs)
    out = []
    for path in sorted(pinned):
        if path in timed:
            held = "column" if path.endswith(".parquet") else "key"
            keys = timed[path]
            named = f"{held} '{keys[0]}'" if len(keys) == 1 else f"{held}s {', '.join(repr(k) for k in keys)}"
            out.append(f"reproduce.expect.outputs_sha256: '{path}' holds figures measured as the job ran ({named}: "
                       "wall-clock time, speed, peak memory, the host and checkout), so no run writes the same bytes and its hash never "
                       "matches: pin a metric instead, with a tolerance, in reproduce.expect.metrics (best_val_loss, "
                       "final_val_loss)")
        elif path in folders:
            out.append(f"reproduce.expect.outputs_sha256: '{path}' is a folder: provenance hashes each file in it "
                       f"under its own path ('{path}/<file>'): pin those")
        elif path not in outputs and not any(path.startswith(folder + "/") for folder in folders):
            close = difflib.get_close_matches(path, [p for p in outputs if p not in folders], n=1, cutoff=0.6)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            out.append(f"reproduce.expect.outputs_sha256: '{path}' is not an output the provenance of {ds} hashes"
                       f"{hint} (it hashes {', '.join(hashed)})")
    return out


def _normalises(model: str) -> bool | None:
    """Whether the embedding model's vectors are unit-norm, as rule verify reads it (its
    checks differ); None where the model is not on this machine, or does not load."""
    from shardflow.core.models import resolve_model
    from shardflow.embed.stconfig import load_model_spec

    try:
        return load_model_spec(resolve_model(model)).normalize
    except (OSError, ValueError, RuntimeError):  # RuntimeError: "default" without its package
        return None


def summarise_settings_problem(sm: dict) -> str | None:
    """Why a summarise section cannot work, or None: method stored without its fields,
    abstractive without a model, sampling without a seed or sampling settings it would not
    read (unread_sampling). One check for the config's own section (summarise_model) and
    each sweep point's (summarise_point_problems)."""
    if sm["method"] == "stored" and not (sm["stored_field"] and sm["reference_field"]):
        missing = [f"summarise.{k}" for k in ("stored_field", "reference_field") if not sm[k]]
        return (
            f"summarise.method is stored but {' and '.join(missing)} is null: stored scores the summaries in "
            "stored_field ('summary', 'a.b' or 'a.*') against the references in reference_field"
        )
    if sm["method"] == "abstractive" and not sm["model"]:
        return (
            "summarise.method is abstractive but summarise.model is null: set it to a local model folder or "
            "a hub name in the local Hugging Face cache (seq2seq: BART, PEGASUS, T5; or a decoder-only model), "
            "or use method lead or extractive"
        )
    if sm["method"] == "abstractive" and sm["generation"].get("do_sample") and sm["seed"] is None:
        return (
            "summarise.generation.do_sample is true but summarise.seed is null: set a seed, so that a rerun "
            "or a resumed job gives the same summaries"
        )
    return unread_sampling(sm)


def summarise_point_problems(spec: SweepSpec) -> list[str]:
    """One line per point of a summarise sweep whose jobs would refuse its summarise
    settings (summarise_settings_problem: a base do_sample: false and a grid of
    temperatures, a grid over summarise.method whose abstractive point has no model), each
    after queueing for a GPU and being retried; summarise_model checks the config's own."""
    if spec.stage != "summarise":
        return []
    found = ((pid, summarise_settings_problem(spec.job_config(pid, spec.seeds[0])["summarise"])) for pid in spec.ids)
    return [f"sweep {spec.name!r}, point {pid}: {problem}" for pid, problem in found if problem]


def stored_systems(cfg: dict, sources: tuple[str, ...]) -> tuple[str, ...] | None:
    """The systems of method stored with summarise.stored_field "a.*": the keys of that
    object, the set most records of `sources` hold, decided as the scoring job decides it
    (shardflow.summarise.data, which reads every file); None for another method or field
    (their systems follow from the config: sweep.metrics.summary_systems), or where a
    source is not on this machine (s3://) or no record holds such an object. Read with
    the job's record limit (input.max_record_mb), so a long record counts here as there.
    Kept between parses (core.parsecache), as every cluster job parses the workflow again."""
    from shardflow.summarise.data import usual_systems

    field = cfg["summarise"]["stored_field"] or ""
    if cfg["summarise"]["method"] != "stored" or not field.endswith(".*"):
        return None
    if not sources or any(p.startswith("s3://") or not os.path.isfile(p) for p in sources):
        return None
    parent = field.removesuffix(".*")
    limit = record_limit_bytes(cfg["input"]["max_record_mb"])
    systems, _ = cached("stored-systems", sources, [parent, limit], lambda: usual_systems(sources, parent, limit))
    return tuple(systems) or None


def summarise_model(cfg: dict, sources: tuple[str, ...] = ()) -> None:
    """Stop at parse time on summarisation settings that cannot work, instead of letting
    every summarise job start, fail and be retried, or the evaluation fail after them:
    method abstractive without a model, sampling without a seed, references or stored
    summaries read from `sources` (the data set's files) that are not JSONL."""
    sm = cfg["summarise"]
    if problem := summarise_settings_problem(sm):
        raise ValueError(problem)
    if sm["reference_field"]:  # method stored included (it needs one, above)
        opts = ReaderOptions(format=cfg["input"]["format"])
        formats = [(p, detect_format(p, opts)) for p in sources]
        other = [(p, fmt) for p, fmt in formats if fmt != "jsonl"]
        if other:
            path, fmt = other[0]
            raise ValueError(
                f"summarise.reference_field reads the input as JSONL(.gz), but {path} is {fmt} (input.format): "
                "convert it to JSON Lines, or set summarise.reference_field: null"
            )
        fields = {"summarise.reference_field": sm["reference_field"]}
        if sm["method"] == "stored":
            fields["summarise.stored_field"] = sm["stored_field"].removesuffix(".*")
        # With on_bad_record: error a document without the field stops the evaluation, so a
        # file whose first records all lack it cannot work; with skip such documents are
        # counted, and only a field that no sampled record of any file has is an error.
        per_file = cfg["input"]["on_bad_record"] == "error"
        sampled, limit = [], record_limit_bytes(cfg["input"]["max_record_mb"])  # as the jobs read the files
        for path in sources:
            if path.startswith("s3://") or not os.path.isfile(path):
                continue
            first, seen, kinds = _sample_fields(path, fields.values(), limit)
            if first is not None:
                sampled.append((path, first, seen, kinds))
        for key, field in fields.items():
            lacking = [(path, first) for path, first, seen, _ in sampled if not seen[field]]
            if lacking and (per_file or len(lacking) == len(sampled)):
                path, first = lacking[0]
                raise ValueError(
                    f"{key} {field!r}: none of the first {FIELD_SAMPLE} records of {path} has it "
                    f"(the first record's fields: {', '.join(map(str, first))})"
                )
            if key == "summarise.stored_field" and sm["stored_field"].endswith(".*"):
                continue  # one string per system below it (stored_systems)
            # A reference (or stored summary) is one string: a list of sentences or a number
            # stops the evaluation, after every summarise job ran; under skip such records
            # are counted, and only a field no sampled record holds as a string stops here.
            other = [(path, kinds[field]["other"]) for path, _, _, kinds in sampled if kinds[field]["other"]]
            if other and (per_file or not any(kinds[field]["text"] for _, _, _, kinds in sampled)):
                path, (line, kind) = other[0]
                article = "an" if kind[:1] in "aeiou" else "a"
                raise ValueError(
                    f"{key} {field!r}: {path}:{line} holds {article} {kind}, not a string (one text per record; "
                    "a list of sentences joined by newlines is one text): the evaluation would stop there, after "
                    "every summarise job"
                )


# The config key of each model role (shardflow.workflow.tasks.models), and the tasks a
# sweep's jobs run models for: a training sweep trains its own, from the main data set's
# tokenizer (train_tokenizer: a pretrained one is read from shards.tokenizer).
MODEL_KEYS = {"embedding": "embedding.model", "summarise": "summarise.model", "summarise_encoder": "summarise.encoder"}
SWEEP_TASKS = {
    "retrieval": ("retrieval",),
    "summarise": ("summarisation",),
    "embed": ("embedding",),
    "train": ("training",),
}


def loaded_models(cfg: dict, tasks: Iterable[str]) -> dict[str, str]:
    """Config key -> value of every model and pretrained tokenizer the jobs of `tasks` load."""
    tasks = tuple(tasks)
    out = {MODEL_KEYS[role]: name for role, name in task_models(tasks, cfg).items()}
    if "training" in tasks and tokenizer_is_path(cfg["shards"]["tokenizer"]):
        out["shards.tokenizer"] = cfg["shards"]["tokenizer"]
    return out


@dataclass(frozen=True)
class MissingModel:
    """A model or pretrained tokenizer that a job of this run would load and this machine
    cannot: its config key, value, which sweep point names it ("" for the run's own
    config) and why it cannot be loaded."""

    key: str
    name: str
    where: str
    why: str

    def __str__(self) -> str:
        return f"{self.key} {self.name!r}{self.where}: {self.why}"


def _model_places(cfg: dict, data_sets: Iterable[DataSet], sweeps: Iterable[SweepSpec]):
    """(where, config, tasks) of the run's own jobs, then of each sweep point's."""
    yield "", cfg, {t for ds in data_sets for t in ds.tasks}
    yield from _sweep_points(cfg, sweeps)


def _sweep_points(cfg: dict, sweeps: Iterable[SweepSpec]):
    """(where, config, tasks) of each sweep point's jobs (its first seed's config)."""
    for spec in sweeps:
        for point in spec.ids:
            job = {**cfg, **spec.job_config(point, spec.seeds[0])}
            yield f" (sweep '{spec.name}', point {point})", job, SWEEP_TASKS.get(spec.stage, ())


def unavailable_models(cfg: dict, data_sets: Iterable[DataSet], sweeps: Iterable[SweepSpec] = ()) -> list[MissingModel]:
    """Each model or pretrained tokenizer that a job of this run would load and this
    machine cannot (a mistyped folder, a hub name not in the local cache), once per key
    and value, named by the first place that loads it. Asked where the jobs see this
    machine's files (local, SLURM): without it, every GPU job would wait for its GPU,
    fail and be resubmitted. Whether that stops the run: model_verdicts."""
    seen, missing = set(), []
    for where, job, tasks in _model_places(cfg, data_sets, sweeps):
        for key, name in loaded_models(job, tasks).items():
            if (key, name) in seen:
                continue
            seen.add((key, name))
            if key == "shards.tokenizer":
                why = pretrained_unavailable(name)
            elif key == "summarise.model":  # transformers' loaders (AutoConfig) alone: config.json
                why = model_unavailable(name, marks=("config.json",))
            else:
                why = model_unavailable(name)
            if why:
                missing.append(MissingModel(key, name, where, why))
    return missing


# The prompt keys of the embedding model's jobs, by the task they embed for: (section,
# literal prompt, prompt name). The corpus's embed jobs read embedding's; retrieval's
# embed_queries and search's embed_search_queries read their task's query keys in their
# place (rules/retrieval.smk, rules/search.smk).
PROMPT_KEYS = {
    "embedding": (("embedding", "prompt", "prompt_name"),),
    "retrieval": (("embedding", "prompt", "prompt_name"), ("retrieval", "query_prompt", "query_prompt_name")),
    "search": (("search", "query_prompt", "query_prompt_name"),),
}


def _model_spec(model: str):
    """The sentence-transformers description of embedding model `model`, read from its
    config files (no weights); None where it cannot be read here: the jobs name what is
    wrong."""
    from shardflow.core.models import resolve_model
    from shardflow.embed.stconfig import load_model_spec

    try:
        return load_model_spec(resolve_model(model))
    except (OSError, ValueError, RuntimeError):
        return None


def unknown_prompts(
    cfg: dict, data_sets: Iterable[DataSet], sweeps: Iterable[SweepSpec] = (), missing: Iterable[MissingModel] = ()
) -> list[str]:
    """One line per prompt name (embedding.prompt_name, retrieval.query_prompt_name,
    search.query_prompt_name, a sweep point's) that the embedding model's sentence-transformers config does not list:
    its embed jobs refuse it (shardflow.embed.stconfig.ModelSpec.resolve_prompt), each
    once it has its GPU and has loaded the model, naming no config key. Read from the
    model's config files (no weights), where the jobs see this machine's files, as
    unavailable_models; a model in `missing` (its result) or one that cannot be read
    here is left to that check and to the jobs."""
    skip = {(m.key, m.name) for m in missing}
    specs: dict = {}
    seen, lines = set(), []
    for where, job, tasks in _model_places(cfg, data_sets, sweeps):
        model = job["embedding"]["model"]
        keys = {k for task in tasks for k in PROMPT_KEYS.get(task, ())}
        if not keys or ("embedding.model", model) in skip:
            continue
        for section, literal, named in sorted(keys):
            name = job[section][named]
            if name is None or job[section][literal] is not None:  # both set: prompt_conflicts
                continue
            if (named, name, model) in seen:
                continue
            seen.add((named, name, model))
            if model not in specs:
                specs[model] = _model_spec(model)
            spec = specs[model]
            if spec is None:
                continue
            try:
                spec.resolve_prompt(None, name)
            except ValueError:
                listed = ", ".join(sorted(dict(spec.prompts))) or "it has none"
                lines.append(
                    f"{section}.{named} {name!r}{where} is not among the prompts of embedding.model {model!r} "
                    f"({listed}): the embed jobs would refuse it; name one of them, or give the text as "
                    f"{section}.{literal}"
                )
    return lines


# The prompt names MTEB (v2) looks for among a SentenceTransformer's prompts for a retrieval
# task, the first one found winning (mteb.models.abs_encoder.AbsEncoder.get_prompt_name:
# "<task name>-<prompt type>", "<task name>", "<task type>-<prompt type>", "<task type>",
# "<prompt type>"; a BEIR folder here has no MTEB task name, so those two are left out). Its
# wrapper passes the prompt's text to encode_query / encode_document. sentence-transformers
# >= 5 gives every model a `query` and a `document` prompt, empty where its config names none
# (SentenceTransformer.__init__), so the last name is always found: a model's `passage` or
# `corpus` prompt (e5's `passage`), second and third in encode_document's own order after
# `document`, is never what MTEB prepends to documents.
MTEB_PROMPT_NAMES = {
    "queries": ("Retrieval-query", "Retrieval", "query"),
    "documents": ("Retrieval-document", "Retrieval", "document"),
}
# The keys that set each side's prompt in a retrieval run: (section, literal, named).
RETRIEVAL_PROMPT_KEYS = {
    "queries": ("retrieval", "query_prompt", "query_prompt_name"),
    "documents": ("embedding", "prompt", "prompt_name"),
}


def _default_prompt(cfg: dict, missing: Iterable[MissingModel]):
    """(the embedding model's spec, the prompt its jobs prepend with neither prompt key
    set: its default prompt, or "") where the model can be read here; None for a model in
    `missing`, one this machine cannot read (a model only the image holds), or one whose
    default_prompt_name it lacks (the embed jobs refuse it, naming it)."""
    model = cfg["embedding"]["model"]
    if ("embedding.model", model) in {(m.key, m.name) for m in missing}:
        return None
    spec = _model_spec(model)
    if spec is None:
        return None
    try:
        return spec, spec.resolve_prompt()
    except ValueError:
        return None


def search_prompt_unset(cfg: dict, missing: Iterable[MissingModel] = ()) -> str | None:
    """One warning where task search embeds its queries without the query prompt the
    model's sentence-transformers config names (workflow.search.QUERY_PROMPT_NAME, not
    empty: Qwen3-Embedding's instruction), both search.query_prompt and
    query_prompt_name null: the queries then take the model's default prompt, as the
    documents did, and an instruction model ranks worse so; `make search` would take the
    model's query prompt. Not an error, and the default stays: the user may mean it. None
    for a model without such a prompt (the bundled MiniLM), one in `missing` or one that
    cannot be read here (a model only the image holds)."""
    from shardflow.workflow.search import QUERY_PROMPT_NAME

    sc = cfg["search"]
    if "search" not in cfg["tasks"] or sc["query_prompt"] is not None or sc["query_prompt_name"] is not None:
        return None
    read = _default_prompt(cfg, missing)
    if read is None:
        return None
    spec, ours = read
    if not dict(spec.prompts).get(QUERY_PROMPT_NAME) or ours == dict(spec.prompts)[QUERY_PROMPT_NAME]:
        return None
    model = cfg["embedding"]["model"]
    here = f"its default prompt {spec.default_prompt_name!r}" if ours else "no prompt"
    return (
        f"search: embedding.model {model!r} names a {QUERY_PROMPT_NAME!r} prompt in its sentence-transformers "
        f"config, and the queries are embedded with {here} (search.query_prompt, search.query_prompt_name null), "
        f"as the documents were: set search.query_prompt_name: {QUERY_PROMPT_NAME} to embed them as queries (make "
        "search does), or search.query_prompt: '' to keep this and silence the warning"
    )


def prompts_unlike_mteb(cfg: dict, missing: Iterable[MissingModel] = ()) -> str | None:
    """One warning where a retrieval run embeds its queries or its documents with another
    prompt than MTEB does with the same model. MTEB prepends the prompts the model's
    sentence-transformers config names for each side (MTEB_PROMPT_NAMES: Qwen3-Embedding's
    `query`, for one); the embed jobs prepend a prompt only where the config names one, else
    the model's default prompt, which MTEB never applies. Only for a side whose two keys are
    both null: a prompt the user set is the user's choice. A warning, not an error, and the
    defaults stay (other defaults would rerun every embed job). None for a model whose
    prompts MTEB would not apply either (the bundled MiniLM has none), and for a model in
    `missing` (unavailable_models' result) or one that cannot be read here."""
    if not cfg["retrieval"]["path"]:
        return None
    read = _default_prompt(cfg, missing)
    if read is None:
        return None
    spec, ours = read
    model = cfg["embedding"]["model"]
    prompts = dict(spec.prompts)
    unset, differences, fixes = [], [], []
    for side, (section, literal, named) in RETRIEVAL_PROMPT_KEYS.items():
        if cfg[section][literal] is not None or cfg[section][named] is not None:
            continue
        name = next((n for n in MTEB_PROMPT_NAMES[side] if n in prompts), MTEB_PROMPT_NAMES[side][-1])
        theirs = prompts.get(name, "")
        if theirs == ours:
            continue
        unset += [f"{section}.{literal}", f"{section}.{named}"]
        here = f"its default prompt {spec.default_prompt_name!r}" if ours else "nothing"
        there = f"its prompt {name!r}" if theirs else "nothing"
        differences.append(f"MTEB prepends {there} to the {side}, this run {here}")
        fixes.append(f"{section}.{named}: {name}" if theirs else f"{section}.{literal}: ''")
    if not differences:
        return None
    names = ", ".join(sorted(prompts))
    return (
        f"retrieval: embedding.model {model!r} names prompts in its sentence-transformers config ({names}), and "
        f"this run embeds otherwise than MTEB ({', '.join(unset)} null): {'; '.join(differences)}. Set "
        f"{' and '.join(fixes)} to embed as MTEB does; otherwise the retrieval metrics differ from MTEB's for this model"
    )


def temp_vectors_rerun_growth(cfg: dict, data_sets: Iterable[DataSet]) -> str | None:
    """One warning where `chunking.by: source` embeds a corpus with
    `embedding.keep_chunk_vectors: false`. By source, a source added, changed or removed
    leaves the other chunks' embed jobs done, but it reruns merge, which reads every
    chunk's vectors; false deleted them once merge had read them, so Snakemake reruns every
    embed job of the data set to remake them ("Missing output files"), the GPU time of the
    whole corpus each time it grows. A warning, not an error: the disk may matter more."""
    if cfg["embedding"]["keep_chunk_vectors"]:
        return None
    grown = [ds.name for ds in data_sets if ds.by == "source" and "embedding" in ds.tasks]
    if not grown:
        return None
    return (
        f"chunking.by: source with embedding.keep_chunk_vectors: false: a source added to, changed in or removed "
        f"from data set {grown[0]!r} reruns merge, and merge reads every chunk's vectors, which false deletes once "
        "merge has read them: every embed job of the data set then runs again to remake them (and every "
        "sweep_embed_chunk job of an embed sweep), not only the new or changed chunk's. Set "
        "embedding.keep_chunk_vectors: true for a corpus that grows: the next change then reruns every embed job "
        "once more, to remake the vectors deleted already, and later ones only their own chunk's"
    )


Job = tuple[str, dict]  # (rule, wildcards): one job, as the rule's output patterns name it


def chunk_jobs(rule: str, ds: DataSet) -> list[Job]:
    """The jobs of a per-chunk rule (embed, summarise, tokenize) on data set `ds`: one
    per chunk, in chunk order."""
    return [(rule, {"dataset": ds.name, "chunk": i}) for i in range(ds.n_chunks)]


def _data_set_model_jobs(key: str, ds: DataSet) -> list[Job]:
    """The jobs of data set `ds` that load the model of `key` (rules/embed.smk, verify.smk,
    retrieval.smk, neighbours.smk, summarise.smk, train.smk; provenance hashes the models of
    tasks.models, not the tokenizer)."""
    one = {"dataset": ds.name}
    jobs: list[Job] = []
    if key == "embedding.model":
        jobs += [*chunk_jobs("embed", ds), ("verify", one)]
        if "retrieval" in ds.tasks:  # their outputs name the data set: no wildcard
            jobs += [("embed_queries", {}), ("retrieval_evaluate", {})]
        if "neighbours" in ds.tasks:  # the model's similarity
            jobs += chunk_jobs("neighbours", ds)
        if "search" in ds.tasks:  # the queries' vectors, the model's similarity
            jobs += [("embed_search_queries", one), ("search", one)]
    elif key in ("summarise.model", "summarise.encoder"):
        jobs += chunk_jobs("summarise", ds)
    elif key == "shards.tokenizer":
        jobs.append(("train_tokenizer", one))
    if key in MODEL_KEYS.values():
        jobs.append(("provenance", one))
    return jobs


def retrieval_sweep_embeddings(
    cfg: dict, data_sets: Iterable[DataSet], sweeps: Iterable[SweepSpec]
) -> shared.SharedEmbeddings | None:
    """The embedding sets the retrieval sweeps among `sweeps` read (shardflow.sweep.shared.plan),
    planned from what decides them: those sweeps, the config, the retrieval data set's
    name and chunk count, gpu_jobs.device. One place for rules/common.smk, status and
    estimate, so the rules' files and what status and estimate look for cannot drift
    apart. None without a retrieval sweep, or without a retrieval data set (the parse
    stops on such a sweep: it needs retrieval.path)."""
    retrieval = next((ds for ds in data_sets if ds.role == "retrieval"), None)
    specs = [spec for spec in sweeps if spec.stage == "retrieval"]
    if not specs or retrieval is None:
        return None
    return shared.plan(
        specs, cfg, dataset=retrieval.name, n_chunks=retrieval.n_chunks, device=cfg["gpu_jobs"]["device"]
    )


def _sweep_model_jobs(cfg: dict, spec: SweepSpec, point: str, seed: int, sets: list[DataSet], embeddings) -> list[Job]:
    """The jobs of one sweep job (point, seed) that load its stage's model, and the main
    run's jobs whose outputs it reads (rules/sweep.smk): a retrieval job's embeddings (the
    main run's or a shared set, `embeddings`: retrieval_sweep_embeddings), an embed job's
    reference (the main run's vectors, where the point loads that model), a training
    job's tokenizer (train_tokenizer of the main data set)."""
    main = next(ds for ds in sets if ds.role == "main")
    job = {"sweep": spec.folder, "point": point, "seed": seed}
    if spec.stage == "retrieval":
        ds = next(ds for ds in sets if ds.role == "retrieval")
        corpus, queries = embeddings.of_job(spec.folder, point, seed)
        if corpus.main:
            out = [j for j in _data_set_model_jobs("embedding.model", ds) if j[0] in ("embed", "verify")]
        else:
            out = [("sweep_embed", {"settings": corpus.key, "chunk": i}) for i in range(ds.n_chunks)]
            out.append(("sweep_verify", {"settings": corpus.key}))
        out.append(("embed_queries", {}) if queries.main else ("sweep_embed_queries", {"settings": queries.key}))
        return [*out, ("sweep_retrieval_evaluate", job)]
    if spec.stage == "summarise":
        return [("sweep_summarise", {**job, "chunk": i}) for i in range(main.n_chunks)]
    if spec.stage == "embed":
        out = [("sweep_embed_chunk", {**job, "chunk": i}) for i in range(main.n_chunks)]
        out.append(("sweep_embed_verify", job))
        if loads_model(spec, point, cfg["embedding"]["model"]):
            out += [j for j in _data_set_model_jobs("embedding.model", main) if j[0] in ("embed", "verify")]
        return out
    return [("train_tokenizer", {"dataset": main.name})]


def model_jobs(
    cfg: dict, data_sets: Iterable[DataSet], sweeps: Iterable[SweepSpec] = (), embeddings=None
) -> dict[tuple[str, str], list[Job]]:
    """(config key, value) -> every job of this run that loads that model (or reads the
    pretrained tokenizer), each as (rule, wildcards), for the models loaded_models names:
    the data sets' jobs, each sweep job's (`embeddings`: the retrieval sweeps' shared sets,
    retrieval_sweep_embeddings). The graph is known at parse time, so these are all of
    them; the rules' output patterns name their files (rules/common.smk check_models)."""
    sets = list(data_sets)
    out: dict[tuple[str, str], list[Job]] = {}
    # The jobs already listed, by model: each sweep job of an embed point adds the main
    # run's embed jobs again, and a list's `in` made that grow as jobs squared (seconds
    # a parse at a thousand chunks; every parse that looks for models lists them).
    listed: dict[tuple[str, str], set] = {}

    def add(key: str, name: str, jobs: list[Job]) -> None:
        found, seen = out.setdefault((key, name), []), listed.setdefault((key, name), set())
        for rule, wildcards in jobs:
            job = (rule, tuple(sorted(wildcards.items())))
            if job not in seen:
                seen.add(job)
                found.append((rule, wildcards))

    for ds in sets:
        for key, name in loaded_models(cfg, ds.tasks).items():
            add(key, name, _data_set_model_jobs(key, ds))
    for spec in sweeps:
        for point, seed in spec.jobs():
            job = {**cfg, **spec.job_config(point, seed)}
            for key, name in loaded_models(job, SWEEP_TASKS.get(spec.stage, ())).items():
                add(key, name, _sweep_model_jobs(cfg, spec, point, seed, sets, embeddings))
    return out


def model_verdicts(
    missing: Iterable[MissingModel],
    outputs: Callable[[str, str], Iterable[str]] | None = None,
    exists: Callable[[str], bool] = os.path.exists,
) -> tuple[list[str], list[str]]:
    """(errors, warnings) for the models this machine lacks (unavailable_models), given
    `outputs(key, name)`: the declared outputs of every job that loads it (None: not
    known, so each one stops the run). A model stops the run while any of those outputs
    is missing: a job that loads it has work to do. Where they all exist (a finished run
    whose model has since moved), a warning: Snakemake still reruns a job whose input
    changed or is remade (a deleted chunk, say) or whose params or code changed, and that
    job then fails naming the model (shardflow.core.models.resolve_model); the parse
    cannot foresee that."""
    errors, warnings = [], []
    for m in missing:
        paths = list(outputs(m.key, m.name)) if outputs else []
        absent = next((p for p in paths if not exists(p)), None)
        if absent is None and paths:
            warnings.append(
                f"{m}; all {len(paths)} outputs of the jobs that load it exist, so none of them needs it unless "
                "it must rerun (an input changed or remade, its params or code changed): such a job fails naming "
                "it. Put it back, or set the key to its new place"
            )
        else:
            absent = f" ({absent} is not there yet)" if absent else ""
            errors.append(f"{m}; the jobs that load it would fail{absent}")
    return errors, warnings


# The rules whose jobs ask for GPUs (rules/common.smk job_resources), by the task that
# runs them on a data set and by the sweep stage whose rules (rules/sweep.smk) are made
# from them; a profile's set-resources names each on its own.
GPU_RULES = {
    "embedding": ("embed",),
    "retrieval": ("embed_queries", "retrieval_evaluate"),
    "neighbours": ("neighbours",),
    "search": ("embed_search_queries", "search"),
    "summarisation": ("summarise",),
    "training": ("train",),
}
SWEEP_GPU_RULES = {
    "retrieval": ("sweep_embed", "sweep_embed_queries", "sweep_retrieval_evaluate"),
    "summarise": ("sweep_summarise",),
    "embed": ("sweep_embed_chunk",),
    "train": ("sweep_train",),
}
GPU_RULE_NAMES = frozenset(r for rs in (*GPU_RULES.values(), *SWEEP_GPU_RULES.values()) for r in rs)
# The `gpu` of a GPU rule's job on the CPU where it has one: train's is 0 (its shell
# command hands the count to the launcher); the others have none.
GPU_ON_CPU = {"train": 0, "sweep_train": 0}


def cpu_rules(names: Iterable[str]) -> list[str]:
    """The rules among `names` (the workflow's) that are no GPU rule: their jobs have no
    `gpu` resource and never use a GPU, whatever the config says."""
    return [name for name in names if name not in GPU_RULE_NAMES]


def resources_key(rule: str) -> str:
    """The `resources.<rule>` entry a GPU rule's jobs read: a sweep variant shares its
    stage rule's (`sweep_embed` and `sweep_embed_chunk` read `embed`)."""
    return rule.removeprefix("sweep_").removesuffix("_chunk")


def run_gpu_rules(cfg: dict, data_sets: Iterable[DataSet], sweeps: Iterable[SweepSpec] = ()) -> list[str]:
    """The GPU rules with jobs in this run: those of its data sets' tasks and of its
    sweeps' stages, not the summarise rules under `summarise.method: stored` (which has
    no summarise jobs). An embed sweep's points compare their vectors with the main
    run's (rules/common.smk embed_reference): embed runs too."""
    sweeps = list(sweeps)
    tasks = {t for ds in data_sets for t in ds.tasks}
    model = cfg["embedding"]["model"]
    if any(loads_model(spec, p, model) for spec in sweeps if spec.stage == "embed" for p in spec.ids):
        tasks.add("embedding")
    stages = {spec.stage for spec in sweeps}
    rules = [r for task, rs in GPU_RULES.items() if task in tasks for r in rs]
    rules += [r for stage, rs in SWEEP_GPU_RULES.items() if stage in stages for r in rs]
    stored = cfg["summarise"]["method"] == "stored"
    return [r for r in rules if not (stored and r in ("summarise", "sweep_summarise"))]


def gpu_rules_on_cpu(
    cfg: dict, data_sets: Iterable[DataSet], sweeps: Iterable[SweepSpec] = (), gpu_0: bool = True
) -> dict[str, str]:
    """{rule: why} for each GPU rule with jobs in this run (`run_gpu_rules`) whose jobs
    run on the CPU whatever the executor: every one under `gpu_jobs.device: cpu`, the
    summarise rules under `summarise.method: lead`, the retrieval evaluation under
    `retrieval.backend: faiss` (faiss scores on the CPU: its jobs held a GPU idle), and
    each whose `resources.<rule>.gpu`
    is 0 (`resources_key`: its sweep variants too), as a job scheduled with no GPU runs
    on the CPU (core.gpujob), where `job_gpus` counts a 0 as one; train's follows
    train.gpus, at least 1. Under `auto` the jobs run on the CPU only with the local
    executor on a host without GPUs, where no scheduler reads a profile's GPU settings.

    `gpu_0=False` leaves out the rules a gpu of 0 puts there, for the profile check
    (rules/common.smk name_gpu_requests), whose line for a rule on the CPU says it "uses
    no GPU": a profile's set-resources `gpu` overrides that 0, and the job then runs on
    the GPUs it gets; and it names a gpu_model's ask as <model>:1, where such a job, its
    gpu 0, asks sbatch for <model>:0."""
    method, device = cfg["summarise"]["method"], cfg["gpu_jobs"]["device"]
    out = {}
    for rule in run_gpu_rules(cfg, data_sets, sweeps):
        key = resources_key(rule)
        if key == "summarise" and method == "lead":
            out[rule] = "summarise.method lead"
        elif device == "cpu":
            out[rule] = "gpu_jobs.device cpu"
        elif key == "retrieval_evaluate" and cfg["retrieval"]["backend"] == "faiss":
            out[rule] = "retrieval.backend faiss"  # faiss scores on the CPU
        elif key == "neighbours" and cfg["neighbours"]["backend"] == "faiss":
            out[rule] = "neighbours.backend faiss"
        elif key == "search" and cfg["search"]["backend"] == "faiss":
            out[rule] = "search.backend faiss"
        elif gpu_0 and key != "train" and cfg["resources"].get(key, {}).get("gpu", 1) == 0:
            out[rule] = f"resources.{key}.gpu 0"
    return out


def job_gpus(cfg: dict, rule: str) -> int:
    """The GPUs a job of GPU rule `rule` (embed, embed_queries, retrieval_evaluate,
    summarise, and their sweep variants, which share its resources) holds on a GPU:
    resources.<rule>.gpu, as rules/common.smk job_resources requests them. The job runs
    on one (`idle_gpus` warns at parse time) but holds them all, and the cluster bills
    them all: make estimate and make status count them (for the finished jobs too, whose
    stats record no `gpus`: core.jobs.gpus_held), and so do the stage reports, the first
    page and a sweep's collection, which get them as a param of their rules
    (core.jobs.gpus_held). A gpu of 0 counts as one (a job scheduled with none runs on
    the CPU: the callers tell those apart; gpu_rules_on_cpu). train's are
    train.gpus (`train_gpus`)."""
    return max(1, int(cfg["resources"].get(rule, {}).get("gpu", 1)))


def idle_gpus(
    cfg: dict, data_sets: Iterable[DataSet], sweeps: Iterable[SweepSpec], on_cpu: Iterable[str]
) -> list[str]:
    """One line per GPU rule of this run (`resources.<rule>`, which its sweep variants
    share) whose `gpu` asks for more than one GPU a job where the job uses one: embed,
    embed_queries, retrieval_evaluate and summarise load their model on one device, so
    the others would idle, paid, for the whole job. train runs a process per GPU.
    `on_cpu`: the rules that run on the CPU whatever the executor (`gpu_rules_on_cpu`)."""
    on_cpu = {resources_key(r) for r in on_cpu}  # their sweep variants too
    # The rules with jobs in this run (`run_gpu_rules`: none of summarise's under method
    # stored), by the key their resources are under.
    rules = {resources_key(r) for r in run_gpu_rules(cfg, data_sets, sweeps)}
    out = []
    for rule in sorted(rules - {"train"} - on_cpu):
        gpus = job_gpus(cfg, rule)
        if gpus > 1:
            out.append(
                f"resources.{rule}.gpu is {gpus}, but each {rule} job runs on one GPU: the other {gpus - 1} would idle for "
                f"the whole job; set it to 1 (more chunks, n_chunks, put more GPUs to work at once)"
            )
    return out


FIELD_SAMPLE = 100  # records read at parse time to find a misspelt field name


def _sample_fields(path: str, fields, max_record_bytes: int) -> tuple[list | None, dict[str, bool], dict]:
    """The first record's keys (None: no readable record), per dotted field whether one of
    the first FIELD_SAMPLE JSON objects of `path` has it, and per field how the sampled
    values read: {"text": whether one is a string, "other": [line, type name] of the first
    that is not, or None}; lines read with the jobs' limit (input.max_record_mb). Bad lines
    are passed over: the jobs that read the file name them. Kept between parses
    (core.parsecache), as every cluster job parses the workflow again."""
    from shardflow.summarise.data import json_objects

    def sample() -> list:
        seen = dict.fromkeys(fields, False)
        kinds = {field: {"text": False, "other": None} for field in seen}
        first, count = None, 0
        for line, _, obj in json_objects(path, max_record_bytes):
            if not isinstance(obj, dict):  # a bad line (summarise.data's _Bad) or not an object
                continue
            first = list(obj) if first is None else first
            for field in seen:
                node = obj
                for part in field.split("."):
                    node = node.get(part) if isinstance(node, dict) else None
                seen[field] = seen[field] or node is not None
                if isinstance(node, str):
                    kinds[field]["text"] = True
                elif node is not None and kinds[field]["other"] is None:
                    kinds[field]["other"] = [line, type(node).__name__]
            count += 1
            if count >= FIELD_SAMPLE or (all(seen.values()) and all(k["other"] for k in kinds.values())):
                break
        return [first, seen, kinds]

    first, seen, kinds = cached("summary-fields-2", [path], [sorted(set(fields)), max_record_bytes], sample)
    return first, seen, kinds


# The role a job's `made_with` record names (shardflow.workflow.provenance.made_with), by
# the config key of the model it loaded.
MODEL_ROLES = {key: role for role, key in MODEL_KEYS.items()}


@dataclass(frozen=True)
class ChangedModel:
    """A model whose files changed since jobs that load it wrote their outputs: its config
    key and value, the folder it is now, its hash now and the hashes the jobs recorded,
    each such job (rule, stats file) and the first stats file of its jobs that is not
    there yet (they have work to do), if any."""

    key: str
    name: str
    folder: str
    now: str
    ran: tuple[str, ...]
    stale: tuple[tuple[str, str], ...]
    waiting: str | None

    def rules(self) -> list[str]:
        return sorted({rule for rule, _ in self.stale})

    def __str__(self) -> str:
        ran = ", ".join(s[:12] for s in self.ran)
        return (
            f"{self.key} {self.name!r} ({self.folder}) changed since {len(self.stale)} of the jobs that load it "
            f"ran: they recorded sha256 {ran}, its files hash to {self.now[:12]} now"
        )


def model_source(name: str) -> tuple[str, str | None] | None:
    """(the folder a job would load for model `name`, the ref file that chose it where
    `name` is a hub name: its cached snapshot, core.models.hub_ref; None for a local
    folder), or None where there is none here: unavailable_models names a missing one,
    and "default" whose package this environment lacks is the jobs' own (their conda env
    holds it)."""
    from shardflow.core.models import hub_ref, hub_snapshot, resolve_model

    try:
        folder = resolve_model(name)
        if os.path.isdir(folder):
            return folder, None
        snapshot = hub_snapshot(folder)
        return str(snapshot), str(hub_ref(snapshot))
    except (OSError, ValueError, RuntimeError):
        return None


# changed_model's verdicts of "unchanged", kept between parses: core.parsecache.cache_file(MODEL_VERDICTS).
MODEL_VERDICTS = "model-verdicts"


def _known_unchanged(kept: dict, role: str, folder: str, model: str) -> dict[str, list]:
    """The stats files (path: hashing.file_state) that changed_model found recording
    the model at `folder`, as it is now, for role `role` (or recording no model of that
    role: nothing to judge), so that a later parse need not read them or look the
    model's hash up again.

    Kept in .snakemake/shardflow/model-verdicts.json under the working directory (the
    parse cache's folder; beside the folder each hub name loads, _loads_since), one
    entry per [role, folder]: `model`, the digest of the
    model's files' states (hashing.model_files_state: each file's path, size, mtime,
    change time and inode), and `stats`, path: file_state of each stats file judged
    against it. Invalidated where either moves: any write, utime, chmod, replacement,
    addition or removal of a model file gives another digest, and the entry is started
    anew (_remember_unchanged); a stats file written again (its job rerun) has another
    file_state, and is read again. A changed model is never kept, so it is named at
    every parse until its jobs rerun or it is put back. The file is replaced atomically
    (core.atomic.write_json); concurrent parses may each lose the other's verdicts,
    which costs a reread, and a file that cannot be read or written (deleted, corrupt,
    a read-only working directory) only costs the work again. `kept`: the file's
    content (_kept_verdicts)."""
    entry = kept.get(json.dumps([role, folder]))
    if not isinstance(entry, dict) or entry.get("model") != model or not isinstance(entry.get("stats"), dict):
        return {}
    return entry["stats"]


def _kept_verdicts() -> dict:
    """The content of the verdicts file (_known_unchanged); {} where there is none to read."""
    try:
        kept = json.loads(cache_file(MODEL_VERDICTS).read_text())
    except (OSError, ValueError):
        return {}
    return kept if isinstance(kept, dict) else {}


def _remember_unchanged(kept: dict, role: str, folder: str, model: str, judged: dict[str, list]) -> None:
    """Add `judged` (path: file_state of stats files found unchanged) to the verdicts
    `kept` for [role, folder] while its files' digest is `model` (_known_unchanged), and
    write them back."""
    stats = _known_unchanged(kept, role, folder, model)
    kept[json.dumps([role, folder])] = {"model": model, "stats": {**stats, **judged}}
    with contextlib.suppress(OSError):
        write_json(cache_file(MODEL_VERDICTS), kept)


def _loads_since(kept: dict, role: str, name: str, folder: str, there: dict[str, list]) -> int:
    """When hub name `name` came to load the snapshot `folder`, as the parses saw it: a
    time for changed_model to count with the model's own. HF_HUB_CACHE or HF_HOME pointed
    at another cache (a shared one, downloaded before the jobs ran) loads another
    snapshot, whose files, folder and ref are all older than the jobs' stats, and no
    time of them moves. Kept in the verdicts file (`kept`, _kept_verdicts) per [role,
    name]: the folder the last parse found and since when; a folder other than that one,
    or none kept (the file lost), is taken as found after every stats file there is now
    (`there`: path: hashing.file_state), which are then judged until their jobs rerun. A
    time of the stats files, not this machine's clock: a filesystem's may be ahead."""
    entry = kept.get(json.dumps(["loads", role, name]))
    if isinstance(entry, dict) and entry.get("folder") == folder and isinstance(entry.get("since"), int):
        return entry["since"]
    since = max((state[2] + 1 for state in there.values()), default=0)
    kept[json.dumps(["loads", role, name])] = {"folder": folder, "since": since}
    with contextlib.suppress(OSError):
        write_json(cache_file(MODEL_VERDICTS), kept)
    return since


def changed_model(key: str, name: str, stats: Iterable[tuple[str, str]], model_hash: Callable[[str], str] | None = None
                  ) -> ChangedModel | None:
    """Whether model `name` (config key `key`) changed since the jobs that load it ran,
    given each such job's (rule, stats file): Snakemake does not see a model's files, so a
    model edited or replaced in place reruns none of them. Cheap where nothing changed:
    only a model changed after a job's stats file was written gets the model hashed, once
    per version of its files (model_sha256_kept, the hash the jobs record), and that job's
    recorded hash read. Changed is a file's mtime (written in place) or change time (put
    in place with its mtime kept: `cp -a`, `rsync -a`), or the folder's change time (`mv`
    of a folder downloaded before the jobs ran, whose files' times all stay); for a hub
    name also its ref file's times (refs/main moved, by a download of the branch or by
    hand, to a snapshot already in the cache, whose files and folder are all older than
    the jobs: core.models.hub_ref) and when the name came to load that snapshot
    (HF_HUB_CACHE pointed at another cache: _loads_since); for a folder named through a
    link, the link's (`ln -sfn v2 models/current` to a model older than the jobs). A
    model found unchanged for a stats file is remembered (_known_unchanged), so a folder
    touched without changing the model (a chmod, a file added and removed) costs one
    parse the reading, not every parse; the verdict is kept per folder, and a hub name's
    snapshot folder is its revision's, so what was found of one revision is never taken
    for another. Jobs that recorded none (written before they did, or another role) are
    not judged."""
    role = MODEL_ROLES.get(key)
    found = model_source(name) if role else None
    if found is None:
        return None
    folder, ref = found
    from shardflow.core.files import read_json
    from shardflow.core.hashing import digest, file_state, model_files_state

    stats = list(stats)
    there = {path: file_state(path) for _, path in stats if os.path.exists(path)}
    files = model_files_state(folder)
    times = [t for _, _, mtime, ctime, _ in files for t in (mtime, ctime)]
    times.append(os.stat(folder).st_ctime_ns)
    kept = None
    if ref is not None:  # when the name came to load this snapshot
        with contextlib.suppress(OSError):  # gone since hub_snapshot read it: the next parse names that
            times += file_state(ref)[2:4]
        kept = _kept_verdicts()
        times.append(_loads_since(kept, role, name, folder, there))  # another cache
    # The folder, or one above it, a link (`ln -sfn v2 models/current`): stat follows it,
    # so one repointed at files older than the jobs shows only in its own times.
    for link in filter(os.path.islink, (folder, *map(str, Path(folder).parents))):
        with contextlib.suppress(OSError):  # gone since: the next parse sees what replaced it
            st = os.lstat(link)
            times += [st.st_mtime_ns, st.st_ctime_ns]
    newest = max(times) if files else None
    older = [(rule, path) for rule, path in stats if path in there and newest is not None and there[path][2] < newest]
    if not older:
        return None
    signature = digest(files)
    kept = _kept_verdicts() if kept is None else kept
    known = _known_unchanged(kept, role, folder, signature)
    older = [(rule, path) for rule, path in older if known.get(path) != there[path]]
    if not older:
        return None
    if model_hash is None:
        from shardflow.core.madewith import model_sha256_kept

        def model_hash(folder: str) -> str:
            return model_sha256_kept(folder)["sha256"]

    now = model_hash(folder)
    stale, ran, unchanged = [], [], {}
    for rule, path in older:
        try:
            made = read_json(path).get("made_with") or {}
            recorded = made.get("model") or {}
        except (OSError, ValueError, AttributeError):
            continue  # a stats file that does not read: the job's own rerun says so
        sha = recorded.get("sha256") if isinstance(recorded, dict) else None
        if made.get("role") == role and isinstance(sha, str) and sha != now:
            stale.append((rule, path))
            ran += [sha] if sha not in ran else []
        else:
            unchanged[path] = there[path]
    # Kept only for the files hashed: a model swapped while it was hashed (a link put back
    # to the model the jobs ran with) would leave "unchanged" on the files read before.
    if unchanged and digest(model_files_state(folder)) == signature:
        _remember_unchanged(kept, role, folder, signature, unchanged)
    if not stale:
        return None
    waiting = next((path for _, path in stats if path not in there), None)
    return ChangedModel(key, name, folder, now, tuple(ran), tuple(stale), waiting)


def changed_model_verdicts(changed: Iterable[ChangedModel], forced: Callable[[str], bool] = lambda rule: False
                           ) -> tuple[list[str], list[str]]:
    """(errors, warnings) for models changed since their jobs ran (changed_model), where
    `forced(rule)` says the run remakes every job of that rule (--forcerun, --forceall):
    those are left to it. Where a job of the model is still to run, the run would put
    the new model's outputs beside the former one's (one index of two models' vectors),
    so it stops; where all have run, a warning: their outputs stay the former model's."""
    errors, warnings = [], []
    for c in changed:
        rules = [r for r in c.rules() if not forced(r)]
        if not rules:
            continue
        again = f"`--forcerun {' '.join(rules)}`"
        shown = ", ".join(path for _, path in c.stale[:3]) + (", ..." if len(c.stale) > 3 else "")
        if c.waiting:
            errors.append(
                f"{c}; and jobs that load it have yet to run ({c.waiting} is not there yet): this run would mix "
                f"the two models' outputs. Remake them all with the model as it is now ({again}), or put the "
                "former model back"
            )
        else:
            warnings.append(
                f"{c}: Snakemake does not watch a model's files, so their outputs ({shown}) stay the former "
                f"model's unless they rerun for another reason. Remake them with {again}, or put the former "
                "model back"
            )
    return errors, warnings
