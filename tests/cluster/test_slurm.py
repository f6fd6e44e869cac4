"""The SLURM path: the tiny workflow through `--executor slurm` on a real one-node
cluster (.ci/slurm.sh: slurmctld + slurmd, 4 fake GPUs, no accounting), with the
site profile profiles/slurm and the CI overlay profiles/ci-slurm."""

import re
import subprocess

import pytest

pytestmark = pytest.mark.cluster


def slurm_profile_args(sm) -> list[str]:
    return [
        "--profile", str(sm.REPO / "profiles" / "slurm"),
        "--workflow-profile", str(sm.REPO / "profiles" / "ci-slurm"),
    ]


def scontrol_job(job_id: str) -> str:
    out = subprocess.run(["scontrol", "show", "job", job_id], capture_output=True, text=True, timeout=30, check=False)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_slurm_run_matches_local_run_and_schedules_one_gpu_per_embed_job(
    slurm_cluster, workflow_dir, local_hashes, sm
):
    run = sm.run(workflow_dir, *slurm_profile_args(sm), timeout_s=240)
    assert run.returncode == 0, sm.describe(run)
    # Both profiles were read, the overlay on top (its partition reached the jobs).
    assert "profiles/slurm and workflow specific profile" in run.output, sm.describe(run)
    assert "slurm_partition=ci" in run.output, sm.describe(run)

    assert {rel: sm.sha256((workflow_dir / rel).read_bytes()) for rel in sm.OUTPUTS} == local_hashes

    # Each embed job went through sbatch with --gpus=1: SLURM gave it one (fake) GPU,
    # ran it in the CI partition, and still lists it (MinJobAge=300).
    for chunk in "abc":
        log = (workflow_dir / "logs" / "embed" / f"{chunk}.log").read_text()
        cuda = re.search(r"'CUDA_VISIBLE_DEVICES': '(\d+)'", log)
        assert cuda and cuda.group(1) in {"0", "1", "2", "3"}, log
        assert f"'SLURM_JOB_PARTITION': '{slurm_cluster}'" in log, log
        job_id = re.search(r"'SLURM_JOB_ID': '(\d+)'", log).group(1)
        job = scontrol_job(job_id)
        assert re.search(r"TresPerJob=\S*gpu:1\b", job), job
        assert f"Partition={slurm_cluster}" in job, job
        assert "MinMemoryNode=200M" in job, job  # mem_mb from the rule
        assert "TimeLimit=00:05:00" in job, job  # runtime from the rule (minutes)


def test_failed_slurm_job_is_reported_and_the_run_ends(slurm_cluster, workflow_dir, sm):
    # One chunk fails (retries off to keep this short: with `retries: 2` a permanently
    # failing job makes 6 attempts, 3 sbatch submissions with in-job retries).
    # squeue must report FAILED, the other chunks finish (keep-going from profiles/slurm),
    # and the run ends with an error instead of waiting forever on a lost job.
    run = sm.run(
        workflow_dir, *slurm_profile_args(sm), "--config", "fail_chunk=b", "embed_retries=0", timeout_s=180
    )
    assert not run.timed_out, sm.describe(run)
    assert run.returncode != 0, sm.describe(run)
    assert re.search(r"SLURM-job '\d+' failed, SLURM status is: 'FAILED'", run.output), sm.describe(run)
    assert "configured to fail (fail_chunk)" in run.output, sm.describe(run)  # show-failed-logs
    assert (workflow_dir / "embeddings" / "a.json").exists()
    assert (workflow_dir / "embeddings" / "c.json").exists()
    assert not (workflow_dir / "embeddings" / "b.json").exists()
    assert not (workflow_dir / "merged" / "summary.json").exists()
