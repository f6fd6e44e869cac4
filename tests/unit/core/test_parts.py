"""shardflow.core.parts: records parts read back as they were saved; removed parts take
the folders they leave empty with them, beside other jobs creating theirs."""

from __future__ import annotations

import errno
import json
import os
import time
from pathlib import Path

import numpy as np
import pytest

from shardflow.core import atomic
from shardflow.core.parts import (
    JobIdentity,
    PartStore,
    attempt_totals,
    configured,
    job_identity,
    remove_job_parts,
    resume_folder,
    resume_key,
    resume_tree_top,
)
from shardflow.core.s3 import LOCAL_VARIABLE, PREFIX_VARIABLE


# JSON escapes the C0 controls ("\x1c" is "\\u001c"), not these.
@pytest.mark.parametrize("char", ["\u2028", "\u2029", "\x85"], ids=["U+2028", "U+2029", "NEL"])
def test_records_with_line_breaks_other_than_newline_load_as_saved(tmp_path, char):
    """Python's splitlines() breaks at U+2028, NEL and more, which JSON leaves unescaped
    (a summary may hold them): a part is one record a "\\n"-ended line."""
    store = PartStore(tmp_path / "parts", {"job": "t"}).open()
    records = [{"id": "a", "summary": f"one{char}two"}, {"id": "b", "summary": "three"}]
    store.save_records(0, records)
    assert store.load_records(0, 2) == records
    assert store.load_records(0, 3) is None


def test_an_empty_records_part_loads_as_no_record(tmp_path):
    store = PartStore(tmp_path / "parts", {"job": "t"}).open()
    store.save_records(0, [])
    assert store.load_records(0, 0) == []


@pytest.mark.parametrize(
    ("suffix", "damage"),
    [(".npy", b"\x93NUMPY\x01\x00v\x00{'descr'"), (".npy", b"not an array"), (".jsonl", b'{"id": "a", "s'),
     (".jsonl", b"\xff\xfe\n")],
    ids=["npy-cut-short", "npy-not-numpy", "jsonl-cut-short", "jsonl-not-utf8"],
)
def test_a_damaged_part_is_computed_again_and_named_in_a_warning(tmp_path, caplog, suffix, damage):
    """Parts are written whole (a temporary, renamed), so a damaged one comes from outside:
    a disk error, a copy cut short. It raised a ValueError naming no file, recorded as an
    input error, so every retry stopped at once on it, and the user could not tell which
    part to remove. Like a part of the wrong shape, it is computed again, with a warning
    naming it."""
    store = PartStore(tmp_path / "parts", {"job": "t"}).open()
    if suffix == ".npy":
        store.save_array(0, np.ones((2, 3), dtype=np.float32))
    else:
        store.save_records(0, [{"id": "a", "s": "x"}])
    part = tmp_path / "parts" / PartStore.name(0, suffix)
    part.write_bytes(damage)
    with caplog.at_level("WARNING"):
        got = store.load_array(0, (2, 3), np.dtype(np.float32)) if suffix == ".npy" else store.load_records(0, 1)
    assert got is None
    assert str(part) in caplog.text and "damaged" in caplog.text


def test_a_damaged_manifest_names_its_folder(tmp_path):
    """Whose parts a folder holds is its manifest's to say: one that does not read back
    stops the job naming the folder (a bare JSONDecodeError named nothing)."""
    PartStore(tmp_path / "parts", {"job": "t"}).open()
    (tmp_path / "parts" / "manifest.json").write_bytes(b'{"job": ')
    with pytest.raises(ValueError, match=r"resume folder .*parts: its manifest.json does not read back"):
        PartStore(tmp_path / "parts", {"job": "t"}).open()


# ------------------------------------------------------- removing, beside other jobs


def _parts(root, key):
    store = PartStore(resume_folder(root, key), {"job": key}).open()
    store.save_records(0, [{"id": key}])
    return store


@pytest.mark.parametrize("layout", ["results/ds/.resume", "results/sweeps/.resume/s/k=1/seed=0", "volume/ds"],
                         ids=["data set", "sweep point", "resume_dir"])
def test_the_last_job_to_remove_its_parts_takes_the_emptied_folders_up_to_the_resume_tree_top(tmp_path, layout):
    """A job removes its parts folder and the folders above it left empty: the `.resume`
    folder its root lies in goes with the last job of the data set (or sweep); above
    it, and above a root in gpu_jobs.resume_dir (`volume`), nothing goes."""
    root = tmp_path / layout
    first, second = _parts(root, "a" * 24), _parts(root, "b" * 24)
    first.remove(root)
    assert not Path(first.folder).exists() and Path(second.folder).is_dir()  # another job's: kept
    second.remove(root)
    top = resume_tree_top(root)
    assert not top.exists() and top.parent.is_dir()
    assert top == (root if layout == "volume/ds" else tmp_path / layout.split("/.resume")[0] / ".resume")


def test_a_sweep_point_removes_its_own_folders_and_not_its_sweeps(tmp_path):
    top = tmp_path / "results/sweeps/.resume"
    mine, other = top / "s/k=1/seed=0", top / "s/k=2/seed=0"
    _parts(mine, "a" * 24).remove(mine)
    _parts(other, "b" * 24)
    assert not (top / "s/k=1").exists() and (top / "s/k=2/seed=0").is_dir()


def test_parts_in_a_folder_of_the_callers_own_leave_the_folders_above(tmp_path):
    store = _parts(tmp_path / ".resume", "a" * 24)
    store.remove()  # no resume root: only the parts folder goes
    assert not Path(store.folder).exists() and (tmp_path / ".resume").is_dir()


# A path the job cannot remove: CI runs as root, whom a read-only folder does not stop,
# so the failing call is monkeypatched (os.unlink and os.rmdir, which shutil.rmtree and
# remove_folder call through the os module).


def _failing(monkeypatch, name: str, fails, exc: OSError):
    """os.<name> raising `exc` for the paths `fails(path)` picks (rmtree passes an entry
    name with dir_fd, remove_folder a whole path)."""
    real = getattr(os, name)

    def call(path, *args, **kwargs):
        if fails(Path(path)):
            raise exc
        return real(path, *args, **kwargs)

    monkeypatch.setattr(os, name, call)


def test_a_part_that_cannot_be_removed_is_named_in_a_warning_and_the_job_goes_on(tmp_path, monkeypatch, caplog):
    """Every other path is still removed; the warning names the one left and its error
    (not the folder it keeps from going empty); the folders above stay; nothing raises."""
    root = tmp_path / "results/ds/.resume"
    store = _parts(root, "a" * 24)
    store.save_records(1, [{"id": "b"}])
    denied = PermissionError(errno.EACCES, "Permission denied")
    _failing(monkeypatch, "unlink", lambda p: p.name == "part-000000.jsonl", denied)
    with caplog.at_level("WARNING", logger="shardflow.core.parts"):
        line = store.remove(root)
    left = Path(store.folder) / "part-000000.jsonl"
    assert line == f"removing {store.folder} left on disk: {left} (EACCES: Permission denied)"
    assert caplog.messages == [line]
    assert sorted(p.name for p in Path(store.folder).iterdir()) == [left.name] and root.is_dir()


def test_an_emptied_folder_above_that_cannot_be_removed_is_named_in_a_warning(tmp_path, monkeypatch, caplog):
    """Not empty (another job's parts) is the normal stop; any other error is named."""
    root = tmp_path / "results/ds/.resume"
    store = _parts(root, "a" * 24)
    _failing(monkeypatch, "rmdir", lambda p: p == root, OSError(errno.EBUSY, "Device or resource busy"))
    with caplog.at_level("WARNING", logger="shardflow.core.parts"):
        line = store.remove(root)
    # The job's own folder went; the line names the one above it that stayed.
    assert line == f"removing {store.folder} left on disk: {root} (EBUSY: Device or resource busy)"
    assert caplog.messages == [line] and not Path(store.folder).exists()


def test_a_folder_or_part_another_job_removed_first_is_no_warning(tmp_path, monkeypatch, caplog):
    root = tmp_path / "results/ds/.resume"
    gone, store = _parts(root, "a" * 24), _parts(root, "b" * 24)
    gone.remove(root)
    real_unlink = os.unlink

    def unlink(path, *args, **kwargs):  # the other job's unlink lands first
        real_unlink(path, *args, **kwargs)
        raise FileNotFoundError(errno.ENOENT, "No such file or directory")

    monkeypatch.setattr(os, "unlink", unlink)
    with caplog.at_level("WARNING", logger="shardflow.core.parts"):
        assert gone.remove(root) is None  # the whole folder
        assert store.remove(root) is None  # its files, one by one
    assert caplog.messages == [] and not root.exists()


def test_a_resume_folder_removed_between_a_jobs_mkdirs_is_made_again(tmp_path, monkeypatch):
    """The race of a job removing the emptied `.resume` with another job creating its
    parts folder in it: mkdir .resume, the other job's rmdir .resume, mkdir .resume/<key>
    (FileNotFoundError). The creating job makes the parent again and goes on."""
    root = tmp_path / "results/ds/.resume"
    real_mkdir = os.mkdir
    raced = []

    def mkdir(path, *args, **kwargs):
        path = Path(path)
        if path.parent == root and root.is_dir() and not raced:  # the other job's removal lands here
            raced.append(path)
            os.rmdir(root)
        return real_mkdir(path, *args, **kwargs)

    monkeypatch.setattr(os, "mkdir", mkdir)
    store = _parts(root, "a" * 24)
    assert raced and store.load_records(0, 1) == [{"id": "a" * 24}]



def test_a_part_saved_while_another_attempt_at_the_job_removes_the_folder_is_saved(tmp_path, monkeypatch):
    """Two attempts at one job (a retry beside a zombie the scheduler gave up on) share the
    folder. The zombie finished first and removed it while the retry was writing a part,
    between its temporary and the rename: the retry failed with FileNotFoundError naming
    a temporary. It makes the folder again, with its manifest, and goes on."""
    root = tmp_path / "results/ds/.resume"
    folder = resume_folder(root, "a" * 24)
    retry, zombie = PartStore(folder, {"job": "t"}).open(), PartStore(folder, {"job": "t"}).open()
    real = atomic.publish
    raced = []

    def publish(tmp, path, **kwargs):
        if Path(path).name.startswith("part-") and not raced:  # the zombie's removal lands here
            raced.append(path)
            zombie.remove(root)
        return real(tmp, path, **kwargs)

    monkeypatch.setattr(atomic, "publish", publish)
    retry.save_array(0, np.arange(6, dtype=np.float32).reshape(2, 3))
    assert raced and retry.load_array(0, (2, 3), np.dtype(np.float32)).tolist() == [[0, 1, 2], [3, 4, 5]]
    assert json.loads((Path(folder) / "manifest.json").read_text()) == {"job": "t"}
    with pytest.raises(ValueError, match="belongs to another job"):  # still guarded by the manifest
        PartStore(folder, {"job": "other"}).open()
    assert not [p.name for p in Path(folder).iterdir() if ".tmp-" in p.name]


# ------------------------------------------------------------------ attempt records


def test_each_attempt_records_its_start_and_last_part_and_reads_the_earlier_ones(tmp_path):
    """An attempt writes its record when it opens the folder and again after each part
    it saves; the next attempt reads every record but its own."""
    folder = tmp_path / "parts"
    job = JobIdentity("results/d/embed/embed_0.npy", "/work/run/results/d/embed/embed_0.npy", "digest")
    first = PartStore(folder, {"job": "t"}, device="cuda:0", job=job).open()
    (record,) = list(folder.glob("attempt-*.json"))
    opened = json.loads(record.read_text())
    assert opened["parts_saved"] == 0 and opened["last_part_unix"] is None and opened["device"] == "cuda:0"
    assert opened["pid"] == os.getpid() and opened["items_saved"] == 0
    assert opened["job"] == "results/d/embed/embed_0.npy"  # which job the folder is for (make status)
    # Which run's and settings' job (core.parts.remove_job_parts)
    assert (opened["run"], opened["settings"]) == ("/work/run/results/d/embed/embed_0.npy", "digest")
    first.save_records(0, [{"id": "a"}])
    first.save_array(1, np.zeros(3, dtype=np.float32))
    saved = json.loads(record.read_text())
    assert saved["parts_saved"] == 2 and saved["start_unix"] == opened["start_unix"] < saved["last_part_unix"]
    assert saved["items_saved"] == 1 + 3  # the records of its parts
    assert first.earlier_attempts() == []  # its own record is not an earlier attempt

    second = PartStore(folder, {"job": "t"}, device="cpu").open()  # the manifest check passes
    assert second.load_records(0, 1) == [{"id": "a"}]
    assert second.earlier_attempts() == [saved]
    totals = second.attempt_totals()
    seconds = saved["last_part_unix"] - saved["start_unix"]
    assert totals == {"earlier_attempts": 1, "earlier_attempt_seconds": seconds,
                      "earlier_attempt_devices": {"cuda:0": seconds}}


def test_an_attempt_that_saved_no_part_counts_no_time():
    records = [{"start_unix": 10.0, "last_part_unix": None, "device": "cuda:0"},
               {"start_unix": 20.0, "last_part_unix": 25.5, "device": "cuda:0"},
               {"start_unix": 30.0, "last_part_unix": 31.0, "device": "cpu"}]
    assert attempt_totals(records) == {"earlier_attempts": 3, "earlier_attempt_seconds": 6.5,
                                       "earlier_attempt_devices": {"cpu": 1.0, "cuda:0": 5.5}}


def test_a_folder_from_before_attempt_records_resumes_with_no_earlier_attempt(tmp_path):
    folder = tmp_path / "parts"
    folder.mkdir()
    (folder / "manifest.json").write_text(json.dumps({"job": "t"}, indent=2, sort_keys=True) + "\n")
    (folder / "part-000000.jsonl").write_text('{"id": "a"}\n')
    store = PartStore(folder, {"job": "t"}).open()
    assert store.load_records(0, 1) == [{"id": "a"}]
    assert store.attempt_totals() == {"earlier_attempts": 0, "earlier_attempt_seconds": 0,
                                      "earlier_attempt_devices": {}}


# ------------------------------------------------------------------ the folder's name


def test_two_jobs_of_identical_chunks_keep_their_parts_and_attempts_apart(tmp_path, monkeypatch):
    """Chunks with the same bytes under one resume root (the empty chunks of n_chunks over
    the records; parts here, as two equal chunks of texts would save): keyed by bytes and
    identity alone they shared a folder, so the first job to finish removed the parts the
    other had saved (its retry then lost them) and the other counted the first's attempt
    as its own earlier one."""
    monkeypatch.chdir(tmp_path)
    chunks = Path("results/ds/chunks")
    chunks.mkdir(parents=True)
    for i in (2, 3):
        (chunks / f"chunk_{i}.jsonl").write_bytes(b"")
    root, identity, manifest = Path("results/ds/.resume"), {"model": "m"}, {"n_texts": 0}

    def store(i):
        folder = resume_folder(root, resume_key(chunks / f"chunk_{i}.jsonl", identity))
        return PartStore(folder, manifest, job=f"results/ds/embed/embed_{i}.npy").open()

    first, second = store(2), store(3)
    first.save_array(0, np.zeros(2, dtype=np.float32))
    second.save_array(0, np.ones(2, dtype=np.float32))
    assert second.attempt_totals()["earlier_attempts"] == 0
    first.remove(root)  # the first job's outputs are written
    retry = store(3)  # the second job, killed, runs again
    assert retry.load_array(0, (2,), np.dtype(np.float32)).tolist() == [1.0, 1.0]
    assert retry.attempt_totals()["earlier_attempts"] == 1


def test_the_key_of_a_chunk_is_the_same_in_a_local_run_and_an_s3_run(tmp_path, monkeypatch):
    """An S3 run's job reads its local copy of the chunk; the key names the chunk as the
    workflow does (core.s3.logical_path), as a local run's job does."""
    monkeypatch.chdir(tmp_path)
    local = Path("results/ds/chunks/chunk_0.jsonl")
    copy = Path(".snakemake/storage/s3/bucket/run/results/ds/chunks/chunk_0.jsonl")
    for path in (local, copy):
        path.parent.mkdir(parents=True)
        path.write_bytes(b'{"id":"a","text":"x"}\n')
    monkeypatch.setenv(LOCAL_VARIABLE, ".snakemake/storage")
    monkeypatch.setenv(PREFIX_VARIABLE, "s3://bucket/run")
    assert resume_key(copy, {"model": "m"}) == resume_key(local, {"model": "m"})


# ------------------------------------------------- the job's folders under other identities

JOB = "results/d/embed/embed_0.npy"
# The job as its attempts' records name it: its output, the run that writes it, its settings.
ME = JobIdentity(JOB, "/work/run/results/d/embed/embed_0.npy", "settings-of-model-a")


def _folder_with(root: Path, name: str, *records: dict, parts: int = 1) -> Path:
    """A resume folder as attempts left it: their records and `parts` parts."""
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text("{}\n")
    for i in range(parts):
        np.save(folder / f"part-{i:06d}.npy", np.zeros(2, dtype=np.float32))
    for i, rec in enumerate(records):
        (folder / f"attempt-h-{i}-{int(rec['start_unix'])}.json").write_text(json.dumps(rec))
    return folder


def _killed(job=JOB, start=100.0, last=160.0, device="cuda:0", run=ME.run, settings=ME.settings):
    """An attempt's record (None: a key records from before it was written leave out)."""
    rec = {"host": "h", "pid": 1, "start_unix": start, "last_part_unix": last, "device": device, "job": job,
           "run": run, "settings": settings}
    return {k: v for k, v in rec.items() if v is not None or k == "last_part_unix"}


def test_a_retry_on_another_node_type_counts_and_removes_the_killed_attempts_folder(tmp_path):
    """The folder's name hashes the output identity, which holds the hardware (a GPU's
    model and SM count, a CPU's thread count): a killed attempt retried on another node
    type left its parts and record in a folder the retry never opens. The finished job
    counts that attempt with its own folder's (by device too) and removes both, and the
    resume tree with them."""
    root = tmp_path / "results" / "d" / ".resume"
    _folder_with(root, "a100", _killed(start=100.0, last=160.0, device="cuda:0"), parts=3)
    _folder_with(root, "cpu", _killed(start=200.0, last=230.0, device="cpu"), _killed(start=300.0, last=None))
    own = resume_folder(root, "h100")
    store = PartStore(own, {"n": 1}, device="cuda:0", job=ME).open()
    store.save_array(0, np.zeros(2, dtype=np.float32))
    own_totals = {"earlier_attempts": 1, "earlier_attempt_seconds": 40.0, "earlier_attempt_devices": {"cuda:0": 40.0}}
    totals = remove_job_parts(own, root, ME, time.time(), own_totals)
    assert totals == {"earlier_attempts": 4, "earlier_attempt_seconds": 40.0 + 60.0 + 30.0,
                      "earlier_attempt_devices": {"cpu": 30.0, "cuda:0": 100.0}}
    assert not root.exists() and (tmp_path / "results" / "d").is_dir()


def _killed_an_hour_ago(store: PartStore, parts: int) -> PartStore:
    """`store` as an attempt killed an hour ago left it, after saving `parts` parts."""
    for i in range(parts):
        store.save_array(i, np.zeros(2, dtype=np.float32))
    (path,) = Path(store.folder).glob("attempt-*.json")
    rec = json.loads(path.read_text())
    aged = dict(rec, start_unix=rec["start_unix"] - 3600, last_part_unix=rec["last_part_unix"] - 3000)
    path.write_text(json.dumps(aged))
    return store


def test_another_runs_folder_under_a_shared_resume_root_is_left_and_not_billed(tmp_path):
    """Two working directories share one gpu_jobs.resume_dir (a volume mounted in every
    pod) and a data set name: the same chunk's output, the same settings. The other run's
    attempt, killed an hour ago with 3 parts, is no attempt at this run's job: its folder
    stays for that run to resume, and its seconds are not this job's."""
    root = tmp_path / "shared" / "d"
    theirs = JobIdentity(JOB, "/work/w2/" + JOB, ME.settings)
    w2 = _killed_an_hour_ago(PartStore(resume_folder(root, "w2key"), {"n": 1}, device="cuda:0", job=theirs).open(), 3)
    since = time.time()
    w1 = PartStore(resume_folder(root, "w1key"), {"n": 1}, device="cuda:0", job=ME).open()
    w1.save_array(0, np.zeros(2, dtype=np.float32))
    earlier = {"earlier_attempts": 0, "earlier_attempt_seconds": 0, "earlier_attempt_devices": {}}
    assert remove_job_parts(w1.folder, root, ME, since, earlier) == earlier
    assert not os.path.exists(w1.folder)
    assert sorted(p.name for p in Path(w2.folder).iterdir() if p.name.startswith("part-")) == [
        PartStore.name(i, ".npy") for i in range(3)]


def test_a_killed_attempt_under_other_settings_is_left_for_them_and_not_billed(tmp_path):
    """In one run: model A killed with 3 parts, model B tried (finished), then back to A.
    B's job is not A's: A's folder stays (A resumes its 3 parts) and B's stats count none
    of A's time."""
    root = tmp_path / "results" / "d" / ".resume"
    model_a = PartStore(resume_folder(root, "a"), {"n": 1}, device="cuda:0", job=ME).open()
    _killed_an_hour_ago(model_a, 3)
    model_b = JobIdentity(ME.job, ME.run, "settings-of-model-b")
    since = time.time()
    b = PartStore(resume_folder(root, "b"), {"n": 1}, device="cuda:0", job=model_b).open()
    b.save_array(0, np.zeros(2, dtype=np.float32))
    earlier = {"earlier_attempts": 0, "earlier_attempt_seconds": 0, "earlier_attempt_devices": {}}
    assert remove_job_parts(b.folder, root, model_b, since, earlier) == earlier
    again = PartStore(resume_folder(root, "a"), {"n": 1}, device="cuda:0", job=ME).open()
    assert all(again.load_array(i, (2,), np.dtype(np.float32)) is not None for i in range(3))


def test_folders_whose_records_do_not_name_the_run_and_settings_are_left(tmp_path):
    """Records written before they named the run and the settings cannot tell this run's
    job from another's: a folder with any such record is left, as is one whose records
    name the job only, and one a record of which names another run."""
    root = tmp_path / ".resume"
    kept = [
        _folder_with(root, "old", _killed(run=None, settings=None)),
        _folder_with(root, "no_settings", _killed(settings=None)),
        _folder_with(root, "mixed", _killed(), _killed(start=120.0, run=None, settings=None)),
        _folder_with(root, "then_another_run", _killed(), _killed(start=120.0, run="/work/w2/" + JOB)),
    ]
    own = _folder_with(root, "own")
    earlier = {"earlier_attempts": 0, "earlier_attempt_seconds": 0, "earlier_attempt_devices": {}}
    assert remove_job_parts(str(own), root, ME, 1000.0, earlier) == earlier
    assert sorted(p.name for p in root.iterdir()) == sorted(p.name for p in kept)
    assert all(len(list(p.iterdir())) > 1 for p in kept)


def test_a_jobs_identity_names_its_run_and_its_settings_without_the_hardware(tmp_path, monkeypatch):
    """`run` is where the output is kept: the same relative output of two working
    directories differs, while an S3 run's local copy is its object's URL, whatever the
    pod's working directory. `settings` hashes the chunk (bytes and path), the model and
    the params as configured, without the device, the thread count and the compile cache
    (which the node decides or which decide no output)."""
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class Params:
        model: str
        device: str = "auto"
        threads: int | None = None
        compile_cache: str | None = None
        dtype: str = "auto"
        window: int = 8

    def ident(params, model="model-a", out=Path("results/d/embed/embed_0.npy")):
        return job_identity(out, Path("results/d/chunks/chunk_0.jsonl"), configured(params, model))

    for workdir in ("w1", "w2"):
        (tmp_path / workdir / "results/d/chunks").mkdir(parents=True)
        (tmp_path / workdir / "results/d/chunks/chunk_0.jsonl").write_text('{"id": "a", "text": "x"}\n')
    monkeypatch.chdir(tmp_path / "w1")
    base = ident(Params("/models/a"))
    assert base.job == "results/d/embed/embed_0.npy"
    assert base.run == str(tmp_path / "w1" / "results/d/embed/embed_0.npy")
    # Another node: another device, thread count, compile cache, model path (same model).
    assert ident(Params("/mnt/models/a", device="cuda:0", threads=8, compile_cache="/tmp/c")) == base
    for other in (ident(Params("/models/a", dtype="float16")), ident(Params("/models/a", window=4)),
                  ident(Params("/models/a"), model="model-b")):
        assert (other.job, other.run) == (base.job, base.run) and other.settings != base.settings
    (tmp_path / "w1/results/d/chunks/chunk_0.jsonl").write_text('{"id": "a", "text": "y"}\n')
    assert ident(Params("/models/a")).settings != base.settings  # another chunk
    monkeypatch.chdir(tmp_path / "w2")
    theirs = ident(Params("/models/a"))
    assert theirs.settings == base.settings and theirs.run != base.run

    monkeypatch.setenv(LOCAL_VARIABLE, ".snakemake/storage")
    monkeypatch.setenv(PREFIX_VARIABLE, "s3://bucket/run")
    copy = Path(".snakemake/storage/s3/bucket/run/results/d/embed/embed_0.npy")
    stored = ident(Params("/models/a"), out=copy)
    assert (stored.job, stored.run) == ("results/d/embed/embed_0.npy", "s3://bucket/run/results/d/embed/embed_0.npy")
    monkeypatch.chdir(tmp_path / "w1")
    assert ident(Params("/models/a"), out=copy).run == stored.run


def test_only_the_jobs_own_dead_folders_are_counted_and_removed(tmp_path, caplog):
    """Another chunk's or output's folder, one whose records name no job (from before they
    did) or do not read back, train/'s checkpoints, and one where an attempt at the job
    opened it or saved a part after this job started (still running on another node:
    it would make its folder again and count nothing) are left as they are."""
    root = tmp_path / ".resume"
    since = 1000.0
    kept = [
        _folder_with(root, "other_chunk", _killed(job="results/d/embed/embed_1.npy")),
        _folder_with(root, "shared", _killed(), _killed(job="results/d/summarise/summaries_0.jsonl", start=150.0)),
        _folder_with(root, "unnamed", {"start_unix": 100.0, "last_part_unix": 160.0, "device": "cpu"}),
        _folder_with(root, "live", _killed(start=900.0, last=since + 5)),
        _folder_with(root, "opened_since", _killed(start=since + 1, last=None), parts=0),
        _folder_with(root, "damaged", _killed()),
        _folder_with(root, "train", parts=0),
    ]
    (kept[5] / "attempt-h-9-9.json").write_text("{")
    (kept[6] / "checkpoint.pt").write_bytes(b"x")
    own = _folder_with(root, "own")
    earlier = {"earlier_attempts": 0, "earlier_attempt_seconds": 0, "earlier_attempt_devices": {}}
    with caplog.at_level("INFO", logger="shardflow.core.parts"):
        assert remove_job_parts(str(own), root, ME, since, earlier) == earlier
    assert not own.exists()
    assert sorted(p.name for p in root.iterdir()) == sorted(p.name for p in kept)
    assert all(len(list(p.iterdir())) > 1 for p in kept)  # nothing removed in them
    assert [r.getMessage() for r in caplog.records if "still running" in r.getMessage()] == [
        f"leaving {kept[i]}: an attempt at {JOB} opened it or saved a part there after this one started (still "
        "running elsewhere, or a clock ahead); it removes its folder when it finishes"
        for i in (3, 4)
    ]


def test_the_jobs_folders_in_a_bucket_are_found_by_one_listing_and_their_records(monkeypatch):
    """On EKS without a volume the resume root is under the run's storage prefix
    (s3://<bucket>/<prefix>/results/<ds>/.resume): the sub-folders come from one listing
    with a delimiter, each one's attempt records from a listing of their prefix; the
    parts are not read. The killed attempt's keys go with the job's own."""
    import io

    import boto3
    from botocore.response import StreamingBody
    from botocore.stub import Stubber

    from shardflow.core import s3 as s3_module

    s3 = boto3.client("s3", region_name="us-east-1", aws_access_key_id="k", aws_secret_access_key="s")
    monkeypatch.setattr(s3_module, "client", lambda *a, **k: s3)
    prefix = "run/results/d/.resume/"

    def listed(under, keys, **extra):
        stub.add_response("list_objects_v2", {"Contents": [{"Key": k} for k in keys], "IsTruncated": False},
                          {"Bucket": "b", "Prefix": under, **extra})

    def record(key, rec):
        body = json.dumps(rec).encode()
        stub.add_response("get_object", {"Body": StreamingBody(io.BytesIO(body), len(body))},
                          {"Bucket": "b", "Key": key})

    def removed(keys):
        listed(keys[0].rsplit("/", 1)[0] + "/", keys)
        stub.add_response("delete_objects", {}, {"Bucket": "b", "Delete": {"Objects": [{"Key": k} for k in keys],
                                                                          "Quiet": True}})

    with Stubber(s3) as stub:
        stub.add_response("list_objects_v2", {"CommonPrefixes": [{"Prefix": prefix + n + "/"} for n in
                                                                 ("a100", "h100", "other")], "IsTruncated": False},
                          {"Bucket": "b", "Prefix": prefix, "Delimiter": "/"})
        listed(prefix + "a100/attempt-", [prefix + "a100/attempt-h-1-1.json"])
        record(prefix + "a100/attempt-h-1-1.json", _killed())
        listed(prefix + "other/attempt-", [prefix + "other/attempt-h-2-2.json"])
        record(prefix + "other/attempt-h-2-2.json", _killed(job="results/d/embed/embed_1.npy"))
        removed([prefix + "a100/attempt-h-1-1.json", prefix + "a100/manifest.json", prefix + "a100/part-000000.npy"])
        removed([prefix + "h100/attempt-h-3-3.json", prefix + "h100/manifest.json"])
        earlier = {"earlier_attempts": 0, "earlier_attempt_seconds": 0, "earlier_attempt_devices": {}}
        totals = remove_job_parts("s3://b/run/results/d/.resume/h100", "s3://b/run/results/d/.resume", ME,
                                  1000.0, earlier)
        stub.assert_no_pending_responses()
    assert totals == {"earlier_attempts": 1, "earlier_attempt_seconds": 60.0,
                      "earlier_attempt_devices": {"cuda:0": 60.0}}
