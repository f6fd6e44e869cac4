"""The train rule's launcher: where it runs, how many processes, what the trainer gets."""

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
