"""start_gpu_job: the start every GPU script shares (CPU switch, N-device pinning, log)."""

import os
import types

import pytest

from shardflow.core import gpu_slots
from shardflow.core.gpujob import start_gpu_job


def fake_smk(tmp_path, gpu, pinning="slots", devices="0,1,2", threads=3):
    return types.SimpleNamespace(
        params=types.SimpleNamespace(gpu_jobs={"device": "auto", "pinning": pinning, "devices": devices}),
        resources={"gpu": gpu},
        log=[str(tmp_path / "job.log")],
        input=[str(tmp_path / "chunk_0.jsonl")],
        threads=threads,
    )


@pytest.fixture
def clean_pin(monkeypatch, tmp_path):
    monkeypatch.setattr(gpu_slots, "_pinned", None)
    monkeypatch.setenv("SHARDFLOW_GPU_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    for var in ("SLURM_JOB_ID", "KUBERNETES_SERVICE_HOST"):
        monkeypatch.delenv(var, raising=False)
    yield
    os.environ.pop("CUDA_VISIBLE_DEVICES", None)


def test_a_job_scheduled_without_a_gpu_runs_on_the_cpu_and_takes_no_slot(tmp_path, clean_pin):
    job = start_gpu_job(fake_smk(tmp_path, gpu=0), "embed", {"x": 1})
    assert (job.device, job.gpus, job.threads) == ("cpu", 0, 3)
    assert not (tmp_path / "locks").exists()
    log = (tmp_path / "job.log").read_text()
    assert "gpu_pinning=off" in log
    # device auto: one warning in the job's log (the engine sees "cpu" from here on)
    assert log.count(" WARNING ") == 1 and "on the CPU, slow for large corpora" in log
    chosen = fake_smk(tmp_path, gpu=0)
    chosen.params.gpu_jobs["device"] = "cpu"
    chosen.log = [str(tmp_path / "chosen.log")]
    start_gpu_job(chosen, "embed", {"x": 1})
    assert " WARNING " not in (tmp_path / "chosen.log").read_text()  # the CPU was asked for
    # The workflow gives a CPU job no gpu resource at all (rules/common.smk): the same.
    absent = fake_smk(tmp_path, gpu=0)
    absent.resources = {}
    absent.log = [str(tmp_path / "absent.log")]
    job = start_gpu_job(absent, "embed", {"x": 1})
    assert (job.device, job.gpus) == ("cpu", 0) and not (tmp_path / "locks").exists()


def test_a_job_with_n_gpus_pins_n_devices(tmp_path, clean_pin):
    with gpu_slots.acquire_gpu("0,1,2", mode="slots", lock_dir=tmp_path / "locks"):  # another job holds 0
        job = start_gpu_job(fake_smk(tmp_path, gpu=2), "train", {"x": 1})
        assert os.environ["CUDA_VISIBLE_DEVICES"] == "1,2"
    assert job.device == "auto" and job.visible_devices == "1,2"
    lines = (tmp_path / "job.log").read_text().splitlines()
    assert lines[0].split(" INFO ")[1].startswith("train: params=")
    assert any(" INFO train: CUDA_VISIBLE_DEVICES=1,2 (gpu_pinning=slots)" in line for line in lines)


def test_tokenizer_threads_follow_the_jobs_cpu_share_unless_set(tmp_path, clean_pin, monkeypatch):
    monkeypatch.setenv("RAYON_NUM_THREADS", "placeholder")  # so that monkeypatch restores the original
    monkeypatch.delenv("RAYON_NUM_THREADS")
    start_gpu_job(fake_smk(tmp_path, gpu=0, threads=5), "embed", {"x": 1})
    assert os.environ["RAYON_NUM_THREADS"] == "5"
    monkeypatch.setenv("RAYON_NUM_THREADS", "2")  # the user's own setting stands
    start_gpu_job(fake_smk(tmp_path, gpu=0, threads=5), "embed", {"x": 1})
    assert os.environ["RAYON_NUM_THREADS"] == "2"
