"""`compile_mode: aot`: the padded forward compiled ahead of time, once for many jobs.

Why: `torch.compile` compiles in every job. On an H200 a 20,000-text MiniLM job spent
8.9 s compiling with an empty compile cache and 4.5 s with a warm one (dynamo traces the
model again in every process, then loads the cached kernels), against 1.2 s for the
whole eager job (docs/gpu.md, stop 34). Here the model's padded forward is exported
once (`torch.export`, batch rows and width dynamic) and compiled by AOTInductor into a
package without the model's weights; a later job loads the package, hands it its own
loaded weights (not copied: the package reads the model's tensors) and runs it. No
tracing, no compiling: loading took milliseconds on the CPU.

How:
- The package is `<cache>/shardflow-aot/<key>.pt2`, `<cache>` being the compile cache
  (`embedding.compile_cache`, else torch's, per machine). The key is a digest of what
  decides the compiled code, never the weights: the model's class and config.json, the
  dtype, the device kind (a GPU's name and compute capability, the CPU's vector
  instructions as ATen reads them), the torch and
  transformers versions, the attention path the engine resolved (the mask it passes,
  SDPA's cuDNN kernel on or off, fused kernels), and the largest batch (rows, width).
  Fine-tuned weights of one architecture share a package.
- The first job to need a package builds it under a lock file beside it (core.locks: a
  crashed builder leaves no stale lock); a job that finds the lock taken waits for the
  package instead of building it too. The package is written to a temporary name and
  renamed, so that no job loads half a package; one that does not load all the same
  (a filesystem whose rename is no atomic swap, a file damaged since) is built again
  once, under the lock, by the job that finds it so.
- The first batch runs both ways, and each row's embedding must match the eager one
  (cosine >= CHECK_COSINE); otherwise, or if exporting, compiling or loading fails, the
  job runs eagerly, with the reason logged and in its stats (`compile`). A failed build
  leaves `<key>.failed.json` beside the package, with its error: later jobs run eagerly
  at once, naming it, instead of each failing the same build (remove it to try again);
  so does a package built that does not load. An error of the device while building or
  loading (out of memory, a CUDA fault: `device_fault`) is neither: the package stays,
  nothing is recorded, and the next job tries again.
- Padded batches only: packing keeps its eager path (the engine does not pair them).
"""

from __future__ import annotations

import logging
import os
import platform
import time
from pathlib import Path
from typing import Any

import torch

from shardflow.core import locks
from shardflow.core.atomic import write_json
from shardflow.core.files import read_json
from shardflow.core.hashing import digest
from shardflow.embed.pooling import last_hidden

FOLDER = "shardflow-aot"
# Bump when what a package holds or how it is called changes: older packages are then
# never loaded (a new key), and stay in the cache until removed.
PACKAGE_FORMAT = 1
CHECK_COSINE = 0.9999  # as embed.graphs' check of a captured forward
WAIT_LOG_SECONDS = 30.0  # how often a job waiting for another's build says so


class _Padded(torch.nn.Module):
    """What is exported: the model on a padded batch, to its last hidden state."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        return last_hidden(self.model(input_ids=input_ids, attention_mask=attention_mask))


def mask_kind(mask: torch.Tensor | None) -> str:
    """How the engine passes a padded batch's mask: none (a causal decoder, right-padded),
    2-D [rows, width], or 4-D [rows, 1, 1, width] (attention_bias)."""
    return "none" if mask is None else f"{mask.dim()}-D {str(mask.dtype).removeprefix('torch.')}"


def package_key(
    model: torch.nn.Module, device: torch.device, dtype: torch.dtype, limits: tuple[int, int], path: dict
) -> str:
    """The package's name: a digest of what decides the compiled code (module docstring).
    `limits`: (most rows, widest batch); `path`: the engine's resolved attention path."""
    import transformers

    config = {k: v for k, v in model.config.to_dict().items() if k not in ("_name_or_path", "transformers_version")}
    what: dict[str, Any] = {
        "format": PACKAGE_FORMAT,
        "model": f"{type(model).__module__}.{type(model).__qualname__}",
        "config": config,
        "dtype": str(dtype),
        "device": device.type,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "limits": list(limits),
        "path": path,
    }
    if device.type == "cuda":
        what["gpu"] = [torch.cuda.get_device_name(device), list(torch.cuda.get_device_capability(device))]
    else:  # the CPU's vector instructions, which its compiled code uses (ATen's reading: no probe)
        what["cpu"] = [platform.machine(), torch.backends.cpu.get_cpu_capability()]
    return digest(what)[:32]


def package_folder() -> Path:
    """Where packages lie: inside the compile cache this process uses (the engine points
    TORCHINDUCTOR_CACHE_DIR at embedding.compile_cache first; core.devices.use_compile_cache)."""
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    return Path(os.environ.get("TORCHINDUCTOR_CACHE_DIR") or default_cache_dir()).resolve() / FOLDER


class AotForward:
    """The padded forward of one loaded model from an AOTInductor package; `prepare`
    builds it (if no job has) and loads it; a call then runs a padded batch."""

    def __init__(
        self,
        model: torch.nn.Module,
        device: torch.device,
        dtype: torch.dtype,
        limits: tuple[int, int],
        path: dict,
        logger: logging.Logger,
    ):
        self.module = _Padded(model)
        self.device, self.limits, self.logger = device, limits, logger
        self.key = package_key(model, device, dtype, limits, path)
        self.package = package_folder() / f"{self.key}.pt2"
        # A build that failed says so here, for every later job: a model that cannot be
        # exported (a decoder patched with liger's kernels, say) is not tried once a job.
        self.failed = self.package.with_suffix(".failed.json")
        self.runner = None

    def prepare(self, input_ids: torch.Tensor, mask: torch.Tensor | None) -> str:
        """Load the package, building it first if it is missing; `input_ids` and `mask`
        (a batch as the engine passes it) give the inputs' kinds. Returns what it did:
        "loaded in <s> s", after "built in <s> s, " or "waited <s> s for another job's build, ".

        A package in the cache that does not load (cut short by a writer killed on a
        filesystem whose rename is no atomic swap, or damaged since) is built again once,
        under the build's lock. One built just now that does not load is a failed build
        (`failed`), so that no later job builds it again."""
        self.package.parent.mkdir(parents=True, exist_ok=True)
        how = ""
        if not self.package.is_file():
            how = self._build_once(input_ids, mask)
        t0 = time.perf_counter()
        found, exc = self._try_load()
        if exc is not None:
            if how:
                self._unloadable(exc, found)
            self.logger.warning(
                "compile (aot): the package %s does not load (%s): building it again", self.package, error_line(exc)
            )
            how = f"did not load ({error_line(exc)}), " + self._build_once(input_ids, mask, broken=found)
            t0 = time.perf_counter()
            found, again = self._try_load()
            if again is not None:
                self._unloadable(again, found)
        return f"{how}loaded in {time.perf_counter() - t0:.2f} s"

    def _try_load(self) -> tuple[os.stat_result | None, Exception | None]:
        """Load the package: (its file's stat, None), or (the stat where there was a file,
        the error) where it does not load. A device's error (or the batch's) says nothing
        of the package and is raised (`device_fault`): torch's out of memory goes to the
        engine's back-off, which splits the batch; the rest leave the job eager, saying
        why (the engine's `_aot_start`), the package in place for the next job."""
        found = None
        try:
            found = self.package.stat()
            self._load()
        except Exception as exc:
            if device_fault(exc):
                raise
            return found, exc
        return found, None

    def _build_once(
        self, input_ids: torch.Tensor, mask: torch.Tensor | None, broken: os.stat_result | None = None
    ) -> str:
        """Build the package under its lock, unless another job has (or did while this one
        waited). `broken`: the package file that did not load; it is built again unless
        another job has replaced it meanwhile."""
        lock = self.package.with_suffix(".lock")
        waited_since = time.monotonic()
        said = 0.0
        while (fd := locks.try_lock(lock, package=str(self.package))) is None:
            if time.monotonic() - said >= WAIT_LOG_SECONDS:
                self.logger.info(
                    "compile (aot): waiting for %s, which another job builds: %s", self.package.name, locks.holder(lock)
                )
                said = time.monotonic()
            time.sleep(0.5)
        try:
            if self.package.is_file() and not (broken is not None and _same_file(self.package.stat(), broken)):
                return f"waited {time.monotonic() - waited_since:.1f} s for another job's build, "
            if self.failed.is_file():
                earlier = read_json(self.failed)
                raise RuntimeError(
                    f"an earlier job's build of this package failed ({earlier.get('error', '?')}); "
                    f"remove {self.failed} to try again"
                )
            self.package.unlink(missing_ok=True)  # the one that did not load: no job tries it while this one builds
            try:
                return self._build(input_ids, mask)
            except Exception as exc:
                if not device_fault(exc):  # the device's or the batch's, not the build's
                    self._record_failure(error_line(exc))
                raise
        finally:
            locks.release(fd)

    def _record_failure(self, error: str) -> None:
        write_json(self.failed, {"error": error, "unix": time.time(), "torch": torch.__version__})

    def _unloadable(self, exc: Exception, found: os.stat_result | None) -> None:
        """A package built just now (`found`: its file) that does not load: recorded as a
        failed build and removed, under the lock, so that later jobs run eagerly at once
        instead of each building it again. Raises."""
        while (fd := locks.try_lock(self.package.with_suffix(".lock"), package=str(self.package))) is None:
            time.sleep(0.5)
        try:
            now = self.package.stat() if self.package.is_file() else None
            if now is None or found is None or _same_file(now, found):  # not one another job has built since
                self._record_failure(f"the package built does not load: {error_line(exc)}")
                self.package.unlink(missing_ok=True)
        finally:
            locks.release(fd)
        raise RuntimeError(f"the package built does not load ({error_line(exc)}); recorded in {self.failed}") from exc

    def _build(self, input_ids: torch.Tensor, mask: torch.Tensor | None) -> str:
        from torch._inductor import aoti_compile_and_package

        rows, width = self.limits
        t0 = time.perf_counter()
        # Example inputs of 2 x 16 (sizes 0 and 1 would be specialised), within the limits.
        w = max(2, min(16, width))
        example_ids = input_ids.new_zeros((2, w))
        dims = {
            0: torch.export.Dim("rows", min=1, max=max(2, rows)),
            1: torch.export.Dim("width", min=1, max=max(2, width)),
        }
        if mask is None:
            args, shapes = (example_ids,), {"input_ids": dims}
        else:
            example_mask = torch.ones((2,) + tuple(mask.shape[1:-1]) + (w,), dtype=mask.dtype, device=mask.device)
            mask_dims = {0: dims[0], mask.dim() - 1: dims[1]}
            args, shapes = (example_ids, example_mask), {"input_ids": dims, "attention_mask": mask_dims}
        with torch.no_grad():
            program = torch.export.export(self.module, args, dynamic_shapes=shapes)
        exported = time.perf_counter() - t0
        tmp = self.package.with_name(f"{self.key}.{os.getpid()}.tmp.pt2")
        try:
            aoti_compile_and_package(
                program,
                package_path=str(tmp),
                # The weights stay out: `_load` hands the package the model's own.
                inductor_configs={"aot_inductor.package_constants_in_so": False},
            )
            os.replace(tmp, self.package)
        finally:
            tmp.unlink(missing_ok=True)
        total = time.perf_counter() - t0
        self.logger.info("compile (aot): exported in %.1f s, built %s in %.1f s", exported, self.package, total)
        return f"built in {total:.1f} s, "

    def _load(self) -> None:
        index = -1  # the current device
        if self.device.type == "cuda" and self.device.index is not None:
            index = self.device.index
        runner = load_package(self.package, index)
        named = dict(self.module.named_parameters(remove_duplicate=False))
        named.update(self.module.named_buffers(remove_duplicate=False))
        wanted = list(runner.get_constant_fqns())
        missing = [name for name in wanted if name not in named]
        if missing:
            raise ValueError(f"the package {self.package} wants tensors this model does not have: {missing[:5]}")
        runner.load_constants({name: named[name] for name in wanted}, check_full_update=True, user_managed=True)
        self.runner = runner

    def __call__(self, input_ids: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        # The compiled code takes its inputs' strides as exported (contiguous): a split
        # batch's columns cut to its own width are a view with the old row stride.
        input_ids = input_ids.contiguous()
        mask = None if mask is None else mask.contiguous()
        try:
            return self.runner(input_ids) if mask is None else self.runner(input_ids, mask)
        except RuntimeError as exc:
            if "out of memory" in str(exc).lower():  # the engine's back-off splits the batch
                raise torch.OutOfMemoryError(str(exc)) from exc
            raise


def load_package(path: Path, device_index: int):
    """torch's aoti_load_package, without the CPU probe it makes in every new process.

    Before loading, torch compares the machine with the package's build machine, for a
    warning only, and reads the CPU's vector instructions by building and loading a test
    library per instruction set, each in a child Python: 1.1-1.2 s of every job's load
    on the 2-core CPU (then 0.004 s), a GPU package's too, where an eager MiniLM job takes
    1.2 s in all. The package key already holds what that compares (`package_key`: the
    CPU's vector instructions, as ATen reads them, or the GPU and its compute capability),
    so the comparison runs without the probe. Where torch's internals differ from these,
    the plain call."""
    import sys

    from torch._inductor import aoti_load_package, codecache

    full = getattr(codecache, "get_device_information", None)
    if full is None:
        return aoti_load_package(str(path), device_index=device_index)

    def without_isa_probe(device_type: str) -> dict[str, str]:
        info = {"AOTI_PLATFORM": sys.platform, "AOTI_MACHINE": platform.machine()}
        try:
            from torch._dynamo.device_interface import get_interface_for_device

            info["AOTI_COMPUTE_CAPABILITY"] = str(get_interface_for_device(device_type).get_compute_capability())
        except Exception:  # noqa: BLE001 - a field of a warning's comparison
            pass
        return info

    codecache.get_device_information = without_isa_probe
    try:
        return aoti_load_package(str(path), device_index=device_index)
    finally:
        codecache.get_device_information = full


def device_fault(exc: BaseException) -> bool:
    """Whether an error is the device's, not a package's or a build's: out of memory
    (torch's, or AOTInductor's own allocation, a RuntimeError "CUDA error: out of memory")
    or a CUDA fault (torch.AcceleratorError, or a RuntimeError naming a CUDA error). Taken
    for a damaged package, it had the package deleted and built again, and the build that
    did not load either recorded as failed: every later job on every node ran eagerly."""
    if isinstance(exc, torch.OutOfMemoryError):
        return True
    accelerator_error = getattr(torch, "AcceleratorError", None)  # torch >= 2.8
    if accelerator_error is not None and isinstance(exc, accelerator_error):
        return True
    text = str(exc)
    return isinstance(exc, RuntimeError) and ("out of memory" in text.lower() or "CUDA error" in text)


def _same_file(a: os.stat_result, b: os.stat_result) -> bool:
    """Whether two stats are of one file, unchanged: a package written since (renamed into
    place) is another inode."""
    return (a.st_dev, a.st_ino, a.st_size, a.st_mtime_ns) == (b.st_dev, b.st_ino, b.st_size, b.st_mtime_ns)


def error_line(exc: BaseException) -> str:
    """`<type>: <first line of the message>`: what a log line and the job's stats say."""
    lines = str(exc).splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"


def rows_agree(got: torch.Tensor, want: torch.Tensor) -> float:
    """The smallest per-row cosine between two batches of embeddings."""
    cos = torch.nn.functional.cosine_similarity(got.float(), want.float(), dim=-1)
    return float(cos.min()) if cos.numel() else 1.0
