"""A job's disk on EKS (profiles/eks default-resources, shardflow.workflow.disk), evaluated
as Snakemake 9 evaluates it for a job: the profile's default, then the rule's own
`resources:`, then `--set-resources`, each a snakemake Resource evaluated with the job's
inputs (sparse files here: their sizes without their bytes)."""

from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from snakemake.common import async_run
from snakemake.io import IOFile
from snakemake.iocontainers import InputFiles, Wildcards
from snakemake.resources import Resources

from shardflow.core import s3
from shardflow.workflow import disk
from tests.helpers import REPO

GB = 10**9
# What _IOFile.size() looks for when it caches (rules hold their workflow's IO cache).
_RULE = SimpleNamespace(workflow=SimpleNamespace(iocache=SimpleNamespace(active=False)))


def eks_default_resources() -> list[str]:
    """profiles/eks default-resources as Snakemake gets a profile's mapping: NAME=VALUE."""
    text = (REPO / "profiles" / "eks" / "config.yaml").read_text()
    return [f"{name}={value}" for name, value in yaml.safe_load(text)["default-resources"].items()]


def inputs(tmp_path, **sizes) -> InputFiles:
    """The job's inputs: one sparse file per name (dots for "__"), of the given bytes."""
    files = []
    for name, size in sizes.items():
        path = tmp_path / name.replace("__", ".")
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as fh:
            fh.truncate(size)
        f = IOFile(str(path))
        f.rule = _RULE
        files.append(f)
    return InputFiles(toclone=files)


def disk_mb(input, rule=None, set_resources=None, defaults=None, wildcards=None):
    """disk_mb of one job, as Snakemake 9.27 sets a rule's resources (workflow.py: the
    parsed default-resources, updated by the rule's `resources:`, then by set-resources)
    and evaluates them (Rule.expand_resources: wildcards, input, attempt, threads...)."""
    resources = Resources.parse(defaults or eks_default_resources(), allow_expressions=True, defaults="full")
    resources.update(Resources.from_mapping(rule or {}))
    resources.update(Resources.from_mapping(set_resources or {}))
    found = resources["disk_mb"].evaluate(
        wildcards or Wildcards(), input=input, attempt=1, threads=1, rulename="r", async_run=async_run
    )
    return found.value


def profile_disk(defaults=None):
    """The profile's disk_mb as the rules' job_disk_mb gets it (rules/common.smk)."""
    return Resources.parse(defaults or eks_default_resources(), allow_expressions=True, defaults="full").get("disk_mb")


def test_the_eks_profile_gives_a_job_twice_its_inputs_and_at_least_10000_mb(tmp_path):
    """The pod's workdir holds the job's inputs and its outputs: a merge of 40 GB of
    chunk vectors writes 40 GB more, and a pod of 10,000 MB was evicted. Sized as
    Snakemake's own default sizes a job (twice its inputs), in the plugin's unit (10**6
    bytes: "<n>M"), plus room for the pod's own files, never below today's 10,000."""
    merge = inputs(tmp_path, **{f"embed_{i}__npy": 10 * GB for i in range(4)}, ids__parquet=GB // 2)
    assert disk_mb(merge) == 2 * 40_500 + disk.HEADROOM_MB == 82_000
    assert disk_mb(inputs(tmp_path, small__json=1000)) == 10_000
    assert disk_mb(inputs(tmp_path)) == 10_000  # no input (the demo corpus's rule)
    # Between: the inputs decide (Snakemake rounds to whole MB).
    assert disk_mb(inputs(tmp_path, chunk__npy=5_500_000_000)) == 12_000


def test_a_missing_input_leaves_the_disk_to_be_determined(tmp_path):
    """In a dry run, before the jobs that write them, the inputs have no size: Snakemake
    shows <TBD>, and evaluates again when it schedules the job, its inputs in place (in
    S3: their sizes come from the bucket)."""
    gone = inputs(tmp_path, chunk__jsonl=10)
    (tmp_path / "chunk.jsonl").unlink()
    assert disk_mb(gone) == "<TBD>"
    rule = {"disk_mb": disk.job_disk_mb(disk.split_need(lambda wildcards: {}), profile_disk())}
    assert disk_mb(gone, rule) == "<TBD>"


def reader(**values):
    return lambda wildcards: {"format": "auto", **values}


def test_a_split_holds_its_corpus_and_its_chunks_uncompressed(tmp_path):
    """A split's chunks are its corpus's records uncompressed, as JSON lines: 50 GB of
    gzip is about 160-200 GB of text (gzip -6: 3.2x-4.1x on prose), so the pod is sized
    for the corpus plus 8x its bytes; plain JSON lines for 1.25x (ids as strings),
    CSV and text lines for 2x (the JSON keys, quoting, position ids)."""
    rule = {"disk_mb": disk.job_disk_mb(disk.split_need(reader()), profile_disk())}
    gz = inputs(tmp_path, corpus__jsonl__gz=50 * GB)
    assert disk_mb(gz, rule) == 50_000 + 8 * 50_000 + disk.HEADROOM_MB
    plain = inputs(tmp_path, a__jsonl=40 * GB, b__csv=10 * GB)
    assert disk_mb(plain, rule) == 40_000 * 2.25 + 10_000 * 3 + disk.HEADROOM_MB
    parquet = inputs(tmp_path, part__parquet=10 * GB)
    assert disk_mb(parquet, rule) == 10_000 * 9 + disk.HEADROOM_MB
    # input.format names the format where the name does not; gzip is by name.
    named = {"disk_mb": disk.job_disk_mb(disk.split_need(reader(format="text")), profile_disk())}
    assert disk_mb(inputs(tmp_path, corpus__dat=10 * GB), named) == 10_000 * 3 + disk.HEADROOM_MB
    assert disk_mb(inputs(tmp_path, corpus__dat__gz=10 * GB), named) == 10_000 * 9 + disk.HEADROOM_MB
    # A small corpus: the profile's floor.
    assert disk_mb(inputs(tmp_path, tiny__jsonl__gz=10**6), rule) == 10_000


def test_the_rules_never_ask_less_than_the_profile_and_set_resources_wins(tmp_path):
    """A rule's own disk_mb replaces the profile's default (Snakemake 9), so it takes
    the larger of the two: a profile that gives every job 20,000 MB still does. A
    `--set-resources <rule>:disk_mb=N` (or the profile's set-resources) replaces the
    rule's, in both directions."""
    mine = ["disk_mb=max(2 * input.size / 1e6, 20000)"]
    rule = {"disk_mb": disk.job_disk_mb(disk.split_need(reader()), profile_disk(mine))}
    assert disk_mb(inputs(tmp_path, tiny__jsonl=10**6), rule, defaults=mine) == 20_000
    gz = inputs(tmp_path, corpus__jsonl__gz=50 * GB)
    assert disk_mb(gz, rule, {"disk_mb": 200_000}) == 200_000
    assert disk_mb(gz, rule, {"disk_mb": 300_000}) == 300_000
    assert disk_mb(inputs(tmp_path, merged__npy=40 * GB), set_resources={"disk_mb": 50_000}) == 50_000


class Stored:
    """The split's manifests as the workflow names them, read through `read`."""

    def __init__(self, files):
        self.files, self.reads = dict(files), []

    def read(self, path):
        self.reads.append(path)
        return self.files.get(path)


def manifest(*chunks):
    return {"chunks": [{"path": p, "bytes": n, "items": items} for p, n, items in chunks]}


def embed_rule(stored, dims=None, output_dtype="float32", warnings=None):
    need = disk.embed_need(
        disk.ChunkCounts(stored.read),
        lambda wildcards: {"model": "m", "output_dtype": output_dtype},
        lambda model: dims,
        (warnings if warnings is not None else []).append,
    )
    return {"disk_mb": disk.job_disk_mb(need, profile_disk())}


def test_an_embed_job_holds_its_chunk_and_its_vectors(tmp_path, monkeypatch):
    """An embed job writes records x dim x dtype bytes of vectors beside its chunk: 4
    million records of a 2 GB chunk at 1024 dims in float32 are 16.4 GB, a pod of
    10,000 MB evicted at the end of hours of GPU time. The records are the split
    manifest's count for that chunk; the chunk is counted twice (its ids are in it)."""
    chunk, small = "results/news/chunks/chunk_3.jsonl", "results/news/chunks/chunk_4.jsonl"
    counted = manifest((chunk, 2 * GB, 4_000_000), (small, GB // 10, 200_000))
    stored = Stored({"results/news/chunks/manifest.json": counted})
    monkeypatch.chdir(tmp_path)  # the job's input as the workflow names it
    job = inputs(Path(), **{"results/news/chunks/chunk_3__jsonl": 2 * GB})
    assert disk_mb(job, embed_rule(stored, dims=1024)) == 4_000 + 16_384 + disk.HEADROOM_MB
    assert disk_mb(job, embed_rule(stored, dims=1024, output_dtype="float16")) == 4_000 + 8_192 + disk.HEADROOM_MB
    assert disk_mb(job, embed_rule(stored, dims=384)) == 4_000 + 6_144 + disk.HEADROOM_MB
    small_job = inputs(Path(), **{"results/news/chunks/chunk_4__jsonl": GB // 10})
    assert disk_mb(small_job, embed_rule(stored, dims=1024)) == 10_000  # 200 + 820 + 1,000: the floor
    # The model's width not known here (its folder only in the pods' image): 4096 dims.
    warnings = []
    assert disk_mb(job, embed_rule(stored, warnings=warnings)) == 4_000 + 65_536 + disk.HEADROOM_MB
    assert "sized at 4096 dims" in warnings[0] and "'m'" in warnings[0]


def test_an_embed_job_counts_only_a_manifest_of_its_very_chunk():
    """A manifest counts a chunk where its entry names it with the chunk's bytes: one
    from an earlier split (a chunk since written again) is read again, and where none
    counts it (chunking.by: source, before the collector wrote the manifest) the part
    manifest its split_source job wrote with it does; with neither, the profile's size
    stands, and a warning says so."""
    chunk = "results/news/chunks/chunk_3.jsonl"
    counts = disk.ChunkCounts(
        Stored(
            {
                "results/news/chunks/manifest.json": manifest(
                    (chunk, 100, 7), ("results/news/chunks/chunk_4.jsonl", 5, 1)
                )
            }
        ).read
    )
    assert counts.records(chunk, 100) == 7
    assert counts.records(chunk, 101) is None  # not the file the manifest counted
    part = "results/news/chunks/sources/chunk_3.json"
    stored = Stored({part: manifest((chunk, 100, 9))})
    counts = disk.ChunkCounts(stored.read)
    assert counts.records(chunk, 100) == 9
    assert counts.records(chunk, 100) == 9
    assert stored.reads == ["results/news/chunks/manifest.json", part, "results/news/chunks/manifest.json"]
    # Kept once it counts: read again only where it no longer counts the chunk.
    stored.files[part] = manifest((chunk, 200, 18))
    assert counts.records(chunk, 200) == 18

    warnings = []
    need = disk.embed_need(
        disk.ChunkCounts(Stored({}).read),
        lambda wildcards: {"model": "m", "output_dtype": "float32"},
        lambda model: 384,
        warnings.append,
    )
    assert need(Wildcards(), [(chunk, 100 * GB)]) == 0
    assert "nothing counts the records of chunk_3.jsonl (results/news/chunks/manifest.json or " in warnings[0]
    assert "--set-resources <rule>:disk_mb=<MB>" in warnings[0]


def test_a_queries_file_is_counted_by_its_lines_and_an_uncounted_one_says_so_not_a_manifest():
    """embed_queries' and embed_search_queries' input has no manifest: its records are
    counted in the file (QueryCounts), and where they cannot be the warning names that,
    not a split's manifest the job never had."""
    queries = "results/demo/search/queries.jsonl"
    counted = disk.QueryCounts(lambda path, n_bytes: 1000 if (path, n_bytes) == (queries, 200_000) else None)
    warnings = []
    need = disk.embed_need(counted, lambda wildcards: {"model": "m", "output_dtype": "float32"}, lambda model: 1024,
                           warnings.append)
    assert need(Wildcards(), [(queries, 200_000)]) == disk.embed_need_mb(200_000, 1000, 1024, 4) and not warnings
    assert need(Wildcards(), [(queries, 300_000)]) == 0
    assert warnings == [
        "disk_mb of the embed jobs of results/demo/search: nothing counts the records of queries.jsonl (its lines, "
        "streamed from the default storage where it holds the bytes the job gets), so its vectors are not counted; "
        "raise it with "
        "--set-resources <rule>:disk_mb=<MB> where they need more"
    ]


def test_a_chunk_in_storage_is_counted_by_the_path_the_workflow_names_it(monkeypatch):
    """On EKS a job sees its chunk as Snakemake storage's local copy; the manifest names
    it as the workflow does (core.s3.logical_path), under the storage prefix."""
    monkeypatch.setenv(s3.PREFIX_VARIABLE, "s3://bkt/runs/a")
    monkeypatch.setenv(s3.LOCAL_VARIABLE, ".snakemake/storage")
    chunk = "results/news/chunks/chunk_0.jsonl"
    stored = Stored({"results/news/chunks/manifest.json": manifest((chunk, 10 * GB, 20_000_000))})
    need = disk.embed_need(
        disk.ChunkCounts(stored.read), lambda w: {"model": "m", "output_dtype": "float32"}, lambda m: 384, print
    )
    local = f".snakemake/storage/s3/bkt/runs/a/{chunk}"
    assert need(Wildcards(), [(local, 10 * GB)]) == 20_000 + 30_720 + disk.HEADROOM_MB


@pytest.mark.parametrize(("model", "dim"), [("default", 384), ("/no/such/model", None)])
def test_the_width_comes_from_the_models_config_where_this_machine_has_it(model, dim):
    assert disk.model_dim(model) == dim


def test_a_manifest_that_cannot_be_read_leaves_the_profiles_size_and_says_why():
    """Snakemake evaluates disk_mb when it schedules the job, and an error there ends the
    whole run (--keep-going or not: an InputFunctionException, before any job fails), and
    in the pod, whose Snakemake evaluates it again, fails the job. So a manifest the bucket
    does not give (a connection error past the client's retries, access denied, a file
    that is no JSON) leaves the profile's size, with a warning naming the error."""

    def unreadable(path):
        raise ConnectionError(f"Could not connect to the endpoint URL for {path}")

    warnings = []
    need = disk.embed_need(
        disk.ChunkCounts(unreadable),
        lambda wildcards: {"model": "m", "output_dtype": "float32"},
        lambda model: 384,
        warnings.append,
    )
    assert need(Wildcards(), [("results/news/chunks/chunk_3.jsonl", 100 * GB)]) == 0
    assert "could not read the records of chunk_3.jsonl" in warnings[0]
    assert "ConnectionError: Could not connect" in warnings[0] and "--set-resources" in warnings[0]
