"""Lock files that name their holder, with real processes (flock is per open file)."""

from __future__ import annotations

import errno
import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from shardflow.core import locks

REPO = Path(__file__).resolve().parents[3]

# Takes the lock, says so, and holds it until killed.
HOLDER = (
    "import sys, time; from shardflow.core import locks; "
    "fd = locks.try_lock(sys.argv[1], job=sys.argv[2]); "
    "print('held' if fd is not None else 'refused', flush=True); time.sleep(60)"
)


@pytest.fixture
def hold(tmp_path):
    """Start a process holding `path` as `job`; kill every one started, at the end."""
    procs = []
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}

    def start(path, job):
        proc = subprocess.Popen(
            [sys.executable, "-c", HOLDER, str(path), job], stdout=subprocess.PIPE, text=True, env=env
        )
        procs.append(proc)
        assert proc.stdout.readline().strip() == "held"
        return proc

    yield start
    for proc in procs:
        proc.kill()
        proc.wait()
        proc.stdout.close()


def test_a_lock_another_process_holds_is_refused_and_names_that_process(tmp_path, hold):
    path = tmp_path / "train.lock"
    proc = hold(path, "train earlier")
    assert locks.try_lock(path, job="train now") is None
    info = json.loads(locks.holder(path))
    assert (info["pid"], info["job"], info["host"]) == (proc.pid, "train earlier", socket.gethostname())


def test_a_lock_left_by_a_killed_process_is_taken_over(tmp_path, hold):
    """SIGKILL runs no cleanup: the file still names the dead holder, but the kernel has
    dropped its flock. The new holder's info replaces all of the old (a longer old text
    must leave no tail behind: the file stays one JSON object)."""
    path = tmp_path / "train.lock"
    proc = hold(path, "an earlier train job with a much longer description than the next one")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert json.loads(locks.holder(path))["pid"] == proc.pid  # stale info, no lock
    fd = locks.try_lock(path, job="next", resume_dir="r")
    try:
        info = json.loads(locks.holder(path))
        assert (info["pid"], info["job"], info["resume_dir"]) == (os.getpid(), "next", "r")
    finally:
        locks.release(fd)


def test_two_opens_in_one_process_exclude_each_other(tmp_path):
    """flock belongs to an open file, not a process: a second try_lock in the holder's own
    process (another thread's job) is refused too, until the first is released."""
    path = tmp_path / "gpu0.lock"
    fd = locks.try_lock(path, job="first")
    assert fd is not None and locks.try_lock(path, job="second") is None
    locks.release(fd)
    again = locks.try_lock(path, job="second")
    assert again is not None
    locks.release(again)


def test_a_released_lock_keeps_its_file_and_names_no_holder(tmp_path):
    """The file is never unlinked (a waiter may hold it open); emptied, it names nobody."""
    path = tmp_path / "x.lock"
    locks.release(locks.try_lock(path, job="done"))
    assert path.is_file() and locks.holder(path) == "(no holder info)"
    assert locks.holder(tmp_path / "never.lock") == "(no lock file)"


def test_a_lock_whose_holder_info_cannot_be_written_is_not_kept(tmp_path, monkeypatch):
    """A full disk when the holder writes who it is: the error goes to the caller, and the
    lock goes with the fd (kept open, nobody could release it: every later try_lock in
    this process was refused)."""
    path = tmp_path / "gpu0.lock"

    def full(fd, data, offset):
        raise OSError(errno.ENOSPC, "No space left on device")

    with monkeypatch.context() as patch:
        patch.setattr(os, "pwrite", full)
        with pytest.raises(OSError, match="No space left"):
            locks.try_lock(path, job="first")
    fd = locks.try_lock(path, job="second")
    assert fd is not None and json.loads(locks.holder(path))["job"] == "second"
    locks.release(fd)


def test_a_holder_info_write_that_fails_names_the_lock_file(tmp_path, monkeypatch):
    """ENOSPC's own message names no file: the error says which lock it was writing, and
    stays an OSError of the same errno (callers catching OSError still do)."""
    path = tmp_path / "gpu0.lock"

    def full(fd, data, offset):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "pwrite", full)
    with pytest.raises(OSError) as caught:
        locks.try_lock(path, job="first")
    assert caught.value.errno == errno.ENOSPC
    assert str(caught.value) == f"[Errno 28] No space left on device while writing the holder info of lock file {path}"
