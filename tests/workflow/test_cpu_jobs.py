"""`resources.embed.threads: auto` on a host without GPUs: the embed jobs share the cores and
run side by side instead of queueing behind the local profile's single `gpu` slot."""

import re
from datetime import datetime

import pytest

from tests.helpers import REPO, offline_env, snakemake, write_config

pytestmark = pytest.mark.workflow


def _embed_jobs(dry_run_output: str) -> list[str]:
    """The text of each `rule embed:` block of a dry run."""
    return [block for block in re.split(r"\n(?=rule |localrule )", dry_run_output) if block.startswith("rule embed:")]


def _threads(block: str) -> int:
    m = re.search(r"^\s+threads: (\d+)$", block, re.MULTILINE)
    return int(m.group(1)) if m else 1  # Snakemake prints no threads line for 1


@pytest.mark.dryrun
@pytest.mark.parametrize(("device", "gpu"), [("cpu", None), ("auto", 1)])
def test_a_dry_run_shows_the_cluster_view_and_never_a_gpu_for_a_cpu_job(tmp_path, device, gpu):
    # A dry run shows what a cluster executor gets: 2 threads; one GPU unless device:
    # cpu, and then no gpu resource at all (a gpu of 0 still gets an EKS pod the GPU
    # toleration: rules/common.smk, job_resources).
    cfg = write_config(tmp_path / "c.yaml", n_chunks=4, gpu_jobs={"device": device})
    jobs = _embed_jobs(snakemake(tmp_path, "-n", "--cores", "8", "--configfile", str(cfg)).stdout)
    assert len(jobs) == 4
    for block in jobs:
        assert _threads(block) == 2, block
        resources = re.search(r"resources: (.*)", block).group(1)
        if gpu is None:
            assert not re.search(r"\bgpu=", resources), block
        else:
            assert re.search(rf"\bgpu={gpu}\b", resources), block


@pytest.mark.dryrun
def test_an_integer_is_used_as_given(tmp_path):
    cfg = write_config(tmp_path / "c.yaml", n_chunks=4, resources={"embed": {"threads": 3}})
    out = snakemake(tmp_path, "-n", "--cores", "8", "--configfile", str(cfg)).stdout
    assert [_threads(b) for b in _embed_jobs(out)] == [3] * 4


def _job_span(log_text: str) -> tuple[datetime, datetime]:
    stamps = [datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f") for line in log_text.splitlines() if line[:4].isdigit()]
    return stamps[0], stamps[-1]


def test_local_profile_on_a_cpu_host_runs_embed_jobs_side_by_side(tmp_path, demo_texts):
    corpus, _ = demo_texts
    cfg = write_config(tmp_path / "c.yaml", dataset="cpu", n_chunks=2, input={"path": str(corpus)})
    # The local profile (cores: all, gpu=<GPUs or 1>) with 2 cores, on this GPU-less host.
    # CUDA_VISIBLE_DEVICES="": no GPU here, whatever the test host has.
    snakemake(
        tmp_path, "results/cpu/ids.parquet", "--profile", str(REPO / "profiles/local"), "--cores", "2",
        "--configfile", str(cfg), env=offline_env(CUDA_VISIBLE_DEVICES=""),
    )
    logs = [(tmp_path / f"logs/embed/cpu/chunk_{i}.log").read_text() for i in range(2)]
    for log in logs:
        assert re.search(r" device cpu .* threads 1 ", log), log[:2000]
        assert "gpu_pinning=off" in log, log[:2000]  # a CPU job takes no GPU slot
    (a0, a1), (b0, b1) = (_job_span(log) for log in logs)
    assert a0 < b1 and b0 < a1, f"embed jobs ran one after the other: {a0}-{a1}, {b0}-{b1}"
