"""Exclusive lock files that say who holds them.

A lock is an `flock` on an open file: the kernel drops it when the holder's last file
descriptor closes, so a process that exits, crashes or is SIGKILLed never leaves a
stale lock behind. The holder writes who it is (pid, host, job, since when) into the
file, for the message of whoever finds it taken.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import sys
import time
from pathlib import Path


def try_lock(path: str | os.PathLike, **about) -> int | None:
    """The fd of `path` locked exclusively, its holder info written (`about` plus pid,
    host, job and since); None when another process holds it. The lock is the caller's
    while the fd stays open. os.open makes the fd non-inheritable, so programs the
    holder execs do not keep the lock after it ends (forked children without exec do)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o664)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    job = about.pop("job", None)
    info = {
        **about,
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "job": job if job is not None else " ".join(sys.argv),
        "since": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(info) + "\n").encode(), 0)
    except OSError as exc:
        os.close(fd)  # else the lock stays held by an fd nobody has (a full disk, say)
        # The errno's own message names no file. OSError(errno, ...) is the subclass
        # that errno has (PermissionError, ...), so callers catching it still do.
        raise OSError(exc.errno, f"{exc.strerror} while writing the holder info of lock file {path}") from exc
    except BaseException:
        os.close(fd)
        raise
    return fd


def release(fd: int) -> None:
    """Truncate (so a stale holder is not reported), then close, which unlocks. Never
    unlink: another process may already have the file open, waiting, and would then
    lock an inode nobody else can see."""
    with contextlib.suppress(OSError):
        os.ftruncate(fd, 0)
    os.close(fd)


def holder(path: str | os.PathLike) -> str:
    """What the holder of `path` wrote about itself."""
    try:
        return Path(path).read_text().strip() or "(no holder info)"
    except OSError:
        return "(no lock file)"
