"""The start of every GPU rule's script: logging, no repeat of a deterministic failure,
the CPU switch, device pinning.

    job = start_gpu_job(snakemake, "embed", params)   # before importing torch
    ... EmbedParams(device=job.device, threads=job.threads, ...)

A job the workflow scheduled without a GPU (no `gpu` resource, or `gpu=0`: a CPU run,
`gpu_jobs.device: cpu` or a local host without GPUs) runs on the CPU and takes no GPU slot, whatever CUDA a
container shows. A job with `gpu=N` takes N devices through the lock-file slots
(`shardflow.core.gpu_slots`) on a local multi-GPU host, or keeps what SLURM or
Kubernetes gave it. The slots are taken before torch is imported: setting
CUDA_VISIBLE_DEVICES after CUDA initialises has no effect.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from shardflow.core.failures import guard_retries
from shardflow.core.gpu_slots import PRESET, cuda_visible, pin_gpu, scheduler_pinning
from shardflow.core.runlog import configure_logging, share_tokenizer_threads


@dataclass(frozen=True)
class GpuJob:
    device: str  # "cpu", or gpu_jobs.device (auto, cuda, cuda:N) for a job that got GPUs
    gpus: int  # GPUs the job was scheduled with
    visible_devices: str | None  # CUDA_VISIBLE_DEVICES after pinning
    threads: int
    log: logging.Logger


def pin_job_gpus(
    settings: dict, gpus: int, job: str, logger: logging.Logger | None = None, per_rank: bool = False
) -> tuple[str, str | None]:
    """(device, CUDA_VISIBLE_DEVICES) of a job scheduled with `gpus` GPUs.

    settings: the rule's `gpu_jobs` params (device, pinning, devices). `gpus == 0`
    means a CPU job: device "cpu" and no slot taken. Also the start of
    `python -m shardflow.train.launch`, a shell rule's job, which passes `per_rank`: it
    runs a job of several GPUs as one process per GPU, each on cuda:LOCAL_RANK, so the
    index of a `cuda:N` is not used there (check_visible_index).
    """
    log = logger or logging.getLogger(__name__)
    device, pinning = settings["device"], settings["pinning"]
    if gpus == 0:  # scheduled as a CPU job: run as one, take no GPU slot
        if device == "auto":  # the engine's own warning sees "cpu" from here on
            log.warning(
                "no GPU for this job (gpu_jobs.device auto, scheduled without a GPU): on the CPU, slow for large corpora"
            )
        device, pinning = "cpu", "off"
    visible = pin_gpu(settings["devices"], mode=pinning, job=job, count=max(gpus, 1))
    log.info("CUDA_VISIBLE_DEVICES=%s (gpu_pinning=%s)", visible, pinning)
    if not (per_rank and gpus > 1):
        check_visible_index(device, visible, pinning)
    return device, visible


def check_visible_index(device: str, visible: str | None, pinning: str) -> None:
    """A `cuda:N` the job can see: CUDA numbers the devices of CUDA_VISIBLE_DEVICES from
    0, so a one-GPU job pinned to its own GPU (by a slot, or by SLURM or Kubernetes) sees
    it as cuda:0, and `cuda:1` failed only where the model loads (core.devices), on each
    retry, with nothing saying that pinning is why. With no list (pinning off, nothing
    exported) the host's devices could be counted only by initialising CUDA, which would
    freeze this process's view of CUDA_VISIBLE_DEVICES: not checked. The devices are
    counted as CUDA reads the list (gpu_slots.cuda_visible: up to its first entry that is
    no device, `-1` showing none)."""
    if not (device.startswith("cuda:") and visible is not None):
        return
    seen = len(cuda_visible({"CUDA_VISIBLE_DEVICES": visible}))
    if int(device[5:]) < seen:
        return
    by = scheduler_pinning()  # a scheduler's name where it pinned the job, not this process
    pinned = f"gpu_jobs.pinning: {pinning}" + (f", pinned by {by}" if by not in (None, "shardflow", PRESET) else "")
    raise ValueError(
        f"gpu_jobs.device {device!r}: this job sees {seen} GPU{'' if seen == 1 else 's'} "
        f"(CUDA_VISIBLE_DEVICES={visible!r} after {pinned}), numbered from cuda:0, so it has no {device}. "
        "Set gpu_jobs.device to cuda or auto and choose GPUs with gpu_jobs.devices; "
        "cuda:N names a host device only with gpu_jobs.pinning: off and no CUDA_VISIBLE_DEVICES exported"
    )


def start_gpu_job(smk: Any, name: str, params: Any) -> GpuJob:
    """Log `params` (first line of the rule log), stop a retry that would repeat the last
    attempt's input or config error (shardflow.core.failures), pin the job's GPUs, then
    record such an error should the job end on one."""
    gpus = int(smk.resources.get("gpu", 0))  # none: a CPU job (rules/common.smk, job_resources)
    log = configure_logging(smk.log[0], name, params)
    guard = guard_retries(smk, log)  # before a GPU slot is taken or a model loads
    device, visible = pin_job_gpus(dict(smk.params.gpu_jobs), gpus, job=f"{name} {smk.input[0]}", logger=log)
    if guard is not None:  # after pinning: its ValueErrors (a pool smaller than the job) are the host's state
        guard.record_uncaught(log)
    threads = int(smk.threads)
    share_tokenizer_threads(threads)
    return GpuJob(device=device, gpus=gpus, visible_devices=visible, threads=threads, log=log)
