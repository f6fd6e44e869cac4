"""The train rule's launcher: where it runs, how many processes, what the trainer gets."""

import contextlib
import sys

import pytest

from shardflow.train import launch


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
    with caplog.at_level("WARNING"):
        launch.check_gpu_count("cpu", 0, rest)  # a CPU job trains in one process, as documented, and says so
    assert "train.gpus is 4 but this job runs on the CPU: one process" in caplog.text
    launch.check_gpu_count("cuda:0", 1, ["--params", '{"n_layer": 2}'])  # 1: not recorded
    with pytest.raises(SystemExit, match="train.gpus is 1 but this job was given 2"):
        launch.check_gpu_count("cuda:0", 2, ["--params", "{}"])


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


def test_a_rank_whose_launcher_is_already_gone_stops_before_training(monkeypatch):
    import os

    from shardflow.core import controller

    monkeypatch.setattr(controller, "die_with_parent", lambda: None)  # not this test runner
    monkeypatch.setenv(controller.LAUNCHER_ENV, controller.Controller(os.getpid(), "another start").to_env())
    with pytest.raises(controller.OrphanedJobError, match=r"train launcher \(pid \d+\) that started this rank is gone"):
        controller.bind_to_launcher()
    monkeypatch.setenv(controller.LAUNCHER_ENV, controller.this_process().to_env())
    controller.bind_to_launcher()  # alive: nothing happens (its parent is this test's runner)
