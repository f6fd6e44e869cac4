"""The disk a job holds, where each job has a disk of its own: on EKS every job runs in
a pod whose working directory (an emptyDir) holds its inputs, fetched from S3, and its
outputs until they are uploaded. The Kubernetes plugin (0.5.1) makes the job's `disk_mb`
the pod's ephemeral-storage request and, with the eks profile's `scale: 0`, its limit:
a pod whose files outgrow it is evicted, which fails the job.

The eks profile sizes every job from its inputs (`default-resources: disk_mb`: twice
their bytes plus HEADROOM_MB, at least 10,000 MB), which holds the inputs and outputs no
larger than them (a merge: the chunks' vectors and the merged file). Two kinds of job
write more than they read, and their rules add the rest here (`job_disk_mb`), never
asking less than the profile gives the job:

- a split holds its corpus and its chunks, which are the corpus's records uncompressed
  and written again as JSON lines (`split_need_mb`);
- an embed job holds its chunk, its ids and its vectors, records x width x dtype bytes,
  the records counted in the split's manifest (`embed_need_mb`, `ChunkCounts`).

Sizes are in Snakemake's disk_mb unit, which the plugin requests as "<n>M": 10**6 bytes
(Snakemake's own `input.size_mb` counts 2**20, 5 % less than it asks for).
"""

from __future__ import annotations

import math
import posixpath
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from shardflow.core.files import GZIP_SUFFIXES
from shardflow.core.s3 import logical_path
from shardflow.corpus.readers import ReaderOptions, detect_format

MB = 10**6
# Room for what a pod holds besides the job's inputs and outputs: the workflow sources,
# the storage plugin it installs, Snakemake's metadata, logs and temporary files.
HEADROOM_MB = 1000
# Chunk bytes per source byte, by what the source is. Not a bound (a gzip stream can
# expand about 1000-fold): an allowance. gzip -6 measured 3.2x on English prose as
# plain text and 3.5x-4.1x as JSON lines with a url field; 8 is twice that, and also
# covers Parquet (snappy or zstd columns). Plain JSON lines are written again with the id
# and text alone (a string id, compact separators); CSV, TSV and text lines gain the
# JSON keys and quoting, and text lines an id naming their file and line.
COMPRESSED_EXPANSION = 8
EXPANSION = {"jsonl": 1.25, "csv": 2.0, "tsv": 2.0, "text": 2.0, "parquet": COMPRESSED_EXPANSION}
# GZIP_SUFFIXES (core.files): names the split reads as gzip. It also reads gzip under any
# name, by its magic bytes, which are not looked at here: such a file is sized as the
# format its name says.
# Vector width assumed where the model's own is not known here (the eks profile's
# controller, whose models live in the pods' image): the widest common embedding models
# (4096 dims, e.g. Mistral-based encoders).
FALLBACK_DIM = 4096


def to_mb(n_bytes: float) -> int:
    return math.ceil(n_bytes / MB)


def expansion(path: str, fmt: str) -> float:
    """Chunk bytes per byte of a source in format `fmt` (readers.detect_format)."""
    if path.lower().endswith(GZIP_SUFFIXES):
        return COMPRESSED_EXPANSION
    return EXPANSION[fmt]


def split_need_mb(sources: Sequence[tuple[str, int, str]]) -> int:
    """A split job's disk, from its sources as (path, bytes, format): the sources, the
    chunks they become (`expansion`; rejects set aside are records not in a chunk),
    and HEADROOM_MB."""
    held = sum(n + n * expansion(path, fmt) for path, n, fmt in sources)
    return to_mb(held) + HEADROOM_MB


def split_need(reader_of: Callable[[Any], Mapping[str, Any]]):
    """`need` of a split rule for job_disk_mb; `reader_of(wildcards)`: the data set's
    reader settings (plan.DataSet.reader), which name the sources' format."""

    def need(wildcards, sizes: list[tuple[str, int]]) -> int:
        opts = ReaderOptions(**reader_of(wildcards))
        return split_need_mb([(path, n, _format(path, opts)) for path, n in sizes])

    return need


def _format(path: str, opts: ReaderOptions) -> str:
    try:
        return detect_format(path, opts)
    except ValueError:  # no format in the name: the split job itself stops, naming the file
        return "text"


def embed_need_mb(chunk_bytes: int, records: int, dim: int, width: int) -> int:
    """An embed job's disk: its chunk, its ids (no more than the chunk, whose lines hold
    them), its vectors (records x dim x width bytes) and HEADROOM_MB."""
    return to_mb(2 * chunk_bytes + records * dim * width) + HEADROOM_MB


def manifests_of(chunk: str) -> list[str]:
    """Where the split recorded a chunk's records, as the workflow names the files
    (`results/<dataset>/chunks/chunk_<i>.jsonl`): the data set's manifest, and the part
    manifest a `chunking.by: source` split writes with the chunk (before the collector
    writes the manifest)."""
    folder, name = posixpath.split(chunk)
    stem = name.removesuffix(".jsonl")
    return [f"{folder}/manifest.json", f"{folder}/sources/{stem}.json"]


def records_in(manifest: Mapping[str, Any] | None, chunk: str, chunk_bytes: int) -> int | None:
    """The records of `chunk` that `manifest` counts, where it counts that very file:
    its entry names the chunk and its bytes are the chunk's (a manifest of an earlier
    split, or of a chunk since written again, is no count); None otherwise."""
    for entry in (manifest or {}).get("chunks", ()):
        if entry.get("path") == chunk and entry.get("bytes") == chunk_bytes:
            return int(entry["items"])
    return None


class ChunkCounts:
    """Records per chunk from the split's manifests, read through `read` (a path as the
    workflow names it -> the parsed JSON, or None where there is no such file). A
    manifest is kept once it counts a chunk, and read again where it does not count the
    one asked for (a split that ran since)."""

    def __init__(self, read: Callable[[str], Mapping[str, Any] | None]):
        self._read = read
        self._held: dict[str, Mapping[str, Any]] = {}

    def records(self, chunk: str, chunk_bytes: int) -> int | None:
        for path in manifests_of(chunk):
            found = records_in(self._held.get(path), chunk, chunk_bytes)
            if found is None:
                manifest = self._read(path)
                found = records_in(manifest, chunk, chunk_bytes)
                if found is not None:
                    self._held[path] = manifest
            if found is not None:
                return found
        return None

    def source(self, chunk: str) -> str:
        """Where a chunk's records are counted, as a warning names it."""
        return " or ".join(manifests_of(chunk))


class QueryCounts:
    """Records of a queries file (a record a line: embed_queries', embed_search_queries'),
    which no manifest counts, counted by `count(path, bytes)` (None: not counted)."""

    def __init__(self, count: Callable[[str, int], int | None]):
        self.records = count

    def source(self, path: str) -> str:
        return "its lines, streamed from the default storage where it holds the bytes the job gets"


def model_dim(model: str) -> int | None:
    """The width of an embedding model's vectors, from its config.json where this
    machine has the model (estimate.embed_dim); None where it does not."""
    from shardflow.workflow.estimate import embed_dim

    return embed_dim({"embedding": {"model": model}}, None)[0]


def embed_need(
    counts: ChunkCounts | QueryCounts,
    embedding_of: Callable[[Any], Mapping[str, Any]],
    dim_of: Callable[[str], int | None],
    warn: Callable[[str], None],
):
    """`need` of an embed rule (its one input a chunk) for job_disk_mb:
    `embedding_of(wildcards)`: the job's `embedding` section (model, output_dtype);
    `dim_of(model)`: its width or None (FALLBACK_DIM is taken, and `warn` says so);
    a chunk whose records no manifest counts, or whose manifest cannot be read, needs
    what the profile gives (0 here), and `warn` says so."""
    from shardflow.workflow.estimate import DTYPE_BYTES

    def need(wildcards, sizes: list[tuple[str, int]]) -> int:
        path, chunk_bytes = sizes[0]
        chunk = logical_path(path)
        try:
            records = counts.records(chunk, chunk_bytes)
        except Exception as exc:  # noqa: BLE001 - any failure to count is only a smaller size
            # An error in a resource function ends the whole run where Snakemake schedules
            # the job (keep-going or not), and fails the job in the pod, which evaluates it
            # again: a manifest the bucket does not give leaves the profile's size.
            warn(
                f"disk_mb of the embed jobs of {posixpath.dirname(chunk)}: could not read the records of "
                f"{posixpath.basename(chunk)} ({counts.source(chunk)}: {type(exc).__name__}: {exc}), "
                "so its vectors are not counted; raise it with --set-resources <rule>:disk_mb=<MB> where they "
                "need more"
            )
            return 0
        if records is None:
            warn(
                f"disk_mb of the embed jobs of {posixpath.dirname(chunk)}: nothing counts the records of "
                f"{posixpath.basename(chunk)} ({counts.source(chunk)}), so its vectors are not "
                "counted; raise it with --set-resources <rule>:disk_mb=<MB> where they need more"
            )
            return 0
        embedding = embedding_of(wildcards)
        dim = dim_of(embedding["model"])
        if dim is None:
            warn(
                f"disk_mb of the embed jobs: the width of model {embedding['model']!r} is not known on this "
                f"machine, so their vectors are sized at {FALLBACK_DIM} dims; --set-resources "
                "<rule>:disk_mb=<MB> sets it"
            )
            dim = FALLBACK_DIM
        return embed_need_mb(chunk_bytes, records, dim, DTYPE_BYTES[embedding["output_dtype"]])

    return need


def job_disk_mb(need: Callable[[Any, list[tuple[str, int]]], int], default: Any = None):
    """A Snakemake resource function for `disk_mb`: the larger of `need(wildcards,
    [(input path, bytes), ...])` and what `default` (the profile's default-resources
    disk_mb, a snakemake Resource, or None) gives the job. Evaluated by Snakemake per job
    when it is scheduled, its inputs then in place (in storage: their sizes come from
    the bucket); while an input is missing (a dry run) the sizes raise and Snakemake
    shows the resource as <TBD>, as its own default does. A `--set-resources` value
    replaces it."""

    def disk_mb(wildcards, input, attempt, threads, rulename, async_run):
        floor = 0
        if default is not None:
            given = default.evaluate(
                wildcards, input=input, attempt=attempt, threads=threads, rulename=rulename, async_run=async_run
            ).value
            if isinstance(given, str):  # <TBD>: an input is not there yet
                return given
            floor = given or 0
        sizes = list(zip(map(str, input), input.size_files, strict=True))
        return max(floor, need(wildcards, sizes))

    return disk_mb
