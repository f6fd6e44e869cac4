"""The SLURM path: `--executor slurm` on a real one-node cluster (.ci/slurm.sh:
slurmctld + slurmd, 4 fake GPUs, no accounting), with the site profile
profiles/slurm and the CI overlay profiles/ci-slurm. The real workflow for results
from an s3:// corpus (compared bit for bit with the local run, to the merged
embeddings), and a run with a chunk that fails and one that is cancelled."""

import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.cluster


# The controller: Snakemake with the plugin's status polls at most 2 s apart instead of
# 1, 11, 21 s ... (the jobs are short; see tests/support/slurm_polls.py).
CONTROLLER = [sys.executable, str(Path(__file__).resolve().parents[1] / "support" / "slurm_polls.py")]


def slurm_profile_args(sm) -> list[str]:
    return [
        "--profile", str(sm.REPO / "profiles" / "slurm"),
        "--workflow-profile", str(sm.REPO / "profiles" / "ci-slurm"),
    ]


def scontrol_job(job_id: str) -> str:
    out = subprocess.run(["scontrol", "show", "job", job_id], capture_output=True, text=True, timeout=30, check=False)
    assert out.returncode == 0, out.stderr
    return out.stdout


def squeue_state(job_id: str) -> str:
    out = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True, text=True, timeout=30,
                         check=False)
    return out.stdout.strip()


def processes_of_slurm_job(job_id: str) -> list[int]:
    """Pids of live processes started for SLURM job `job_id` (SLURM_JOB_ID in their environment)."""
    pids = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if f"SLURM_JOB_ID={job_id}".encode() in environ.read_bytes().split(b"\0"):
                pids.append(int(environ.parent.name))
        except (OSError, ValueError):
            continue
    return pids


def submitted_jobs(output: str) -> dict[str, str]:
    """{'embed/cluster_0': '61', 'merge/cluster': '63', ...} from the plugin's
    'Job N has been submitted with SLURM jobid J (log: .../slurm_logs/rule_R/W/J.log)'."""
    found = re.findall(r"submitted with SLURM jobid (\d+) \(log: \S*/slurm_logs/rule_(\w+)/(?:(\S+)/)?\d+\.log\)", output)
    return {f"{rule}/{wc}" if wc else rule: job_id for job_id, rule, wc in found}


def test_real_workflow_on_slurm_from_an_s3_corpus_matches_the_local_run_bit_for_bit(
    real_local_started, slurm_cluster, s3, s3_corpus, tmp_path, sm
):
    """The repo's Snakefile through sbatch: one SLURM job per Snakemake job, each embed
    job with one (fake) GPU, on the shared filesystem (here: the local disk). To the
    merged embeddings: verify is one more CPU job like merge (its start-up and status
    polls). The local reference run goes on beside it (real_local_started: the first
    test of the file, it would otherwise wait for the reference before submitting).

    The corpus is an s3:// object (the local run reads the same bytes from a file): the
    S3 settings come from the environment (here AWS_ENDPOINT_URL/AWS_ACCESS_KEY_ID/
    AWS_SECRET_ACCESS_KEY), which sbatch exports to the jobs. (Given as --storage-s3-*
    flags instead, they reach only the controller: plugin 2.8 puts no endpoint or key on
    the job's command line, and the split job fails with NoCredentialsError while sizing
    its input; see profiles/README.md.) A local corpus file on SLURM is the same split
    job without the storage step; the tests below start from the reference's chunks.
    The download is the controller's, before it submits the split job, as in a local
    run: this is also the one run of an s3:// corpus into local outputs (the S3 tests
    use S3 as the default storage, or dry-run)."""
    config = sm.real_config(tmp_path / "config.yaml", s3_corpus)
    run = sm.run(tmp_path, *sm.real_args(tmp_path, config, *sm.MERGED), *slurm_profile_args(sm), timeout_s=300,
                 env=sm.env(**s3.aws_env()), snakemake=CONTROLLER)
    assert run.returncode == 0, sm.describe(run)
    # Both profiles were read, the overlay on top (its partition reached the jobs).
    assert "profiles/slurm and workflow specific profile" in run.output, sm.describe(run)
    assert sm.hashes(tmp_path, sm.MERGED + sm.CHUNKS) == real_local_started().hashes

    ds = sm.DATASET
    jobs = submitted_jobs(run.output)
    embeds = {f"embed/{ds}_{i}" for i in range(sm.N_CHUNKS)}
    assert set(jobs) == {f"split_{ds}", f"merge/{ds}"} | embeds, sm.describe(run)
    for name in embeds:
        job = scontrol_job(jobs[name])
        assert re.search(r"TresPerJob=\S*gpu:1\b", job), job  # rule's gpu=1 -> --gpus=1
        assert f"Partition={slurm_cluster}" in job, job
        assert "MinMemoryNode=1000M" in job, job  # resources.embed.mem_mb, first attempt
        assert "TimeLimit=00:10:00" in job, job  # resources.embed.runtime (minutes)
        # SLURM pinned the GPU; the job respected that and ran one torch thread.
        chunk = name.rsplit("_", 1)[1]
        log = (tmp_path / f"logs/embed/{ds}/chunk_{chunk}.log").read_text()
        assert re.search(r"GPUs already pinned by slurm \(CUDA_VISIBLE_DEVICES=[0-3]\)", log), log
        assert " threads 1 " in log, log
    for name in (f"split_{ds}", f"merge/{ds}"):
        job = scontrol_job(jobs[name])
        assert not re.search(r"TresPerJob=\S*gpu", job), job
        assert "MinMemoryNode=500M" in job, job  # ci-slurm default-resources

    assert f"Retrieving from storage: {s3_corpus}" in run.output, sm.describe(run)
    # The split job read the copy Snakemake downloaded to the shared filesystem ...
    log = (tmp_path / f"logs/split/{ds}.log").read_text()
    assert f".snakemake/storage/s3/{s3.bucket}/{sm.CORPUS_KEY}" in log.splitlines()[0], log
    # ... which is removed afterwards.
    assert not (tmp_path / ".snakemake" / "storage" / "s3").exists()
    # The keys travel in the job's environment only, not in its script (which any user
    # of the cluster can read back with scontrol).
    script = subprocess.run(
        ["scontrol", "write", "batch_script", jobs[f"split_{ds}"], "-"],
        capture_output=True, text=True, timeout=30, check=True,
    ).stdout
    assert f"--target-jobs 'split_{ds}:'" in script, script
    assert s3.secret_key not in script and s3.access_key not in script
    assert s3.secret_key not in run.output
    # The object is older than the outputs made from it: nothing to rerun.
    dry = sm.run(tmp_path, *sm.real_args(tmp_path, config, *sm.MERGED), *slurm_profile_args(sm), "--dry-run",
                 env=sm.env(**s3.aws_env()))
    assert dry.returncode == 0 and "Nothing to be done" in dry.output, sm.describe(dry)


def test_a_failed_and_a_cancelled_embed_job_are_resubmitted_not_retried_in_place(
    slurm_cluster, corpus_file, real_local, tmp_path, sm
):
    """Two chunks' embeddings on SLURM, one job failing and one cancelled, in one run
    that starts from the reference run's split (copied with its times, so the split is
    up to date). `resources.embed.retries` is 1 here to keep it short.

    Chunk 0, made unreadable, fails:
    - squeue reports the job FAILED and the controller says so; the job's own log is
      printed (show-failed-logs);
    - the rule's retries resubmit the job, mem_mb growing per attempt, and the Snakemake
      inside each SLURM job does not retry in place (one_retry_layer), which would make
      it 2 x 2 attempts;
    - the resubmitted attempt stops at once on the first one's input error, before it
      loads the model (shardflow.core.failures).

    Chunk 1 is `scancel`led while running (its script has started), as an operator or a
    preemption without requeue would: the plugin sees it CANCELLED, reports it failed,
    and Snakemake submits it again (attempt 2, mem_mb + 500), which completes with the
    local run's bytes. The run then ends with an error for chunk 0 instead of waiting on
    a lost job.

    Retries: profiles/ci-slurm's `retries: 0` replaces profiles/slurm's `retries: 2` (a
    workflow profile overrides the global profile key by key), but it is only the default
    for rules without a `retries:` of their own: Snakemake uses a rule's value when set
    (Rule.restart_times), as embed does. So no `--retries` on the command line; it would
    change split, merge and verify only. (The Snakemake inside each SLURM job runs with
    `--retries 0`, which likewise leaves a rule's own `retries:` in force; the workflow
    turns those off inside SLURM jobs.) The resubmission of chunk 1 after chunk 0 has
    failed for good is profiles/slurm's `keep-going`."""
    import yaml

    ds = sm.DATASET
    chunks = f"results/{ds}/chunks"
    shutil.copytree(real_local.workdir / chunks, tmp_path / chunks, copy_function=shutil.copy2)
    (tmp_path / chunks / "chunk_0.jsonl").write_text("not json\n")  # newer than the split: no rerun
    config = sm.real_config(tmp_path / "config.yaml", str(corpus_file))
    cfg = yaml.safe_load(config.read_text())
    cfg["resources"]["embed"]["retries"] = 1
    config.write_text(yaml.safe_dump(cfg))
    good = [f"results/{ds}/embed/embed_1.npy", f"results/{ds}/embed/embed_1.ids.parquet"]
    cancelled_log = tmp_path / f"logs/embed/{ds}/chunk_1.log"

    run = sm.start(tmp_path, *sm.real_args(tmp_path, config, f"results/{ds}/embed/embed_0.npy", *good),
                   *slurm_profile_args(sm), timeout_s=420, snakemake=CONTROLLER)

    def running_embed_job():
        found = submitted_jobs(run.output).get(f"embed/{ds}_1")
        return found if found and cancelled_log.exists() and squeue_state(found) == "RUNNING" else None

    first = run.wait_until(running_embed_job, "a running embed job")
    subprocess.run(["scancel", first], check=True, capture_output=True, timeout=30)
    done = run.finish()
    # Now and then the job's own Snakemake (slurm-jobstep) deadlocks in its SIGTERM
    # handler and outlives the job: proctrack/linuxproc loses it once it is reparented,
    # so SLURM's SIGKILL misses it. Not the controller's concern; clean it up.
    survivors = processes_of_slurm_job(first)
    for pid in survivors:
        os.kill(pid, signal.SIGKILL)

    assert not done.timed_out and done.returncode != 0, sm.describe(done)
    assert not re.search(r"slurm_logs/rule_split", done.output)  # the split stood
    jobs = re.findall(r"submitted with SLURM jobid (\d+) \(log: (\S*/slurm_logs/rule_embed/(\S+)/\d+\.log)\)",
                      done.output)
    by_chunk = {c: [(job_id, log) for job_id, log, wildcards in jobs if wildcards == f"{ds}_{c}"] for c in (0, 1)}
    assert len(by_chunk[0]) == len(by_chunk[1]) == 2 and len(jobs) == 4, sm.describe(done)
    for c in (0, 1):
        memory = [re.search(r"MinMemoryNode=(\d+)M", scontrol_job(job_id)).group(1) for job_id, _ in by_chunk[c]]
        assert memory == ["1000", "1500"], (c, memory)  # resources.embed.mem_mb + 500 per attempt

    # Chunk 0: failed twice, each attempt once.
    assert re.search(r"SLURM-job '\d+' failed, SLURM status is: 'FAILED'", done.output), sm.describe(done)
    assert f"{chunks}/chunk_0.jsonl:1: not a shardflow chunk record" in done.output, sm.describe(done)  # its log
    texts = [(tmp_path / log).read_text() for _, log in by_chunk[0]]  # an absolute `log` replaces tmp_path
    for text in texts:
        assert "not a shardflow chunk record" in text, text[-3000:]
        assert "Trying to restart job" not in text, text[-3000:]
    # The resubmitted attempt finds the first one's record of its input error on the
    # shared filesystem and stops before pinning a GPU or loading the model
    # (shardflow.core.failures); the first attempt ran the job.
    assert "RepeatedFailureError" not in texts[0], texts[0][-3000:]
    assert "attempt 1 failed with ValueError" in texts[1], texts[1][-3000:]
    assert "attempt 2 would read the same inputs with the same params" in texts[1], texts[1][-3000:]
    assert not (tmp_path / f"results/{ds}/embed/embed_0.npy").exists()

    # Chunk 1: cancelled, resubmitted, completed with the local run's bytes.
    assert by_chunk[1][0][0] == first, sm.describe(done)
    assert f"SLURM-job '{first}' failed, SLURM status is: 'CANCELLED'" in done.output, sm.describe(done)
    assert "Trying to restart job" in done.output, sm.describe(done)
    states = [re.search(r"JobState=(\w+)", scontrol_job(j)).group(1) for j, _ in by_chunk[1]]
    assert states == ["CANCELLED", "COMPLETED"], states
    for rel in good:
        assert (tmp_path / rel).read_bytes() == (real_local.workdir / rel).read_bytes(), rel
    print(f"SLURM embed job {first} cancelled: resubmitted as {by_chunk[1][1][0]}; run took {done.seconds:.0f} s; "
          f"{len(survivors)} process(es) of the cancelled job outlived it (killed)")
