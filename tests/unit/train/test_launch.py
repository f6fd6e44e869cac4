"""The train rule's launcher: where it runs, how many processes, what the trainer gets."""

import contextlib
import json
import os
import sys
import time

import pytest
import torch

from shardflow.core.failures import RepeatedFailureError
from shardflow.train import launch
from shardflow.train.shards import ShardFormatError


def test_a_cpu_job_runs_one_process_on_the_cpu_whatever_gpus_says():
    assert launch.processes("cpu", 0) == 1
    assert launch.processes("cpu", 4) == 1
    assert launch.trainer_args(["--data", "d"], "cpu", 1, 2) == ["--data", "d", "--device", "cpu", "--threads", "2"]


def test_n_gpus_run_n_torchrun_processes_each_on_its_local_rank():
    assert launch.processes("auto", 4) == 4
    args = launch.trainer_args(["--out", "o"], "cuda:1", 4, 8)
    assert args[-4:] == ["--device", "cuda", "--threads", "2"]  # cuda:LOCAL_RANK per rank, cores shared
    cmd = launch.torchrun_command(4, args)
    assert cmd[:5] == [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=4"]
    assert cmd[5:8] == ["-m", "shardflow.train", "--out"]


def test_one_gpu_keeps_the_configured_device():
    assert launch.trainer_args([], "cuda:1", 1, None) == ["--device", "cuda:1"]
    assert launch.trainer_args([], "auto", 1, None) == ["--device", "auto"]


def test_a_cuda_index_is_refused_where_the_job_cannot_see_it_and_ignored_under_torchrun(
    tmp_path, launcher, monkeypatch
):
    """One GPU: the trainer runs on the cuda:N given, so cuda:1 where CUDA_VISIBLE_DEVICES
    lists one GPU stops before training (core.gpujob.check_visible_index). Two GPUs: each
    rank is given `--device cuda` and takes cuda:LOCAL_RANK, so any index trains, as it
    did before the check."""
    import shardflow.train.__main__ as trainer_main
    from shardflow.core import gpu_slots

    monkeypatch.setattr(gpu_slots, "_pinned", None)  # pinning off (launcher_argv): CUDA_VISIBLE_DEVICES as it is
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    monkeypatch.setattr(trainer_main, "main", lambda args: pytest.fail("trained on a device it cannot see"))
    with pytest.raises(ValueError, match=r"^gpu_jobs.device 'cuda:1': this job sees 1 GPU"):
        launch.main(launcher_argv(tmp_path, attempt=1, device="cuda:1", gpus=1))
    got = {}
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    monkeypatch.setattr(launch, "run_ranks", lambda cmd, reports=None, held=None: got.setdefault("cmd", cmd) and 0)
    assert launch.main(launcher_argv(tmp_path, attempt=1, device="cuda:5", gpus=2)) == 0
    assert got["cmd"][got["cmd"].index("--device") + 1] == "cuda"


def test_arguments_after_the_separator_go_to_the_trainer():
    args, rest = launch.parse_args(["--gpus", "2", "--gpu-jobs", "{}", "--", "--data", "x", "--gpus", "9"])
    assert args.gpus == 2 and rest == ["--data", "x", "--gpus", "9"]
    with pytest.raises(SystemExit):
        launch.parse_args(["--gpu-jobs", "{}"])  # --gpus is required


def test_a_gpu_job_given_fewer_gpus_than_train_gpus_stops_naming_both(caplog):
    rest = ["--data", "d", "--params", '{"gpus": 4, "n_layer": 2}']
    with pytest.raises(SystemExit, match=r"train.gpus is 4 but this job was given 2 GPU\(s\)"):
        launch.check_gpu_count("cuda:0", 2, rest)
    launch.check_gpu_count("cuda:0", 4, rest)
    with caplog.at_level("INFO"):
        launch.check_gpu_count("cpu", 0, rest)  # a CPU job trains the 4 processes' batch in one, and says so
    assert "train.gpus is 4 but this job runs on the CPU: one process trains the micro-batches of all 4" in caplog.text
    launch.check_gpu_count("cuda:0", 1, ["--params", '{"n_layer": 2}'])  # 1: not recorded
    with pytest.raises(SystemExit, match="train.gpus is 1 but this job was given 2"):
        launch.check_gpu_count("cuda:0", 2, ["--params", "{}"])


def test_the_gpu_count_is_read_from_the_params_the_trainer_reads():
    """argparse takes the last --params, in either spelling; so does the count check."""
    launch.check_gpu_count("cuda:0", 2, ["--params", '{"gpus": 4}', "--params", '{"gpus": 2}'])
    launch.check_gpu_count("cuda:0", 2, ['--params={"gpus": 2}'])
    with pytest.raises(SystemExit, match="train.gpus is 4 but this job was given 2"):
        launch.check_gpu_count("cuda:0", 2, ["--params", '{"gpus": 2}', '--params={"gpus": 4}'])


def _gone(pid: int) -> bool:
    """No such process, or a zombie nobody reaped (PID 1 in a container may not)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def _wait_for(condition, seconds: float) -> bool:
    import time

    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.1)
    return condition()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG and /proc are Linux's")
def test_a_killed_launcher_takes_torchrun_and_its_ranks_with_it(tmp_path):
    """torchrun starts its ranks in sessions of their own: with only torchrun bound to the
    launcher, a SIGKILLed launcher left them running on GPUs whose slots it had freed.
    Real torchrun, two CPU ranks that bind themselves as the trainer's do."""
    import os
    import signal
    import subprocess

    rank = tmp_path / "rank.py"
    rank.write_text(
        "import os, sys, time\n"
        "from shardflow.core import controller\n"
        "controller.bind_to_launcher()\n"
        "open(os.path.join(sys.argv[1], 'rank' + os.environ['LOCAL_RANK']), 'w').write(str(os.getpid()))\n"
        "time.sleep(120)\n"
    )
    launcher = (
        "import sys\n"
        "from shardflow.train import launch\n"
        "sys.exit(launch.run_ranks([sys.executable, '-m', 'torch.distributed.run', '--standalone',"
        " '--nproc_per_node=2', sys.argv[1], sys.argv[2]]))\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", launcher, str(rank), str(tmp_path)], start_new_session=True)
    ranks: list[int] = []
    try:
        pids = [tmp_path / "rank0", tmp_path / "rank1"]
        assert _wait_for(lambda: all(p.exists() and p.read_text() for p in pids), 90), "the ranks did not start"
        ranks += [int(p.read_text()) for p in pids]
        assert not any(_gone(r) for r in ranks)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        assert _wait_for(lambda: all(_gone(r) for r in ranks), 20), "ranks outlived their launcher"
        ranks.clear()  # gone: their pids may already be another process's
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        for r in ranks:  # when the test fails, its ranks would sleep on
            with contextlib.suppress(ProcessLookupError):
                os.kill(r, signal.SIGKILL)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
@pytest.mark.parametrize("name", ["SIGTERM", "SIGHUP"])
def test_a_sigtermed_launcher_passes_the_signal_to_torchrun_and_ends_by_it_once_torchrun_has(tmp_path, name):
    """SIGTERM to the launcher (a SLURM scancel signals every process of the job) killed it at once, and torchrun and the ranks with it
    (PR_SET_PDEATHSIG): no rank could save its step. Now torchrun gets the signal (which it
    passes to the ranks) and the time to end, and the launcher then ends by SIGTERM, a
    retried failure as before. The stand-in for torchrun takes a while to "checkpoint".
    SIGHUP alike: a closed terminal's reaches the launcher, not torchrun (a session of its own)."""
    import signal
    import subprocess

    signum = getattr(signal, name)

    marker = tmp_path / "torchrun"
    stand_in = tmp_path / "torchrun.py"
    stand_in.write_text(
        "import os, signal, sys, time\n"
        "def stop(signum, frame):\n"
        "    time.sleep(0.5)\n"
        "    open(sys.argv[1], 'w').write(signal.Signals(signum).name)\n"
        "    signal.signal(signum, signal.SIG_DFL)\n"
        "    os.kill(os.getpid(), signum)\n"
        "signal.signal(signal.SIGTERM, stop)\n"
        "signal.signal(signal.SIGHUP, stop)\n"
        "open(sys.argv[1], 'w').write('running')\n"
        "time.sleep(60)\n"
    )
    launcher = (
        "import sys\n"
        "from shardflow.train import launch\n"
        "launch.pin_job_gpus = lambda settings, gpus, job, **_: ('cuda', '0,1')\n"
        f"launch.torchrun_command = lambda nproc, args: [sys.executable, {str(stand_in)!r}, {str(marker)!r}]\n"
        "sys.exit(launch.main(['--gpus', '2', '--gpu-jobs', '{}', '--', '--params', '{\"gpus\": 2}']))\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", launcher], start_new_session=True, stderr=subprocess.PIPE, text=True)
    try:
        assert _wait_for(lambda: marker.exists() and marker.read_text() == "running", 60), "torchrun did not start"
        os.kill(proc.pid, signum)
        _, stderr = proc.communicate(timeout=30)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert marker.read_text() == name, stderr[-3000:]  # given the signal, and the time to act on it
    assert proc.returncode == -signum, stderr[-3000:]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG and /proc are Linux's")
def test_ctrl_c_in_a_terminal_reaches_the_launcher_alone_and_the_rank_finishes_its_checkpoint(tmp_path):
    """torchrun shared the launcher's process group, so each Ctrl-C in a terminal reached
    it, and the first twice (the terminal's SIGINT and the launcher's copy); torchrun
    survives two, and at the third its ranks, bound to it, were SIGKILLed mid-checkpoint.
    torchrun now runs in a session of its own and gets the launcher's copy of the first
    signal only. Ctrl-C three times: two where the first one's copies reach torchrun
    apart, which is usual but not certain (two pending alike are one). Real torchrun, one
    rank standing in for the trainer: told to stop, it takes 1.5 s to "checkpoint"."""
    import signal
    import subprocess

    pid, saved = tmp_path / "pid", tmp_path / "saved"
    rank = tmp_path / "rank.py"
    rank.write_text(
        "import os, signal, sys, time\n"
        "from shardflow.core import controller\n"
        "controller.bind_to_launcher()\n"
        "told = []\n"
        "for s in (signal.SIGINT, signal.SIGTERM):\n"
        "    signal.signal(s, lambda signum, frame: told.append(signum))\n"
        f"open({str(pid)!r}, 'w').write(str(os.getpid()))\n"
        "while not told:\n"
        "    time.sleep(0.05)\n"
        "time.sleep(1.5)\n"
        f"open({str(saved)!r}, 'w').write(signal.Signals(told[0]).name)\n"
    )
    launcher = _launcher_of(rank)
    # The launcher leads a process group, as a shell's foreground job does; killpg is the terminal.
    proc = subprocess.Popen([sys.executable, "-c", launcher], start_new_session=True, stderr=subprocess.PIPE, text=True)
    ranks: list[int] = []
    try:
        assert _wait_for(lambda: pid.exists() and pid.read_text(), 90), "the rank did not start"
        ranks.append(int(pid.read_text()))
        for _ in range(3):
            os.killpg(proc.pid, signal.SIGINT)
            time.sleep(0.3)
        _, stderr = proc.communicate(timeout=30)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        for r in ranks:
            with contextlib.suppress(ProcessLookupError):
                os.kill(r, signal.SIGKILL)
    assert saved.exists() and saved.read_text() == "SIGINT", stderr[-3000:]
    assert proc.returncode == -signal.SIGINT, stderr[-3000:]
    said = "SIGINT: passed to torchrun, whose ranks save the step they reach, then ending (a second signal is ignored"
    assert stderr.count(said) == 1, stderr[-3000:]  # at the first Ctrl-C, and at no other


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG, subreapers and /proc are Linux's")
def test_a_third_sigterm_ends_torchrun_but_not_the_rank_writing_its_checkpoint(tmp_path):
    """SLURM signals every process of a job: a second scancel, or a preemption's second
    SIGTERM at the end of GraceTime, is torchrun's third signal, which ends it, and its
    ranks, bound to it, were SIGKILLed mid-checkpoint. A rank that has agreed to stop now
    unbinds itself (the trainer's stop_on), and the launcher, which adopts the ranks
    torchrun leaves, ends after them, so the job's step outlasts the write. Real launcher
    and torchrun; one rank standing in for the trainer takes 2 s to "checkpoint"."""
    import signal
    import subprocess

    pids, unbound, saved = tmp_path / "pids", tmp_path / "unbound", tmp_path / "saved"
    rank = tmp_path / "rank.py"
    rank.write_text(
        "import os, time\n"
        "from shardflow.core import controller\n"
        "from shardflow.core.signals import Held\n"
        "controller.bind_to_launcher()\n"
        "with Held() as held:\n"
        f"    open({str(pids)!r}, 'w').write(f'{{os.getppid()}} {{os.getpid()}}')\n"
        "    while held.received is None:\n"
        "        time.sleep(0.05)\n"
        "    controller.unbind_from_launcher()\n"
        f"    open({str(unbound)!r}, 'w').close()\n"
        "    time.sleep(2)\n"
        f"    open({str(saved)!r}, 'w').write('saved')\n"
    )
    launcher = _launcher_of(rank)
    log = tmp_path / "stderr"  # not a pipe, which the rank holds open after the launcher ends
    with open(log, "w") as err:
        proc = subprocess.Popen([sys.executable, "-c", launcher], start_new_session=True, stderr=err)
    job: list[int] = []  # torchrun, the rank
    try:
        assert _wait_for(lambda: pids.exists() and len(pids.read_text().split()) == 2, 90), "the rank did not start"
        job += [int(p) for p in pids.read_text().split()]
        for n in range(3):  # as SLURM does: every process of the job
            for pid in (proc.pid, *job):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
            # the rank's stop path under way, whatever the load on this host; then 0.3 s apart
            assert n > 0 or _wait_for(unbound.exists, 30), log.read_text()[-3000:]
            time.sleep(0.3)
        proc.wait(timeout=30)
        assert saved.exists(), log.read_text()[-3000:]  # written before the launcher ended
        assert all(_gone(p) for p in job), log.read_text()[-3000:]
        job.clear()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        for p in job:  # when the test fails, torchrun and the rank run in sessions of their own
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGKILL)
    assert proc.returncode == -signal.SIGTERM, log.read_text()[-3000:]


def test_a_rank_whose_launcher_is_already_gone_stops_before_training(monkeypatch):
    import os

    from shardflow.core import controller

    monkeypatch.setattr(controller, "die_with_parent", lambda: None)  # not this test runner
    monkeypatch.setenv(controller.LAUNCHER_ENV, controller.Controller(os.getpid(), "another start").to_env())
    with pytest.raises(controller.OrphanedJobError, match=r"train launcher \(pid \d+\) that started this rank is gone"):
        controller.bind_to_launcher()
    monkeypatch.setenv(controller.LAUNCHER_ENV, controller.this_process().to_env())
    controller.bind_to_launcher()  # alive: nothing happens (its parent is this test's runner)


# ------------------------------------------------- a retry repeats no input error


def launcher_argv(tmp_path, attempt, device="cpu", gpus=0, data=None, train=None):
    """The train rule's command as Snakemake formats it (rules/train.smk)."""
    settings = {"device": device, "pinning": "off", "devices": None, "attempt": attempt}
    shards = data or tmp_path / "shards"
    if data is None and not shards.exists():
        shards.mkdir()
        (shards / "metadata.json").write_text("{}")
    params = json.dumps({**(train or {"n_layer": 1}), **({"gpus": gpus} if gpus > 1 else {})})
    return [
        "--gpus",
        str(gpus),
        "--gpu-jobs",
        json.dumps(settings),
        "--threads",
        "1",
        "--job",
        "train out",
        "--",
        "--data",
        str(shards),
        "--out",
        str(tmp_path / "out"),
        "--resume-dir",
        str(tmp_path / ".resume" / "train"),
        "--params",
        params,
    ]


@pytest.fixture
def launcher(monkeypatch, tmp_path):
    """launch.main in this process: its excepthook and logging put back, no Snakemake."""
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)
    monkeypatch.setattr(launch.controller, "find", lambda: None)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    # launch.main hands the Snakemake it found to the trainer through the environment: a
    # test's fake one must not reach the trainers of later tests in this process.
    # (setenv first: monkeypatch undoes a delenv only of a variable that was there.)
    monkeypatch.setenv(launch.controller.ENV, "")
    monkeypatch.delenv(launch.controller.ENV)
    return tmp_path / ".resume" / "train.failure.json"


def bad_shard(*args, **kwargs):
    raise ShardFormatError("shards/train_0.bin: not an llm.c shard (magic 0)")


def test_one_process_records_its_input_error_and_the_retry_stops_before_pinning(tmp_path, launcher, monkeypatch):
    import shardflow.train.__main__ as trainer_main

    monkeypatch.setattr(trainer_main, "main", bad_shard)
    with pytest.raises(ShardFormatError):
        launch.main(launcher_argv(tmp_path, attempt=1))
    record = json.loads(launcher.read_text())  # beside the resume folder every attempt shares
    assert (record["job"], record["attempt"], record["error"]) == ("train out", 1, "ShardFormatError")

    monkeypatch.setattr(trainer_main, "main", lambda args: pytest.fail("the retry trained"))
    monkeypatch.setattr(launch, "pin_job_gpus", lambda *a, **k: pytest.fail("the retry pinned GPUs"))
    with pytest.raises(RepeatedFailureError, match=r"^train out: attempt 1 failed with ShardFormatError: shards/"):
        launch.main(launcher_argv(tmp_path, attempt=2))


def test_a_retry_in_place_stops_though_its_params_say_attempt_1(tmp_path, launcher, monkeypatch):
    """Locally and in a pod, Snakemake retries with the params of attempt 1: the record
    of the same Snakemake process says it is a retry. Another process is a new run."""
    import shardflow.train.__main__ as trainer_main

    snakemake = launch.controller.Controller(4242, "77")
    monkeypatch.setattr(launch.controller, "find", lambda: snakemake)
    monkeypatch.setattr(trainer_main, "main", bad_shard)
    with pytest.raises(ShardFormatError):
        launch.main(launcher_argv(tmp_path, attempt=1))
    with pytest.raises(RepeatedFailureError):
        launch.main(launcher_argv(tmp_path, attempt=1))
    monkeypatch.setattr(launch.controller, "find", lambda: launch.controller.Controller(4343, "78"))
    monkeypatch.setattr(trainer_main, "main", lambda args: {})
    assert launch.main(launcher_argv(tmp_path, attempt=1)) == 0  # a new run tries again
    assert not launcher.exists()


def test_a_transient_error_or_a_run_by_hand_records_nothing(tmp_path, launcher, monkeypatch):
    import shardflow.train.__main__ as trainer_main

    def oom(args):
        raise torch.OutOfMemoryError("CUDA out of memory")

    monkeypatch.setattr(trainer_main, "main", oom)
    with pytest.raises(torch.OutOfMemoryError):
        launch.main(launcher_argv(tmp_path, attempt=1))
    assert not launcher.exists()
    monkeypatch.setattr(trainer_main, "main", bad_shard)
    argv = launcher_argv(tmp_path, attempt=None)  # no attempt: not started by the workflow
    with pytest.raises(ShardFormatError):
        launch.main(argv)
    assert not launcher.exists()


def test_an_attempt_out_of_memory_records_its_micro_batch_and_the_retry_halves_it(tmp_path, launcher, monkeypatch):
    """One process (the trainer in the launcher), as a local retry in place runs it (its
    params still say attempt 1; the same Snakemake): the attempt that ran out of memory
    at micro-batch 4 records it beside the resume folder, and the retry trains with 2 x
    grad_accum 2, the same tokens per step; the record stays for later runs."""
    from tests.unit.train.test_trainer import TINY, fits_in, write_tiny_shards

    shards = write_tiny_shards(tmp_path / "shards")
    me = launch.controller.Controller(os.getpid(), launch.controller._stat(os.getpid())[1])  # alive: no orphan
    monkeypatch.setattr(launch.controller, "find", lambda: me)
    fits_in({"windows": 2}, monkeypatch)
    argv = [*launcher_argv(tmp_path, 1, data=shards, train=dict(TINY, max_iters=2)), "--sample-tokens", "2"]
    with pytest.raises(torch.OutOfMemoryError):
        launch.main(argv)
    record = json.loads(launcher.read_text())
    assert (record["kind"], record["attempt"], record["error"]) == ("out_of_memory", 1, "OutOfMemoryError")
    assert {k: record["out_of_memory"][k] for k in ("micro_batch", "next_micro_batch", "device")} == {
        "micro_batch": 4,
        "next_micro_batch": 2,
        "device": "cpu",
    }

    assert launch.main(argv) == 0
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert (metrics["micro_batch"], metrics["grad_accum"], metrics["tokens_per_step"]) == (2, 2, 4 * 16)
    assert json.loads(launcher.read_text()) == record


def test_a_rank_out_of_memory_is_recorded_and_the_next_attempt_tells_the_ranks(tmp_path, launcher, monkeypatch):
    from shardflow.core.failures import mark_out_of_memory

    details = {"micro_batch": 8, "next_micro_batch": 4, "next_grad_accum": 2, "device": "NVIDIA H100", "settings": "s"}
    oom = mark_out_of_memory(torch.OutOfMemoryError("CUDA out of memory"), details)
    monkeypatch.setattr(launch, "pin_job_gpus", lambda settings, gpus, job, **_: ("cuda", "0,1"))
    monkeypatch.setattr(launch, "run_ranks", fake_torchrun(RuntimeError("Connection closed by peer"), oom))
    monkeypatch.setenv(launch.failures.RANK_REPORTS_ENV, "")
    monkeypatch.setenv("RANK", "")
    assert launch.main(launcher_argv(tmp_path, attempt=1, device="cuda", gpus=2)) == 1
    record = json.loads(launcher.read_text())
    assert (record["kind"], record["message"], record["out_of_memory"]) == (
        "out_of_memory",
        "rank 1: CUDA out of memory",
        details,
    )

    got = {}
    monkeypatch.setattr(launch, "run_ranks", lambda cmd, reports=None, held=None: got.setdefault("cmd", cmd) and 0)
    assert launch.main(launcher_argv(tmp_path, attempt=2, device="cuda", gpus=2)) == 0  # no RepeatedFailureError
    assert json.loads(launch.option(got["cmd"], "--out-of-memory")) == details


def fake_torchrun(*ranks):
    """run_ranks standing in for torchrun: each rank (None: killed, no report) ends in
    the error given, reported as shardflow.train's __main__ reports it."""

    def run(cmd, reports=None, held=None):
        for rank, exc in enumerate(ranks):
            if exc is not None:
                os.environ.update({launch.failures.RANK_REPORTS_ENV: reports, "RANK": str(rank)})
                try:
                    with launch.failures.reporting_rank_error():
                        raise exc
                except BaseException:  # noqa: BLE001 - the rank ended on it
                    pass
                time.sleep(0.01)
        return 1

    return run


def test_a_rank_out_of_memory_while_the_job_was_told_to_stop_is_still_recorded(tmp_path, launcher, monkeypatch):
    """A signal held while torchrun ran skipped the ranks' reports: a rank that ran out
    of memory in the step it was finishing went unrecorded, and the retry ran out again
    at the same micro-batch. A rank the signal ended reports nothing (SIGTERM) or a
    KeyboardInterrupt, which records nothing (failures.rank_failure), so only a real
    error is recorded; the launcher still ends by the signal."""
    import signal

    from shardflow.core.failures import mark_out_of_memory

    details = {"micro_batch": 8, "next_micro_batch": 4, "next_grad_accum": 2, "device": "NVIDIA H100", "settings": "s"}
    oom = mark_out_of_memory(torch.OutOfMemoryError("CUDA out of memory"), details)
    ranks = fake_torchrun(KeyboardInterrupt(), oom)

    def told_to_stop(cmd, reports=None, held=None):
        signal.raise_signal(signal.SIGINT)  # held: noted, the ranks go on
        return ranks(cmd, reports, held)

    monkeypatch.setattr(launch, "pin_job_gpus", lambda settings, gpus, job, **_: ("cuda", "0,1"))
    monkeypatch.setattr(launch, "run_ranks", told_to_stop)
    monkeypatch.setenv(launch.failures.RANK_REPORTS_ENV, "")
    monkeypatch.setenv("RANK", "")
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            launch.main(launcher_argv(tmp_path, attempt=1, device="cuda", gpus=2))
    finally:
        signal.signal(signal.SIGINT, before)
    record = json.loads(launcher.read_text())
    assert (record["kind"], record["message"]) == ("out_of_memory", "rank 1: CUDA out of memory")


@pytest.mark.parametrize(
    "ranks, recorded",
    [
        ((ShardFormatError("train_0.bin: bad magic"), None), True),  # rank 1 stopped by torchrun
        ((ShardFormatError("train_0.bin: bad magic"), ShardFormatError("train_0.bin: bad magic")), True),
        ((None, torch.OutOfMemoryError("CUDA out of memory")), False),
        ((ShardFormatError("train_0.bin: bad magic"), torch.OutOfMemoryError("CUDA out of memory")), False),
        ((None, None), False),  # killed: a signal, the OOM killer
    ],
)
def test_ranks_under_torchrun_record_only_a_deterministic_failure(tmp_path, launcher, monkeypatch, ranks, recorded):
    monkeypatch.setattr(launch, "pin_job_gpus", lambda settings, gpus, job, **_: ("cuda", "0,1"))
    monkeypatch.setattr(launch, "run_ranks", fake_torchrun(*ranks))
    monkeypatch.setenv(launch.failures.RANK_REPORTS_ENV, "")  # so the fake ranks' values go at teardown
    monkeypatch.setenv("RANK", "")
    assert launch.main(launcher_argv(tmp_path, attempt=1, device="cuda", gpus=2)) == 1
    assert launcher.exists() is recorded
    if recorded:
        assert json.loads(launcher.read_text())["message"] == "rank 0: train_0.bin: bad magic"
        with pytest.raises(RepeatedFailureError, match="attempt 1 failed with ShardFormatError: rank 0: train_0"):
            launch.main(launcher_argv(tmp_path, attempt=2, device="cuda", gpus=2))


def test_no_folder_for_the_ranks_reports_runs_them_unguarded(tmp_path, launcher, monkeypatch, capfd):
    """A full or read-only temporary folder must not fail the job at its guard."""

    def no_space(*args, **kwargs):
        raise OSError(28, "No space left on device")

    got = {}

    def torchrun(cmd, reports=None, held=None):
        got["reports"] = reports
        return 0

    monkeypatch.setattr(launch, "pin_job_gpus", lambda settings, gpus, job, **_: ("cuda", "0,1"))
    monkeypatch.setattr(launch.tempfile, "mkdtemp", no_space)
    monkeypatch.setattr(launch, "run_ranks", torchrun)
    assert launch.main(launcher_argv(tmp_path, attempt=1, device="cuda", gpus=2)) == 0
    assert got == {"reports": None}
    assert "no failure record for this attempt (no folder for the ranks' reports" in capfd.readouterr().err


def test_a_rank_reports_the_error_that_ends_it(tmp_path, monkeypatch):
    """`python -m shardflow.train` as torchrun runs it, in this process: a bad --params
    ends it with a JSONDecodeError, written where the launcher named."""
    import runpy

    monkeypatch.setenv(launch.failures.RANK_REPORTS_ENV, str(tmp_path))
    monkeypatch.setenv("RANK", "1")
    monkeypatch.delitem(sys.modules, "shardflow.train.__main__", raising=False)  # runpy runs it afresh
    monkeypatch.setattr(sys, "argv", ["shardflow.train", "--data", "d", "--out", "o", "--params", "{n_layer"])
    with pytest.raises(json.JSONDecodeError):
        runpy.run_module("shardflow.train", run_name="__main__")
    (report,) = launch.failures.rank_reports(tmp_path)
    assert (report["rank"], report["error"], report["deterministic"]) == ("1", "JSONDecodeError", True)


def test_the_real_launcher_on_a_changed_shard_stops_its_retry_before_training(tmp_path):
    """`python -m shardflow.train.launch` twice, as two attempts of the rule's command: a
    shard changed since it was written (one process, on the CPU) is recorded, and the
    second attempt stops at once, naming it, without importing the trainer."""
    import subprocess

    from tests.unit.train.test_trainer import write_tiny_shards

    shards = write_tiny_shards(tmp_path / "shards")
    with open(shards / "shard_1.bin", "r+b") as fh:
        fh.seek(1024)
        fh.write(b"\5\0")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "OMP_NUM_THREADS": "1"}

    def attempt(n):
        cmd = [sys.executable, "-m", "shardflow.train.launch", *launcher_argv(tmp_path, n, data=shards)]
        return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)

    first = attempt(1)
    assert first.returncode == 1 and "ValueError" in first.stderr, first.stderr[-3000:]
    second = attempt(2)
    assert second.returncode == 1, second.stderr[-3000:]
    assert "RepeatedFailureError: train out: attempt 1 failed with ValueError" in second.stderr
    assert "shard_1.bin: sha256" in second.stderr and "shardflow.train:" not in second.stderr  # no trainer log


def test_a_checkpoint_of_other_parameters_is_recorded_and_the_retry_stops(tmp_path, launcher, monkeypatch):
    """The trainer's refusal of the checkpoint it would resume from (here: written with
    another learning rate) fails every attempt the same way: attempt 1 records it beside
    the resume folder, and attempt 2 stops before pinning GPUs or loading the shards."""
    from shardflow.train.trainer import TrainParams, train
    from tests.unit.train.test_trainer import TINY, write_tiny_shards

    shards = write_tiny_shards(tmp_path / "shards")
    base = dict(TINY, max_iters=2, device="cpu")
    train(
        shards,
        tmp_path / "earlier",
        TrainParams(**base),
        resume_dir=tmp_path / ".resume" / "train",
        keep_resume=True,
        sample_tokens=1,
    )
    argv = launcher_argv(tmp_path, attempt=1, data=shards, train=dict(base, lr=2e-3))
    with pytest.raises(ValueError, match=r"was written with other parameters \(lr\)"):
        launch.main(argv)
    record = json.loads(launcher.read_text())
    assert (record["attempt"], record["error"]) == (1, "CheckpointError")

    monkeypatch.setattr(launch, "pin_job_gpus", lambda *a, **k: pytest.fail("the retry pinned GPUs"))
    with pytest.raises(RepeatedFailureError, match=r"attempt 1 failed with CheckpointError: checkpoint .* \(lr\)"):
        launch.main(launcher_argv(tmp_path, attempt=2, data=shards, train=dict(base, lr=2e-3)))


def _launcher_of(rank) -> str:
    """A script running the real launcher of a 2-GPU job (its GPUs pinned by a stand-in)
    whose torchrun starts one process: the script `rank`."""
    return (
        "import sys\n"
        "from shardflow.train import launch\n"
        "launch.pin_job_gpus = lambda settings, gpus, job, **_: ('cuda', '0,1')\n"
        "launch.torchrun_command = lambda nproc, args: [sys.executable, '-m', 'torch.distributed.run',"
        f" '--standalone', '--nproc_per_node=1', {str(rank)!r}]\n"
        "sys.exit(launch.main(['--gpus', '2', '--gpu-jobs', '{}', '--', '--params', '{\"gpus\": 2}']))\n"
    )
