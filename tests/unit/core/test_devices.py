"""shardflow.core.devices: the compile cache every GPU job points torch at; a job's peak GPU memory."""

from __future__ import annotations

import os

from shardflow.core import devices
from shardflow.core.devices import use_compile_cache


def test_compile_cache_folder_is_made_and_exported(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "placeholder")  # so that monkeypatch restores it
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR")
    monkeypatch.setattr(devices, "_PROCESS_CACHE_DIR", None)  # the process had no setting of its own
    assert use_compile_cache(None) is None
    assert "TORCHINDUCTOR_CACHE_DIR" not in os.environ  # null: torch's own cache, untouched
    monkeypatch.chdir(tmp_path)
    got = use_compile_cache("shared/inductor")
    assert got == tmp_path / "shared" / "inductor" and got.is_dir()
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(got)  # absolute: jobs in other folders agree
    assert use_compile_cache("shared/inductor", "kept-apart") == got / "kept-apart"
    assert use_compile_cache(None) is None and "TORCHINDUCTOR_CACHE_DIR" not in os.environ  # torch's own again
    monkeypatch.setattr(devices, "_PROCESS_CACHE_DIR", str(tmp_path / "own"))  # a setting of the process's
    assert use_compile_cache(None, "kept-apart") == tmp_path / "own" / "kept-apart"
    use_compile_cache(None)
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "own")


class FakeCuda:
    """torch.cuda as a job on one pinned GPU sees it (CUDA_VISIBLE_DEVICES: its GPU is
    cuda:0); no GPU on the machine the tests run on, so the calls are recorded instead."""

    def __init__(self, allocated: int, reserved: int):
        self.allocated, self.reserved, self.calls = allocated, reserved, []

    def install(self, monkeypatch) -> None:
        import torch

        for name in ("reset_peak_memory_stats", "max_memory_allocated", "max_memory_reserved"):
            monkeypatch.setattr(torch.cuda, name, getattr(self, name))
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
        monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)

    def reset_peak_memory_stats(self, device):
        self.calls.append(("reset", str(device)))

    def max_memory_allocated(self, device):
        self.calls.append(("allocated", str(device)))
        return self.allocated

    def max_memory_reserved(self, device):
        self.calls.append(("reserved", str(device)))
        return self.reserved


def test_peak_memory_is_null_on_the_cpu_and_resets_nothing(monkeypatch):
    fake = FakeCuda(1, 1)
    fake.install(monkeypatch)  # a GPU is there, but the job runs on the CPU
    for device in ("cpu", devices.torch.device("cpu")):
        devices.reset_peak_memory(device)
        assert devices.peak_memory(device) == {"peak_gpu_mem_mib": None, "peak_gpu_mem_reserved_mib": None}
    assert fake.calls == []


def test_peak_memory_reads_the_jobs_own_gpu_in_mib(monkeypatch):
    fake = FakeCuda(allocated=3 * 2**30 + 2**19, reserved=4 * 2**30)
    fake.install(monkeypatch)
    devices.reset_peak_memory("auto")  # the setting, before the job resolved it: the current GPU
    assert devices.peak_memory(devices.torch.device("cuda", 0)) == {
        "peak_gpu_mem_mib": 3072.5,
        "peak_gpu_mem_reserved_mib": 4096.0,
    }
    devices.peak_memory("cuda")  # the setting "cuda": the current GPU too
    assert fake.calls == [("reset", "cuda:0")] + [("allocated", "cuda:0"), ("reserved", "cuda:0")] * 2


def test_kernel_hardware_names_the_gpu_its_sms_and_toolkit_and_the_cpus_vector_width(monkeypatch):
    """What the embed resume key holds beside the device type (embed.params.output_identity):
    a MIG slice or another GPU model (its SM count), another toolkit, another CPU."""
    from types import SimpleNamespace

    torch = devices.torch
    mig = SimpleNamespace(name="NVIDIA H100 80GB HBM3 MIG 1g.10gb", major=9, minor=0, multi_processor_count=16)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: mig)
    monkeypatch.setattr(torch.version, "cuda", "12.4")
    monkeypatch.setattr(torch.backends.cudnn, "version", lambda: 90100)
    assert devices.kernel_hardware(torch.device("cuda", 0)) == (
        "NVIDIA H100 80GB HBM3 MIG 1g.10gb, sm_90, 16 SMs, CUDA 12.4, cuDNN 90100"
    )
    monkeypatch.setattr(devices, "cpu_name", lambda: "Intel(R) Xeon(R) Platinum 8480+")
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX512")
    assert devices.kernel_hardware(torch.device("cpu")) == "Intel(R) Xeon(R) Platinum 8480+, AVX512"


def test_auto_dtype_is_float16_on_a_gpu_that_only_emulates_bf16(monkeypatch):
    """A V100 or T4 (compute capability 7): torch.cuda.is_bf16_supported() says True by
    default, counting bf16 emulated in fp32, which runs slower than fp16 and saves no
    memory in the matrix products; auto takes the fallback the docs name, fp16."""
    import torch

    def is_bf16_supported(including_emulation: bool = True) -> bool:
        return including_emulation

    monkeypatch.setattr(torch.cuda, "is_bf16_supported", is_bf16_supported)
    assert devices.resolve_dtype("auto", torch.device("cuda", 0)) == torch.float16
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: True)  # an A100
    assert devices.resolve_dtype("auto", torch.device("cuda", 0)) == torch.bfloat16


def test_auto_dtype_takes_the_engines_fallback_on_a_gpu_without_native_bf16(monkeypatch):
    """Summarisation falls back to fp32, not fp16: T5-family models overflow in fp16 (inf
    and NaN activations), and fp32 is what emulated bf16 computed in before anyway."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: including_emulation)
    cuda = torch.device("cuda", 0)
    assert devices.resolve_dtype("auto", cuda, "summarise") == torch.float32
    assert devices.resolve_dtype("float16", cuda, "summarise") == torch.float16  # as set
    assert devices.resolve_dtype("auto", torch.device("cpu"), "embed") == torch.float32
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: True)  # an A100
    assert devices.resolve_dtype("auto", cuda, "summarise") == torch.bfloat16
