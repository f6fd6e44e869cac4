"""A GPU job's peak-memory calls (shardflow.core.devices reset_peak_memory, peak_memory)
replaced in the module that makes them, and recorded: no GPU runs the tests."""

from __future__ import annotations


def record_peak_memory_calls(monkeypatch, module, allocated: float, reserved: float) -> list:
    """Replace `module`'s two calls; return the list they append ("reset", device) and
    ("peak", device) to (a test may append its own events), the peak being
    `allocated` / `reserved` MiB."""
    events: list = []
    monkeypatch.setattr(module, "reset_peak_memory", lambda device: events.append(("reset", str(device))))
    monkeypatch.setattr(
        module,
        "peak_memory",
        lambda device: events.append(("peak", str(device)))
        or {"peak_gpu_mem_mib": allocated, "peak_gpu_mem_reserved_mib": reserved},
    )
    return events
