"""A job's disk on EKS (profiles/eks default-resources, shardflow.workflow.disk), evaluated
as Snakemake 9 evaluates it for a job: the profile's default, then the rule's own
`resources:`, then `--set-resources`, each a snakemake Resource evaluated with the job's
inputs (sparse files here: their sizes without their bytes)."""

from types import SimpleNamespace

import yaml
from snakemake.common import async_run
from snakemake.io import IOFile
from snakemake.iocontainers import InputFiles, Wildcards
from snakemake.resources import Resources

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


def test_the_eks_profile_gives_a_job_twice_its_inputs_and_at_least_10000_mb(tmp_path):
    """The pod's workdir holds the job's inputs and its outputs: a merge of 40 GB of
    chunk vectors writes 40 GB more, and a pod of 10,000 MB was evicted. Sized as
    Snakemake's own default sizes a job (twice its inputs), in the plugin's unit (10**6
    bytes: "<n>M"), plus room for the pod's own files, never below today's 10,000."""
    merge = inputs(tmp_path, **{f"embed_{i}__npy": 10 * GB for i in range(4)}, ids__parquet=GB // 2)
    assert disk_mb(merge) == 2 * 40_500 + 1000 == 82_000
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
