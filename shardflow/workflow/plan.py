"""Parse-time planning: everything the Snakefile must know before any job runs.

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

import json
import math
import os
from pathlib import Path

from shardflow.corpus.readers import ReaderOptions, count_records_cheap, expand_inputs

DEMO_CORPUS = "resources/demo/corpus.jsonl"
COUNT_CACHE = ".snakemake/shardflow/record-counts.json"


def reader_options(cfg: dict) -> ReaderOptions:
    inp = cfg["input"]
    return ReaderOptions(
        format=inp["format"],
        id_field=inp["id_field"],
        text_field=inp["text_field"],
        group_field=cfg["chunking"]["group_by"],
        text_mode=inp["text_mode"],
        on_bad_record=inp["on_bad_record"],
    )


def corpus_inputs(cfg: dict) -> list[str]:
    """Files the split rule reads: the user's corpus, or the demo corpus to build."""
    path = cfg["input"]["path"]
    if path is None:
        return [DEMO_CORPUS]
    if isinstance(path, str) and path.startswith("s3://"):
        return [path]
    return expand_inputs(path)


def count_records(paths: list[str], opts: ReaderOptions) -> int:
    """Cheap count, cached by (path, size, mtime) so re-parses do not re-read."""
    key = json.dumps(
        [[p, os.stat(p).st_size, os.stat(p).st_mtime_ns] for p in paths] + [opts.format, opts.text_mode]
    )
    cache_file = Path(COUNT_CACHE)
    try:
        cache = json.loads(cache_file.read_text())
    except (OSError, ValueError):
        cache = {}
    if key not in cache:
        cache[key] = count_records_cheap(paths, opts)
        cache_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache_file.with_name(cache_file.name + f".tmp-{os.getpid()}")
        tmp.write_text(json.dumps(cache))
        os.replace(tmp, cache_file)
    return cache[key]


def plan_n_chunks(cfg: dict) -> int:
    n = cfg["n_chunks"]
    if n != "auto":
        return int(n)
    ch = cfg["chunking"]
    inputs = corpus_inputs(cfg)
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


# CPU threads of a GPU job (or of any job a cluster scheduler places) under
# `embedding.threads: auto`: the tokenizer and collation threads feed the GPU.
GPU_JOB_THREADS = 2


def job_threads(setting: int | str, *, local_cpu: bool, cores: int | None, jobs: int) -> int:
    """CPU threads per embed job for `embedding.threads`.

    An integer is used as given. `auto`: when Snakemake runs the jobs on this host
    on the CPU (`local_cpu`), the host's `cores` are shared by the embed jobs that
    can run at once, min(jobs, cores) of them, so several chunks are in flight and
    one job's start-up (imports, model load) overlaps another's compute; otherwise
    GPU_JOB_THREADS.
    """
    if setting != "auto":
        return int(setting)
    if not local_cpu or not cores:
        return GPU_JOB_THREADS
    return max(1, cores // max(1, min(jobs, cores)))


# Reader settings for files this workflow wrote itself in the chunk format
# (the retrieval corpus): {"id": ..., "text": ...} JSON lines.
CHUNK_READER = {"format": "jsonl", "id_field": "id", "text_field": "text", "group_field": None, "on_bad_record": "error"}
