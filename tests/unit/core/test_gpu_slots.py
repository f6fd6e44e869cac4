"""Lock-file GPU slots, with fake device lists and real processes (no GPU needed)."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from shardflow.core import gpu_slots
from shardflow.core.gpu_slots import GpuSlotTimeout, acquire_gpu, lock_path, resolve_devices

REPO = Path(__file__).resolve().parents[3]

# Anything on the test host that would make acquire_gpu stand aside or change its pool.
SCHEDULER_VARS = (
    "CUDA_VISIBLE_DEVICES",
    "SLURM_JOB_ID",
    "SLURM_JOB_GPUS",
    "KUBERNETES_SERVICE_HOST",
    "SHARDFLOW_GPUS",
    "SHARDFLOW_GPU_LOCK_DIR",
)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in SCHEDULER_VARS:
        monkeypatch.delenv(name, raising=False)


def child_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in SCHEDULER_VARS}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    env.update(extra)
    return env


# A job as a script would be: pin a GPU for the life of the process, record
# (device, start, end), exit. time.monotonic() is one system-wide clock on Linux,
# so intervals from different processes compare.
WORKER = textwrap.dedent("""
    import json, sys, time
    from pathlib import Path
    from shardflow.core.gpu_slots import pin_gpu

    out, go, hold = Path(sys.argv[1]), Path(sys.argv[2]), float(sys.argv[3])
    out.with_suffix(".ready").touch()
    while not go.exists():
        time.sleep(0.01)
    device = pin_gpu(lock_dir=sys.argv[4], poll_interval=0.02, job=out.stem)
    start = time.monotonic()
    time.sleep(hold)
    out.write_text(json.dumps({"device": device, "start": start, "end": time.monotonic()}))
""")


def test_concurrent_jobs_never_share_a_device(tmp_path):
    worker = tmp_path / "worker.py"
    worker.write_text(WORKER)
    go, locks = tmp_path / "go", tmp_path / "locks"
    env = child_env(SHARDFLOW_GPUS="0,1,2")
    outs = [tmp_path / f"job{i}.json" for i in range(6)]
    procs = [
        subprocess.Popen([sys.executable, str(worker), str(o), str(go), "0.4", str(locks)], env=env)
        for o in outs
    ]
    # Start all six at once, so the first three really compete for three slots.
    deadline = time.monotonic() + 10
    while not all(o.with_suffix(".ready").exists() for o in outs):
        assert time.monotonic() < deadline, "workers did not start"
        time.sleep(0.01)
    go.touch()
    assert [p.wait(timeout=15) for p in procs] == [0] * 6

    runs = [json.loads(o.read_text()) for o in outs]
    assert {r["device"] for r in runs} == {"0", "1", "2"}
    for i, a in enumerate(runs):
        for b in runs[i + 1 :]:
            if a["device"] == b["device"]:
                assert a["end"] <= b["start"] or b["end"] <= a["start"], (a, b)


HOLDER = textwrap.dedent("""
    import sys, time
    from shardflow.core.gpu_slots import pin_gpu
    pin_gpu("0", lock_dir=sys.argv[1], job="holder")
    print("held", flush=True)
    time.sleep(60)
""")


def test_killed_holder_frees_its_slot(tmp_path):
    locks = tmp_path / "locks"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(locks)],
        env=child_env(),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        info = json.loads(lock_path(locks, "0").read_text())
        assert info["pid"] == holder.pid and info["job"] == "holder" and info["host"]
        with pytest.raises(GpuSlotTimeout):
            with acquire_gpu("0", lock_dir=locks, timeout=0.2, poll_interval=0.02):
                pass
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
        holder.stdout.close()
    started = time.monotonic()
    with acquire_gpu("0", lock_dir=locks, timeout=2, poll_interval=0.02) as device:
        assert device == "0" and os.environ["CUDA_VISIBLE_DEVICES"] == "0"
        assert json.loads(lock_path(locks, "0").read_text())["pid"] == os.getpid()
    assert time.monotonic() - started < 1
    assert "CUDA_VISIBLE_DEVICES" not in os.environ  # restored on exit


def test_timeout_names_the_holders(tmp_path):
    with acquire_gpu("0,1", lock_dir=tmp_path, job="first"):
        with acquire_gpu("0,1", mode="slots", lock_dir=tmp_path, job="second"):
            with pytest.raises(GpuSlotTimeout) as err:
                with acquire_gpu(
                    "0,1", mode="slots", lock_dir=tmp_path, timeout=0.1, poll_interval=0.02
                ):
                    pass
    message = str(err.value)
    assert "no free GPU slot after 0.1 s" in message and "0,1" in message
    assert str(tmp_path) in message and '"job": "first"' in message
    assert '"job": "second"' in message and f'"pid": {os.getpid()}' in message


@pytest.mark.parametrize(
    "env, expected",
    [
        ({"CUDA_VISIBLE_DEVICES": "3", "SHARDFLOW_GPU_PINNED": "3"}, "3"),  # a pinned job's child process
        ({"SLURM_JOB_ID": "42", "SLURM_JOB_GPUS": "1"}, None),
        ({"SLURM_JOB_ID": "42", "CUDA_VISIBLE_DEVICES": "0,1"}, "0,1"),
        ({"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, None),
        ({"PBS_JOBID": "7.server", "CUDA_VISIBLE_DEVICES": "0"}, "0"),
        ({"LSB_JOBID": "9", "CUDA_VISIBLE_DEVICES": "0,1"}, "0,1"),
        ({"KUBERNETES_SERVICE_HOST": "10.0.0.1", "CUDA_VISIBLE_DEVICES": "0"}, "0"),
    ],
)
def test_stands_aside_when_the_scheduler_pins(tmp_path, monkeypatch, env, expected):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with acquire_gpu("0,1,2", lock_dir=tmp_path / "locks") as device:
        assert device == expected
        assert os.environ.get("CUDA_VISIBLE_DEVICES") == env.get("CUDA_VISIBLE_DEVICES")
    assert not (tmp_path / "locks").exists()
    assert gpu_slots.pin_gpu("0,1,2", lock_dir=tmp_path / "locks") == expected
    assert not (tmp_path / "locks").exists()


def test_a_preset_device_list_is_shared_out_one_device_a_job(tmp_path, monkeypatch):
    """A user's CUDA_VISIBLE_DEVICES=4,5 on a shared workstation: each job takes its own
    of those two (standing aside left every job on GPU 4, and the local profile ran as
    many at once as nvidia-smi listed), and what a pinned job starts stands aside."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5")
    monkeypatch.setattr(gpu_slots, "detect_devices", lambda: [str(i) for i in range(8)])
    assert gpu_slots.concurrent_gpu_jobs() == 2
    with acquire_gpu(lock_dir=tmp_path) as first:
        assert first == "4" and os.environ["SHARDFLOW_GPU_PINNED"] == "4"
        assert gpu_slots.scheduler_pinning() == "shardflow"  # a child process of this job stands aside
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5")  # another job, started with the user's list
        monkeypatch.delenv("SHARDFLOW_GPU_PINNED")
        with acquire_gpu(lock_dir=tmp_path) as second:
            assert second == "5"
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "4,5" and "SHARDFLOW_GPU_PINNED" not in os.environ


# A job as Snakemake runs it: pin (as start_gpu_job does), say which devices, hold them
# until the run says so.
HELD_JOB = textwrap.dedent("""
    import os, sys, time
    from pathlib import Path
    from shardflow.core.gpu_slots import pin_gpu

    out, release, locks = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    out.with_suffix(".tmp").write_text(str(pin_gpu(lock_dir=locks, poll_interval=0.02, timeout=20)))
    os.replace(out.with_suffix(".tmp"), out)
    deadline = time.monotonic() + 60
    while not release.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
""")

# A Snakemake process (its file is named snakemake, as the controller looks for): it reads
# the local profile's GPU count, then runs two GPU jobs side by side through bash.
RUN = textwrap.dedent("""
    import subprocess, sys, time
    from pathlib import Path
    from shardflow.core.gpu_slots import concurrent_gpu_jobs

    job, tmp = sys.argv[-2], Path(sys.argv[-1])
    (tmp / "concurrent").write_text(str(concurrent_gpu_jobs()))
    procs = []
    for name in ("a", "b"):
        cmd = f"{sys.executable} {job} {tmp / name} {tmp / 'release'} {tmp / 'locks'}; true"
        procs.append(subprocess.Popen(["bash", "-c", cmd]))
        deadline = time.monotonic() + 30
        while not (tmp / name).exists():
            assert time.monotonic() < deadline and procs[-1].poll() is None, f"job {name} did not pin"
            time.sleep(0.01)
    (tmp / "release").touch()
    sys.exit(max(p.wait(timeout=60) for p in procs))
""")


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs /proc (Linux)")
@pytest.mark.parametrize(
    "allocation, nvidia_smi, shared_out",
    [
        # sbatch --gpus=2: SLURM exports the allocation's devices; the node has 8
        (
            {"SLURM_JOB_ID": "42", "SLURM_JOB_GPUS": "3,5", "CUDA_VISIBLE_DEVICES": "0,1"},
            "0\\n1\\n2\\n3\\n4\\n5\\n6\\n7\\n",
            ["0", "1"],
        ),
        # a pod with 2 GPUs: it sees only those, and nothing exports them
        ({"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, "0\\n1\\n", ["0", "1"]),
    ],
)
@pytest.mark.parametrize("mode", [[], ["--mode", "remote"]], ids=["run", "job"])
def test_a_run_inside_an_allocation_shares_it_out(tmp_path, allocation, nvidia_smi, shared_out, mode):
    """`snakemake --profile local` started inside a SLURM allocation or a Kubernetes pod
    with GPUs: the allocation is the run's, so its jobs, side by side, take one device
    each (standing aside put every job on the first, and the profile ran as many at once
    as the node has); a job that an executor's Snakemake runs (`--mode remote`) keeps
    the devices the scheduler gave it alone."""
    fake_nvidia_smi(tmp_path / "bin", nvidia_smi)
    run = tmp_path / "sm" / "snakemake"
    run.parent.mkdir()
    run.write_text(RUN)
    job = tmp_path / "job.py"
    job.write_text(HELD_JOB)
    env = child_env(**allocation, PATH=f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    proc = subprocess.run(
        [sys.executable, str(run), *mode, str(job), str(tmp_path)], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    devices = sorted((tmp_path / name).read_text() for name in ("a", "b"))
    if mode:  # one job per allocation: what the scheduler exported, as before
        assert devices == [allocation.get("CUDA_VISIBLE_DEVICES", "None")] * 2
        assert not (tmp_path / "locks").exists()
    else:
        assert devices == shared_out
        assert (tmp_path / "concurrent").read_text() == str(len(shared_out))


def test_a_listed_pool_keeps_to_the_exported_devices(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5")
    monkeypatch.setenv("SHARDFLOW_GPUS", "0,1,2,3,4")
    assert gpu_slots.resolve_devices() == ["4"] and gpu_slots.concurrent_gpu_jobs() == 1
    with pytest.raises(ValueError, match=r"the GPU pool 0,1 .* has no device in the exported CUDA_VISIBLE_DEVICES=4,5"):
        gpu_slots.resolve_devices("0,1")
    assert gpu_slots.resolve_devices("0,1", mode="slots") == ["0", "1"]  # slots: the list as given


def test_slurm_without_gpus_still_takes_a_slot(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    with acquire_gpu("5", lock_dir=tmp_path) as device:
        assert device == "5"
    assert gpu_slots.default_lock_dir().name.endswith("-slurm42")


def test_modes(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5")
    with acquire_gpu("0", mode="off", lock_dir=tmp_path) as device:
        assert device == "4,5"
    # slots: share out the preset list, not whatever nvidia-smi would list.
    with open(lock_path(tmp_path, "4"), "w") as taken:
        fcntl.flock(taken, fcntl.LOCK_EX)  # another job holds GPU 4
        with acquire_gpu(mode="slots", lock_dir=tmp_path) as device:
            assert device == "5"
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "4,5"
    with pytest.raises(ValueError, match="auto, off, slots"):
        with acquire_gpu(mode="always"):
            pass


def fake_nvidia_smi(bin_dir: Path, output: str, status: int = 0, stderr: str = "") -> None:
    bin_dir.mkdir()
    exe = bin_dir / "nvidia-smi"
    quoted = [text.replace("'", "'\\''") for text in (output, stderr)]
    exe.write_text(f"#!/bin/sh\nprintf '{quoted[0]}'\nprintf '{quoted[1]}' >&2\nexit {status}\n")
    exe.chmod(0o755)


@pytest.mark.parametrize(
    "output, status, stderr",
    [
        # A GPU with a corrupted infoROM: nvidia-smi warns, lists every GPU and exits 14
        # (a warning: the GPUs work). Detection found no GPUs, and the run went to the CPU.
        ("WARNING: infoROM is corrupted at gpu 0000:B3:00.0\\n0\\n1\\n", 14, ""),
        ("0\\n1\\n", 14, "WARNING: infoROM is corrupted at gpu 0000:B3:00.0\\n"),
        # The same warning with exit 0 was taken for a device: a job that got its slot
        # set CUDA_VISIBLE_DEVICES to the warning, and the profile counted 3 GPUs.
        ("WARNING: infoROM is corrupted at gpu 0000:B3:00.0\\n0\\n1\\n", 0, ""),
    ],
)
def test_detection_keeps_the_gpus_nvidia_smi_lists_beside_a_warning(
    tmp_path, monkeypatch, caplog, output, status, stderr
):
    fake_nvidia_smi(tmp_path / "bin", output, status, stderr)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    assert resolve_devices() == ["0", "1"] and gpu_slots.concurrent_gpu_jobs() == 2
    assert "infoROM is corrupted" in caplog.text and "0,1" in caplog.text


@pytest.mark.parametrize(
    "output, status",
    [
        ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\\n", 9),
        ("Failed to initialize NVML: Driver/library version mismatch\\n", 18),
        ("No devices were found\\n", 6),
    ],
)
def test_detection_that_lists_no_gpu_finds_none(tmp_path, monkeypatch, caplog, output, status):
    fake_nvidia_smi(tmp_path / "bin", output, status)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    assert resolve_devices() == [] and gpu_slots.concurrent_gpu_jobs() == 1
    assert f"exit status {status}" in caplog.text and output.split("\\n")[0] in caplog.text


def test_device_pool_precedence(tmp_path, monkeypatch):
    fake_nvidia_smi(tmp_path / "bin", "0\\n1\\n")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    assert resolve_devices() == ["0", "1"]
    monkeypatch.setenv("SHARDFLOW_GPUS", "2, 3,3")
    assert resolve_devices() == ["2", "3"]
    assert resolve_devices([7, 6]) == ["7", "6"]
    assert resolve_devices("none") == []
    # CUDA_VISIBLE_DEVICES="" hides every GPU, whatever is listed or detected.
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert resolve_devices() == resolve_devices("0,1") == []


@pytest.mark.parametrize("visible, seen", [("-1", []), ("0,-1,1", ["0"]), ("1,x,0", ["1"]), ("GPU-3f2a,MIG-7c1e", ["GPU-3f2a", "MIG-7c1e"])])
def test_cuda_visible_devices_ends_at_its_first_entry_cuda_cannot_take(tmp_path, monkeypatch, visible, seen):
    """CUDA reads CUDA_VISIBLE_DEVICES up to its first invalid entry: `-1`, the usual way
    to hide every GPU, shows none, and `0,-1,1` shows GPU 0 alone. The pool was read as
    devices named "-1" (or 0, -1 and 1): the profile counted a GPU where CUDA has none, and
    the GPU jobs, asking for it, ran one at a time on the CPU instead of side by side."""
    fake_nvidia_smi(tmp_path / "bin", "0\n1\n")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert resolve_devices(mode="slots") == seen
    assert gpu_slots.concurrent_gpu_jobs() == max(1, len(seen))
    if not seen:
        assert resolve_devices() == resolve_devices("0,1") == []


def test_no_devices_means_cpu(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no nvidia-smi at all
    with acquire_gpu(lock_dir=tmp_path / "locks") as device:
        assert device is None and "CUDA_VISIBLE_DEVICES" not in os.environ
    monkeypatch.setenv("SHARDFLOW_GPUS", "")
    with acquire_gpu(lock_dir=tmp_path / "locks") as device:
        assert device is None
    assert not (tmp_path / "locks").exists()


def test_default_lock_dir(monkeypatch, tmp_path):
    assert gpu_slots.default_lock_dir() == Path(f"/tmp/shardflow-gpu-slots-{os.getuid()}")
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # a per-job tmpdir must not split the locks
    assert gpu_slots.default_lock_dir().parent == Path("/tmp")
    monkeypatch.setenv("SHARDFLOW_GPU_LOCK_DIR", str(tmp_path / "x"))
    assert gpu_slots.default_lock_dir() == tmp_path / "x"


def test_lock_files_in_a_shared_folder_are_writable_by_its_group(tmp_path):
    """SHARDFLOW_GPU_LOCK_DIR shared by several users: a lock file gets the folder's read
    and write bits whatever the umask (under the usual 022 it was 0644, and every other
    user's job then stopped opening it); a private folder keeps its files private."""
    shared, private = tmp_path / "shared", tmp_path / "private"
    shared.mkdir()
    shared.chmod(0o2775)
    private.mkdir()
    private.chmod(0o700)
    old = os.umask(0o022)
    try:
        with acquire_gpu("0", mode="slots", lock_dir=shared), acquire_gpu("0", mode="slots", lock_dir=private):
            pass
    finally:
        os.umask(old)
    assert lock_path(shared, "0").stat().st_mode & 0o777 == 0o664
    assert lock_path(private, "0").stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in shared.iterdir()) == ["gpu0.lock"]  # no part file left


def test_a_job_can_hold_several_devices_all_or_none(tmp_path):
    """A data-parallel job asks for N devices: it gets N distinct ones at once, and
    while fewer than N are free it holds none (no half-held pools to deadlock on)."""
    with acquire_gpu("0,1,2", mode="slots", lock_dir=tmp_path, count=2) as visible:
        assert visible == "0,1" and os.environ["CUDA_VISIBLE_DEVICES"] == "0,1"
        with pytest.raises(GpuSlotTimeout, match="no 2 free GPU slots at once"):
            with acquire_gpu("0,1,2", mode="slots", lock_dir=tmp_path, count=2, timeout=0.1, poll_interval=0.02):
                pass
        # The waiting job released device 2 when it gave up: a one-device job gets it.
        with acquire_gpu("0,1,2", mode="slots", lock_dir=tmp_path, timeout=0.1) as third:
            assert third == "2"
    with pytest.raises(ValueError, match="asks for 4 GPUs but the pool has 3"):
        with acquire_gpu("0,1,2", mode="slots", lock_dir=tmp_path, count=4):
            pass


def test_a_lock_file_is_made_under_a_name_no_other_job_uses(tmp_path):
    """Its temporary name was `.<name>.<pid>`: a job in another container with the same
    pid, making the same lock file at that moment, had its part truncated and unlinked
    under it (its link then failed). The name is now unique in the folder."""
    path = gpu_slots.lock_path(tmp_path, "0")
    theirs = path.with_name(f".{path.name}.{os.getpid()}")  # another container's part, in flight
    theirs.write_text("")
    gpu_slots._create_shared(path)
    assert path.is_file() and theirs.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([path.name, theirs.name])


def test_a_lock_folder_that_cannot_be_used_is_named(tmp_path, monkeypatch):
    """SHARDFLOW_GPU_LOCK_DIR pointing at something that is not a folder said only
    `[Errno 17] File exists`, and a folder this user cannot create files in named a
    temporary file in it (`.gpu0.lock.kekb6lje`): neither said it was the GPU lock folder,
    nor how to choose another. A failure of the same errno, naming the folder, now."""
    not_a_folder = tmp_path / "locks"
    not_a_folder.write_text("")
    with pytest.raises(FileExistsError) as caught:
        with acquire_gpu("0", mode="slots", lock_dir=not_a_folder):
            pass
    assert f"cannot make the GPU lock folder {not_a_folder}" in str(caught.value)
    assert "SHARDFLOW_GPU_LOCK_DIR" in str(caught.value)

    def refused(*args, **kwargs):  # what a non-root user gets in a folder it cannot write
        raise PermissionError(13, "Permission denied", str(tmp_path / "shared" / ".gpu0.lock.x"))

    (tmp_path / "shared").mkdir()
    monkeypatch.setattr(gpu_slots.tempfile, "mkstemp", refused)
    with pytest.raises(PermissionError) as caught:
        with acquire_gpu("0", mode="slots", lock_dir=tmp_path / "shared"):
            pass
    assert f"cannot create a lock file in the GPU lock folder {tmp_path / 'shared'}" in str(caught.value)
    assert "SHARDFLOW_GPU_LOCK_DIR" in str(caught.value)


def test_a_waiting_job_names_the_holders_in_its_log(tmp_path, caplog):
    """The workflow's jobs wait for a slot without a timeout (gpujob.pin_job_gpus), so
    the holders GpuSlotTimeout names never reached a run: a job waiting behind a slot
    held outside the run (an orphan of a killed Snakemake, another run on the same lock
    folder) logged only that it waits. Its log now names each holder, and, for a job
    that wants several GPUs at once, which slots it found free (listed before as
    "(no holder info)", like a held slot whose holder wrote nothing)."""
    caplog.set_level("INFO", logger="shardflow.core.gpu_slots")
    with acquire_gpu("0,1,2", mode="slots", lock_dir=tmp_path, job="first"):
        with acquire_gpu("0,1,2", mode="slots", lock_dir=tmp_path, job="second"):
            with pytest.raises(GpuSlotTimeout) as err:
                with acquire_gpu("0,1,2", mode="slots", lock_dir=tmp_path, count=2, timeout=0.1, poll_interval=0.02):
                    pass
    waiting = [r.getMessage() for r in caplog.records if "are free; waiting" in r.getMessage()]
    assert len(waiting) == 1
    for message in (waiting[0], str(err.value)):
        assert '"job": "first"' in message and '"job": "second"' in message
        assert "  gpu 2: free\n" in message + "\n" and "no holder info" not in message
