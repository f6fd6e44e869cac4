"""Devices and precisions of GPU jobs: `auto` resolved the same way by every engine.

Cheap: torch is imported, CUDA is only queried.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

import torch

from shardflow.core.jobs import PEAK_GPU_KEYS

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_device(name: str) -> torch.device:
    """auto: the current CUDA device if there is one, else CPU."""
    if name == "auto":
        return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    device = torch.device(name)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError(f"device {name!r} requested but CUDA is not available")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise RuntimeError(f"device {name!r} requested but only {torch.cuda.device_count()} CUDA devices exist")
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
    return device


# What `auto` takes on a GPU without native bf16, by engine: encoders run soundly in fp16;
# generation falls back to fp32 (T5-family models overflow in fp16), and so does training
# (train.trainer.auto_dtype). make estimate reads it to tell a run's dtype from auto's.
WITHOUT_BF16 = {"embed": "float16", "summarise": "float32", "train": "float32"}


def resolve_dtype(name: str, device: torch.device, engine: str = "embed") -> torch.dtype:
    """auto: bf16 on CUDA (`fallback` where bf16 is unsupported), fp32 on CPU. Supported
    means natively (compute capability 8 and up): torch counts bf16 emulated in fp32 on a
    V100 or T4 unless told not to, slower than their fp16 tensor cores. fp16 suits
    encoders; an engine whose models overflow in fp16 (T5's activations) passes fp32."""
    if name != "auto":
        return DTYPES[name]
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported(including_emulation=False) else DTYPES[WITHOUT_BF16[engine]]
    return torch.float32


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def kernel_hardware(device: torch.device) -> str:
    """What picks a resolved device's kernels, and so the last bits of what they compute,
    beyond torch's version and the thread count. On CUDA: the GPU's model, architecture
    and SM count (a MIG slice has its own), and the CUDA and cuDNN versions: cuBLAS
    promises equal bits only on GPUs of one architecture and SM count, from one toolkit.
    On the CPU: its model (MKL and oneDNN pick kernels per processor) and the vector
    width ATen dispatches to (AVX2 and AVX512 kernels sum in other orders)."""
    if device.type == "cuda":
        p = torch.cuda.get_device_properties(device)
        return (
            f"{p.name}, sm_{p.major}{p.minor}, {p.multi_processor_count} SMs, CUDA {torch.version.cuda}, "
            f"cuDNN {torch.backends.cudnn.version()}"
        )
    return f"{cpu_name()}, {torch.backends.cpu.get_cpu_capability()}"


def device_memory(device: torch.device) -> tuple[str, int | None]:
    """The name and total memory (MiB) of a resolved device: a CUDA device's
    (`torch.cuda.get_device_properties`), or ("cpu", None)."""
    if device.type != "cuda":
        return "cpu", None
    props = torch.cuda.get_device_properties(device)
    return props.name, props.total_memory >> 20


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def runtime(
    device_setting: str, dtype_setting: str, threads: int | None, engine: str = "embed"
) -> tuple[torch.device, torch.dtype, str]:
    """Resolve a job's device and dtype (`fallback` as resolve_dtype's), apply its thread
    count; also a one-line description of the software and hardware for the job's log."""
    import transformers

    device = resolve_device(device_setting)
    dtype = resolve_dtype(dtype_setting, device, engine)
    if threads:
        torch.set_num_threads(threads)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_name()
    described = (
        f"python {platform.python_version()} torch {torch.__version__} transformers {transformers.__version__} | "
        f"device {device} ({name}) dtype {dtype_name(dtype)} threads {torch.get_num_threads()}"
    )
    return device, dtype, described


# The process's own compile cache setting, before a job pointed torch elsewhere.
_PROCESS_CACHE_DIR = os.environ.get("TORCHINDUCTOR_CACHE_DIR")


def use_compile_cache(folder: str | Path | None, subfolder: str | None = None) -> Path | None:
    """Point torch's compile cache (TORCHINDUCTOR_CACHE_DIR) at `folder`, created if
    missing, before the first compile of this process. None: torch's own (the process's
    setting, else per machine in /tmp), put back if an earlier call pointed elsewhere.
    `subfolder`: a folder of its own inside either, for compiled code that must not mix
    with the rest. Jobs sharing the folder reuse each other's compiled kernels
    (inductor writes its entries atomically: safe for concurrent jobs)."""
    if folder is None and subfolder is None:
        if _PROCESS_CACHE_DIR is None:
            os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
        else:
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = _PROCESS_CACHE_DIR
        return None
    if folder is None:
        from torch._inductor.runtime.cache_dir_utils import default_cache_dir

        folder = _PROCESS_CACHE_DIR or default_cache_dir()
    cache = Path(folder).expanduser().resolve() / (subfolder or "")
    cache.mkdir(parents=True, exist_ok=True)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(cache)
    return cache


_MIB = 1 << 20


def _cuda_device(device: str | torch.device) -> torch.device | None:
    """The CUDA device a job's `device` (a setting, auto included, or a resolved one)
    names, or None where it runs on the CPU."""
    if str(device) == "auto":
        return resolve_device("auto") if torch.cuda.is_available() else None
    device = torch.device(device)
    return resolve_device(str(device)) if device.type == "cuda" else None


def reset_peak_memory(device: str | torch.device) -> None:
    """Count peak GPU memory on `device` from now on: a job calls it at its start, so its
    peak is its own, not an earlier job's in the same process. Nothing on the CPU."""
    cuda = _cuda_device(device)
    if cuda is not None:
        torch.cuda.reset_peak_memory_stats(cuda)


def peak_memory(device: str | torch.device) -> dict[str, float | None]:
    """The peak GPU memory on `device` since reset_peak_memory, in MiB to 0.1:
    `peak_gpu_mem_mib`, the most its tensors held at once (torch.cuda.max_memory_allocated),
    and `peak_gpu_mem_reserved_mib`, the most torch's caching allocator held from the card
    (max_memory_reserved: what a smaller GPU must have, fragmentation included). Neither
    counts the CUDA context (a few hundred MiB per process) or memory allocated outside
    torch. Both None on the CPU: not on a GPU, which 0 would misstate. The device is the
    job's own as the process sees it: a job pinned by CUDA_VISIBLE_DEVICES sees its GPU
    as cuda:0, and that is the one measured."""
    cuda = _cuda_device(device)
    if cuda is None:
        return dict.fromkeys(PEAK_GPU_KEYS)
    return {
        "peak_gpu_mem_mib": round(torch.cuda.max_memory_allocated(cuda) / _MIB, 1),
        "peak_gpu_mem_reserved_mib": round(torch.cuda.max_memory_reserved(cuda) / _MIB, 1),
    }
