"""core.controller: a job finds the Snakemake that runs it, and sees when it is gone."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from shardflow.core import controller

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs /proc (Linux)")


def test_the_nearest_snakemake_ancestor_is_found(tmp_path):
    """A process tree as Snakemake makes it: `.../bin/snakemake` -> bash -> the job."""
    probe = tmp_path / "probe.txt"
    job = f"from shardflow.core import controller; open({str(probe)!r}, 'w').write(str(controller.find().pid))"
    fake = tmp_path / "bin" / "snakemake"
    fake.parent.mkdir()
    fake.write_text(
        "import os, subprocess, sys\n"
        f"open({str(tmp_path / 'own.txt')!r}, 'w').write(str(os.getpid()))\n"
        f"subprocess.run(['bash', '-c', {f'{sys.executable} -c {chr(34)}{job}{chr(34)}; true'!r}], check=True)\n"
    )
    proc = subprocess.run([sys.executable, str(fake)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert probe.read_text() == (tmp_path / "own.txt").read_text()


def test_a_controller_is_alive_until_it_exits_and_survives_the_environment():
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        start = controller._stat(sleeper.pid)[1]
        found = controller.Controller(sleeper.pid, start)
        assert found.alive()
        assert controller.Controller.from_env(found.to_env()) == found
        assert not controller.Controller(sleeper.pid, start + "0").alive()  # the pid, reused by another process
    finally:
        sleeper.kill()
        sleeper.wait()
    assert not found.alive()
    assert controller.Controller.from_env("") is None


@pytest.mark.parametrize(
    "snakemake_args, expected",
    [
        (["python", "-m", "snakemake", "--mode", "remote", "--target-jobs", "embed:chunk=3"], True),
        (["/venv/bin/snakemake", "--mode=remote"], True),
        (["/venv/bin/snakemake", "--profile", "local"], False),  # the run's own Snakemake
        (["python", "-m", "snakemake", "--mode", "subprocess"], False),  # one it spawned locally
        (["/bin/sh", "-c", "sleep 1"], None),  # no Snakemake above the job
    ],
)
def test_runs_one_job_reads_the_mode_of_the_nearest_snakemake(monkeypatch, snakemake_args, expected):
    """The job (pid 30) under bash (20), under `snakemake` as PID 1, as in a pod whose
    container command is Snakemake itself: PID 1 is looked at too."""
    tree = {30: (20, ["python", "scripts/embed.py"]), 20: (1, ["bash", "-c", "..."]), 1: (0, snakemake_args)}
    monkeypatch.setattr(controller, "_args", lambda pid: tree[pid][1] if pid in tree else [])
    monkeypatch.setattr(controller, "_stat", lambda pid: (tree[pid][0], "1") if pid in tree else None)
    assert controller.runs_one_job(30) is expected


def test_the_files_snakemake_processes_hold_open_are_found_not_other_processes(tmp_path):
    """A run's Snakemake holds its log open until it ends: a process whose command is
    `.../bin/snakemake` holding a file is found, one of another command (`tail -f` on the
    log) is not, and once the Snakemake exits its file is no longer held."""
    fake = tmp_path / "bin" / "snakemake"
    fake.parent.mkdir()
    fake.write_text("import sys\nlog = open(sys.argv[1], 'a')\nprint('ready', flush=True)\nsys.stdin.read()\n")
    other = tmp_path / "other.py"
    other.write_text(fake.read_text())
    held, read = tmp_path / "run.snakemake.log", tmp_path / "tailed.log"
    procs = [
        subprocess.Popen(
            [sys.executable, str(path), str(log)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        for path, log in ((fake, held), (other, read))
    ]
    try:
        assert [p.stdout.readline() for p in procs] == ["ready\n", "ready\n"]
        found = controller.snakemake_open_files()
        assert os.path.realpath(held) in found and os.path.realpath(read) not in found
    finally:
        for p in procs:
            p.stdin.close()
            p.wait(timeout=60)
    assert os.path.realpath(held) not in controller.snakemake_open_files()


def test_a_file_of_another_user_has_a_writer_this_user_cannot_see(tmp_path, monkeypatch):
    """/proc/<pid>/fd of another user's process cannot be read, so the writer of a file of
    theirs may be alive unseen; root reads every process's, and a file gone has no writer."""
    path = tmp_path / "run.snakemake.log"
    path.write_text("")
    owner = os.stat(path).st_uid
    monkeypatch.setattr(os, "geteuid", lambda: owner + 1)
    assert controller.unseen_writer(path) and not controller.unseen_writer(tmp_path / "gone.log")
    monkeypatch.setattr(os, "geteuid", lambda: owner)
    assert not controller.unseen_writer(path)
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert not controller.unseen_writer(path)


def test_waiting_for_children_is_bounded_and_says_whether_they_ended():
    """The train launcher waits for the ranks torchrun left saving their step: a process
    that never ends must not keep the job from ending. In a process of its own, whose
    only children are the script's (pytest's may hold servers other tests started)."""
    script = """
import subprocess, sys
from shardflow.core import controller
subprocess.Popen([sys.executable, "-c", "pass"])
assert controller.wait_for_children(30) is True
stuck = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
assert controller.wait_for_children(0.3) is False
stuck.kill()
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.stdout == "ok\n", done.stderr
