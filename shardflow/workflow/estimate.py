"""What a run will cost, before any GPU is rented (`python -m shardflow.cli estimate`,
`make estimate`).

For each data set and GPU stage the configured run would execute (embed; retrieval's
embed_queries and retrieval_evaluate; neighbours; task search's embed_search_queries and
search; summarise; train; and the sweeps'): its jobs, records (tokens for training;
queries, and multiply-adds for the searches), the rate used and where it came from,
GPU-hours, their cost (core.jobs.priced at report.gpu_hour_price), the wall time on N
GPUs and the disk its outputs take. The config is read as the workflow reads it
(config/config.yaml, then each --configfile, validated by the schema), and the data
sets, chunk counts, sweeps and the rules that run on the CPU come from the parse-time
functions the rules use (workflow.plan, sweep.parse_sweeps): nothing is derived a
second time. It runs no job and downloads nothing; it reads, and keeps a record count
where the parse keeps it (core.parsecache).

Rates, in order of trust:
1. measured by an earlier run in this working directory: the chunk jobs' stats of the
   stage (results/<ds>/embed, results/<ds>/summarise; this data set first, then the
   others), a sweep job of the stage whose swept values equal this config's, a training
   run of the same model shape (results/**/train: its steps' tokens per second, the rest
   of its wall time once a job), a finished retrieval_evaluate (its
   benchmark, metrics.json and the queries' embed stats: multiply-adds per second of the
   whole job), a finished neighbours or search job (its record's search seconds, the rest
   of its benchmark once a job); a query embedding (embed_queries, embed_search_queries)
   runs at its corpus's embed rate. A run of another model (another summarise.method)
   is passed over, so is an embed run in another compute precision (embedding.dtype,
   `other_dtype`), and so is one on another kind of device: a CPU rate is no estimate
   for a GPU run, nor a GPU rate for a CPU run. So is a run of another data set whose records average more than
   LENGTH_FACTOR times as long or as short as this one's (`other_length`): embedding and
   summarising take time per token, and a rate is counted in records.
2. assumed, labelled so ("assumed, not measured: ..."): `chunking.rate_items_per_s`
   (ASSUMED) for embed and summarise; for training on GPUs, the trainer's own FLOPs per
   token (shardflow.train.model.GPT.flops_per_token) at an assumed share (ASSUMED_MFU,
   --mfu) of a GPU's dense bf16 peak (PEAK_GPU's in the trainer's MFU table,
   --gpu-peak-tflops), see `assumed_training`; for the exact searches on a GPU
   (retrieval_evaluate, neighbours, search), queries x documents x dim multiply-adds at
   SEARCH_MACS_PER_S plus reading the document matrix at SEARCH_READ_BYTES_PER_S.
   Training and the searches on the CPU (faiss) have no assumed rate (a CPU's
   throughput varies too much): not estimated.
A measured rate holds for that run's settings and GPU (named with it: the jobs' made_with;
a training run's metrics.json records made_with since 2026-11-29, and a row timed by an
older one says its GPU is unknown): another token budget, dtype or GPU model runs at
another speed. GPU rules count as GPU jobs unless
they run on the CPU whatever the host (plan.gpu_rules_on_cpu: gpu_jobs.device cpu,
summarise.method lead, a `resources.<rule>.gpu` of 0), as a dry run shows them.

Wall time: each stage's jobs longest first onto the GPUs free first (a job holding N
GPUs, train.gpus or another GPU rule's resources.<rule>.gpu, waits for N; a sweep's
points may hold different numbers), the stages one after another (embed and summarise
of one data set share the GPUs when they run at once, so the sum is what they take
together). GPU-hours are each job's seconds x the GPUs it holds (`plan.job_gpus`).
A row whose longest job runs past its rule's resources.<rule>.runtime, a cluster job's
time limit, says so and what shortens the job (`past_runtime`).

What is left, beside the whole run, once some job has run (`estimate` again part-way):
a GPU job whose outputs all exist is done, as make status counts it
(status.jobs_done, from the rules' own patterns; temp() chunk vectors that merge has
read may be gone), and every other job is priced whole, a running one too (make status
counts its parts). A sweep job whose metrics JSON exists is done, and so are the jobs of
a retrieval sweep's embedding set once a job that read the set has ended, and the
one-job stages (retrieval's embed_queries and retrieval_evaluate, search's
embed_search_queries and search) as status counts them. The table then gains the
columns `done` and `left GPU-h`, and the total line ends with `; left (<k> of <n> GPU
jobs done): ...`.

Sweeps: each point x seed estimated as the stage's own row with the job's config, summed
into one row per sweep. A retrieval sweep's jobs are those rules/sweep.smk runs
(`RetrievalSweepSets`): the corpus's embed jobs and the query embedding once per distinct
embedding settings across all the sweeps (shardflow.sweep.shared), each counted in the
first sweep that reads it and never where the settings are the main run's (its rows
count those), and the search per point x seed, as the main run's rows are estimated (a
set's own folder, results/sweeps/_embeddings/..., measures its rate first).

Records: the split's manifest.json where the split ran on these inputs; else counted
(newline counts, Parquet metadata: plan.count_records), or, for line-format inputs
above SAMPLE_ABOVE bytes, sampled and extrapolated by file size, and said so. Queries:
the prepared queries.jsonl of the task where it has been written, else retrieval's
qrels or search.queries (an s3:// one is not counted: its rows are not estimated).
"""

from __future__ import annotations

import copy
import glob
import gzip
import heapq
import itertools
import math
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from shardflow.core.config import canonical_order, load_schema, read_yaml, validate_config
from shardflow.core.files import GZIP_MAGIC, read_json
from shardflow.core.jobs import items_computed, money, priced, read_benchmark, read_job_table, significant
from shardflow.core.models import same_model
from shardflow.corpus.readers import ReaderOptions, detect_format
from shardflow.sweep import parse_sweeps
from shardflow.sweep.paths import job_metrics
from shardflow.sweep.shared import SHARED_FOLDER, set_folder
from shardflow.sweep.spec import SweepSpec, merge
from shardflow.workflow import plan

REPO = Path(__file__).resolve().parents[2]
RESULTS = "results"
ASSUMED = "assumed, not measured: run a small sample or an embed sweep to measure"
# An embed or summarise rate is counted in records per second, but the work is per token:
# a run on another data set's records measures this one's only where they are of like
# length. One whose records average more than this many times as long or as short (text
# bytes a record) is passed over (the demo's short lines are no measure of articles).
LENGTH_FACTOR = 2.0
# Line-format inputs above this many bytes are sampled, not counted line by line (a
# newline count reads every byte: minutes for a corpus of 100 M documents).
SAMPLE_ABOVE = 2 * 2**30
SAMPLE_BYTES = 8 * 2**20  # read from the start of each sampled file
SAMPLE_FILES = 8
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}
# What a training run's speed depends on, besides the device: the model's shape
# (train/config.json "model") and the batch (its "train").
TRAIN_SHAPE = ("n_layer", "n_head", "n_embd", "block_size", "bias")
TRAIN_BATCH = ("batch_size", "grad_accum", "dtype", "compile")
NOTES_SHOWN = 8  # per row in the table (--json has them all)

# Training without a measured run of its shape (`assumed_training`): the trainer's FLOPs
# per token at ASSUMED_MFU of a GPU's dense bf16 peak. The default peak is PEAK_GPU's in
# the table the trainer reports its MFU against (shardflow.train.trainer.PEAK_BF16_TFLOPS);
# --gpu-peak-tflops gives another GPU's.
ASSUMED_TRAIN = "assumed, not measured: run it once with a small train.max_iters to measure"
PEAK_GPU = "H100 SXM"
# Model FLOP utilisation: large training runs reach 0.2 to 0.46 of peak (the PaLM paper,
# Chowdhery et al. 2022, table 3: GPT-3 0.21, Gopher 0.33, Megatron-Turing NLG 0.30,
# PaLM 0.46), so 0.3 is a middling figure for a well-fed model; a small one (under
# SMALL_MODEL parameters, such as the shipped config's) spends its steps launching
# kernels and reaches far less, so its time is a lower bound (said so).
ASSUMED_MFU = 0.3
SMALL_MODEL = 10**8
# A char vocabulary is the corpus's distinct characters, known only once train_tokenizer
# has run (results/<ds>/tokenizer): until then this many (it weighs little in the FLOPs).
CHAR_VOCAB = 256
# retrieval_evaluate without a measured run: the exact search (shardflow.retrieval.search,
# torch on the job's GPU, float32) multiplies blocks of retrieval.block_size documents by
# 1,024 queries and keeps each block's top retrieval.top_k with torch.topk and two sorts,
# which take longer than the products: 1e12 multiply-adds per second is an order of
# magnitude, a few per cent of an H100's float32 peak (about 3e13), not a measurement.
# The document matrix (embeddings.npy) is read once, at SEARCH_READ_BYTES_PER_S (a
# network or cold local disk; a file in the page cache reads faster).
ASSUMED_SEARCH = "assumed, not measured: a finished retrieval_evaluate here measures it (its benchmark)"
ASSUMED_NEIGHBOURS = "assumed, not measured: a finished neighbours job here measures it (its record and benchmark)"
ASSUMED_BATCH_SEARCH = "assumed, not measured: a finished search job here measures it (its record and benchmark)"
SEARCH_MACS_PER_S = 1e12
SEARCH_READ_BYTES_PER_S = 1e9
# A row of task search's hits.parquet before one is written here: its rank (int32), score
# (float32) and corpus row (int64). Its two ids add their lengths, and Parquet's
# compression takes back about as much (the query id repeats k times, the rank runs
# 1..k): tables of 10 to 100 hits a query, ids like "q12" and "doc-123456", took 13 to
# 21 bytes a row.
HIT_BYTES = 16


class EstimateError(ValueError):
    pass


# --------------------------------------------------------------------- config


def load_config(configfiles: Iterable[str] = ()) -> dict:
    """config/config.yaml with each of `configfiles` merged over it in order (as
    Snakemake's --configfile), defaults filled and validated by the schema."""
    shipped = read_yaml(str(REPO / "config" / "config.yaml"))
    cfg = copy.deepcopy(shipped)
    for path in configfiles:
        try:
            overlay = read_yaml(path)
        except OSError as exc:
            raise EstimateError(f"--configfile {path}: {exc.strerror or exc}") from None
        except yaml.YAMLError as exc:  # its message names the line and column
            raise EstimateError(f"--configfile {path}: not YAML: {' '.join(str(exc).split())}") from None
        if overlay is None:
            continue
        if not isinstance(overlay, dict):
            raise EstimateError(f"--configfile {path}: not a mapping of config keys")
        cfg = merge(cfg, overlay)
    schema = load_schema(REPO / "config" / "config.schema.yaml")
    validate_config(cfg, schema)
    canonical_order(cfg, shipped, schema)
    return cfg


def sweeps(cfg: dict) -> dict:
    """The run's sweeps by name, parsed as the rules parse them (sweep.parse_sweeps)."""
    if not cfg["sweeps"]:
        return {}
    schema = load_schema(REPO / "config" / "config.schema.yaml")
    return parse_sweeps(cfg["sweeps"], cfg, lambda c: validate_config(c, schema), root=REPO)


# -------------------------------------------------------------------- records


@dataclass(frozen=True)
class Count:
    """A data set's records, where the figure came from, the records of each chunk
    (from a manifest; else spread evenly) and the bytes its chunks take."""

    records: int
    source: str
    per_chunk: tuple[int, ...] = ()
    chunk_bytes: int | None = None
    chunk_bytes_source: str = ""


def split_manifest(ds: plan.DataSet) -> tuple[dict | None, str]:
    """The split's manifest of `ds` where it was written for these inputs and this
    chunk count, else None and why it is not used ("" where there is none)."""
    path = f"{RESULTS}/{ds.name}/chunks/manifest.json"
    if not os.path.isfile(path):
        return None, ""
    try:
        manifest = read_json(path)
        chunks, total = manifest["chunks"], int(manifest["total_records"])
        for chunk in chunks:  # every chunk's records, a number (status and the count read them)
            int(chunk["items"])
    except (ValueError, KeyError, TypeError) as exc:
        return None, f"{path} is not readable ({exc}): not used"
    if manifest.get("n_chunks") != ds.n_chunks or len(chunks) != ds.n_chunks:
        return None, f"{path} has {manifest.get('n_chunks')} chunks, this config makes {ds.n_chunks}: not used"
    if not plan.matches_sources(list(manifest.get("sources", [])), ds.sources):
        return None, f"{path} was split from other input files: not used"
    written = os.path.getmtime(path)
    newer = [p for p in ds.sources if os.path.isfile(p) and os.path.getmtime(p) > written]
    if newer:
        return None, f"{newer[0]} changed after {path} was written: not used"
    return {**manifest, "total_records": total}, ""


def _sample(path: str) -> tuple[int, int, int]:
    """(newlines, file bytes read, text bytes) of the first SAMPLE_BYTES of text of
    `path` (gunzipped by its magic bytes)."""
    try:
        with open(path, "rb") as raw:
            packed = raw.read(2) == GZIP_MAGIC
            raw.seek(0)
            reader = gzip.GzipFile(fileobj=raw) if packed else raw
            data = reader.read(SAMPLE_BYTES)
            at_end = not reader.read(1)
            consumed = os.path.getsize(path) if at_end else raw.tell()
    except (OSError, EOFError) as exc:
        raise EstimateError(f"{path}: not readable ({exc})") from None
    lines = data.count(b"\n") + (at_end and data[-1:] not in (b"", b"\n"))
    return lines, consumed, len(data)


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError


def count_local(paths: list[str], opts: ReaderOptions, exact: bool) -> tuple[int, str, float | None]:
    """(records, how they were found, text bytes per file byte) of local corpus files:
    counted (plan.count_records), or, for line formats above SAMPLE_ABOVE bytes and not
    `exact`, sampled from up to SAMPLE_FILES files and extrapolated by file size. The
    ratio is None where a file is Parquet: its size is of compressed columns, ids and
    other fields included, no measure of its text."""
    for p in paths:
        if not os.path.isfile(p):
            raise EstimateError(f"input file {p!r} does not exist")
    formats = {p: detect_format(p, opts) for p in paths}
    cheap = [p for p in paths if formats[p] == "parquet" or (formats[p] == "text" and opts.text_mode == "files")]
    lines = [p for p in paths if p not in cheap]
    size = sum(os.path.getsize(p) for p in lines)
    counted = plan.count_records(cheap, opts) if cheap else 0
    step = max(1, math.ceil(len(lines) / SAMPLE_FILES))
    picked = lines[::step]
    samples = [_sample(p) for p in picked]
    ratio = sum(s[2] for s in samples) / max(1, sum(s[1] for s in samples)) if samples else 1.0  # text per file byte
    if any(formats[p] == "parquet" for p in paths):
        ratio = None
    if exact or size <= SAMPLE_ABOVE:
        return counted + (plan.count_records(lines, opts) if lines else 0), f"counted in {len(paths)} file(s)", ratio
    per_byte = sum(s[0] for s in samples) / max(1, sum(s[1] for s in samples))
    how = (
        f"sampled: the first {_size(SAMPLE_BYTES)} of text of {len(picked)} of {len(lines)} files, "
        f"extrapolated by file size ({_size(size)}); --records N or chunking.expected_records gives the figure"
    )
    return counted + round(per_byte * size), how, ratio


def count_records(cfg: dict, ds: plan.DataSet, given: int | None = None) -> Count:
    """The records of data set `ds` (see the module docstring); `given`: --records (the
    main data set's)."""
    if given is not None:
        return Count(given, "--records")
    manifest, why = split_manifest(ds)
    if manifest is not None:
        path = f"{RESULTS}/{ds.name}/chunks/manifest.json"
        return Count(
            manifest["total_records"],
            f"the split's {path}",
            tuple(int(c["items"]) for c in manifest["chunks"]),
            sum(int(c["bytes"]) for c in manifest["chunks"]),
            f"the chunks in {path}",
        )
    stale = f" ({why})" if why else ""
    if ds.role == "retrieval":
        from shardflow.retrieval.pipeline import RetrievalSpec

        spec = RetrievalSpec.from_config(cfg)
        if spec.in_s3:
            raise EstimateError(
                f"retrieval.path {spec.path} is in S3 and the estimate downloads nothing: "
                "run the split first (its manifest holds the count)"
            )
        corpus = spec.source_files()[0]
        fmt = "jsonl" if cfg["retrieval"]["format"] == "beir" else "text"
        exact = cfg["retrieval"]["n_chunks"] == "auto"  # counted at parse time already (kept)
        records, how, ratio = count_local([corpus], ReaderOptions(format=fmt), exact=exact)
        return Count(
            records,
            f"{how}: {corpus}{stale}",
            chunk_bytes=round(os.path.getsize(corpus) * ratio),
            chunk_bytes_source=f"about the size of {corpus}'s text",
        )
    if cfg["input"]["path"] is None and not os.path.isfile(plan.DEMO_CORPUS):
        return Count(
            cfg["demo"]["max_docs"],
            f"demo.max_docs: at most (the demo corpus is built by the run){stale}",
            chunk_bytes_source="not estimated: the demo corpus is not built yet",
        )
    expected = cfg["chunking"]["expected_records"]
    if expected is not None:
        return Count(expected, f"chunking.expected_records{stale}")
    remote = [p for p in ds.sources if p.startswith("s3://")]
    if remote:
        raise EstimateError(
            f"input {remote[0]} is in S3 and the estimate downloads nothing: "
            "pass --records N or set chunking.expected_records"
        )
    sources = list(ds.sources)
    # n_chunks auto by records counted every file at parse time already (kept): no sample
    counted = cfg["n_chunks"] == "auto" and cfg["chunking"]["by"] == "records"
    records, how, ratio = count_local(sources, plan.reader_options(cfg), exact=counted)
    if ratio is None:
        return Count(records, how + stale, chunk_bytes_source="not estimated: Parquet input (run the split first)")
    text = sum(os.path.getsize(p) for p in sources) * ratio
    return Count(records, how + stale, chunk_bytes=round(text), chunk_bytes_source="about the input's text")


def even_chunks(records: int, n: int) -> tuple[int, ...]:
    return tuple(records // n + (i < records % n) for i in range(n))


def chunks_by_size(records: int, sources: tuple[str, ...]) -> tuple[int, ...] | None:
    """chunking.by: source: `records` shared among the sources (one chunk each) in
    proportion to their file sizes, summing to `records`; None unless every source is a
    local file (an S3 object's size is not listed here)."""
    if not all(os.path.isfile(s) for s in sources):
        return None
    sizes = [os.path.getsize(s) for s in sources]
    total = sum(sizes)
    if not total:
        return even_chunks(records, len(sources))
    cumulative = [round(records * upto / total) for upto in itertools.accumulate(sizes)]
    return tuple(b - a for a, b in zip([0, *cumulative[:-1]], cumulative, strict=True))


@dataclass(frozen=True)
class Length:
    """The records a row's chunk jobs run on: their data set, their mean text bytes (None:
    not known here) and where that figure came from (`record_length`)."""

    dataset: str
    mean_bytes: float | None = None
    source: str = ""


def record_length(name: str, count: Count) -> Length:
    """The mean record of data set `name`: the bytes its chunks take (the split's manifest,
    else about its input's text) over its records."""
    if count.chunk_bytes is None or count.records <= 0:
        return Length(name)
    return Length(name, count.chunk_bytes / count.records, count.chunk_bytes_source)


def run_dataset(folder: str, main: str) -> str | None:
    """The data set whose chunks the jobs of a stage folder ran on: results/<ds>/<stage>'s,
    a shared embedding set's (results/sweeps/_embeddings/<ds>/...), and for a sweep job the
    main data set `main` (its embed and summarise jobs run on the main data set's chunks)."""
    parts = folder.split("/")
    if len(parts) < 3 or parts[0] != RESULTS:
        return None
    if parts[1] != "sweeps":
        return parts[1]
    return parts[3] if parts[2] == SHARED_FOLDER and len(parts) > 3 else main


def manifest_record_bytes(name: str) -> float | None:
    """The mean bytes of a record of data set `name` in its split's chunks (the manifest's
    bytes over its items), or None where no readable manifest is here."""
    try:
        chunks = read_json(f"{RESULTS}/{name}/chunks/manifest.json")["chunks"]
        items, size = sum(int(c["items"]) for c in chunks), sum(int(c["bytes"]) for c in chunks)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return size / items if items > 0 else None


def other_length(folder: str, length: Length | None, main: str) -> tuple[str | None, str]:
    """(why a run in `folder` is passed over: it measured another data set's records of
    another length than `length`'s, else None; a note naming whose records measured it,
    "" where they are this data set's). `main`: the main data set, a sweep job's."""
    ran_on = run_dataset(folder, main)
    if length is None or ran_on is None or ran_on == length.dataset:
        return None, ""
    theirs, ours = manifest_record_bytes(ran_on), length.mean_bytes
    if theirs is None or ours is None:
        unknown = "theirs" if theirs is None else "this data set's"
        return None, (
            f"measured on data set {ran_on}'s records, their length not compared with this data set's ({unknown} "
            "not known here): a rate in records/s holds for records of like length"
        )
    said = (
        f"data set {ran_on}'s records, {theirs:,.0f} bytes each on average (its split's manifest), "
        f"this data set's {ours:,.0f} ({length.source})"
    )
    if max(theirs, ours) > LENGTH_FACTOR * min(theirs, ours):
        return f"ran on {said}: a rate in records/s does not carry over to records of another length", ""
    return None, f"measured on {said}"


# ---------------------------------------------------------------------- rates


@dataclass(frozen=True)
class Rate:
    """Work units (records; tokens for training) per second of one job (of one GPU,
    for training), where the figure came from, whether it was measured, on which
    device, and the seconds a job takes beyond it (model loading: an earlier run's
    benchmark time less its own encode time)."""

    per_s: float
    source: str
    measured: bool
    device: str = ""
    overhead_s: float = 0.0
    where: str = ""  # the folder of the run that measured it ("" where none did)


@dataclass(frozen=True)
class Run:
    """An earlier run of a stage: where (its folder), and its chunk jobs' stats and
    Snakemake benchmarks (aligned; {} where none); `problem`: why its records could not
    be read (then it has none)."""

    where: str
    stats: list[dict]
    benches: list[dict]
    problem: str = ""


def load_run(folder: str, stats_glob: str, bench: Callable[[dict], str] | None = None) -> Run | None:
    """A stage folder's jobs: its job table (jobs.json, written by the stage's merge),
    else the stats files there now (`bench(stats)`: the job's benchmark file)."""
    table = os.path.join(folder, "jobs.json")
    paths = sorted(glob.glob(os.path.join(glob.escape(folder), stats_glob)))
    if not os.path.isfile(table) and not paths:
        return None
    try:
        if os.path.isfile(table):
            rows = read_job_table(table)
            return Run(folder, [r["stats"] for r in rows], [r.get("benchmark") or {} for r in rows])
        stats = [read_json(p) for p in paths]
        benches = []
        for s in stats:
            path = bench(s) if bench else None
            benches.append(read_benchmark(path) if path and os.path.isfile(path) else {})
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return Run(folder, [], [], f"is not readable ({exc})")
    return Run(folder, stats, benches)


def device_kind(device: object) -> str:
    """The kind of a device: cuda for any CUDA one (cuda:1), else its name (cpu)."""
    return "cuda" if str(device).startswith("cuda") else str(device)


def _devices(stats: list[dict]) -> str:
    names = []
    for s in stats:
        gpu = (s.get("made_with") or {}).get("gpu")
        name = f"{s.get('device')} ({gpu})" if gpu else str(s.get("device"))
        if name not in names:
            names.append(name)
    return ", ".join(names)


def run_rate(run: Run) -> tuple[float, float | None] | None:
    """(records per second of a job's compute, mean seconds per job beyond it: None
    without benchmarks)."""
    done = sum(items_computed(s) for s in run.stats)
    seconds = sum(s.get("seconds", 0.0) for s in run.stats)
    if done <= 0 or seconds <= 0:
        return None
    extra = [
        b["s"] - s["seconds"] for s, b in zip(run.stats, run.benches, strict=True) if isinstance(b.get("s"), float)
    ]
    return done / seconds, (max(0.0, sum(extra) / len(extra)) if extra else None)


def _recorded_model(stats: dict) -> str | None:
    model = (stats.get("made_with") or {}).get("model")
    return model.get("path") if isinstance(model, dict) else None


def other_model(stats: list[dict], name: str, key: str) -> str | None:
    """Why jobs with these stats ran another model than `name` (config key `key`), or None."""
    recorded = {_recorded_model(s) for s in stats}
    if None in recorded:
        return "its jobs did not record their model"
    other = next((m for m in recorded if not same_model(m, name)), None)
    return f"ran model {other}, not {key} {name}" if other else None


def other_dtype(stats: list[dict], setting: str, key: str = "embedding.dtype", engine: str = "embed") -> str | None:
    """Why chunk jobs with these stats computed in another precision than `key`'s
    `setting`, or None. auto is bfloat16 on CUDA, what `engine` takes where the GPU has no
    native bf16 (core.devices.WITHOUT_BF16: float16 for embedding, float32 for
    summarisation), and float32 elsewhere (core.devices.resolve_dtype): a GPU in float32
    runs several times slower than in half precision, so a rate does not carry across."""
    from shardflow.core.devices import WITHOUT_BF16  # torch: only where runs are compared

    without_bf16 = WITHOUT_BF16[engine]
    for s in stats:
        ran, kind = s.get("dtype"), device_kind(s.get("device"))
        if ran is None:
            return "its jobs did not record their compute dtype"
        if setting != "auto":
            if ran != setting:
                return f"ran dtype {ran}, not {key} {setting}"
            continue
        auto = ("bfloat16", without_bf16) if kind == "cuda" else ("float32",)
        if ran not in auto:
            return f"ran dtype {ran}, not {key} auto ({' or '.join(auto)} on {kind})"
    return None


def _listed(items: list[str], most: int = 3) -> str:
    more = f" and {len(items) - most} more" if len(items) > most else ""
    return "; ".join(items[:most]) + more


def _jobs(n: int) -> str:
    return f"{n} job{'s' if n != 1 else ''}"


def find_rate(runs: Iterable[tuple[Run, str | None]], on_gpu: bool, notes: list[str]) -> tuple[Rate, Run] | None:
    """The first of `runs` (each with why it does not fit, or None) measured on the
    device kind the run will use; what was passed over, and why, goes into `notes`."""
    want = "cuda" if on_gpu else "cpu"
    unfit, elsewhere, found = [], [], None
    for run, why in runs:
        if why:
            unfit.append(f"{run.where} {why}")
            continue
        measured = run_rate(run)
        if measured is None:
            continue
        per_s, overhead = measured
        if {device_kind(s.get("device")) for s in run.stats} != {want}:
            elsewhere.append(f"{run.where} {readable(per_s)} records/s on {_devices(run.stats)}")
            continue
        loading = "not measured (no benchmarks)" if overhead is None else f"{overhead:.0f} s a job"
        source = f"measured by {run.where} ({_jobs(len(run.stats))}; model loading {loading})"
        found = Rate(per_s, source, True, _devices(run.stats), overhead or 0.0, run.where), run
        break
    if elsewhere:
        notes.append(
            f"passed over, measured on another kind of device (a {'CPU' if on_gpu else 'GPU'} rate is no "
            f"estimate for a {'GPU' if on_gpu else 'CPU'} run): {_listed(elsewhere)}"
        )
    if unfit and not found:
        notes.append(f"passed over: {_listed(unfit)}")
    return found


@dataclass(frozen=True)
class GpuAssumption:
    """What a GPU is assumed to do for training without a measured run: its dense bf16
    peak in TFLOP/s (--gpu-peak-tflops) and the share of it a run uses (--mfu); None:
    the defaults, PEAK_GPU's peak and ASSUMED_MFU."""

    peak_tflops: float | None = None
    mfu: float | None = None

    def peak(self) -> tuple[float, str]:
        """(TFLOP/s, where the figure came from)."""
        if self.peak_tflops is not None:
            return self.peak_tflops, "--gpu-peak-tflops"
        from shardflow.train.trainer import PEAK_BF16_TFLOPS  # the trainer's MFU reference

        return PEAK_BF16_TFLOPS[PEAK_GPU], (
            f"an {PEAK_GPU}'s in the trainer's MFU table (shardflow.train.trainer.PEAK_BF16_TFLOPS); "
            "--gpu-peak-tflops X for another GPU"
        )

    def given(self) -> list[str]:
        """The options given, as the command line names them ([] for the defaults)."""
        named = (("--gpu-peak-tflops", self.peak_tflops), ("--mfu", self.mfu))
        return [f"{flag} {value:g}" for flag, value in named if value is not None]

    def utilisation(self) -> tuple[float, str]:
        if self.mfu is not None:
            return self.mfu, "--mfu"
        return ASSUMED_MFU, "large training runs reach 0.21 to 0.46 (the PaLM paper, table 3); --mfu X for another"


def assumed_rate(cfg: dict, what: str = "") -> Rate:
    rate = cfg["chunking"]["rate_items_per_s"]
    return Rate(rate, f"{ASSUMED} (chunking.rate_items_per_s: {rate:g} records/s per GPU{what})", False)


def _point_matches(params: dict, cfg: dict) -> bool:
    for key, value in params.items():
        node = cfg
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                return False
            node = node[part]
        if node != value:
            return False
    return True


def sweep_job_folders(stage: str, cfg: dict) -> Iterator[tuple[str, str]]:
    """(job folder, label) of every finished-or-started sweep job of `stage` under
    results/sweeps whose swept values all equal `cfg`'s (its spec.json)."""
    for spec_path in sorted(glob.glob(f"{RESULTS}/sweeps/*/spec.json")):
        try:
            spec = read_json(spec_path)
        except ValueError:
            continue
        if spec.get("stage") != stage:
            continue
        root = os.path.dirname(spec_path)
        for pid, params in spec.get("points", []):
            if _point_matches(params, cfg):
                for job in sorted(glob.glob(f"{glob.escape(root)}/{glob.escape(pid)}/seed=*")):
                    yield job, f"sweep {spec.get('name')!r} point {pid}"


def _stage_folders(stage: str, dataset: str) -> list[str]:
    """results/<dataset>/<stage>, then the other data sets' (the sweeps' folder aside)."""
    own = f"{RESULTS}/{dataset}/{stage}"
    others = [
        f for f in sorted(glob.glob(f"{RESULTS}/*/{stage}")) if f != own and not f.startswith(f"{RESULTS}/sweeps/")
    ]
    return [own, *others]


def embed_runs(
    cfg: dict, dataset: str, first: Iterable[str] = (), length: Length | None = None
) -> Iterator[tuple[Run, str | None]]:
    model = cfg["embedding"]["model"]
    folders = [
        *first,
        *_stage_folders("embed", dataset),
        *(f"{job}/embed" for job, _ in sweep_job_folders("embed", cfg)),
    ]
    for folder in dict.fromkeys(folders):
        run = load_run(folder, "embed_*.stats.json", lambda s, f=folder: _chunk_bench("embed", f, s))
        if run:
            why = run.problem or other_model(run.stats, model, "embedding.model")
            why = why or other_dtype(run.stats, cfg["embedding"]["dtype"])
            yield run, why or other_length(folder, length, cfg["dataset"])[0]


def summarise_runs(
    cfg: dict, dataset: str, first: Iterable[str] = (), length: Length | None = None
) -> Iterator[tuple[Run, str | None]]:
    sm = cfg["summarise"]
    model = {"abstractive": ("summarise.model", sm["model"]), "extractive": ("summarise.encoder", sm["encoder"])}
    folders = [
        *first,
        *_stage_folders("summarise", dataset),
        *(f"{j}/summarise" for j, _ in sweep_job_folders("summarise", cfg)),
    ]
    for folder in dict.fromkeys(folders):
        run = load_run(folder, "summaries_*.stats.json", lambda s, f=folder: _chunk_bench("summarise", f, s))
        if not run:
            continue
        if run.problem:
            yield run, run.problem
            continue
        methods = {s.get("method") for s in run.stats}
        if methods != {sm["method"]}:
            yield run, f"ran summarise.method {', '.join(map(str, methods))}, not {sm['method']}"
        else:
            key, name = model.get(sm["method"], (None, None))
            why = other_model(run.stats, name or "", key) if key else None
            if sm["method"] == "abstractive":  # generation's precision
                why = why or other_dtype(run.stats, sm["dtype"], "summarise.dtype", "summarise")
            yield run, why or other_length(folder, length, cfg["dataset"])[0]


def _chunk_bench(stage: str, folder: str, stats: dict) -> str | None:
    """The benchmark of a data set's chunk job (benchmarks/<stage>/<ds>/chunk_<i>.tsv)."""
    parts = folder.split("/")
    if len(parts) == 3 and parts[0] == RESULTS and "chunk" in stats:
        return f"benchmarks/{stage}/{parts[1]}/chunk_{stats['chunk']}.tsv"
    return None


# ----------------------------------------------------------------------- rows


@dataclass
class Row:
    """One stage of one data set (or one sweep): its jobs, their work, the rate, what
    each job would take (None: not estimated), the GPUs a job holds (0: on the CPU) and
    the disk its outputs take (None: not estimated); `finish` fills in the rest."""

    dataset: str
    stage: str
    jobs: int
    work: int | None = None
    unit: str = "records"
    rate: Rate | None = None
    gpus: int = 1
    seconds: list[float] | None = None
    disk: int | None = None
    disk_source: str = ""
    notes: list[str] = field(default_factory=list)
    gpu_hours: float | None = None
    cost: float | None = None
    wall_s: float | None = None
    assumed_jobs: int = 0  # a sweep's jobs at an assumed rate (its rate is None where they differ)
    # The GPUs each job holds, in the order of `seconds`, where a sweep's points hold
    # different numbers (train.gpus); None: every job holds `gpus`.
    job_gpus: list[int] | None = None
    # What is left: per job, in the order of `seconds`, whether its outputs exist (None:
    # not checked, every job left), and what the jobs not done take (`finish`).
    done: list[bool] | None = None
    left_gpu_hours: float | None = None
    left_cost: float | None = None
    left_wall_s: float | None = None

    @property
    def jobs_done(self) -> int | None:
        return None if self.done is None else sum(self.done)

    def gpus_each(self) -> list[int]:
        """The GPUs each job holds, in the order of `seconds`."""
        return self.job_gpus if self.job_gpus is not None else [self.gpus] * len(self.seconds or ())


def makespan(seconds: list[float], gpus_per_job: int | list[int], n_gpus: int) -> float | None:
    """Wall seconds of `seconds` jobs on `n_gpus` GPUs, longest first, each starting once
    as many GPUs as it holds (`gpus_per_job`: one count for all, or each job's) are
    free, on the GPUs free first; None where one job needs more GPUs than there are."""
    each = [gpus_per_job] * len(seconds) if isinstance(gpus_per_job, int) else list(gpus_per_job)
    if any(max(1, g) > n_gpus for g in each):
        return None
    free = [0.0] * max(1, n_gpus)  # when each GPU is next free (a heap)
    for s, g in sorted(zip(seconds, each, strict=True), key=lambda job: job[0], reverse=True):
        held = [heapq.heappop(free) for _ in range(max(1, g))]  # ascending: the last frees last
        for _ in held:
            heapq.heappush(free, held[-1] + s)
    return max(free)


def finish(row: Row, n_gpus: int, price: float) -> Row:
    if row.seconds is None:
        return row
    if row.gpus == 0:
        row.gpu_hours, row.cost = 0.0, 0.0
        row.left_gpu_hours, row.left_cost = 0.0, 0.0
        row.notes.append("runs on the CPU: no GPU-hours (wall time depends on the cores: not estimated)")
        return row
    gpus = row.gpus_each()
    if row.stage != "train" and row.gpus > 1:  # resources.<stage>.gpu (plan.job_gpus): the stages are the rules
        row.notes.append(
            f"each job holds resources.{row.stage}.gpu {row.gpus} GPUs and runs on one (the parse warns the "
            "others idle): GPU-hours and wall time count all it holds"
        )
    row.gpu_hours = sum(s * g for s, g in zip(row.seconds, gpus, strict=True)) / 3600
    row.cost = priced(row.gpu_hours, price, row.work)["estimated_cost"]
    row.wall_s = makespan(row.seconds, gpus, n_gpus)
    # What is left: the jobs whose outputs do not all exist, each as a whole job.
    done = row.done if row.done is not None else [False] * len(row.seconds)
    left = [(s, g) for s, g, d in zip(row.seconds, gpus, done, strict=True) if not d]
    row.left_gpu_hours = sum(s * g for s, g in left) / 3600
    row.left_cost = priced(row.left_gpu_hours, price)["estimated_cost"]
    if row.wall_s is not None:
        row.left_wall_s = makespan([s for s, _ in left], [g for _, g in left], n_gpus) if left else 0.0
    if row.wall_s is None:
        row.notes.append(f"a job holds {row.gpus} GPUs, more than the {n_gpus} given: no wall time")
    elif sum(gpus) < n_gpus and row.stage in CHUNK_STAGES:
        row.notes.append(
            f"{_jobs(row.jobs)} for {n_gpus} GPUs: some GPUs idle (more chunks: n_chunks, or auto with chunking.gpus)"
        )
    return row


# The stages with a job per chunk: more chunks would keep more GPUs busy (a stage of one
# job, as the query embedding or the search, has no such remedy). neighbours searches a
# chunk's records a job (the data set's n_chunks), each job reading the whole matrix.
CHUNK_STAGES = ("embed", "summarise", "neighbours")
# The rule of a sweep stage's chunk jobs (rules/sweep.smk): a point and seed of an embed
# or summarise sweep runs the main data set's chunks as jobs of its own.
SWEEP_CHUNK_RULES = {"embed": "sweep_embed_chunk", "summarise": "sweep_summarise"}


def embed_dim(cfg: dict, run: Run | None) -> tuple[int | None, str]:
    """The embedding width: the measuring run's, else the model's config.json."""
    if run and run.stats and "dim" in run.stats[0]:
        return int(run.stats[0]["dim"]), f"dim {run.stats[0]['dim']} (as {run.where})"
    from shardflow.core.models import resolve_model
    from shardflow.embed.stconfig import load_model_spec, output_dim

    try:
        dim = output_dim(load_model_spec(resolve_model(cfg["embedding"]["model"])))
        return dim, f"dim {dim} (the model's config.json)"
    except (OSError, ValueError) as exc:
        return None, f"disk not estimated: the model's width is not known here ({exc})"


def chunk_job_row(name: str, stage: str, per_chunk: tuple[int, ...], rate: Rate, gpus: int) -> Row:
    seconds = [n / rate.per_s + rate.overhead_s for n in per_chunk]
    return Row(name, stage, len(per_chunk), sum(per_chunk), rate=rate, gpus=gpus, seconds=seconds)


def measured_chunk_row(
    cfg: dict,
    name: str,
    stage: str,
    per_chunk: tuple[int, ...],
    on_gpu: bool,
    runs: Iterable[tuple[Run, str | None]],
    assumed: Rate,
    length: Length | None,
) -> tuple[Row, Run | None]:
    """The row of a chunk stage's jobs (embed, summarise) at the first fitting rate of
    `runs` (find_rate), else at `assumed`; its notes say what was passed over and, first,
    whose records measured the rate (other_length). Also the run it came from, or None."""
    notes: list[str] = []
    found = find_rate(runs, on_gpu, notes)
    rate, run = found if found else (assumed, None)
    if run:
        notes.insert(0, other_length(run.where, length, cfg["dataset"])[1])
    row = chunk_job_row(name, stage, per_chunk, rate, plan.job_gpus(cfg, stage) if on_gpu else 0)
    row.notes += [n for n in notes if n]
    return row, run


def embed_row(
    cfg: dict,
    name: str,
    per_chunk: tuple[int, ...],
    on_gpu: bool,
    first: Iterable[str] = (),
    length: Length | None = None,
) -> Row:
    """The embed jobs of data set `name` (a sweep's: `first`, its own job folder), whose
    records are `length`'s (None: a rate of any data set's records is used)."""
    runs = embed_runs(cfg, name, first, length)
    row, run = measured_chunk_row(cfg, name, "embed", per_chunk, on_gpu, runs, assumed_rate(cfg), length)
    dim, how = embed_dim(cfg, run)
    if dim:
        width = DTYPE_BYTES[cfg["embedding"]["output_dtype"]]
        row.disk = 2 * row.work * dim * width  # the chunks' .npy files and the merged embeddings.npy
        row.disk_source = (
            f"records x {how} x {width} bytes ({cfg['embedding']['output_dtype']}), chunk files and merged copy"
        )
    else:
        row.disk_source = how
    return row


def summarise_row(
    cfg: dict,
    name: str,
    per_chunk: tuple[int, ...],
    on_gpu: bool,
    first: Iterable[str] = (),
    length: Length | None = None,
) -> Row:
    """The summarise jobs of data set `name` (a sweep's: `first`, its own job folder), whose
    records are `length`'s (None: a rate of any data set's records is used)."""
    slow = (
        "; set for embedding: generating summaries is usually far slower"
        if cfg["summarise"]["method"] == "abstractive"
        else ""
    )
    runs = summarise_runs(cfg, name, first, length)
    row, run = measured_chunk_row(cfg, name, "summarise", per_chunk, on_gpu, runs, assumed_rate(cfg, slow), length)
    if run:
        files = [f"{run.where}/summaries_{s.get('chunk')}.jsonl" for s in run.stats]
        written = sum(os.path.getsize(f) for f in files if os.path.isfile(f))
        items = sum(s.get("items", 0) for s in run.stats)
        if written and items:
            row.disk = round(2 * row.work * written / items)  # the chunks' files and the merged summaries.jsonl
            row.disk_source = f"bytes per summary as in {run.where}, chunk files and merged copy"
    if row.disk is None:
        row.disk_source = "not estimated: no earlier summaries of this method here"
    return row


def train_runs(cfg: dict, dataset: str, first: Iterable[str] = ()) -> Iterator[str]:
    folders = [*first, *_stage_folders("train", dataset), *sorted(glob.glob(f"{RESULTS}/sweeps/*/*/seed=*/train"))]
    yield from (
        f for f in dict.fromkeys(folders) if os.path.isfile(f"{f}/metrics.json") and os.path.isfile(f"{f}/config.json")
    )


def recorded_value(recorded: dict, key: str):
    """A TRAIN_SHAPE or TRAIN_BATCH value of a training run's config.json."""
    return recorded["model" if key in TRAIN_SHAPE else "train"].get(key)


def _folder_bytes(folder: str) -> int:
    return sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file())


def train_tokens(cfg: dict, gpus: int) -> int:
    """The tokens of a training run on `gpus` GPUs: train.max_iters steps of the global batch."""
    tr = cfg["train"]
    return tr["max_iters"] * tr["batch_size"] * tr["block_size"] * tr["grad_accum"] * gpus


def train_vocab(cfg: dict, dataset: str) -> tuple[int | None, str]:
    """(the vocabulary size the model of data set `dataset` gets, where it came from;
    None and why where it cannot be known here): shards.vocab_size for bpe, the char
    tokenizer results/<ds>/tokenizer holds (else CHAR_VOCAB), a pretrained one's file."""
    from shardflow.train.tokenizer import META_FILE, load_pretrained, pretrained_unavailable

    sh = cfg["shards"]
    if sh["tokenizer"] == "bpe":
        return sh["vocab_size"], "shards.vocab_size, bpe: at most"
    if sh["tokenizer"] == "char":
        meta = f"{RESULTS}/{dataset}/tokenizer/{META_FILE}"
        try:
            ident = read_json(meta)["identity"]
            if ident["kind"] == "char":
                return int(ident["vocab_size"]), f"as {meta}"
        except (OSError, ValueError, KeyError, TypeError):
            pass
        return CHAR_VOCAB, "char: the corpus's characters, unknown until train_tokenizer runs"
    missing = pretrained_unavailable(sh["tokenizer"])
    if missing:
        return None, f"shards.tokenizer {sh['tokenizer']}: {missing}"
    try:
        return load_pretrained(sh["tokenizer"]).vocab_size, f"shards.tokenizer {sh['tokenizer']}"
    except (OSError, ValueError) as exc:
        return None, f"shards.tokenizer {sh['tokenizer']} is not readable ({exc})"


def train_flops_per_token(cfg: dict, vocab: int) -> tuple[int, int]:
    """(training FLOPs per token, parameters) of the model `cfg` trains, counted by the
    trainer's own shardflow.train.model.GPT.flops_per_token (as it reports its MFU), the
    model built on torch's meta device: shapes only, no memory."""
    import torch

    from shardflow.train.model import GPT, GPTConfig

    with torch.device("meta"):
        model = GPT(GPTConfig(vocab_size=vocab, **{k: cfg["train"][k] for k in TRAIN_SHAPE}))
    return model.flops_per_token(cfg["train"]["block_size"]), model.num_params()


def evaluations(train: dict) -> int:
    """The periodic evaluations of a run: every train.eval_interval steps and at the last."""
    return train["max_iters"] // train["eval_interval"] + bool(train["max_iters"] % train["eval_interval"])


def assumed_training(row: Row, cfg: dict, dataset: str, gpu: GpuAssumption) -> str | None:
    """Fill `row` (a GPU train job without a measured run) from FLOPs: its tokens at the
    trainer's FLOPs per token, at `gpu`'s peak x MFU per GPU, the GPUs scaled linearly,
    plus the periodic evaluations (forward only: a third of a training token's FLOPs).
    Returns why it cannot, or None."""
    tr = cfg["train"]
    vocab, vocab_source = train_vocab(cfg, dataset)
    if vocab is None:
        return vocab_source
    flops, params = train_flops_per_token(cfg, vocab)
    (peak, peak_source), (mfu, mfu_source) = gpu.peak(), gpu.utilisation()
    per_gpu = peak * 1e12 * mfu / flops
    row.rate = Rate(
        per_gpu,
        f"{ASSUMED_TRAIN} ({flops:,} FLOPs per token by shardflow.train.model.GPT.flops_per_token, "
        f"at MFU {mfu:g} of a {peak:g} TFLOP/s dense bf16 peak)",
        False,
    )
    if params < SMALL_MODEL:
        row.notes.append(
            f"{readable(params / 1e6)} M parameters: a model this small keeps a GPU far below MFU {mfu:g} "
            "(its steps go to launching kernels): the time is a lower bound"
        )
    if tr["dtype"] == "float32":
        row.notes.append("train.dtype float32 multiplies in TF32, about half the bf16 peak: the time is a lower bound")
    row.notes.append(f"peak: {peak_source}; MFU: {mfu_source}; vocabulary {vocab:,} ({vocab_source})")
    seconds = row.work / (per_gpu * row.gpus)
    if row.gpus > 1:
        row.notes.append(f"scaled linearly to {row.gpus} GPUs (data parallel; gradient exchange not counted)")
    if tr["eval_windows"] == "all":
        row.notes.append(
            "evaluations over the whole val split (train.eval_windows all) not included: "
            "its size is known once the shards exist"
        )
    else:
        n = evaluations(tr)
        extra = n * tr["eval_windows"] * tr["block_size"] * (flops / 3) / (peak * 1e12 * mfu * row.gpus)
        seconds += extra
        row.notes.append(
            f"{duration(extra)} of periodic evaluations included ({n} x train.eval_windows "
            f"{tr['eval_windows']} windows, forward only: a third of a training token's FLOPs); the final "
            "evaluation over the whole val split, checkpoints and start-up not"
        )
    row.seconds = [seconds]
    return None


def train_row(
    cfg: dict,
    name: str,
    on_gpu: bool,
    first: Iterable[str] = (),
    gpu: GpuAssumption | None = None,
    dataset: str | None = None,
) -> Row:
    """The train job of data set `name` (a sweep's: `first`, its own job folder, and
    `dataset`, whose shards it trains on): its tokens are train.max_iters steps of the
    global batch. A measured run's rate is its steps' (metrics' tokens_per_second), the
    rest of its wall time counted once a job; without that key, its whole job's. Without
    a measured run of its shape, a GPU job is assumed from FLOPs (`assumed_training`, at
    `gpu`: None, the defaults)."""
    tr = cfg["train"]
    gpus = plan.train_gpus(cfg) if on_gpu else 1  # processes the job runs, each at the measured rate
    # train.gpus' global batch either way: on the CPU one process trains the micro-batches of
    # all of them (shardflow.train.trainer, `processes`)
    tokens = train_tokens(cfg, plan.train_gpus(cfg))
    row = Row(name, "train", 1, tokens, unit="tokens", gpus=gpus if on_gpu else 0)
    want, kind = ("cuda", "GPU") if on_gpu else ("cpu", "CPU")
    unfit = []
    for folder in train_runs(cfg, name, first):
        try:
            metrics, recorded = read_json(f"{folder}/metrics.json"), read_json(f"{folder}/config.json")
            other = [k for k in TRAIN_SHAPE if recorded["model"].get(k) != tr[k]]
            other += [k for k in TRAIN_BATCH if recorded["train"].get(k) != tr[k]]
            done = (metrics["steps"] - (metrics.get("resumed_from_step") or 0)) * metrics["tokens_per_step"]
            world, device = int(metrics.get("world_size") or 1), str(metrics["device"])
            seconds = float(metrics["wall_seconds"])
            # `device` is cuda whatever the GPU: made_with names it (a run from before it
            # was recorded does not), and the rate is said to be that GPU's, as an embed
            # or summarise rate is (_devices).
            named = _devices([metrics])
            gpu_named = bool((metrics.get("made_with") or {}).get("gpu"))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            unfit.append(f"{folder} is not readable ({exc})")
            continue
        if other:
            unfit.append(
                f"{folder} trained another shape ({', '.join(f'{k} {recorded_value(recorded, k)}' for k in other)})"
            )
            continue
        if done <= 0 or seconds <= 0:
            continue
        steady = metrics.get("tokens_per_second")  # its steps alone (None: a run of one step, older metrics)
        steady = steady if isinstance(steady, (int, float)) and not isinstance(steady, bool) and steady > 0 else None
        per_gpu = (steady or done / seconds) / world
        if device_kind(device) != want:
            row.notes.append(
                f"passed over: {folder} measured {readable(per_gpu)} tokens/s on {named}, no estimate for a {kind} run"
            )
            continue
        scaled = f"; scaled linearly from {world} to {gpus} GPUs" if world != gpus else ""
        if steady:
            # The rest of its wall time (the first step's warm-up, torch.compile's; the
            # evaluations, the final one over the whole val split; checkpoints) is a job's,
            # not a token's: spread over the tokens of a short measuring run, it made a
            # longer run several times slower than its steps.
            fixed = max(0.0, seconds - done / steady)
            how = (
                f"its steps' tokens_per_second; the rest of its {duration(seconds)}, {duration(fixed)} of warm-up, "
                f"evaluations and checkpoints, once a job{scaled}"
            )
        else:
            fixed, how = 0.0, f"whole job, evaluations included{scaled}"
        row.rate = Rate(per_gpu, f"measured by {folder} ({how})", True, named, overhead_s=fixed)
        unnamed = want == "cuda" and not gpu_named  # made_with names no GPU
        if unnamed:
            row.notes.append(
                f"{folder}'s metrics.json names no GPU model (written before made_with was recorded): the rate "
                "is that of the GPU it ran on, unknown here, and another GPU model trains at another speed; "
                "train once on this run's GPU to measure it"
            )
        row.seconds = [tokens / (per_gpu * gpus) + fixed]
        row.disk = _folder_bytes(folder)
        row.disk_source = f"as {folder} (weights, losses, hf/)"
        given = gpu.given() if gpu else []
        if given:  # they size the assumed rate alone: said, not dropped in silence
            row.notes.insert(
                0,
                f"{' and '.join(given)} not used: the rate is measured by {folder} on {named}"
                + (", on a GPU its metrics do not name" if unnamed else "")
                + "; move that folder aside to estimate from FLOPs at the figures given",
            )
        break
    if row.rate is None:
        if unfit:
            row.notes.append(f"passed over: {_listed(unfit)}")
        shape = ", ".join(f"{k} {tr[k]}" for k in (*TRAIN_SHAPE, *TRAIN_BATCH))
        why = assumed_training(row, cfg, dataset or name, gpu or GpuAssumption()) if on_gpu else None
        if row.rate is not None:
            row.notes.insert(0, f"no earlier training run of this shape on a GPU here ({shape})")
        else:
            row.notes.append(
                f"not estimated: no earlier training run of this shape on a {kind} here ({shape}); "
                + (f"no FLOPs: {why}; " if why else "")
                + "run it once with a small train.max_iters to measure"
            )
        row.disk_source = "not estimated: no earlier run of this shape"
    return row


# ------------------------------------------------------------------------ run


@dataclass
class Estimate:
    rows: list[Row]
    n_gpus: int
    gpus_source: str
    price: float
    currency: str
    records: dict[str, Count] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def gpu_hours(self) -> float:
        return sum(r.gpu_hours or 0.0 for r in self.rows)

    @property
    def cost(self) -> float:
        return priced(self.gpu_hours, self.price)["estimated_cost"]

    @property
    def disk(self) -> int:
        return sum(r.disk or 0 for r in self.rows)

    @property
    def wall_s(self) -> float:
        """The stages one after another on the GPUs (embed and summarise of one data
        set share them when they run at once, so their sum is what they take)."""
        return sum(r.wall_s or 0.0 for r in self.rows)

    @property
    def left_gpu_hours(self) -> float:
        """What the jobs not done take (a row without an output check: all its jobs)."""
        return sum(r.left_gpu_hours or 0.0 for r in self.rows)

    @property
    def left_cost(self) -> float:
        return priced(self.left_gpu_hours, self.price)["estimated_cost"]

    @property
    def left_wall_s(self) -> float:
        return sum(r.left_wall_s or 0.0 for r in self.rows)

    def jobs_done(self) -> tuple[int, int]:
        """(jobs done, jobs) of the GPU stages whose outputs were checked."""
        checked = [r for r in self.rows if r.done is not None and r.gpus]
        return sum(r.jobs_done or 0 for r in checked), sum(len(r.done or ()) for r in checked)

    def not_checked(self) -> list[str]:
        """The GPU stages whose jobs' outputs are not checked: all their jobs count as left."""
        return [f"{r.stage} {r.dataset}" for r in self.rows if r.gpus and r.seconds is not None and r.done is None]

    def no_wall(self, left: bool = False) -> list[str]:
        """The GPU stages estimated but left out of the wall time: a job of theirs holds
        more GPUs than the run is given (train.gpus, or a resources.<rule>.gpu, above
        --gpus), so they cannot run; `left`: those with a job left."""
        return [
            f"{r.stage} {r.dataset}"
            for r in self.rows
            if r.gpus and r.seconds is not None and r.wall_s is None and (not left or r.left_gpu_hours)
        ]

    def missing(self) -> list[str]:
        """The GPU stages without an estimate (a stage on the CPU costs no GPU-hours)."""
        return [f"{r.stage} {r.dataset}" for r in self.rows if r.seconds is None and r.gpus]

    def estimated(self) -> bool:
        """Whether the totals are figures: False where a GPU stage has no estimate and no
        other has one (their sum, 0, would read as free); where some have, the totals are
        "at least" (`missing`)."""
        return not self.missing() or any(r.gpus and r.seconds is not None for r in self.rows)

    def disk_missing(self) -> list[str]:
        """The stages whose disk is not estimated: `disk` leaves them out."""
        return [f"{r.stage} {r.dataset}" for r in self.rows if r.disk is None]

    def left_partial(self) -> bool:
        """Whether what is left is "at least": a GPU stage without an estimate has a job left."""
        return any(r.gpus and r.seconds is None and not all(r.done or [False]) for r in self.rows)

    def assumed(self) -> list[str]:
        return [
            f"{r.stage} {r.dataset}"
            for r in self.rows
            if r.gpus and ((r.rate is not None and not r.rate.measured) or r.assumed_jobs)
        ]


def _sweep_rows(
    cfg: dict,
    sweeps: dict,
    per_chunk: tuple[int, ...],
    on_cpu: dict,
    main: str,
    gpu: GpuAssumption | None,
    corpus: tuple[plan.DataSet, tuple[int, ...], int] | None = None,
    lengths: dict[str, Length] | None = None,
) -> list[Row]:
    """One row per sweep: its jobs (points x seeds, each over the chunks, or the shards,
    of the main data set `main`), each estimated as the stage's own row with the job's
    config; a retrieval sweep's rows (`RetrievalSweepSets`) need `corpus`: the retrieval
    data set, its records per chunk and its records. `lengths`: each data set's records
    (`record_length`)."""
    rows = []
    lengths = lengths or {}
    length = lengths.get(main)
    embeddings = RetrievalSweepSets(cfg, sweeps, corpus, on_cpu, lengths.get(corpus[0].name) if corpus else None)
    for spec in sweeps.values():
        jobs = spec.jobs()
        label = f"sweep {spec.name}"
        done: list[bool] = []
        if spec.stage == "retrieval":
            for row in embeddings.rows(spec):  # sweep_embed, sweep_embed_queries, sweep_retrieval_evaluate
                past_runtime(cfg, row, plan.resources_key(f"sweep_{row.stage}"), "retrieval.n_chunks")
                rows.append(row)
            continue
        parts = []
        borrowed: dict[str, set[str]] = {}  # point -> the folders whose rates its jobs take
        for pid, seed in jobs:
            job_cfg = {**cfg, **spec.job_config(pid, seed)}
            # The job's own folder, then its point's other seeds': measured at its values,
            # before the main run's, measured at the main config's.
            own = [f"{RESULTS}/sweeps/{spec.folder}/{pid}/seed={s}/{spec.stage}" for s in dict.fromkeys((seed, *spec.seeds))]
            group = {"sweep": spec.folder, "point": pid, "seed": seed}
            if spec.stage in CHUNK_STAGES:
                on_gpu = SWEEP_CHUNK_RULES[spec.stage] not in on_cpu
                estimate_row = embed_row if spec.stage == "embed" else summarise_row
                parts.append(estimate_row(job_cfg, label, per_chunk, on_gpu, first=own, length=length))
                rate = parts[-1].rate
                # Only the point's own folders measured its values; another sweep's job
                # matched that sweep's keys (sweep_job_folders), this one's at its base.
                if rate.measured and rate.where not in own and not _point_matches(spec.point(pid), cfg):
                    borrowed.setdefault(pid, set()).add(rate.where)
            else:
                parts.append(train_row(job_cfg, label, "sweep_train" not in on_cpu, own, gpu, dataset=main))
            if spec.stage == "train":
                done += _jobs_done(job_cfg, "sweep_train", group)
            elif os.path.exists(job_metrics(spec.stage, spec.folder, pid, seed)):  # the sweep job has ended
                done += [True] * len(per_chunk)
            else:
                done += _jobs_done(job_cfg, SWEEP_CHUNK_RULES[spec.stage], group, len(per_chunk))
        rows.append(combined(label, spec.stage, parts, "sweep jobs (points x seeds)", done))
        past_runtime(cfg, rows[-1], plan.resources_key(SWEEP_CHUNK_RULES.get(spec.stage, "sweep_train")))
        if borrowed:
            rows[-1].notes.append(borrowed_rates(spec, borrowed))
    return rows


def borrowed_rates(spec: SweepSpec, borrowed: dict[str, set[str]]) -> str:
    """What the rates of a chunk sweep's points that have not run are: another run's (the
    main run's, another sweep's), measured with the main config's values of the swept
    keys (a chunk job's stats record its model and dtype, which a rate must match, not
    its batch or length settings), so a swept key that changes the speed
    (embedding.token_budget, max_length; summarise's batch and generation settings) does
    not show in them."""
    folders = sorted({f for where in borrowed.values() for f in where})
    points = len(borrowed)
    return (
        f"{points} of {len(spec.points)} point{'s' if len(spec.points) != 1 else ''} at a rate measured by "
        f"{_listed(folders)}, with the main config's {', '.join(spec.params)}, not the point's: a swept key "
        "that changes the speed does not show in them until the point has run (its own rate is used then)"
    )


def combined(label: str, stage: str, parts: list[Row], what: str, done: list[bool], part: str = "job") -> Row:
    """One row of a sweep's `parts` of one stage (each estimated as the stage's own row,
    with its job's config): their jobs, work, seconds and disk summed, the rate where they
    share one, how many were measured and assumed (`what`: what the parts are, `part`: one
    of them), and `done` (each job's, in the order of their seconds)."""
    row = Row(
        label,
        stage,
        sum(p.jobs for p in parts),
        sum(p.work or 0 for p in parts),
        unit=parts[0].unit,
        gpus=max(p.gpus for p in parts),
    )
    rates = {p.rate for p in parts if p.rate}
    row.rate = next(iter(rates)) if len(rates) == 1 else None
    measured = sum(1 for p in parts if p.rate and p.rate.measured)
    assumed = sum(1 for p in parts if p.rate and not p.rate.measured)
    missing = len(parts) - measured - assumed
    row.assumed_jobs = assumed
    row.notes.append(
        f"{len(parts)} {what}: {measured} with a measured rate, {assumed} assumed"
        + (f", {missing} not estimated" if missing else "")
    )
    if len(rates) > 1:
        low, high = min(r.per_s for r in rates), max(r.per_s for r in rates)
        where = sorted({r.source.split(" (")[0] for r in rates})
        row.notes.append(f"rates per job from {readable(low)} to {readable(high)}/s: {_listed(where)}")
    row.notes += list(dict.fromkeys(n for p in parts for n in p.notes))
    if all(p.seconds is not None for p in parts):
        row.seconds = [s for p in parts for s in p.seconds]
        row.done = done
        if len({p.gpus for p in parts}) > 1:  # a sweep over train.gpus: each job holds its point's
            row.job_gpus = [p.gpus for p in parts for _ in p.seconds]
    if len({p.gpus for p in parts}) > 1:
        low, high = min(p.gpus for p in parts), max(p.gpus for p in parts)
        row.notes.append(f"GPUs per job from {low} to {high} (each point's train.gpus), counted per job")
    if all(p.disk is not None for p in parts):
        row.disk, row.disk_source = sum(p.disk for p in parts), parts[0].disk_source + f", per {part}"
    else:
        row.disk_source = "not estimated"
    return row


KIND_NAMES = {"corpus": "corpus", "queries": "query"}  # shardflow.sweep.shared.KINDS, in a sentence


class RetrievalSweepSets:
    """The retrieval sweeps' jobs as rules/sweep.smk runs them: the corpus's embed jobs
    (sweep_embed, one per chunk) and the query embedding (sweep_embed_queries) once per
    distinct embedding settings across all the sweeps (plan.retrieval_sweep_embeddings, as
    rules/common.smk plans them), a set with the main run's settings not at all (the main
    run's rows count it); the search (sweep_retrieval_evaluate) once per point x seed.

    A set is counted in the rows of the first sweep that reads it, estimated as the main
    run's rows are (`embed_row`, its own folder's runs first; `query_row`) with the config
    of the first job that reads it. Its jobs are done once a job that read it has ended
    (its metrics JSON exists: it read the merged set), as a sweep job is done. `length`:
    the corpus's records (`record_length`)."""

    def __init__(
        self,
        cfg: dict,
        sweeps: dict,
        corpus: tuple[plan.DataSet, tuple[int, ...], int] | None,
        on_cpu,
        length: Length | None = None,
    ):
        self.cfg, self.corpus, self.on_cpu, self.length = cfg, corpus, on_cpu, length
        self.counted: dict[tuple[str, str], str] = {}  # (kind, key) -> the sweep whose rows count it
        self.ended: dict[tuple[str, str], bool] = {}  # (kind, key) -> a job that read it has ended
        self.sets = plan.retrieval_sweep_embeddings(cfg, [corpus[0]] if corpus else [], sweeps.values())
        if self.sets is None:
            return
        self.queries = _queries(cfg, corpus[0].name)
        for spec in (s for s in sweeps.values() if s.stage == "retrieval"):
            for pid, seed in spec.jobs():
                ended = os.path.exists(job_metrics("retrieval", spec.folder, pid, seed))
                for found in self.sets.of_job(spec.folder, pid, seed):
                    key = (found.kind, found.key)
                    self.ended[key] = self.ended.get(key, False) or ended

    def folder(self, kind: str, key: str) -> str:
        """A set's results folder: the main run's own, or the shared one
        (shardflow.sweep.shared.set_folder, as rules/common.smk shared_embeddings names it)."""
        name = self.corpus[0].name
        if self.sets.sets[(kind, key)].main:
            return f"{RESULTS}/{name}" if kind == "corpus" else f"{RESULTS}/{name}/retrieval"
        return set_folder(RESULTS, name, kind, key)

    def rows(self, spec: SweepSpec) -> list[Row]:
        """The rows of retrieval sweep `spec`: embed and embed_queries of the sets it is
        the first to read (none where it reads only the main run's or an earlier sweep's),
        and retrieval_evaluate of its points x seeds, which says whose sets each reads."""
        label = f"sweep {spec.name}"
        if self.sets is None:
            why = "not estimated: retrieval.path is not set, so there is no data set to search"
            return [Row(label, "retrieval_evaluate", len(spec.jobs()), notes=[why])]
        ds, per_chunk, documents = self.corpus
        new: dict[str, list[tuple[str, Row]]] = {"corpus": [], "queries": []}  # kind -> (key, row)
        reads: dict[str, dict[str, set[str]]] = {"corpus": {}, "queries": {}}  # kind -> whose -> keys
        searches, done = [], []
        for pid, seed in spec.jobs():
            job_cfg = {**self.cfg, **spec.job_config(pid, seed)}
            corpus_set, query_set = self.sets.of_job(spec.folder, pid, seed)
            first = []
            for found in (corpus_set, query_set):
                whose = "main" if found.main else self.counted.setdefault((found.kind, found.key), spec.name)
                reads[found.kind].setdefault(whose, set()).add(found.key)
                if whose == spec.name and found.key not in {key for key, _ in new[found.kind]}:
                    first.append(found)
            if first:
                # The corpus set's rate and bytes per vector; its query set differs from it
                # by the query prompt alone, so the queries are embedded at its rate.
                own = [f"{self.folder('corpus', corpus_set.key)}/embed"]
                on_gpu = "sweep_embed" not in self.on_cpu
                embed = embed_row(job_cfg, ds.name, per_chunk, on_gpu, first=own, length=self.length)
                embed.dataset = label  # its runs looked up as the data set's, then the others'
                for found in first:
                    if found.kind == "corpus":
                        new["corpus"].append((found.key, embed))
                    else:
                        gpus = 0 if "sweep_embed_queries" in self.on_cpu else plan.job_gpus(job_cfg, "embed_queries")
                        new["queries"].append((found.key, query_row(label, self.queries, embed, gpus)))
            gpus = 0 if "sweep_retrieval_evaluate" in self.on_cpu else plan.job_gpus(job_cfg, "retrieval_evaluate")
            search = search_row(job_cfg, ds.name, self.queries[0], documents, gpus)
            search.dataset = label
            searches.append(search)
            done.append(os.path.exists(job_metrics("retrieval", spec.folder, pid, seed)))
        rows = []
        for kind, stage, jobs in (("corpus", "embed", ds.n_chunks), ("queries", "embed_queries", 1)):
            if new[kind]:
                ended = [self.ended[(kind, key)] for key, _ in new[kind] for _ in range(jobs)]
                parts = [row for _, row in new[kind]]
                what = f"{KIND_NAMES[kind]} embedding sets (one per distinct settings)"
                rows.append(combined(label, stage, parts, what, ended, part="set"))
        search = combined(label, "retrieval_evaluate", searches, "sweep jobs (points x seeds)", done)
        for kind, whose in reads.items():
            said = []
            for name, keys in whose.items():
                sets = f"{len(keys)} set{'s' if len(keys) != 1 else ''}"
                if name == "main":
                    said.append(f"the main run's ({self.folder(kind, next(iter(keys)))}: counted in its rows)")
                elif name == spec.name:
                    said.append(f"{sets} of its own ({'embed' if kind == 'corpus' else 'embed_queries'} row)")
                else:
                    said.append(f"{sets} shared with sweep {name} (counted in its rows)")
            search.notes.append(f"{KIND_NAMES[kind]} embeddings read: {'; '.join(said)}")
        return [*rows, search]


def _jobs_done(cfg: dict, rule: str, group: dict, n_chunks: int | None = None) -> list[bool]:
    """status.jobs_done: whether each job's outputs exist, as make status counts a job done
    (imported here: status imports this module)."""
    from shardflow.workflow import status

    return status.jobs_done(cfg, rule, group, n_chunks)


def _prepared_queries(prepared: str) -> tuple[int, str] | None:
    """The queries of a task's prepared queries file (the chunk format: a record a line),
    the query embedding's input, where it has been written; else None."""
    if not os.path.isfile(prepared):
        return None
    return plan.count_records([prepared], ReaderOptions(format="jsonl")), f"counted in {prepared}"


def _queries(cfg: dict, name: str) -> tuple[int | None, str]:
    prepared = _prepared_queries(f"{RESULTS}/{name}/retrieval/queries.jsonl")
    if prepared:
        return prepared
    from shardflow.retrieval.data import load_qrels
    from shardflow.retrieval.pipeline import RetrievalSpec

    spec = RetrievalSpec.from_config(cfg)
    if spec.in_s3:
        return None, "not counted: the qrels are in S3"
    qrels = spec.source_files()[2]
    return len(load_qrels(qrels)), f"the judged queries of {qrels}"


def _search_queries(cfg: dict, name: str) -> tuple[int | None, str]:
    """Task search's queries (search.queries) on data set `name`: counted in the prepared
    results/<ds>/search/queries.jsonl once search_queries has run, else in the file
    itself (newlines, Parquet metadata: plan.count_records); an s3:// file is not counted
    (the estimate downloads nothing)."""
    prepared = _prepared_queries(f"{RESULTS}/{name}/search/queries.jsonl")
    if prepared:
        return prepared
    sc = cfg["search"]
    path = sc["queries"]
    if path.startswith("s3://"):
        return None, (
            f"not counted: search.queries {path} is in S3 and the estimate downloads nothing (counted once "
            f"search_queries has written {RESULTS}/{name}/search/queries.jsonl)"
        )
    if not os.path.isfile(path):
        raise EstimateError(f"search.queries {path!r} does not exist")
    opts = ReaderOptions(format=sc["format"], id_field=sc["id_field"], text_field=sc["text_field"])
    return plan.count_records([path], opts), f"counted in {path} (search.queries)"


def query_row(
    name: str, queries: tuple[int | None, str], embed: Row, gpus: int, stage: str = "embed_queries"
) -> Row:
    """The query embedding of data set `name` (`stage`: embed_queries, or task search's
    embed_search_queries; one job holding `gpus`): its `queries` (the count, and where it
    came from: `_queries`, `_search_queries`) at the rate of `embed`, the corpus's embed
    row of the same settings (the rule is the embed rule), and one copy of the corpus's
    bytes per vector each."""
    count, how = queries
    row = Row(name, stage, 1, count, unit="queries", rate=embed.rate, gpus=gpus)
    row.notes.append(f"queries: {how}; at the corpus's rate (queries are shorter: an upper bound)")
    if count is not None and embed.rate:
        row.seconds = [count / embed.rate.per_s + embed.rate.overhead_s]
    if count is not None and embed.disk and embed.work:
        row.disk = round(embed.disk / (2 * embed.work) * count)  # one copy
        row.disk_source = "queries x the corpus's bytes per vector"
    return row


def search_runs(dataset: str) -> Iterator[tuple[str, dict, dict, int, float | None]]:
    """(folder, metrics, benchmark, dim, seconds) of each finished retrieval_evaluate here,
    this data set's first: results/<ds>/retrieval/metrics.json, the job's benchmark
    (benchmarks/retrieval_evaluate/<ds>.tsv), the width of its query vectors
    (retrieval/queries.stats.json), and the seconds its search and scoring took
    (retrieval/evaluate.stats.json; None where the record is older, or unreadable); one
    without the first three is passed over."""
    for folder in _stage_folders("retrieval", dataset):
        ds = folder.split("/")[1]
        files = (f"{folder}/metrics.json", f"benchmarks/retrieval_evaluate/{ds}.tsv", f"{folder}/queries.stats.json")
        if not all(os.path.isfile(f) for f in files):
            continue
        try:
            metrics, bench = read_json(files[0]), read_benchmark(files[1])
            dim = int(read_json(files[2])["dim"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        try:
            seconds = read_json(f"{folder}/evaluate.stats.json").get("seconds")
        except (OSError, ValueError, AttributeError):
            seconds = None
        valid = isinstance(seconds, (int, float)) and not isinstance(seconds, bool) and seconds > 0
        yield folder, metrics, bench, dim, float(seconds) if valid else None


def assumed_search_rate(cfg: dict, documents: int, dim: int, source: str) -> Rate:
    """An exact search on a GPU that no finished job here measured (retrieval_evaluate, a
    neighbours job): SEARCH_MACS_PER_S, top-k selection included, and a job's read of the
    document matrix at SEARCH_READ_BYTES_PER_S once."""
    width = DTYPE_BYTES[cfg["embedding"]["output_dtype"]]
    read_s = documents * dim * width / SEARCH_READ_BYTES_PER_S
    return Rate(
        SEARCH_MACS_PER_S,
        f"{source} ({SEARCH_MACS_PER_S:.0e} multiply-adds/s on a GPU, top-k selection included, plus "
        f"{duration(read_s)} a job reading the {_size(documents * dim * width)} document matrix at "
        f"{SEARCH_READ_BYTES_PER_S / 1e9:g} GB/s)",
        False,
        overhead_s=read_s,
    )


def search_row(cfg: dict, name: str, queries: int | None, documents: int, gpus: int) -> Row:
    """retrieval_evaluate of data set `name` (one job holding `gpus`): its exact search is
    queries x documents x dim multiply-adds (shardflow.retrieval.search), at the rate a
    finished retrieval_evaluate here measured (the whole job's seconds), else at
    SEARCH_MACS_PER_S plus reading the document matrix (ASSUMED_SEARCH)."""
    row = Row(name, "retrieval_evaluate", 1, unit="multiply-adds", gpus=gpus)
    dim, how = embed_dim(cfg, None)
    if queries is None or dim is None:
        row.notes.append(f"not estimated: {'the queries are not counted' if queries is None else how}")
        return row
    row.work = queries * documents * dim
    row.notes.append(f"exact search: {queries:,} queries x {documents:,} documents x {how}")
    faiss = cfg["retrieval"]["backend"] == "faiss"  # scores on the CPU, whatever the job holds
    want = "cpu" if faiss or not gpus else "cuda"
    elsewhere = []
    for folder, metrics, bench, run_dim, searched in search_runs(name):
        done = int(metrics.get("n_queries") or 0) * int(metrics.get("n_documents") or 0) * run_dim
        if done <= 0 or not isinstance(bench.get("s"), float) or bench["s"] <= 0:
            continue
        # The search's own seconds where its record has them (since 2026-11-29), the
        # job's start-up (imports, CUDA) once a job; else the whole job's.
        per_s = done / (searched or bench["s"])
        if device_kind(metrics.get("device")) != want:
            elsewhere.append(f"{folder} {readable(per_s)}/s on {metrics.get('device')}")
            continue
        what = f"{metrics['n_queries']:,} queries x {metrics['n_documents']:,} documents x dim {run_dim}, top_k " \
               f"{metrics.get('top_k')}"
        row.rate = Rate(
            per_s,
            f"measured by {folder} (its search and scoring, {what}; the rest of the job, start-up, once)" if searched
            else f"measured by {folder} (the whole job's benchmark: {what}; loading and scoring included, so a "
                 "small run's rate is low)",
            True,
            str(metrics.get("device")),
            overhead_s=max(0.0, bench["s"] - searched) if searched else 0.0,
        )
        break
    if elsewhere:
        row.notes.append(f"passed over, measured on another kind of device: {_listed(elsewhere)}")
    if row.rate is None and want == "cuda":
        row.rate = assumed_search_rate(cfg, documents, dim, ASSUMED_SEARCH)
    if row.rate is None:
        where = "retrieval.backend faiss searches on the CPU" if faiss else "the search runs on the CPU"
        held = f"; the job holds its {'GPU' if gpus == 1 else f'{gpus} GPUs'} meanwhile" if gpus else ""
        row.notes.append(f"not estimated: {where}, whose rate no earlier retrieval_evaluate here measured{held}")
        return row
    row.seconds = [row.work / row.rate.per_s + row.rate.overhead_s]
    return row


def search_start_up(cfg: dict, bench: dict, search_s: float, documents: int, dim: int) -> tuple[float, str]:
    """(seconds, in words) of a finished search job (neighbours, task search) beyond its
    search's `search_s`, counted once a job: the rest of its benchmark `bench`, else ({}:
    none) a read of the corpus's matrix (`documents` x `dim`) at SEARCH_READ_BYTES_PER_S."""
    # The rest of the job (imports, CUDA start-up, reading the matrix) is a job's, not a
    # multiply-add's: spread over a small run's work it made the rate several times low.
    job_s = bench.get("s")
    if isinstance(job_s, float):
        start = max(0.0, job_s - search_s)
        return start, f"the rest of its {duration(job_s)} job, {duration(start)} of start-up and reading once a job"
    # its record alone: the search's seconds are in it, the job's whole time is not
    width = DTYPE_BYTES[cfg["embedding"]["output_dtype"]]
    start = documents * dim * width / SEARCH_READ_BYTES_PER_S
    return start, f"no benchmark of the job: its start-up not known; the matrix's read assumed, {duration(start)} a job"


def corpus_passes(cfg: dict, want: str, queries: int, documents: int, dim: int, k: int) -> tuple[float, str]:
    """(seconds, in words) of the reads of the corpus's matrix a search job of `queries`
    makes beyond its first: one a slice of queries (shardflow.retrieval.search.slice_rows,
    a GPU's budget where it has 8 GiB free or more, `want` "cuda"), at
    SEARCH_READ_BYTES_PER_S; (0, "") for one slice."""
    from shardflow.retrieval.search import SLICE_BYTES, slice_rows

    step = slice_rows(SLICE_BYTES[want], dim, min(k, documents))
    passes = math.ceil(queries / step)
    if passes <= 1:
        return 0.0, ""
    width = DTYPE_BYTES[cfg["embedding"]["output_dtype"]]
    extra = (passes - 1) * documents * dim * width / SEARCH_READ_BYTES_PER_S
    where = "a GPU with 8 GiB free or more" if want == "cuda" else "the CPU"
    return extra, (f"{passes} passes over the corpus (slices of {step:,} queries on {where}): "
                   f"{duration(extra)} more reading the matrix at {SEARCH_READ_BYTES_PER_S / 1e9:g} GB/s")


def measured_search_rate(cfg: dict, row: Row, runs: Iterable[tuple[str, dict, dict]], want: str, documents: int,
                         dim: int, done: Callable[[dict], int], described: Callable[[dict], str]) -> None:
    """Sets `row`'s rate to the first of `runs` (stats file, stats, benchmark: neighbours_runs,
    batch_search_runs) measured on the `want` kind of device: the `done(stats)` multiply-adds (0:
    not known, passed over) over its search's seconds, the rest of its job once a job
    (search_start_up); `described(stats)` is that work in words, in the rate's source. A
    record from another kind of device is passed over and named in the row's notes."""
    elsewhere = []
    for path, stats, bench in runs:
        macs = done(stats)
        search_s = stats.get("seconds")
        if macs <= 0 or not isinstance(search_s, (int, float)) or isinstance(search_s, bool) or search_s <= 0:
            continue
        per_s = macs / search_s
        if device_kind(stats.get("device")) != want:
            elsewhere.append(f"{path} {readable(per_s)}/s on {stats.get('device')}")
            continue
        start, rest = search_start_up(cfg, bench, search_s, documents, dim)
        row.rate = Rate(per_s, f"measured by {path} (the search's {significant(search_s, 2, grouped=True)} s: "
                               f"{described(stats)}; {rest})", True, str(stats.get("device")), overhead_s=start)
        break
    if elsewhere:
        row.notes.append(f"passed over, measured on another kind of device: {_listed(elsewhere)}")


def job_records(dataset: str, stage: str, files: Callable[[str], Iterable[tuple[str, str]]]
                ) -> Iterator[tuple[str, dict, dict]]:
    """(stats file, stats, benchmark) of each finished job of a search stage here, this
    data set's first, the others by name: `files(ds)` lists each data set's (stats file,
    benchmark file) under results/<ds>/<stage> (the benchmark {} where there is none, as
    after results copied from another working directory); one whose stats or benchmark
    is unreadable is passed over."""
    folders = sorted(glob.glob(f"{RESULTS}/*/{stage}"), key=lambda f: (f.split("/")[1] != dataset, f))
    for folder in folders:
        for path, bench in files(folder.split("/")[1]):
            if not os.path.isfile(path):
                continue
            try:
                found = path, read_json(path), read_benchmark(bench) if os.path.isfile(bench) else {}
            except (OSError, ValueError):
                continue
            yield found


def neighbours_runs(dataset: str) -> Iterator[tuple[str, dict, dict]]:
    """The neighbours jobs' records (`job_records`): results/<ds>/neighbours/neighbours_<i>.stats.json,
    benchmarks/neighbours/<ds>/chunk_<i>.tsv."""

    def files(ds: str) -> Iterator[tuple[str, str]]:
        for path in sorted(glob.glob(f"{RESULTS}/{ds}/neighbours/neighbours_*.stats.json")):
            chunk = path.rsplit("_", 1)[1].removesuffix(".stats.json")
            yield path, f"benchmarks/neighbours/{ds}/chunk_{chunk}.tsv"

    return job_records(dataset, "neighbours", files)


def neighbours_row(cfg: dict, name: str, per_chunk: tuple[int, ...], documents: int, gpus: int) -> Row:
    """The neighbours jobs of data set `name` (one a chunk, each holding `gpus`): a chunk's
    exact search is its records x the corpus's documents x dim multiply-adds, at the rate
    a finished neighbours job here measured (its search's seconds; the rest of its
    benchmark, start-up and reading, once a job), else, on a GPU, at SEARCH_MACS_PER_S
    plus each job's read of the corpus's matrix, as search_row."""
    row = Row(name, "neighbours", len(per_chunk), unit="multiply-adds", gpus=gpus)
    dim, how = embed_dim(cfg, None)
    if dim is None:
        row.notes.append(f"not estimated: {how}")
        return row
    work = [n * documents * dim for n in per_chunk]
    row.work = sum(work)
    row.notes.append(f"exact search: each chunk's records x {documents:,} documents x {how}")
    rows = documents * min(cfg["neighbours"]["k"], max(documents - 1, 0))  # a document lists only the others
    table = f"{RESULTS}/{name}/neighbours.parquet"
    if os.path.isfile(table):  # its Parquet bytes a row: the ids' lengths are the corpus's
        import pyarrow.parquet as pq

        written = pq.ParquetFile(table).metadata.num_rows
        if written:
            row.disk = round(2 * rows * os.path.getsize(table) / written)
            row.disk_source = f"documents x neighbours.k rows at the bytes a row of {table}, chunk tables and merged copy"
    want = "cpu" if cfg["neighbours"]["backend"] == "faiss" or not gpus else "cuda"

    def run_dim(stats: dict) -> tuple[int, str]:
        # A record from before jobs recorded their width ("dim") is taken at the config's:
        # a job of another model then did more or fewer multiply-adds than said.
        return (int(stats["dim"]), "recorded") if "dim" in stats else (dim, "not recorded: the config's width")

    def done(stats: dict) -> int:
        return int(stats.get("items") or 0) * int(stats.get("documents") or 0) * run_dim(stats)[0]

    def described(stats: dict) -> str:
        width, said = run_dim(stats)
        return f"{stats['items']:,} records x {stats['documents']:,} documents x dim {width} ({said})"

    # Records with a benchmark first: one without says nothing of the job's start-up.
    runs = sorted(neighbours_runs(name), key=lambda run: not run[2])
    measured_search_rate(cfg, row, runs, want, documents, dim, done, described)
    if row.rate is None and want == "cuda":
        row.rate = assumed_search_rate(cfg, documents, dim, ASSUMED_NEIGHBOURS)
    if row.rate is None:
        row.notes.append("not estimated: the search runs on the CPU, whose rate no earlier neighbours job here "
                         "measured")
        return row
    row.seconds = []
    for n, w in zip(per_chunk, work, strict=True):  # k + 1 searched: a document's own row among them
        extra, said = corpus_passes(cfg, want, n, documents, dim, cfg["neighbours"]["k"] + 1)
        row.seconds.append(w / row.rate.per_s + row.rate.overhead_s + extra)
        if said and said not in row.notes:
            row.notes.append(f"a chunk of {n:,} records: {said}")
    return row


def batch_search_runs(dataset: str) -> Iterator[tuple[str, dict, dict]]:
    """Task search's search jobs' records (`job_records`): results/<ds>/search/search.stats.json,
    benchmarks/search/<ds>.tsv."""
    return job_records(dataset, "search",
                       lambda ds: [(f"{RESULTS}/{ds}/search/search.stats.json", f"benchmarks/search/{ds}.tsv")])


def batch_search_row(cfg: dict, name: str, queries: tuple[int | None, str], documents: int, gpus: int) -> Row:
    """The search job of task search on data set `name` (one job holding `gpus`): its
    `queries` (the count, and where it came from: `_search_queries`) x documents x dim
    multiply-adds, as retrieval_evaluate's search (search_row), at the rate a finished
    search job here measured (its record's seconds, the search alone; the rest of its
    benchmark once: search_start_up), else on a GPU at SEARCH_MACS_PER_S plus reading the
    document matrix (assumed_search_rate). Its disk: hits.parquet, queries x search.k rows."""
    row = Row(name, "search", 1, unit="multiply-adds", gpus=gpus)
    count, counted = queries
    dim, how = embed_dim(cfg, None)
    if count is None or dim is None:
        row.notes.append(f"not estimated: {f'the queries are {counted}' if count is None else how}")
        row.disk_source = "not estimated"
        return row
    row.work = count * documents * dim
    row.notes.append(f"exact search: {count:,} queries x {documents:,} documents x {how}")
    row.disk, row.disk_source = hits_disk(name, count * min(cfg["search"]["k"], documents))
    faiss = cfg["search"]["backend"] == "faiss"  # scores on the CPU
    want = "cpu" if faiss or not gpus else "cuda"

    def done(stats: dict) -> int:
        try:
            return int(stats["queries"]) * int(stats["documents"]) * int(stats["dim"])
        except (KeyError, TypeError, ValueError):
            return 0  # a record without them is passed over

    def described(stats: dict) -> str:
        return f"{int(stats['queries']):,} queries x {int(stats['documents']):,} documents x dim {int(stats['dim'])}"

    measured_search_rate(cfg, row, batch_search_runs(name), want, documents, dim, done, described)
    if row.rate is None and want == "cuda":
        row.rate = assumed_search_rate(cfg, documents, dim, ASSUMED_BATCH_SEARCH)
    if row.rate is None:
        where = "search.backend faiss searches on the CPU" if faiss else "the search runs on the CPU"
        row.notes.append(f"not estimated: {where}, whose rate no earlier search job here measured")
        return row
    extra, said = corpus_passes(cfg, want, count, documents, dim, cfg["search"]["k"])
    if said:
        row.notes.append(said)
    row.seconds = [row.work / row.rate.per_s + row.rate.overhead_s + extra]
    return row


def hits_disk(name: str, rows: int) -> tuple[int, str]:
    """(bytes, where the figure came from) of task search's hits.parquet of `rows` hits:
    at the bytes a row of data set `name`'s finished one (its ids' lengths are this
    corpus's and queries'), else HIT_BYTES."""
    table = f"{RESULTS}/{name}/search/hits.parquet"
    per_row, said = HIT_BYTES, (
        f"about {HIT_BYTES} bytes a row (rank, score and corpus row; the ids' lengths are known once a "
        "hits.parquet is written here)"
    )
    if os.path.isfile(table):
        import pyarrow.parquet as pq

        try:
            written = pq.ParquetFile(table).metadata.num_rows
        except (OSError, ValueError):  # pyarrow's ArrowInvalid is a ValueError
            written = 0
        if written:
            per_row, said = os.path.getsize(table) / written, f"the bytes a row of {table}"
    return round(rows * per_row), f"queries x search.k hits at {said}"


def past_runtime(cfg: dict, row: Row, key: str, chunks: str = "n_chunks") -> None:
    """Note on `row` where its longest job, as estimated, runs past resources.<key>.runtime
    (minutes): a SLURM job's time limit, where it is killed. `key`: the resources key of
    the row's rule (plan.resources_key: a sweep's rules read their stage's); `chunks`: the
    key of the chunk count its chunk jobs split (retrieval.n_chunks for the retrieval
    corpus). Says what shortens the job where a knob does: more chunks for a chunk
    stage, fewer steps or more GPUs for training; a one-job stage (embed_queries,
    retrieval_evaluate, embed_search_queries, search) covers all its queries, so only a
    longer runtime helps."""
    if not row.seconds or key not in cfg["resources"]:
        return
    if key == "summarise" and cfg["summarise"]["method"] == "lead":
        # Lead jobs ask for a CPU rule's resources, the profile's runtime, unless the
        # run's own config sets this one (rules/common.smk job_resources): not known here.
        return
    limit = cfg["resources"][key]["runtime"]
    longest = max(row.seconds)
    if longest <= 60 * limit:
        return
    fixed = row.rate.overhead_s if row.rate else 0.0
    unshortened = f", all but the {duration(fixed)} counted once a job" if fixed else ""
    if key in CHUNK_STAGES:
        shorter = f"more chunks ({chunks}) make shorter jobs{unshortened}"
    elif key == "train":
        shorter = f"fewer steps (train.max_iters) or more GPUs (train.gpus) make it shorter{unshortened}"
    else:
        shorter = "the stage is one job over all the queries, which no setting splits: raise the runtime"
    # The encoders keep their parts (embed_queries and embed_search_queries are the embed
    # rule), train its checkpoints: a retry goes on from there, so `retries` more attempts
    # of the runtime each may finish it, the killed ones paid; the searches start again.
    retries = int(cfg["resources"][key].get("retries", 2))
    attempts = f"{retries + 1} attempt{'s' if retries else ''} (resources.{key}.retries {retries})"
    if key in ("embed", "embed_queries", "embed_search_queries", "summarise", "train"):
        kept = "its last checkpoint" if key == "train" else "its saved parts"
        enough = longest <= 60 * limit * (retries + 1)
        retry = (f"a retry goes on from {kept}: its {attempts} may finish it, each killed at the limit and paid"
                 if enough else f"a retry goes on from {kept}, but its {attempts} {'are' if retries else 'is'} not "
                 "enough: it fails")
    else:
        retry = f"a retry starts it again: each of its {attempts} is killed, and it fails"
    row.notes.append(
        f"the longest job, {duration(longest)}, runs past resources.{key}.runtime {limit} min "
        f"(a SLURM job's time limit: killed there; {retry}): {shorter}"
    )


LOCAL_CPU = "gpu_jobs.device auto on this host, which has no GPU: a local run runs it on the CPU (--gpus N: a GPU run)"


def host_gpus(cfg: dict) -> list[str]:
    """This host's GPUs for the GPU jobs, as the local executor finds them
    (rules/common.smk local_gpus)."""
    from shardflow.core.gpu_slots import resolve_devices

    return resolve_devices(cfg["gpu_jobs"]["devices"], mode=cfg["gpu_jobs"]["pinning"])


def gpu_stages(cfg: dict, ds: plan.DataSet, sweep_specs: Iterable) -> list[str]:
    """The GPU stages of the rules' own (embed, summarise, train) that run on data set `ds`:
    its tasks', and embed on the main data set where an embed sweep compares its points'
    vectors with the main run's (a point that loads the run's model)."""
    embed_for_sweep = ds.role == "main" and any(
        spec.stage == "embed"
        and any(
            same_model(spec.job_config(p, spec.seeds[0])["embedding"]["model"], cfg["embedding"]["model"])
            for p in spec.ids
        )
        for spec in sweep_specs
    )
    out = ["embed"] if "embedding" in ds.tasks or embed_for_sweep else []
    if "summarisation" in ds.tasks and cfg["summarise"]["method"] != "stored":
        out.append("summarise")
    return out + (["train"] if "training" in ds.tasks else [])


def estimate(
    cfg: dict,
    n_gpus: int,
    gpus_source: str,
    records: int | None = None,
    local_cpu: bool = False,
    gpu: GpuAssumption | None = None,
) -> Estimate:
    """The estimate of the run `cfg` (validated) on `n_gpus` GPUs; `records`: the main
    data set's record count, given (--records). `local_cpu`: the run is a local one on a
    host without GPUs under `gpu_jobs.device: auto`, whose GPU rules run on the CPU
    (rules/common.smk runs_on_cpu), so their rates are the CPU's. `gpu`: the GPU assumed
    for training without a measured run (--gpu-peak-tflops, --mfu; None: the defaults)."""
    # An s3:// glob is not listed (no S3 settings here, nothing downloaded): a count
    # given (--records, chunking.expected_records) or the split's manifest says more.
    data_sets = plan.datasets(cfg, list_s3=plan.unlisted)
    specs = sweeps(cfg)
    on_cpu = plan.gpu_rules_on_cpu(cfg, data_sets.values(), specs.values())
    if local_cpu:  # a local run on a host without GPUs (device auto): the other GPU rules' jobs too
        rules = plan.run_gpu_rules(cfg, data_sets.values(), specs.values())
        on_cpu |= {rule: LOCAL_CPU for rule in rules if rule not in on_cpu}
    price, currency = cfg["report"]["gpu_hour_price"], cfg["report"]["currency"]
    out = Estimate([], n_gpus, gpus_source, price, currency)
    main = next(ds for ds in data_sets.values() if ds.role == "main")
    per_chunk_of, lengths = {}, {}
    for ds in data_sets.values():
        count = count_records(cfg, ds, records if ds.role == "main" else None)
        out.records[ds.name] = count
        by_size = chunks_by_size(count.records, ds.sources) if ds.by == "source" and not count.per_chunk else None
        per_chunk = count.per_chunk or by_size or even_chunks(count.records, ds.n_chunks)
        per_chunk_of[ds.name] = per_chunk
        lengths[ds.name] = record_length(ds.name, count)
        split = Row(
            ds.name,
            "split",
            ds.n_chunks + 1 if ds.by == "source" else 1,  # a job per source and the collector
            count.records,
            gpus=0,
            disk=count.chunk_bytes,
            disk_source=count.chunk_bytes_source or "not estimated",
        )
        split.notes.append(f"records: {count.source}")
        if by_size and ds.n_chunks > 1:
            split.notes.append("records per chunk in proportion to each source's file size (chunking.by source)")
        elif not count.per_chunk and ds.n_chunks > 1 and (ds.by in ("size", "source") or cfg["chunking"]["group_by"]):
            split.notes.append(f"records per chunk taken as even (chunking.by {ds.by} or group_by makes them uneven)")
        out.rows.append(split)
        stages = gpu_stages(cfg, ds, specs.values())
        first = len(out.rows)
        if "embed" in stages:
            out.rows.append(embed_row(cfg, ds.name, per_chunk, "embed" not in on_cpu, length=lengths[ds.name]))
            out.rows[-1].done = _jobs_done(cfg, "embed", {"dataset": ds.name}, len(per_chunk))
        if "retrieval" in ds.tasks:
            queries = _queries(cfg, ds.name)
            gpus = 0 if "embed_queries" in on_cpu else plan.job_gpus(cfg, "embed_queries")
            out.rows.append(query_row(ds.name, queries, out.rows[-1], gpus))
            out.rows[-1].done = _jobs_done(cfg, "embed_queries", {"RETRIEVAL": ds.name})
            gpus = 0 if "retrieval_evaluate" in on_cpu else plan.job_gpus(cfg, "retrieval_evaluate")
            out.rows.append(search_row(cfg, ds.name, queries[0], out.records[ds.name].records, gpus))
            out.rows[-1].done = _jobs_done(cfg, "retrieval_evaluate", {"RETRIEVAL": ds.name})
        if "neighbours" in ds.tasks:
            gpus = 0 if "neighbours" in on_cpu else plan.job_gpus(cfg, "neighbours")
            out.rows.append(neighbours_row(cfg, ds.name, per_chunk, out.records[ds.name].records, gpus))
            out.rows[-1].done = _jobs_done(cfg, "neighbours", {"dataset": ds.name}, len(per_chunk))
        if "search" in ds.tasks:  # after the corpus's embed (plan.datasets: search lists embedding)
            queries = _search_queries(cfg, ds.name)
            embed = next(r for r in out.rows[first:] if r.stage == "embed")
            gpus = 0 if "embed_search_queries" in on_cpu else plan.job_gpus(cfg, "embed_search_queries")
            out.rows.append(query_row(ds.name, queries, embed, gpus, stage="embed_search_queries"))
            out.rows[-1].done = _jobs_done(cfg, "embed_search_queries", {"dataset": ds.name})
            gpus = 0 if "search" in on_cpu else plan.job_gpus(cfg, "search")
            out.rows.append(batch_search_row(cfg, ds.name, queries, out.records[ds.name].records, gpus))
            out.rows[-1].done = _jobs_done(cfg, "search", {"dataset": ds.name})
        if "summarise" in stages:
            out.rows.append(summarise_row(cfg, ds.name, per_chunk, "summarise" not in on_cpu, length=lengths[ds.name]))
            out.rows[-1].done = _jobs_done(cfg, "summarise", {"dataset": ds.name}, len(per_chunk))
        if "train" in stages:
            row = train_row(cfg, ds.name, "train" not in on_cpu, gpu=gpu)
            row.done = _jobs_done(cfg, "train", {"dataset": ds.name})
            shards = f"{RESULTS}/{ds.name}/shards"
            if os.path.isdir(shards) and row.disk is not None:
                row.disk += _folder_bytes(shards)
                row.disk_source += f", and the shards as in {shards}"
            out.rows.append(row)
        chunks = "retrieval.n_chunks" if ds.role == "retrieval" else "n_chunks"
        for row in out.rows[first:]:  # each a rule's jobs, the rule named as its stage
            past_runtime(cfg, row, row.stage, chunks)
    retrieval = next((ds for ds in data_sets.values() if ds.role == "retrieval"), None)
    if retrieval is not None:  # the data set a retrieval sweep's jobs embed and search
        corpus = (retrieval, per_chunk_of[retrieval.name], out.records[retrieval.name].records)
    else:
        corpus = None
    out.rows += _sweep_rows(cfg, specs, per_chunk_of[main.name], on_cpu, main.name, gpu, corpus, lengths)
    for row in out.rows:
        finish(row, n_gpus, price)
    if on_cpu:
        out.notes.append("on the CPU: " + ", ".join(f"{rule} ({why})" for rule, why in on_cpu.items()))
    return out


# --------------------------------------------------------------------- output


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    for limit, unit, div in ((120, "s", 1), (7200, "min", 60), (172800, "h", 3600)):
        if seconds < limit:
            return f"{seconds / div:.0f} {unit}" if unit == "s" else f"{seconds / div:.1f} {unit}"
    return f"{seconds / 86400:.1f} days"


def gpu_hours(hours: float) -> str:
    """GPU-hours to three significant digits in fixed point: a large run's 2083, not the
    2.08e+03 of :.3g, which reads as 2.08 at a glance (core.jobs.significant). make
    status prints its GPU-hours with it too."""
    return significant(hours, 3)


def readable(x: float) -> str:
    """A rate (records/s, tokens/s) or a count for a person: three significant digits in
    fixed point, thousands grouped as the first page groups its counts: 17,906 texts/s, not
    the 1.79e+04 of :.3g; 3.27; 0.0412. make status prints its rates' sources with it too."""
    return significant(x, 3, grouped=True)


def _number(n: int | None) -> str:
    return "-" if n is None else f"{n:,}"


def not_counted(est: Estimate, left: bool = False) -> str:
    """What the wall time (`left`: of what is left) leaves out, said after it ("" where nothing)."""
    stages = est.no_wall(left)
    if not stages:
        return ""
    return f", {', '.join(stages)} not counted" + (
        "" if left else f" (a job holds more GPUs than the {est.n_gpus} given)"
    )


def total_line(est: Estimate) -> str:
    """The one line a user acts on. A GPU stage without an estimate is no zero: where no GPU
    stage has one the line says so, and where some have, their sum is "at least"."""
    missing = est.missing()
    if not est.estimated():
        return f"GPU-hours, cost and wall time not estimated: {', '.join(missing)} (the notes above say why)"
    gpus = f"{est.n_gpus} GPU{'s' if est.n_gpus != 1 else ''}"
    wall = f"about {duration(est.wall_s)} on {gpus}{not_counted(est)}"
    if not any(r.gpus for r in est.rows):
        wall = "every job runs on the CPU (wall time not estimated)"
    line = f"{'at least ' if missing else ''}{gpu_hours(est.gpu_hours)} GPU-h, {money(est.cost)} {est.currency}, {wall}"
    if est.assumed():
        line += f" (assumed rates: {', '.join(est.assumed())})"
    if missing:
        line += f"; not estimated: {', '.join(missing)}"
    return line + left_text(est)


def left_text(est: Estimate) -> str:
    """What is left, where some GPU job is done (its outputs exist): "" before any is; "at
    least" where a GPU stage without an estimate has a job left."""
    done, jobs = est.jobs_done()
    if not done:
        return ""
    wall = f", about {duration(est.left_wall_s)}{not_counted(est, left=True)}" if any(r.gpus for r in est.rows) else ""
    return (
        f"; left ({done} of {jobs} GPU jobs done): {'at least ' if est.left_partial() else ''}{gpu_hours(est.left_gpu_hours)} GPU-h, "
        f"{money(est.left_cost)} {est.currency}{wall}"
    )


def table(est: Estimate) -> str:
    head = ("data set", "stage", "jobs", "work", "rate/s", "GPU-h", "cost", "wall", "disk")
    some_done = est.jobs_done()[0] > 0
    if some_done:  # the columns of what is left, once some job is done
        head += ("done", "left GPU-h")
    body = []
    for r in est.rows:
        rate = "-" if r.rate is None else f"{readable(r.rate.per_s)}{'' if r.rate.measured else ' (assumed)'}"
        gpu_h = "-" if r.gpu_hours is None else ("0 (CPU)" if r.gpus == 0 else gpu_hours(r.gpu_hours))
        cost = "-" if r.cost is None else money(r.cost)
        work = "-" if r.work is None else f"{_number(r.work)} {r.unit}"
        disk = "-" if r.disk is None else _size(r.disk)
        cells = (r.dataset, r.stage, str(r.jobs), work, rate, gpu_h, cost, duration(r.wall_s), disk)
        if some_done:
            done = "-" if r.done is None else f"{r.jobs_done}/{len(r.done)}"
            left = "-" if r.left_gpu_hours is None else ("0 (CPU)" if r.gpus == 0 else gpu_hours(r.left_gpu_hours))
            cells += (done, left)
        body.append(cells)
    widths = [max(len(row[i]) for row in (head, *body)) for i in range(len(head))]
    lines = [
        f"GPUs: {est.n_gpus} ({est.gpus_source}); price: {est.price:g} {est.currency} per GPU-hour "
        "(report.gpu_hour_price, report.currency)",
        "",
        "  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)).rstrip(),
    ]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in body]
    lines += ["", "Where the numbers come from:"]
    for r in est.rows:
        said = [f"rate: {r.rate.source}" + (f", on {r.rate.device}" if r.rate.device else "")] if r.rate else []
        said += [f"disk: {r.disk_source}"] if r.disk_source else []
        shown = said + r.notes
        if len(shown) > NOTES_SHOWN:
            shown = shown[: NOTES_SHOWN - 1] + [f"... {len(shown) - NOTES_SHOWN + 1} more notes (--json)"]
        lines += [f"  {r.stage} {r.dataset}: {text}" for text in shown]
    lines += [f"  {n}" for n in est.notes]
    lines.append("  wall: each stage's jobs longest first on the GPUs, the stages one after another")
    if some_done:
        unchecked = est.not_checked()
        lines.append(
            "  left: a job whose outputs all exist is done (as make status counts it), any other counts whole "
            "(make status counts a running job's parts)"
            + (f"; not checked, all left: {', '.join(unchecked)}" if unchecked else "")
        )
    unknown = est.disk_missing()
    lines.append(f"  disk: {_size(est.disk)} in all" + (f" (not estimated: {', '.join(unknown)})" if unknown else ""))
    lines += ["", total_line(est)]
    return "\n".join(lines)


JSON_KEYS = (
    "dataset",
    "stage",
    "jobs",
    "work",
    "unit",
    "gpus",
    "gpu_hours",
    "cost",
    "wall_s",
    "disk",
    "disk_source",
    "notes",
)


def as_json(est: Estimate) -> dict:
    """The estimate as `--json` prints it. A figure not estimated is null, as in a row: the
    totals (`gpu_hours`, `cost`, `wall_s` and left's) where no GPU stage has an estimate,
    the wall times where every job runs on the CPU; where the totals leave out a GPU stage
    without an estimate (`not_estimated`) they are a lower bound, `at_least` true, as the
    total line's "at least" (left's `at_least` likewise, for a stage with a job left)."""
    known = est.estimated()
    on_gpu = known and any(r.gpus for r in est.rows)  # else the total line says "wall time not estimated"

    def figure(value: float) -> float | None:
        return value if known else None

    def row(r: Row) -> dict:
        out = {k: getattr(r, k) for k in JSON_KEYS}
        out["rate"] = None if r.rate is None else {**r.rate.__dict__}
        out["job_seconds"] = None if r.seconds is None else sum(r.seconds)
        out["jobs_done"] = r.jobs_done  # None: outputs not checked
        out |= {"left_gpu_hours": r.left_gpu_hours, "left_cost": r.left_cost, "left_wall_s": r.left_wall_s}
        return out

    return {
        "format": "shardflow.estimate/1",
        "gpus": est.n_gpus,
        "gpus_source": est.gpus_source,
        "gpu_hour_price": est.price,
        "currency": est.currency,
        "records": {name: c.__dict__ for name, c in est.records.items()},
        "rows": [row(r) for r in est.rows],
        "gpu_hours": figure(est.gpu_hours),
        "cost": figure(est.cost),
        "wall_s": est.wall_s if on_gpu else None,
        "at_least": known and bool(est.missing()),
        "wall_not_counted": est.no_wall(),
        "disk": est.disk,
        "disk_not_estimated": est.disk_missing(),
        "left": {
            "jobs_done": est.jobs_done()[0],
            "jobs": est.jobs_done()[1],
            "gpu_hours": figure(est.left_gpu_hours),
            "cost": figure(est.left_cost),
            "wall_s": est.left_wall_s if on_gpu else None,
            "at_least": known and est.left_partial(),
            "not_checked": est.not_checked(),
        },
        "not_estimated": est.missing(),
        "assumed": est.assumed(),
        "notes": est.notes,
        "total": total_line(est),
    }
