"""start_gpu_job: the start every GPU script shares (CPU switch, N-device pinning, log)."""

import os
import types

import pytest

from shardflow.core import gpu_slots
from shardflow.core.gpujob import pin_job_gpus, start_gpu_job


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


def release_pinned():
    """Free the slots pin_gpu holds for the process, as its exit would."""
    for slot in gpu_slots._pinned or []:
        slot.release()
    gpu_slots._pinned = None


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


def test_a_cuda_index_the_pinned_job_cannot_see_stops_it_at_once_naming_the_setting(tmp_path, clean_pin):
    """A one-GPU job pinned to its own GPU sees it as cuda:0: `gpu_jobs.device: cuda:1`
    failed only in the model's load (core.devices: "only 1 CUDA devices exist"), again on
    each retry, with nothing saying that pinning is why. It now stops before any model
    loads, and start_gpu_job records no failure for it (the host's GPUs, not the input)."""
    smk = fake_smk(tmp_path, gpu=1, pinning="slots")
    smk.params.gpu_jobs["device"] = "cuda:1"
    with pytest.raises(ValueError) as info:
        start_gpu_job(smk, "embed", {"x": 1})
    message = str(info.value)
    assert message.startswith("gpu_jobs.device 'cuda:1': this job sees 1 GPU (CUDA_VISIBLE_DEVICES='0' after ")
    assert "gpu_jobs.pinning: slots" in message
    assert "Set gpu_jobs.device to cuda or auto and choose GPUs with gpu_jobs.devices" in message
    assert "cuda:N names a host device only with gpu_jobs.pinning: off" in message
    release_pinned()
    settings = {"device": "cuda:0", "pinning": "slots", "devices": "0,1,2"}
    assert pin_job_gpus(settings, 1, job="embed x") == ("cuda:0", "0")


def test_a_cuda_index_is_checked_against_an_exported_list_and_left_alone_without_one(clean_pin, monkeypatch):
    """pinning: off takes CUDA_VISIBLE_DEVICES as it is: an exported list is counted; none
    set leaves cuda:N unchecked (counting the host's GPUs would initialise CUDA)."""
    off = {"device": "cuda:7", "pinning": "off", "devices": None}
    assert pin_job_gpus(off, 1, job="embed x") == ("cuda:7", None)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert pin_job_gpus({**off, "device": "cuda:1"}, 1, job="embed x") == ("cuda:1", "2,3")
    with pytest.raises(
        ValueError, match=r"^gpu_jobs.device 'cuda:2': this job sees 2 GPUs \(CUDA_VISIBLE_DEVICES='2,3'"
    ):
        pin_job_gpus({**off, "device": "cuda:2"}, 1, job="embed x")
    assert pin_job_gpus({**off, "device": "cuda"}, 1, job="embed x") == ("cuda", "2,3")
    # Counted as CUDA reads the list: it ends at -1, so "2,-1,3" shows one GPU
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,-1,3")
    with pytest.raises(ValueError, match=r"^gpu_jobs.device 'cuda:1': this job sees 1 GPU \(CUDA_VISIBLE_DEVICES="):
        pin_job_gpus({**off, "device": "cuda:1"}, 1, job="embed x")


def test_a_multi_gpu_train_job_whose_ranks_take_their_local_rank_is_not_refused(clean_pin):
    """train.launch runs a job of N > 1 GPUs as N torchrun ranks, each given `--device
    cuda` and so on cuda:LOCAL_RANK (train.launch.trainer_args): the index of its cuda:N is
    never used, and such a job trains today. A one-process job of 2 GPUs (an embed job)
    does use it: cuda:1 is its second GPU, cuda:2 none."""
    settings = {"device": "cuda:5", "pinning": "slots", "devices": "0,1,2"}
    assert pin_job_gpus(settings, 2, job="train", per_rank=True) == ("cuda:5", "0,1")
    release_pinned()
    with pytest.raises(ValueError, match=r"^gpu_jobs.device 'cuda:2': this job sees 2 GPUs"):
        pin_job_gpus({**settings, "device": "cuda:2"}, 2, job="embed x")
