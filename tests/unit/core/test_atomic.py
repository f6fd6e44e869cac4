import os
import signal
import subprocess
import sys

import numpy as np
import pytest

from shardflow.core.atomic import atomic_open, atomic_write_bytes, write_json


def test_a_killed_writer_leaves_no_file_and_its_temporary_is_cleared_by_the_next_write(tmp_path):
    target = tmp_path / "out.bin"
    # A writer SIGKILLed mid-write: its temporary stays, the target never appears.
    code = (
        "import os, signal, sys\n"
        "from shardflow.core.atomic import atomic_open\n"
        "with atomic_open(sys.argv[1], 'wb') as fh:\n"
        "    fh.write(b'half'); fh.flush(); os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(target)], capture_output=True)
    assert proc.returncode == -signal.SIGKILL
    assert not target.exists()
    (stale,) = tmp_path.glob("out.bin.tmp-*")
    # A temporary of a writer still running is left alone; the dead one's goes.
    running = tmp_path / f"out.bin.tmp-{os.getppid()}"
    running.write_bytes(b"in progress")
    atomic_write_bytes(target, b"whole")
    assert target.read_bytes() == b"whole"
    assert not stale.exists() and running.exists()


def test_a_dead_writers_temporary_is_cleared_before_the_next_write_takes_room(tmp_path):
    """A merge killed mid-write leaves a temporary as large as the file: its rerun on a
    nearly full disk needs that room while it writes, not after."""
    target = tmp_path / "embeddings.npy"
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = int(proc.stdout)  # a process that has exited
    stale = tmp_path / f"embeddings.npy.tmp-{dead}"
    stale.write_bytes(b"half of a large file")
    with atomic_open(target, "wb") as fh:
        assert not stale.exists()
        fh.write(b"whole")
    assert target.read_bytes() == b"whole"


def test_a_write_lists_its_folder_once_and_a_batch_once_per_folder(tmp_path, monkeypatch):
    """A folder of thousands of chunk files makes each listing O(n): a write listed it
    before writing and again once published, twice where once clears every dead
    writer's temporary (the one before, as a rerun needs the room)."""
    from shardflow.core import atomic

    listed = []
    real_scandir, real_listdir = os.scandir, os.listdir
    monkeypatch.setattr(os, "scandir", lambda p=".": listed.append(p) or real_scandir(p))
    monkeypatch.setattr(os, "listdir", lambda p=".": listed.append(p) or real_listdir(p))
    stale = tmp_path / f"out.bin.tmp-{atomic._host()}-{2**22 + 1}-0a0a0a0a"  # above pid_max: a dead writer's
    stale.write_bytes(b"half")
    atomic_write_bytes(tmp_path / "out.bin", b"whole")
    assert len(listed) == 1 and not stale.exists()
    write_json(tmp_path / "m.json", {"a": 1})
    assert len(listed) == 2
    listed.clear()
    finals = [tmp_path / f"chunk_{i}.jsonl" for i in range(3)]
    tmps = [atomic.tmp_path(p) for p in finals]
    for t in tmps:
        t.write_bytes(b"x")
    atomic.publish_all(list(zip(tmps, finals, strict=True)))  # as the split publishes its chunks
    assert len(listed) == 1 and all(p.read_bytes() == b"x" for p in finals)


def test_temporaries_are_unique_across_hosts_and_only_dead_writers_ones_are_cleared(tmp_path, monkeypatch):
    """Two hosts (or containers whose pids start alike) may write one path on a shared
    filesystem: each temporary names its host, pid and a random token, and the next
    write clears this host's dead writers' temporaries and other hosts' day-old ones."""
    import time

    from shardflow.core import atomic

    target = tmp_path / "part.npy"
    a, b = atomic.tmp_path(target), atomic.tmp_path(target)
    assert a != b and a.name.startswith(f"part.npy.tmp-{atomic._host()}-{os.getpid()}-")
    here_dead = tmp_path / f"part.npy.tmp-{atomic._host()}-{2**22 + 1}-0a0a0a0a"  # above pid_max: no such process
    here_running = tmp_path / f"part.npy.tmp-{atomic._host()}-{os.getppid()}-0b0b0b0b"
    other_recent = tmp_path / "part.npy.tmp-node-17.cluster-5-0c0c0c0c"  # its pid means nothing here
    other_old = tmp_path / "part.npy.tmp-node-18-5-0d0d0d0d"
    not_ours = tmp_path / "part.npy.tmp-notes"
    for p in (here_dead, here_running, other_recent, other_old, not_ours):
        p.write_bytes(b"x")
    day_ago = time.time() - atomic.OTHER_HOST_STALE_S - 60
    os.utime(other_old, (day_ago, day_ago))
    atomic_write_bytes(target, b"whole")
    assert target.read_bytes() == b"whole"
    left = sorted(p.name for p in tmp_path.glob("part.npy.tmp-*"))
    assert left == sorted(p.name for p in (here_running, other_recent, not_ours))


def test_an_error_inside_the_block_publishes_nothing(tmp_path):
    target = tmp_path / "out.txt"
    try:
        with atomic_open(target, "w") as fh:
            fh.write("partial")
            raise RuntimeError("boom")
    except RuntimeError:
        pass
    assert list(tmp_path.iterdir()) == []


def test_a_full_disk_names_the_file_and_keeps_nothing(tmp_path, monkeypatch):
    import errno

    import pytest

    from shardflow.core import atomic

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    target = tmp_path / "emb.npy"
    with pytest.raises(atomic.DiskFullError, match=rf"No space left on device while writing {target} \(.* bytes free"):
        with atomic.atomic_open(target, "wb") as fh:
            fh.write(b"x")
            monkeypatch.setattr(atomic.os, "fsync", full)
    assert list(tmp_path.iterdir()) == []


def test_a_short_write_on_a_full_filesystem_is_a_full_disk(tmp_path, monkeypatch):
    import collections

    import pytest

    from shardflow.core import atomic

    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(atomic.shutil, "disk_usage", lambda p: usage(1 << 20, (1 << 20) - 2016, 2016))
    target = tmp_path / "emb.npy"
    with pytest.raises(atomic.DiskFullError, match=r"No space left on device while writing .*2,016 bytes free"):
        with atomic.atomic_path(target):
            raise OSError("11520 requested and 2016 written")  # numpy's tofile, errno-less
    monkeypatch.setattr(atomic.shutil, "disk_usage", lambda p: usage(1 << 40, 0, 1 << 39))
    with pytest.raises(OSError, match="requested and") as exc:
        with atomic.atomic_path(target):
            raise OSError("11520 requested and 2016 written")
    assert not isinstance(exc.value, atomic.DiskFullError)  # plenty of space: not a full disk


def test_a_published_file_has_the_umask_mode_whatever_its_writer_chose(tmp_path):
    """safetensors creates its files 0600: trained weights on a shared filesystem were
    unreadable by the rest of a team."""
    import stat

    from shardflow.core.atomic import atomic_path

    old = os.umask(0o027)
    try:
        with atomic_path(tmp_path / "w.bin") as tmp:
            os.unlink(tmp)  # a writer that makes its own file, private (safetensors' new files)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT, 0o600)
            os.write(fd, b"x")
            os.close(fd)
        assert stat.S_IMODE((tmp_path / "w.bin").stat().st_mode) == 0o640
    finally:
        os.umask(old)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), np.float32("-inf")])
def test_write_json_refuses_a_number_that_is_not_finite_naming_the_file_and_the_key(tmp_path, value):
    # json.dump would write NaN or Infinity, which strict parsers (jq, JavaScript) refuse.
    path = tmp_path / "metrics.json"
    with pytest.raises(ValueError, match=r"metrics\.json: systems\.lead\[1\]\.mean is .*strict JSON"):
        write_json(path, {"n": 1, "systems": {"lead": [{"mean": 0.5}, {"mean": value}]}})
    assert os.listdir(tmp_path) == []
    write_json(path, {"mean": None, "n": np.int64(2)})
    assert path.read_text() == '{\n  "mean": null,\n  "n": 2\n}\n'
