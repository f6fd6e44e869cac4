"""The Snakemake process that runs this job, and whether it is still there.

A job's outputs count only if the Snakemake that started it records them. When the
local controller is SIGKILLed, its running jobs are orphaned and carry on: a train job
would finish hours later and write its declared outputs with no record of the params
they were made with, and the next run, with other params, takes them as up to date.
So a long job notes which Snakemake runs it (`find`: the train launcher, the embed and
summarise jobs as they start) and, before it publishes (and at each checkpoint), checks
that this process is still the same one (pid and start time); if not, it keeps its
resume state and stops without outputs (`OrphanedJobError`), and the rerun resumes.

The controller is the nearest ancestor process running Snakemake: the main process
locally, the job-mode Snakemake inside a SLURM job or Kubernetes pod (which lives as
long as the job). Linux only (/proc); elsewhere `find` returns None and nothing is
checked.

`make status` asks the same of a whole run: whether the Snakemake that ran it is still
there, by the log it holds open (`snakemake_open_files`; shardflow.workflow.status).
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass

ENV = "SHARDFLOW_CONTROLLER"
# The train launcher, for the ranks it starts through torchrun (`bind_to_launcher`).
LAUNCHER_ENV = "SHARDFLOW_LAUNCHER"
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
PR_SET_CHILD_SUBREAPER = 36


def _stat(pid: int) -> tuple[int, str] | None:
    """(parent pid, start time in clock ticks) of `pid`, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as fh:
            text = fh.read()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()  # after "pid (comm) ": state, ppid, ...
    return int(fields[1]), fields[19]


def _args(pid: int) -> list[str]:
    """The command line of `pid` ([] when it is gone)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return [a.decode(errors="replace") for a in fh.read().split(b"\0") if a]
    except OSError:
        return []


def _is_snakemake(args: list[str]) -> bool:
    if any(os.path.basename(a) == "snakemake" for a in args[:2]):
        return True
    return "-m" in args[:-1] and args[args.index("-m") + 1] == "snakemake"


def _runs_snakemake(pid: int) -> bool:
    return _is_snakemake(_args(pid))


def snakemake_open_files() -> set[str] | None:
    """The files that the Snakemake processes on this host hold open, as real paths; None
    off Linux, where no process can be looked at. A run's Snakemake holds its own log
    (.snakemake/log/<start>.snakemake.log) open until it ends, and its jobs do not inherit
    it (Python opens files non-inheritable), so a run whose log is not among them has no
    process here. Another user's processes, whose open files cannot be read, are passed over."""
    if not os.path.isdir("/proc/self/fd"):
        return None
    found: set[str] = set()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or not _runs_snakemake(int(entry.name)):
            continue
        fds = f"/proc/{entry.name}/fd"
        try:
            names = os.listdir(fds)
        except OSError:  # gone, or another user's
            continue
        for name in names:
            try:
                found.add(os.readlink(os.path.join(fds, name)))
            except OSError:
                continue
    return found


def unseen_writer(path: str | os.PathLike) -> bool:
    """Whether the process that wrote `path` may be one whose open files this user cannot
    read (`snakemake_open_files` passes those over): the file is another user's, and this
    user is not root. A Snakemake log is its run's user's, so a live run of another user
    in the same folder (a shared project) would otherwise look like none."""
    try:
        owner = os.stat(path).st_uid
    except OSError:
        return False  # gone: no process writes it
    me = os.geteuid()
    return me != 0 and owner != me


@dataclass(frozen=True)
class Controller:
    pid: int
    start: str

    def alive(self) -> bool:
        found = _stat(self.pid)
        return found is not None and found[1] == self.start

    def to_env(self) -> str:
        return f"{self.pid}:{self.start}"

    @classmethod
    def from_env(cls, text: str | None) -> Controller | None:
        if not text:
            return None
        pid, _, start = text.partition(":")
        return cls(int(pid), start)


def this_process() -> Controller | None:
    """This process, as a Controller its children can check (None off Linux)."""
    found = _stat(os.getpid())
    return None if found is None else Controller(os.getpid(), found[1])


def find(pid: int | None = None) -> Controller | None:
    """The nearest ancestor of `pid` (default: this process) that runs Snakemake."""
    current = _stat(os.getpid() if pid is None else pid)
    while current is not None and current[0] > 1:
        parent = current[0]
        found = _stat(parent)
        if found is None:
            return None
        if _runs_snakemake(parent):
            return Controller(parent, found[1])
        current = found
    return None


def runs_one_job(pid: int | None = None) -> bool | None:
    """Whether the nearest Snakemake at or above `pid` (default: this process) is one that
    an executor started for a single job: `--mode remote`, the job-mode Snakemake inside
    a SLURM job or Kubernetes pod, whose GPUs the scheduler gave to that job alone. False
    for a run's own Snakemake (the one the user started, or a `--mode subprocess` one it
    spawned), which runs its local jobs side by side on whatever this host or allocation
    has. None where no Snakemake is found (off Linux, or not started by Snakemake)."""
    pid = os.getpid() if pid is None else pid
    while pid >= 1:
        args = _args(pid)
        if _is_snakemake(args):
            mode = None  # the last one given counts, as with argparse
            for i, arg in enumerate(args):
                if arg == "--mode" and i + 1 < len(args):
                    mode = args[i + 1]
                elif arg.startswith("--mode="):
                    mode = arg.partition("=")[2]
            return mode == "remote"
        found = _stat(pid) if pid > 1 else None  # PID 1 (a pod's first process) has no parent to look at
        if found is None:
            return None
        pid = found[0]
    return None


class OrphanedJobError(RuntimeError):
    """The Snakemake that started this job is gone: outputs written now would not be
    recorded. The job's resume state is kept for the rerun."""


def stop_if_gone(controller: Controller | None, kept: str) -> None:
    """Raise OrphanedJobError when `controller` (from `find`, at the job's start) is gone;
    `kept` says what the rerun resumes from. Nothing is checked without one."""
    if controller is not None and not controller.alive():
        raise OrphanedJobError(
            f"the Snakemake that started this job (pid {controller.pid}) is gone: outputs written now would not "
            f"be recorded, so none are written; {kept} (a rerun resumes from it)"
        )


def _prctl(option: int, value: int) -> None:
    """Linux's prctl(option, value); elsewhere nothing happens."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(option, value)
    except (OSError, AttributeError):
        pass


def die_with_parent() -> None:
    """Linux: this process gets SIGKILL when its parent dies (PR_SET_PDEATHSIG); for a
    `preexec_fn`, or called by the child itself. Elsewhere nothing happens."""
    _prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL))


def bind_to_launcher() -> None:
    """In a process the train launcher started through torchrun (a rank): die with
    torchrun, and stop now if the launcher is already gone.

    torchrun starts its ranks in sessions of their own, so a SIGKILL of the launcher
    (which takes torchrun with it) left them training on GPUs whose slots the launcher
    had freed, rank 0 holding the checkpoint lock the retry needs. Nothing is done
    outside such a process (no LAUNCHER_ENV)."""
    launcher = Controller.from_env(os.environ.get(LAUNCHER_ENV))
    if launcher is None:
        return
    parent = os.getppid()
    die_with_parent()
    if os.getppid() != parent or not launcher.alive():  # gone before the line above took effect
        raise OrphanedJobError(
            f"the train launcher (pid {launcher.pid}) that started this rank is gone: stopping before training"
        )


def unbind_from_launcher() -> None:
    """In a rank the train launcher started (LAUNCHER_ENV) that has agreed to stop and is
    saving its step (shardflow.train.trainer): no longer die with torchrun. torchrun ends
    at its third stop signal (a second scancel, a preemption's second SIGTERM: SLURM
    signals it as well as the launcher), and `bind_to_launcher` made that a SIGKILL of
    the rank mid-checkpoint. Unbound, the rank is adopted by the launcher
    (`adopt_orphans`), finishes its write and ends by its signal; SIGKILL (SLURM's at
    the end of KillWait, kill -9) still ends it. Nothing is done elsewhere."""
    if os.environ.get(LAUNCHER_ENV):
        _prctl(PR_SET_PDEATHSIG, 0)


def adopt_orphans() -> None:
    """Linux: the processes orphaned below this one (a rank whose torchrun has ended,
    `unbind_from_launcher`) become its children instead of init's (PR_SET_CHILD_SUBREAPER),
    so that `wait_for_children` waits for them too. Elsewhere nothing happens."""
    _prctl(PR_SET_CHILD_SUBREAPER, 1)


def wait_for_children(timeout: float) -> bool:
    """Until every child of this process has ended, adopted ones included (`adopt_orphans`),
    for at most `timeout` seconds; whether they all had. For a process whose children are
    its own to reap (the train launcher's: torchrun, then the ranks it left saving their
    step). Bounded: an adopted process that never ends (anything a rank left running)
    must not keep the job from ending."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return True
        if pid == 0:  # children left, none ended just now
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
