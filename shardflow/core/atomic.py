"""Atomic file writes: write a temporary next to the file, fsync, `os.replace`, fsync
the folder.

A reader (or Snakemake after a crash) sees either no file or the whole file,
never a half-written one. The temporary is `<path>.tmp-<host>-<pid>-<random>`: unique
even where two hosts (or containers whose pids start alike) write the same path on a
shared filesystem, as an orphaned job and its rerun can. Temporaries of writers killed
mid-write are removed by the next write of the path (`atomic_path` before it writes, as
a killed merge's is as large as the file; `publish_all` once it has published): this
host's once their process is gone, another host's once untouched for a day. A write lists
its folder once, not more: in a folder of thousands of chunk files a listing costs more
than a small write. A published file has the
mode a plain `open()` gives a new file there (the umask, or the folder's default ACL),
whatever its writer chose: safetensors creates 0600 files, which teammates on a shared
filesystem could not read.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import re
import secrets
import shutil
import socket
import stat
import time
from collections.abc import Iterator, Mapping
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


# Another host's temporary untouched this long belongs to a writer that died (no
# writer here pauses a day between writes).
OTHER_HOST_STALE_S = 24 * 3600


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", socket.gethostname())[:64] or "host"


def tmp_path(path: str | os.PathLike) -> Path:
    """A temporary name next to `path` that no other writer, on any host, uses."""
    path = Path(path)
    return path.with_name(f"{path.name}.tmp-{_host()}-{os.getpid()}-{secrets.token_hex(4)}")


def _stale(tmp: Path, suffix: str) -> bool:
    """Whether the temporary `tmp` (named `<path>.tmp-<suffix>`) is a dead writer's."""
    if suffix.isdigit():  # `<pid>`: written before temporaries named their host
        return int(suffix) != os.getpid() and not _alive(int(suffix))
    parts = suffix.rsplit("-", 2)
    if len(parts) != 3 or not parts[1].isdigit():
        return False  # not one of ours
    host, pid = parts[0], int(parts[1])
    if host == _host():
        return pid != os.getpid() and not _alive(pid)
    try:
        return time.time() - tmp.stat().st_mtime > OTHER_HOST_STALE_S
    except FileNotFoundError:
        return False


def _remove_stale_in(folder: Path, names: set[str]) -> None:
    """Remove the temporaries that writers of the files `names` in `folder` left when
    killed mid-write (SIGKILL skips their clean-up), listing the folder once; a writer
    still running keeps its own."""
    for entry in os.scandir(folder):
        at = entry.name.find(".tmp-")
        while at > 0:  # the name up to some ".tmp-" is one of ours (a host may hold ".tmp-" too)
            if entry.name[:at] in names:
                if _stale(Path(entry.path), entry.name[at + 5 :]):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(entry.path)
                break
            at = entry.name.find(".tmp-", at + 1)


def publish_all(pairs: list[tuple[Path, Path]], *, synced: bool = False, swept: bool = False) -> None:
    """Move finished temporaries (from `tmp_path(path)`) into place: each fsynced
    (unless its writer did: `synced`) and renamed, then each folder fsynced and listed
    once for dead writers' temporaries (a split of n chunks would list its folder n
    times, a file at a time), unless its writer listed it before writing (`swept`:
    a temporary left since by a writer killed meanwhile goes with the next write)."""
    for tmp, path in pairs:
        if not synced:
            with open(tmp, "rb+") as fh:
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    for folder in {Path(path).parent for _, path in pairs}:
        fsync_folder(folder)
        if not swept:
            _remove_stale_in(folder, {Path(path).name for _, path in pairs if Path(path).parent == folder})


def publish(tmp: str | os.PathLike, path: str | os.PathLike, *, synced: bool = False, swept: bool = False) -> None:
    """`publish_all` for one file."""
    publish_all([(Path(tmp), Path(path))], synced=synced, swept=swept)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def fsync_folder(folder: str | os.PathLike) -> None:
    """Make a rename or removal in `folder` durable (a no-op where the filesystem
    cannot sync a folder)."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path next to `path`; move it into place on success.

    Use for writers that want a file name (numpy, pyarrow, matplotlib).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # A dead writer's temporary of this file goes first: a merge killed mid-write leaves
    # one as large as the file, which a rerun on a nearly full disk needs the room of.
    _remove_stale_in(path.parent, {path.name})
    tmp = tmp_path(path)
    try:
        # Created here as open() creates files, to learn the mode this folder gives them.
        os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
        mode = stat.S_IMODE(os.stat(tmp).st_mode)
        yield tmp
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        if stat.S_IMODE(os.stat(tmp).st_mode) != mode:  # the writer made a file of its own
            with contextlib.suppress(OSError):  # a filesystem without chmod keeps the writer's
                os.chmod(tmp, mode)
        publish(tmp, path, synced=True, swept=True)  # listed above: once a write is enough
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
    """Write `obj` as indented, key-sorted, strict JSON, atomically.

    A number that is not finite is refused (ValueError naming the file and the key),
    and nothing is written: Python's json would write NaN or Infinity, which jq,
    JavaScript and other strict parsers refuse. A writer whose value can be undefined
    writes null."""
    try:
        with atomic_open(path, "w", encoding="utf-8") as fh:
            json.dump(obj, fh, indent=2, sort_keys=True, default=_json_default, allow_nan=False)
            fh.write("\n")
    except ValueError as exc:
        where = next(non_finite_paths(obj), None)
        if where is None:  # another ValueError (a circular reference)
            raise
        key, value = where
        raise ValueError(f"{path}: {key or 'the value'} is {value!r}, which strict JSON cannot hold (null "
                         "stands for a number that is not defined); nothing was written") from exc


def non_finite_paths(obj: Any, key: str = "") -> Iterator[tuple[str, float]]:
    """(key path `a.b[2].c`, value) of each number in `obj` that is not finite, mappings
    in key order; numpy scalars included."""
    if isinstance(obj, Mapping):
        for k, v in sorted(obj.items(), key=lambda kv: str(kv[0])):
            yield from non_finite_paths(v, f"{key}.{k}" if key else str(k))
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield from non_finite_paths(v, f"{key}[{i}]")
    elif hasattr(obj, "item") and not isinstance(obj, (str, bytes)):
        with contextlib.suppress(ValueError, TypeError):  # a numpy array of several values: not JSON anyway
            yield from non_finite_paths(obj.item(), key)
    elif isinstance(obj, float) and not math.isfinite(obj):
        yield key, obj


def _json_default(obj: Any) -> Any:
    # numpy scalars (Paramspace instances, reductions) are not JSON types.
    if hasattr(obj, "item"):
        return obj.item()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")
