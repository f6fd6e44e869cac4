"""One GPU per job on a local multi-GPU host, via lock-file slots.

Snakemake never sets `CUDA_VISIBLE_DEVICES`. On a local host `--resources gpu=N`
only caps how many GPU jobs run at once; it does not say *which* GPU each one
should use, and the ids of running jobs are not dense (`jobid % N` collides).
So each GPU job pins itself: it takes an exclusive `flock` on
`<lock_dir>/gpu<k>.lock` for the first free device `k` (or the first N free
devices, all at once, for a job that asks for N), keeps those files open for the
rest of its life, and sets `CUDA_VISIBLE_DEVICES=k[,...]`. The kernel drops
a flock when its last open fd closes, so a job that exits, crashes or is
SIGKILLed frees its slot without any clean-up step.

Call it first thing in the job, before torch (or anything else) initialises
CUDA: the CUDA runtime reads `CUDA_VISIBLE_DEVICES` once, at initialisation;
setting it afterwards has no effect on this process.

    from shardflow.core.gpu_slots import pin_gpu
    pin_gpu(params.gpus, mode=params.gpu_mode, job=f"embed chunk={wildcards.chunk}")
    import torch  # now sees exactly one GPU (or none: run on CPU)

Where the scheduler already pins devices we stand aside (mode `auto`):

* `SLURM_JOB_ID` together with `SLURM_JOB_GPUS` or `CUDA_VISIBLE_DEVICES`: SLURM
  allocated GPUs to this job (with `--gpus`/`--gres`) and exports them.
* `KUBERNETES_SERVICE_HOST`: the kubelet injects it into every pod. A pod sees
  only the GPUs the device plugin gave it, so there is nothing to share.
* `CUDA_VISIBLE_DEVICES` together with PBS_JOBID, LSB_JOBID, FLUX_JOB_ID or
  _CONDOR_JOB_AD: another batch scheduler allocated and exported them.
* `CUDA_VISIBLE_DEVICES` set by a shardflow job that pinned itself (a process it
  started: `SHARDFLOW_GPU_PINNED` holds the same list).

A scheduler's allocation is one job's only where the job runs under the Snakemake an
executor started for it (`--mode remote`: the slurm and kubernetes executors). A run's
own Snakemake started inside an allocation (`snakemake --profile local` in
`sbatch --gpus=4`, or in a pod with GPUs) runs its jobs side by side there, so they
take slots of the allocation's `CUDA_VISIBLE_DEVICES` (or of what `nvidia-smi` lists,
where the scheduler exports none) as from a preset list (below), and the local
profile runs as many at once as it lists (`shardflow.core.controller.runs_one_job`).

A `CUDA_VISIBLE_DEVICES` that anyone else set, e.g. a user who exports
`CUDA_VISIBLE_DEVICES=4,5` before starting Snakemake on a shared workstation, is the
pool: each job takes a slot of that list, as in mode `slots` (standing aside would
leave every job on the first of them), and a local profile runs as many GPU jobs at
once as it lists. With a pool listed as well (`gpu_jobs.devices`, `SHARDFLOW_GPUS`),
only the devices in both are used.

Modes: `auto` (the above), `off` (never touch anything), `slots` (always take
a slot; the pool is then the explicit list, else `SHARDFLOW_GPUS`, else an
already-set `CUDA_VISIBLE_DEVICES` -- e.g. a Snakemake run inside one
multi-GPU SLURM allocation -- else what `nvidia-smi` lists; `auto` takes its pool
the same way).

Environment:

* `SHARDFLOW_GPUS`: device pool, e.g. `0,1,2,3`; empty or `none` means no GPUs.
* `SHARDFLOW_GPU_LOCK_DIR`: where the lock files live. Default
  `/tmp/shardflow-gpu-slots-<uid>` (plus `-slurm<jobid>` inside a SLURM job),
  one per host and user. Deliberately not `$TMPDIR`: Snakemake exports each
  job's `tmpdir` resource as `$TMPDIR`, and jobs with different tmpdirs must
  still see the same locks. Point it at a shared, group-writable folder to
  coordinate several users (the lock files get the folder's read and write bits,
  whatever the umask); keep it on a local disk, not NFS.

Fairness: waiting jobs poll, so a job that started waiting first is not
guaranteed to be served first.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from shardflow.core import controller, locks

log = logging.getLogger(__name__)

MODES = ("auto", "off", "slots")
# Set beside CUDA_VISIBLE_DEVICES when a job pins itself: what it started stands aside.
PINNED_VAR = "SHARDFLOW_GPU_PINNED"
# scheduler_pinning's name for a CUDA_VISIBLE_DEVICES nobody above set: a pool to share out.
PRESET = "CUDA_VISIBLE_DEVICES"
# Batch schedulers besides SLURM that allocate a job's GPUs and export them (PBS, LSF,
# Flux, HTCondor): the variable each sets in a job, and its name.
OTHER_SCHEDULERS = (("PBS_JOBID", "pbs"), ("LSB_JOBID", "lsf"), ("FLUX_JOB_ID", "flux"), ("_CONDOR_JOB_AD", "htcondor"))

DevicesArg = str | Sequence[int | str] | None


class GpuSlotTimeout(TimeoutError):
    """Every GPU slot stayed taken for longer than the caller's timeout."""


def _scheduler(env: Mapping[str, str]) -> str | None:
    """The batch scheduler or orchestrator whose allocation this process runs in, where
    it gave that allocation GPUs (or shows only those: a Kubernetes pod)."""
    if "SLURM_JOB_ID" in env and ("SLURM_JOB_GPUS" in env or "CUDA_VISIBLE_DEVICES" in env):
        return "slurm"
    if "KUBERNETES_SERVICE_HOST" in env:
        return "kubernetes"
    if "CUDA_VISIBLE_DEVICES" in env:
        for var, name in OTHER_SCHEDULERS:  # they export the job's devices too
            if var in env:
                return name
    return None


def scheduler_pinning(environ: Mapping[str, str] | None = None) -> str | None:
    """Name what already pins this process's GPUs, or None if nothing does."""
    env = os.environ if environ is None else environ
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and env.get(PINNED_VAR) == visible:
        return "shardflow"
    scheduler = _scheduler(env)
    if scheduler is not None and controller.runs_one_job() is False:
        # The allocation is the run's, not this job's: its own Snakemake (`snakemake
        # --profile local` in `sbatch --gpus=4`, or in a pod with GPUs) runs its jobs
        # side by side in it, and standing aside put every one of them on the first GPU.
        scheduler = None
    if scheduler is not None:
        return scheduler
    return PRESET if visible is not None else None


def parse_devices(spec: DevicesArg) -> list[str] | None:
    """`"0,1,2"` or `[0, 1, 2]` -> `["0", "1", "2"]`; None stays None (not given).

    An empty string or `none` is an explicit "no GPUs". Duplicates are dropped.
    """
    if spec is None:
        return None
    items = spec.split(",") if isinstance(spec, str) else [str(d) for d in spec]
    items = [d.strip() for d in items]
    if [d.lower() for d in items if d] == ["none"]:
        return []
    return list(dict.fromkeys(d for d in items if d))


def cuda_visible(environ: Mapping[str, str] | None = None) -> list[str] | None:
    """The devices `CUDA_VISIBLE_DEVICES` shows, as CUDA reads it; None where it is unset.

    CUDA takes its entries up to the first one that is no device index or `GPU-`/`MIG-`
    UUID, and ignores that one and the rest: `-1`, the usual way to hide every GPU, shows
    none, and `0,-1,1` shows GPU 0 alone. (An index past the host's last GPU ends the
    list too; which one is, only the driver knows.)
    """
    env = os.environ if environ is None else environ
    if "CUDA_VISIBLE_DEVICES" not in env:
        return None
    shown: list[str] = []
    for entry in env["CUDA_VISIBLE_DEVICES"].split(","):
        entry = entry.strip()
        if not ((entry.isascii() and entry.isdigit()) or entry.startswith(("GPU-", "MIG-"))):
            break
        if entry not in shown:
            shown.append(entry)
    return shown


def detect_devices(nvidia_smi: str = "nvidia-smi") -> list[str]:
    """GPU indices as `nvidia-smi` lists them; [] when there is no driver.

    A separate process asks the driver, so this process does not initialise
    CUDA (which would freeze its view of `CUDA_VISIBLE_DEVICES`).

    Only lines that are indices count, whatever the exit status: nvidia-smi prints
    warnings among them (`WARNING: infoROM is corrupted at gpu ...`) and then exits 14
    though every GPU works, so trusting the status put a GPU host's run on the CPU, and
    trusting every line made the warning a device (its CUDA_VISIBLE_DEVICES hid all
    GPUs). Any other line, and a status other than 0, is warned of.
    """
    cmd = [nvidia_smi, "--query-gpu=index", "--format=csv,noheader"]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    except FileNotFoundError:
        return []
    except subprocess.TimeoutExpired as err:
        log.warning("GPU detection with %s failed (%s); assuming no GPUs", nvidia_smi, err)
        return []
    lines = [line.strip() for line in (out.stdout + "\n" + out.stderr).splitlines() if line.strip()]
    devices = [line.strip() for line in out.stdout.splitlines() if re.fullmatch(r"[0-9]+", line.strip())]
    other = [line for line in lines if line not in devices]
    if out.returncode != 0 or other:
        said = f"exit status {out.returncode}" + (f": {' | '.join(other)}" if other else "")
        if devices:
            log.warning("GPU detection with %s: %s; using the GPUs it listed, %s", nvidia_smi, said, ",".join(devices))
        else:
            log.warning("GPU detection with %s failed (%s); assuming no GPUs", nvidia_smi, said)
    return devices


def resolve_devices(
    devices: DevicesArg = None, mode: str = "auto", environ: Mapping[str, str] | None = None
) -> list[str]:
    """The pool to take a slot from: explicit list, `SHARDFLOW_GPUS`, then detection.

    `CUDA_VISIBLE_DEVICES=""` (or `-1`: `cuda_visible`) hides every GPU from CUDA: the
    pool is then empty whatever is listed or detected.
    """
    env = os.environ if environ is None else environ
    preset = cuda_visible(env)
    if preset == []:
        return []
    pool = parse_devices(devices)
    if pool is None:
        pool = parse_devices(env.get("SHARDFLOW_GPUS"))
    if preset is not None and pool is not None and mode == "auto" and scheduler_pinning(env) == PRESET:
        # Both a listed pool and an exported CUDA_VISIBLE_DEVICES: only devices in both.
        both = [d for d in pool if d in preset]
        if not both:
            raise ValueError(
                f"the GPU pool {','.join(pool)} (gpu_jobs.devices or SHARDFLOW_GPUS) has no device in the exported "
                f"CUDA_VISIBLE_DEVICES={env['CUDA_VISIBLE_DEVICES']}: unset one, or list the same devices"
            )
        pool = both
    if pool is None and preset is not None and (mode == "slots" or scheduler_pinning(env) == PRESET):
        # nvidia-smi ignores CUDA_VISIBLE_DEVICES and would offer GPUs outside it.
        pool = preset
    if pool is None:
        pool = detect_devices()
    return pool


def default_lock_dir(environ: Mapping[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    if env.get("SHARDFLOW_GPU_LOCK_DIR"):
        return Path(env["SHARDFLOW_GPU_LOCK_DIR"])
    base = Path("/tmp") if os.path.isdir("/tmp") else Path(tempfile.gettempdir())
    name = f"shardflow-gpu-slots-{os.getuid()}"
    if "SLURM_JOB_ID" in env:
        # Device numbers restart at 0 in every SLURM allocation sharing this node.
        name += f"-slurm{env['SLURM_JOB_ID']}"
    return base / name


def lock_path(lock_dir: str | os.PathLike, device: str) -> Path:
    """`<lock_dir>/gpu<device>.lock`, with anything odd in a UUID made safe."""
    return Path(lock_dir) / f"gpu{re.sub(r'[^A-Za-z0-9._-]', '_', device)}.lock"


class _Slot:
    """An open, flocked lock file; the slot is ours while the fd is open."""

    def __init__(self, device: str, path: Path, fd: int) -> None:
        self.device, self.path, self.fd = device, path, fd

    def release(self) -> None:
        locks.release(self.fd)


def _create_shared(path: Path) -> None:
    """Create the lock file `path`, if missing, readable and writable by whoever may
    create files in its folder: every job opens it for writing, and with the usual
    umask 022 a file another user created in a shared, group-writable folder was
    0644, so the first job of any other user stopped on a PermissionError. Made under
    a name of its own and linked into place, so that nobody opens it before it has
    that mode."""
    if path.exists():
        return
    mode = (0o666 & path.parent.stat().st_mode) | 0o600
    # A unique name (not the pid: two containers sharing the folder may share pids).
    try:
        fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    except OSError as err:  # its message named only a temporary name in the folder
        raise OSError(
            err.errno,
            f"{err.strerror}: this user (uid {os.getuid()}) cannot create a lock file in the GPU lock folder "
            f"{path.parent}: make it writable by every user whose jobs share it, or point SHARDFLOW_GPU_LOCK_DIR "
            "at a folder on a local disk this user can write",
        ) from err
    part = Path(name)
    try:
        os.fchmod(fd, mode)
    finally:
        os.close(fd)
    try:
        os.link(part, path)
    except FileExistsError:
        pass  # another job made it first
    finally:
        os.unlink(part)


def _try_lock(path: Path, device: str, job: str | None) -> _Slot | None:
    _create_shared(path)
    try:
        fd = locks.try_lock(path, device=device, job=job)
    except PermissionError as err:
        st = path.stat()
        raise PermissionError(
            f"{path}: this user cannot open the GPU lock file for writing (owner uid {st.st_uid}, mode "
            f"{st.st_mode & 0o777:o}): every user sharing the lock folder must be able to, e.g. "
            f"`chmod g+w {path}` by its owner, with the folder group-writable"
        ) from err
    return None if fd is None else _Slot(device, path, fd)


def _holders(lock_dir: Path, pool: list[str], free: Sequence[str] = ()) -> str:
    """One line per device: what its holder wrote, or `free` for one the last scan took
    (and gave back: a job wanting several at once); the file of a free slot says nothing
    (release truncates it) or names a holder that is gone."""
    return "\n".join(
        f"  gpu {device}: {'free' if device in free else locks.holder(lock_path(lock_dir, device))}" for device in pool
    )


def _take_slots(
    pool: list[str], count: int, lock_dir: Path, timeout: float | None, poll_interval: float, job: str | None
) -> list[_Slot]:
    """`count` slots at once, or none: a job holding some while waiting for more could
    deadlock against another doing the same."""
    if count > len(pool):
        raise ValueError(f"a job asks for {count} GPUs but the pool has {len(pool)} ({','.join(pool)})")
    try:
        lock_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:  # `File exists` alone, where it is a file
        raise OSError(
            err.errno,
            f"{err.strerror} ({err.filename}): cannot make the GPU lock folder {lock_dir}: point "
            "SHARDFLOW_GPU_LOCK_DIR at a folder on a local disk this user can write",
        ) from err
    deadline = None if timeout is None else time.monotonic() + timeout
    waiting_logged = False
    while True:
        taken: list[_Slot] = []
        for device in pool:
            slot = _try_lock(lock_path(lock_dir, device), device, job)
            if slot is not None:
                taken.append(slot)
                if len(taken) == count:
                    return taken
        free = [slot.device for slot in taken]
        for slot in taken:
            slot.release()
        if deadline is not None and time.monotonic() >= deadline:
            wanted = "free GPU slot" if count == 1 else f"{count} free GPU slots at once"
            held = f"all of {','.join(pool)} are held" if count == 1 else f"too many of {','.join(pool)} are held"
            raise GpuSlotTimeout(
                f"no {wanted} after {timeout:g} s: {held} "
                f"(lock files in {lock_dir}). Holders:\n{_holders(lock_dir, pool, free)}\n"
                "Lower --resources gpu=N to the number of GPUs, or raise the timeout."
            )
        if not waiting_logged:
            # The workflow's jobs wait without a timeout: this line is all a stuck job's
            # log says, so it names who holds the slots (a job outside this run, mostly).
            log.info(
                "fewer than %d of the %d GPU slots in %s are free; waiting. Holders:\n%s",
                count,
                len(pool),
                lock_dir,
                _holders(lock_dir, pool, free),
            )
            waiting_logged = True
        time.sleep(poll_interval)


def _acquire(
    devices: DevicesArg,
    mode: str,
    lock_dir: str | os.PathLike | None,
    timeout: float | None,
    poll_interval: float,
    job: str | None,
    count: int = 1,
) -> tuple[str | None, list[_Slot]]:
    """Shared body of `acquire_gpu` and `pin_gpu`: (visible devices, slots held)."""
    if mode not in MODES:
        raise ValueError(f"GPU mode must be one of {', '.join(MODES)}, not {mode!r}")
    if count < 1:
        raise ValueError(f"count must be >= 1, not {count}")
    current = os.environ.get("CUDA_VISIBLE_DEVICES")
    if mode == "off":
        return current, []
    if mode == "auto":
        pinned_by = scheduler_pinning()
        if pinned_by is not None and pinned_by != PRESET:
            log.info(
                "GPUs already pinned by %s (CUDA_VISIBLE_DEVICES=%s); " "not taking a slot",
                pinned_by,
                current,
            )
            return current, []
    pool = resolve_devices(devices, mode)
    if not pool:
        log.info("no GPUs configured or detected; running on CPU")
        return None, []
    lock_dir = Path(lock_dir) if lock_dir is not None else default_lock_dir()
    slots = _take_slots(pool, count, lock_dir, timeout, poll_interval, job)
    visible = ",".join(slot.device for slot in slots)
    os.environ["CUDA_VISIBLE_DEVICES"] = os.environ[PINNED_VAR] = visible
    log.info(
        "took GPU slot%s %s of %s (lock dir %s); CUDA_VISIBLE_DEVICES=%s",
        "s" if count > 1 else "",
        visible,
        ",".join(pool),
        lock_dir,
        visible,
    )
    return visible, slots


@contextlib.contextmanager
def acquire_gpu(
    devices: DevicesArg = None,
    *,
    mode: str = "auto",
    lock_dir: str | os.PathLike | None = None,
    timeout: float | None = None,
    poll_interval: float = 0.2,
    job: str | None = None,
    count: int = 1,
) -> Iterator[str | None]:
    """Hold `count` GPU slots for the `with` block; yield `CUDA_VISIBLE_DEVICES`.

    Yields the device taken, or what the scheduler already set when standing
    aside (None if it set nothing), or None when there are no GPUs (use CPU).
    `timeout=None` waits forever for a free slot; otherwise `GpuSlotTimeout`.
    `job` is written into the lock file for whoever debugs a stuck slot.
    On exit the slot is freed and `CUDA_VISIBLE_DEVICES` restored.
    """
    before = {name: os.environ.get(name) for name in ("CUDA_VISIBLE_DEVICES", PINNED_VAR)}
    visible, slots = _acquire(devices, mode, lock_dir, timeout, poll_interval, job, count)
    try:
        yield visible
    finally:
        if slots:
            for slot in slots:
                slot.release()
            for name, value in before.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value


_pinned: list[_Slot] | None = None


def pin_gpu(
    devices: DevicesArg = None,
    *,
    mode: str = "auto",
    lock_dir: str | os.PathLike | None = None,
    timeout: float | None = None,
    poll_interval: float = 0.2,
    job: str | None = None,
    count: int = 1,
) -> str | None:
    """`acquire_gpu` for scripts: the slots are held until the process exits.

    Same arguments and return value. Calling it again in the same process
    returns the slots already held.
    """
    global _pinned
    if _pinned:
        return ",".join(slot.device for slot in _pinned)
    visible, _pinned = _acquire(devices, mode, lock_dir, timeout, poll_interval, job, count)
    return visible


def concurrent_gpu_jobs(environ: Mapping[str, str] | None = None) -> int:
    """How many GPU jobs a local profile lets run at once: one per GPU in the pool.

    Read by profiles/local (YTE) when Snakemake loads it. A host without GPUs
    gets 1, which CPU jobs never wait for: there the GPU rules request no GPU and
    share the cores instead (rules/common.smk, `embedding.threads: auto`).
    """
    return max(1, len(resolve_devices(environ=environ)))
