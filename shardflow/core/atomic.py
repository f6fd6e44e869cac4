"""Atomic file writes: write `<path>.tmp-<pid>`, fsync, then `os.replace`.

A reader (or Snakemake after a crash) sees either no file or the whole file,
never a half-written one. A published file has the mode a plain `open()` gives a new
file there (the umask, or the folder's default ACL), whatever its writer chose:
safetensors creates 0600 files, which teammates on a shared filesystem could not read.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import json
import os
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any


class DiskFullError(OSError):
    """A write that ran out of space, naming the file and what is left on its filesystem
    (a bare ENOSPC from write() names neither)."""

    def __init__(self, path: Path, cause: OSError):
        try:
            free = shutil.disk_usage(path.parent).free
        except OSError:
            free = None
        left = f"{free:,} bytes free there" if free is not None else "free space unknown"
        code = cause.errno or errno.ENOSPC
        super().__init__(code, f"{os.strerror(code)} while writing {path} ({left}); nothing was kept")


def _out_of_space(exc: OSError, path: Path) -> bool:
    """ENOSPC/EDQUOT, or a short write without an errno (numpy's `tofile` reports one as
    'N requested and M written') on a filesystem with less than 1 MiB left."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    if exc.errno is None:
        try:
            return shutil.disk_usage(path.parent).free < 1 << 20
        except OSError:
            return False
    return False


def _tmp_path(path: Path) -> Path:
    return path.with_name(f"{path.name}.tmp-{os.getpid()}")


def _remove_stale_tmp(path: Path) -> None:
    """Temporary files of earlier writers of `path` killed mid-write (SIGKILL skips their
    clean-up): removed once this write is in place, unless their process still runs."""
    for tmp in path.parent.glob(f"{glob.escape(path.name)}.tmp-*"):
        pid = tmp.name.rsplit("-", 1)[1]
        if not pid.isdigit() or int(pid) == os.getpid() or _alive(int(pid)):
            continue
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path next to `path`; move it into place on success.

    Use for writers that want a file name (numpy, pyarrow, matplotlib).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _tmp_path(path)
    try:
        # Created here as open() creates files, to learn the mode this folder gives them.
        os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666))
        mode = stat.S_IMODE(os.stat(tmp).st_mode)
        yield tmp
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        if stat.S_IMODE(os.stat(tmp).st_mode) != mode:  # the writer made a file of its own
            with contextlib.suppress(OSError):  # a filesystem without chmod keeps the writer's
                os.chmod(tmp, mode)
        os.replace(tmp, path)
        _remove_stale_tmp(path)
    except OSError as exc:
        if not _out_of_space(exc, path):
            raise
        raise DiskFullError(path, exc) from exc
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w", **kwargs: Any) -> Iterator[IO]:
    """`open()` that only publishes the file once the block exits without error."""
    with atomic_path(path) as tmp:
        with open(tmp, mode, **kwargs) as fh:
            yield fh


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    with atomic_open(path, "wb") as fh:
        fh.write(data)


def write_json(path: str | os.PathLike, obj: Any) -> None:
    """Write `obj` as indented, key-sorted JSON, atomically."""
    with atomic_open(path, "w", encoding="utf-8") as fh:
        json.dump(obj, fh, indent=2, sort_keys=True, default=_json_default)
        fh.write("\n")


def _json_default(obj: Any) -> Any:
    # numpy scalars (Paramspace instances, reductions) are not JSON types.
    if hasattr(obj, "item"):
        return obj.item()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")
