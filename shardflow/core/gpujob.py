"""The start of every GPU rule's script: logging, the CPU switch, device pinning.

    job = start_gpu_job(snakemake, "embed", params)   # before importing torch
    ... EmbedParams(device=job.device, threads=job.threads, ...)

A job the workflow scheduled with `gpu=0` (a CPU run: `gpu_jobs.device: cpu`, or a
local host without GPUs) runs on the CPU and takes no GPU slot, whatever CUDA a
container shows. A job with `gpu=N` takes N devices through the lock-file slots
(`shardflow.core.gpu_slots`) on a local multi-GPU host, or keeps what SLURM or
Kubernetes gave it. The slots are taken before torch is imported: setting
CUDA_VISIBLE_DEVICES after CUDA initialises has no effect.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from shardflow.core.gpu_slots import pin_gpu
from shardflow.core.runlog import configure_logging


@dataclass(frozen=True)
class GpuJob:
    device: str  # "cpu", or gpu_jobs.device (auto, cuda, cuda:N) for a job that got GPUs
    gpus: int  # GPUs the job was scheduled with
    visible_devices: str | None  # CUDA_VISIBLE_DEVICES after pinning
    threads: int
    log: logging.Logger


def start_gpu_job(smk: Any, name: str, params: Any) -> GpuJob:
    """Log `params` (first line of the rule log), then pin the job's GPUs."""
    settings = dict(smk.params.gpu_jobs)
    gpus = int(smk.resources.get("gpu", 1))
    device, pinning = settings["device"], settings["pinning"]
    log = configure_logging(smk.log[0], name, params)
    if gpus == 0:  # scheduled as a CPU job: run as one, take no GPU slot
        device, pinning = "cpu", "off"
    visible = pin_gpu(settings["devices"], mode=pinning, job=f"{name} {smk.input[0]}", count=max(gpus, 1))
    log.info("CUDA_VISIBLE_DEVICES=%s (gpu_pinning=%s)", visible, pinning)
    return GpuJob(device=device, gpus=gpus, visible_devices=visible, threads=int(smk.threads), log=log)
