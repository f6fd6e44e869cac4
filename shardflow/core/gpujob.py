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
from shardflow.core.gpu_slots import pin_gpu
from shardflow.core.runlog import configure_logging, share_tokenizer_threads


@dataclass(frozen=True)
class GpuJob:
    device: str  # "cpu", or gpu_jobs.device (auto, cuda, cuda:N) for a job that got GPUs
    gpus: int  # GPUs the job was scheduled with
    visible_devices: str | None  # CUDA_VISIBLE_DEVICES after pinning
    threads: int
    log: logging.Logger


def pin_job_gpus(settings: dict, gpus: int, job: str, logger: logging.Logger | None = None) -> tuple[str, str | None]:
    """(device, CUDA_VISIBLE_DEVICES) of a job scheduled with `gpus` GPUs.

    settings: the rule's `gpu_jobs` params (device, pinning, devices). `gpus == 0`
    means a CPU job: device "cpu" and no slot taken. Also the start of
    `python -m shardflow.train.launch`, a shell rule's job.
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
    return device, visible


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
