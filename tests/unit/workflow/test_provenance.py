"""workflow.provenance: the manifest takes what the jobs ran with from their records, and
says where the checkout or the model has changed since."""

from __future__ import annotations

import json

import pytest

from shardflow.core import madewith  # where model_sha256_kept looks up model_sha256
from shardflow.workflow import provenance


def _model(tmp_path, weights: bytes):
    tmp_path.mkdir(parents=True, exist_ok=True)
    folder = tmp_path / "model"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"hidden_size": 4}))
    (folder / "model.safetensors").write_bytes(weights)
    return str(folder)


def test_jobs_record_what_they_ran_with(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the kept model hash lives under the working directory
    model = _model(tmp_path, b"weights")
    made = provenance.made_with("embedding", model, "cpu", 2)
    assert made["model"] == provenance.model_sha256(model) and made["device"] == "cpu" and made["threads"] == 2
    assert made["gpu"] is None and "torch" in made["packages"] and "commit" in made["git"]
    assert provenance.made_with("summarise", None, "cpu", None)["model"] is None


def test_the_manifest_keeps_the_jobs_model_and_warns_where_things_changed(tmp_path, monkeypatch):
    """A model re-saved in place after the embeddings were made: the manifest holds the
    hash the jobs ran (what made the outputs), and a warning; so does a new commit."""
    monkeypatch.chdir(tmp_path)
    model = _model(tmp_path, b"weights")
    ran = provenance.made_with("embedding", model, "cpu", 2)
    other_role = _model(tmp_path / "s", b"summariser")
    summarised = provenance.made_with("summarise", other_role, "cpu", 2)  # another role: no conflict
    (tmp_path / "model" / "model.safetensors").write_bytes(b"tuned!!")  # same size, other bytes
    ran_elsewhere = dict(ran, git={"commit": "0" * 40, "dirty": False})
    manifest = provenance.build_manifest(str(tmp_path), {"a": 1}, {}, [], {},
                                         {"embedding": model, "summarise": other_role},
                                         jobs_made_with=[ran, ran_elsewhere, summarised])
    assert manifest["model"] == ran["model"] != provenance.model_sha256(model)
    assert manifest["models"]["summarise"] == summarised["model"]
    assert manifest["jobs_made_with"]["jobs"] == 3 and len(manifest["jobs_made_with"]["git"]) == 2
    warnings = manifest["warnings"]
    assert len(warnings) == 2, warnings
    assert "the embedding model at" in warnings[0] and "changed since its jobs ran" in warnings[0]
    assert "the jobs ran at git" in warnings[1]
    # Jobs from before they recorded anything: the model as it is now, no claims.
    old = provenance.build_manifest(str(tmp_path), {"a": 1}, {}, [], {}, {"embedding": model})
    assert old["model"] == provenance.model_sha256(model) and old["jobs_made_with"] is None and old["warnings"] == []


def test_jobs_recorded_before_the_diff_hash_ran_at_this_checkout_where_their_commit_is_its(tmp_path, monkeypatch):
    """git_state records diff_sha256 now: a job record from before holds commit and dirty
    flag alone, and a provenance job rerun after the upgrade (a report setting changed)
    compares what both hold, rather than warn that every job ran at another checkout."""
    monkeypatch.chdir(tmp_path)
    now = {"commit": "a" * 40, "dirty": True, "diff_sha256": "b" * 64, "diff_files": 1, "diff_unhashed": []}
    monkeypatch.setattr(provenance, "git_state", lambda repo: now)
    ran = provenance.made_with("embedding", None, "cpu", 2)
    before = dict(ran, git={"commit": "a" * 40, "dirty": True})
    assert provenance.build_manifest(str(tmp_path), {}, {}, [], {}, {}, jobs_made_with=[before])["warnings"] == []
    other_edits = dict(ran, git=dict(now, diff_sha256="c" * 64))
    warnings = provenance.build_manifest(str(tmp_path), {}, {}, [], {}, {}, jobs_made_with=[other_edits])["warnings"]
    assert len(warnings) == 1 and "the jobs ran at git" in warnings[0]


def test_what_the_train_job_ran_with_is_read_from_its_metrics(tmp_path, monkeypatch):
    """The train job writes no stats for a job table: it records `made_with` in
    train/metrics.json, an output provenance hashes, and the manifest collects it with the
    GPU jobs' records. Before, a training run's GPU, torch and CUDA went unrecorded: the
    record's own `accelerator` and `packages` are the provenance job's, a CPU host."""
    import sys

    from shardflow.workflow.reproduce import package_versions_ran

    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(sys.modules, "torch", _fake_torch("NVIDIA H100 80GB HBM3", "12.4", 90100))
    ran = provenance.made_with("train", None, "cuda:0", 8)
    ran["packages"] = dict(ran["packages"], torch="2.5.1+cu124")
    metrics = tmp_path / "metrics.json"
    metrics.write_text(json.dumps({"best_val_loss": 1.5, "made_with": ran}))
    other = tmp_path / "verification.json"
    other.write_text(json.dumps({"ok": True}))  # no record: none read
    manifest = provenance.build_manifest(str(tmp_path), {}, {}, [str(metrics), str(other)], {}, {})
    made = manifest["jobs_made_with"]
    assert made["jobs"] == 1 and made["devices"] == [["cuda:0", "NVIDIA H100 80GB HBM3"]]
    assert made["cuda"] == [["12.4", 90100]] and made["models"] == {}
    assert list(package_versions_ran(manifest, "torch")) == ["2.5.1+cu124", manifest["packages"]["torch"]]


def test_a_folder_output_is_recorded_file_by_file_under_the_names_given(tmp_path, monkeypatch):
    """The shard folder (a directory() output): each file by its path in the folder, not
    Snakemake's timestamp marker; `name` maps the paths a job sees (an S3 run's local
    copies) to the names the record keeps."""
    monkeypatch.chdir(tmp_path)
    shards = tmp_path / "copy" / "shards"
    (shards / "sub").mkdir(parents=True)
    (shards / "metadata.json").write_text("{}")
    (shards / "sub" / "train_000000.bin").write_bytes(b"tokens")
    (shards / ".snakemake_timestamp").write_text("")
    single = tmp_path / "copy" / "metrics.json"
    single.write_text("{}")
    hashes = provenance.output_sha256([str(shards), str(single)])
    assert list(hashes) == [f"{shards}/metadata.json", f"{shards}/sub/train_000000.bin", str(single)]
    assert hashes[f"{shards}/sub/train_000000.bin"] == provenance.sha256_file(shards / "sub" / "train_000000.bin")
    manifest = provenance.build_manifest(str(tmp_path), {}, {f"{tmp_path}/copy/c.jsonl": "x"}, [str(single)],
                                         {str(single): {"s": 1.0}}, {}, name=lambda p: p.replace(f"{tmp_path}/copy/", ""))
    assert manifest["outputs"] == {"metrics.json": hashes[str(single)]}
    assert manifest["inputs"] == {"c.jsonl": "x"} and manifest["timings"] == {"metrics.json": {"s": 1.0}}


def test_jobs_that_ran_two_versions_of_a_model_record_neither_so_a_pinned_hash_fails(tmp_path, monkeypatch):
    """A model folder re-saved in place while a run went on (a chunk job rerun after it):
    the outputs come from two versions. The record's model is neither, so a reproduction
    pinned to the version in the folder now fails; it matched before, with only a warning
    in the provenance job's log."""
    from shardflow.workflow.reproduce import check_reproduction

    monkeypatch.chdir(tmp_path)
    model = _model(tmp_path, b"weights")
    old = provenance.made_with("embedding", model, "cpu", 2)
    (tmp_path / "model" / "model.safetensors").write_bytes(b"tuned!!")
    new = provenance.made_with("embedding", model, "cpu", 2)
    assert old["model"] != new["model"] == provenance.model_sha256(model)
    manifest = provenance.build_manifest(str(tmp_path), {}, {}, [], {}, {"embedding": model},
                                         jobs_made_with=[old, new, new])
    assert manifest["model"]["sha256"] is None and "2 different versions" in manifest["model"]["note"]
    assert manifest["jobs_made_with"]["models"]["embedding"] == [old["model"], new["model"]]
    assert any("ran with 2 different model versions" in w for w in manifest["warnings"])
    (row,) = check_reproduction({"model_sha256": new["model"]["sha256"]}, manifest, None)
    assert (row.item, row.status) == ("model weights", "FAIL")


def test_jobs_that_loaded_one_model_from_two_folders_ran_one_version(tmp_path, monkeypatch):
    """The same model bytes at two paths (`default` in two environments, `~/models/x` for
    two users, a relative path from a moved checkout): one version, where the jobs ran
    it. They counted as two, so the record's hash was null, with a warning of two
    versions, and a reproduction pinned to that very hash failed."""
    from shardflow.workflow.reproduce import check_reproduction

    monkeypatch.chdir(tmp_path)
    here = provenance.made_with("embedding", _model(tmp_path / "env1", b"weights"), "cpu", 2)
    there = provenance.made_with("embedding", _model(tmp_path / "env2", b"weights"), "cpu", 2)
    assert here["model"]["path"] != there["model"]["path"] and here["model"]["sha256"] == there["model"]["sha256"]
    manifest = provenance.build_manifest(str(tmp_path), {}, {}, [], {}, {"embedding": there["model"]["path"]},
                                         jobs_made_with=[here, there, there])
    assert manifest["model"] == here["model"]
    assert not any("model" in w for w in manifest["warnings"]), manifest["warnings"]
    (row,) = check_reproduction({"model_sha256": here["model"]["sha256"]}, manifest, None)
    assert row.status == "ok"


def test_the_jobs_model_is_recorded_where_the_configs_name_points_elsewhere_now(tmp_path, monkeypatch):
    """The config's model name resolves to another folder than the jobs loaded (the
    bundled model of a rebuilt environment, a folder renamed since): the outputs are the
    jobs' model's, so the record keeps the jobs' hash and warns; it took the hash of
    whatever the name points to now, silently."""
    monkeypatch.chdir(tmp_path)
    ran = provenance.made_with("embedding", _model(tmp_path / "then", b"weights"), "cpu", 2)
    now = _model(tmp_path / "now", b"other weights")
    manifest = provenance.build_manifest(str(tmp_path), {}, {}, [], {}, {"embedding": now}, jobs_made_with=[ran])
    assert manifest["model"] == ran["model"] != provenance.model_sha256(now)
    (warning,) = [w for w in manifest["warnings"] if "model" in w]
    assert f"at {ran['model']['path']} changed since its jobs ran (the config names {now} now)" in warning
    # The same bytes at another path: the jobs' record, nothing to warn about.
    same = _model(tmp_path / "copy", b"weights")
    manifest = provenance.build_manifest(str(tmp_path), {}, {}, [], {}, {"embedding": same}, jobs_made_with=[ran])
    assert manifest["model"] == ran["model"] and not any("model" in w for w in manifest["warnings"])


def test_a_model_replaced_with_its_sizes_and_times_kept_is_hashed_again(tmp_path, monkeypatch):
    """model_sha256_kept kept a model's hash by each file's path, size and mtime: another
    model of the same architecture copied over it with its times kept (`cp -a`,
    `rsync -a`) matched on all three, and the jobs recorded the former model's hash. A
    file's change time and inode number are in the key too: `cp -a` over the file (the
    same inode, its change time now) and rsync's temporary renamed into place (another
    inode) are each hashed again; reading the files unchanged is not."""
    import os

    monkeypatch.chdir(tmp_path)  # the kept hash lives under the working directory
    model = _model(tmp_path, b"weights v1")
    weights = tmp_path / "model" / "model.safetensors"
    old = os.stat(weights)
    first = provenance.model_sha256_kept(model)
    assert first == provenance.model_sha256(model) == provenance.model_sha256_kept(model)

    def put_back_times():
        os.utime(weights, ns=(old.st_atime_ns, old.st_mtime_ns))

    # rsync -a: a temporary with the other bytes, its times set, renamed over the file.
    temporary = tmp_path / "model" / ".model.safetensors.XYZ"
    temporary.write_bytes(b"weights v2")
    os.utime(temporary, ns=(old.st_atime_ns, old.st_mtime_ns))
    os.replace(temporary, weights)
    assert [os.stat(weights).st_size, os.stat(weights).st_mtime_ns] == [old.st_size, old.st_mtime_ns]
    second = provenance.model_sha256_kept(model)
    assert second == provenance.model_sha256(model) != first
    # cp -a over the file: written in place (the same inode), its times set back. The
    # change time is the kernel's clock at the write: wait for that clock to move past
    # the file's, so the write cannot share its tick (a filesystem of coarse timestamps).
    probe = tmp_path / "probe"
    probe.write_bytes(b"")
    while os.stat(probe).st_ctime_ns <= os.stat(weights).st_ctime_ns:
        os.utime(probe)
    inode = os.stat(weights).st_ino
    weights.write_bytes(b"weights v3")
    put_back_times()
    assert os.stat(weights).st_ino == inode and os.stat(weights).st_mtime_ns == old.st_mtime_ns
    assert provenance.model_sha256_kept(model) == provenance.model_sha256(model) not in (first, second)
    assert provenance.made_with("embedding", model, "cpu", 1)["model"] == provenance.model_sha256(model)


def test_moving_the_checkout_reruns_no_provenance_job(tmp_path):
    """Rule provenance passed the checkout's absolute path (workflow.basedir) as a
    recorded param: the same run driven from a clone in another folder (a paper's
    experiment rerun months later) reran every provenance job, rewrote each record and
    so reran verify_reproduction and the landing page, though the record names no path
    of the checkout (its git commit and dirty flag, which are, say what it was)."""
    import shutil
    import subprocess

    from tests.helpers import REPO, SNAKEMAKE, offline_env, params_changed

    moved = tmp_path / "elsewhere" / "clone"  # the workflow and its package, as a clone has them
    for name in ("Snakefile", "rules", "config", "scripts", "envs", "shardflow"):
        source, copy = REPO / name, moved / name
        if source.is_dir():  # copy2: the scripts keep their times
            shutil.copytree(source, copy, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, copy)
    run = tmp_path / "run"
    run.mkdir()
    env = offline_env(SHARDFLOW_SKIP_MODEL_CHECK="1")

    def snakemake(checkout, *args):
        cmd = [SNAKEMAKE, "-s", str(checkout / "Snakefile"), "-d", str(run), "--cores", "1", *args,
               "results/demo/provenance.json"]
        proc = subprocess.run(cmd, cwd=run, env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
        return proc.stdout + proc.stderr

    snakemake(REPO, "--touch")  # records every job's params, as a finished run has them
    (run / "results" / "demo").mkdir(parents=True, exist_ok=True)
    (run / "results" / "demo" / "provenance.json").write_text("{}")
    assert "provenance" not in params_changed(snakemake(moved, "-n"))


def test_a_hub_names_hash_is_kept_per_version_of_its_snapshot(tmp_path, monkeypatch):
    """Every GPU job records its model's hash (made_with); for a local folder it is kept
    per version of the files, for a hub name it was computed again in every job (seconds
    to minutes for a large model). Kept per snapshot and version of its files now: a ref
    moved to another snapshot is hashed again."""
    from huggingface_hub import constants

    from tests.support.hub_cache import hub_cache_with_two_revisions, move_ref

    monkeypatch.chdir(tmp_path)  # the kept hash lives under the working directory
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    repo, rev1, rev2 = hub_cache_with_two_revisions(tmp_path / "hub")
    computed = []
    real = provenance.model_sha256
    monkeypatch.setattr(madewith, "model_sha256", lambda name: computed.append(name) or real(name))

    first = provenance.model_sha256_kept("acme/minilm")
    assert first == real("acme/minilm") == provenance.model_sha256_kept("acme/minilm")
    assert first["revision"] == rev2.name and computed == ["acme/minilm"]
    move_ref(repo / "refs" / "main", rev1.name)
    second = provenance.model_sha256_kept("acme/minilm")
    assert second == real("acme/minilm") and second["revision"] == rev1.name and second["sha256"] != first["sha256"]
    assert computed == ["acme/minilm"] * 2
    assert provenance.model_sha256_kept("not/in-the-cache")["sha256"] is None  # not kept, not an error


def test_a_model_swapped_while_it_is_hashed_is_not_kept_against_the_files_read_before(tmp_path, monkeypatch):
    """The kept hash was stored against the model's files as read before hashing, which
    takes minutes for a large model. A link to the folder repointed meanwhile (`ln -sfn
    v2 models/current`) hashed v2 and kept that against v1's files: pointed back at v1,
    the name got v2's hash, in the jobs' made_with and in plan.changed_model, at every
    later parse. Kept only where the files read the same after the hash."""
    import os

    monkeypatch.chdir(tmp_path)  # the kept hash lives under the working directory
    v1, v2 = _model(tmp_path / "v1", b"weights v1"), _model(tmp_path / "v2", b"weights v2")
    current = tmp_path / "current"
    current.symlink_to(v1)

    def repoint(target):  # ln -sfn: a new link renamed over the old one
        (tmp_path / "new-link").symlink_to(target)
        os.replace(tmp_path / "new-link", current)

    real = provenance.model_sha256

    def swapped_while_hashing(path):
        repoint(v2)
        return real(path)

    monkeypatch.setattr(madewith, "model_sha256", swapped_while_hashing)
    assert provenance.model_sha256_kept(str(current))["sha256"] == real(v2)["sha256"]  # what it read
    monkeypatch.setattr(madewith, "model_sha256", real)
    repoint(v1)
    assert provenance.model_sha256_kept(str(current))["sha256"] == real(v1)["sha256"] != real(v2)["sha256"]


def test_a_hub_names_ref_moved_while_it_is_hashed_keeps_no_hash(tmp_path, monkeypatch):
    """The same for a hub name: refs/main moved to another snapshot while the name was
    hashed (model_sha256 finds the snapshot again) kept that snapshot's hash against the
    one read before, given for it once the ref was moved back."""
    from huggingface_hub import constants

    from tests.support.hub_cache import hub_cache_with_two_revisions, move_ref

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    repo, rev1, rev2 = hub_cache_with_two_revisions(tmp_path / "hub")
    real = provenance.model_sha256
    on_rev2 = real("acme/minilm")

    def moved_while_hashing(name):
        move_ref(repo / "refs" / "main", rev1.name)
        return real(name)

    monkeypatch.setattr(madewith, "model_sha256", moved_while_hashing)
    assert provenance.model_sha256_kept("acme/minilm")["revision"] == rev1.name  # what it read
    monkeypatch.setattr(madewith, "model_sha256", real)
    move_ref(repo / "refs" / "main", rev2.name)
    assert provenance.model_sha256_kept("acme/minilm") == on_rev2


def _fake_torch(gpu: str, cuda: str, cudnn: int):
    """A torch module as made_with reads it on a GPU: the device's name, and the CUDA and
    cuDNN it was built with and loaded (no GPU, and no real torch import, needed)."""
    import types

    torch = types.ModuleType("torch")
    torch.__version__ = "2.5.1"
    torch.device = lambda name: name
    # is_available: the provenance job's own host, where no GPU is (accelerator_info)
    torch.cuda = types.SimpleNamespace(get_device_name=lambda device: gpu, current_device=lambda: 0,
                                       is_available=lambda: False)
    torch.version = types.SimpleNamespace(cuda=cuda)
    torch.backends = types.SimpleNamespace(cudnn=types.SimpleNamespace(version=lambda: cudnn))
    return torch


def test_a_gpu_job_records_the_cuda_and_cudnn_it_ran_with(tmp_path, monkeypatch):
    """GPU kernels, and so the output bits, change with CUDA and cuDNN. A GPU job recorded
    its GPU's name but neither version, and the record's own `accelerator` is the
    provenance job's: a CPU job, on a cluster a host without a GPU (no cuDNN, no GPUs). So
    a run reproduced months later could not say which CUDA and cuDNN made its numbers."""
    import sys

    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(sys.modules, "torch", _fake_torch("NVIDIA H100 80GB HBM3", "12.4", 90100))
    h100 = provenance.made_with("embedding", None, "cuda:0", 2)
    assert (h100["gpu"], h100["cuda"], h100["cudnn"]) == ("NVIDIA H100 80GB HBM3", "12.4", 90100)
    monkeypatch.setitem(sys.modules, "torch", _fake_torch("NVIDIA A100-SXM4-80GB", "12.1", 8902))
    a100 = provenance.made_with("embedding", None, "cuda", 2)
    cpu = provenance.made_with("embedding", None, "cpu", 2)
    assert (cpu["gpu"], cpu["cuda"], cpu["cudnn"]) == (None, None, None)
    old = {k: v for k, v in h100.items() if k not in ("cuda", "cudnn")}  # a job from before they were recorded
    manifest = provenance.build_manifest(str(tmp_path), {}, {}, [], {}, {}, jobs_made_with=[h100, h100, a100, cpu, old])
    made = manifest["jobs_made_with"]
    assert made["devices"] == [["cuda:0", "NVIDIA H100 80GB HBM3"], ["cuda", "NVIDIA A100-SXM4-80GB"], ["cpu", None]]
    assert made["cuda"] == [["12.4", 90100], ["12.1", 8902], [None, None]]  # the GPU jobs' only


class _Named(dict):
    """A rule's input or params as a script reads them: by attribute."""

    __getattr__ = dict.__getitem__


def test_the_query_encoders_run_is_read_from_its_stats_file(tmp_path, monkeypatch):
    """embed_queries, one job with no job table, records `made_with` in its
    queries.stats.json, which the provenance rule did not take as input: the query
    encoder's GPU, CUDA, packages and model hash were missing from `jobs_made_with`. The
    rule gets the file (TaskFiles.stats) and the script reads its record, without hashing
    the file (it holds the job's times)."""
    import runpy
    import sys
    from types import SimpleNamespace

    from shardflow.core import runlog
    from shardflow.workflow.tasks import task_files
    from tests.helpers import REPO

    (retrieval,) = task_files(("retrieval",), "scifact", {}, "demo")
    assert "results/scifact/retrieval/queries.stats.json" in retrieval.stats
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(sys.modules, "torch", _fake_torch("NVIDIA H100 80GB HBM3", "12.4", 90100))
    monkeypatch.setattr(runlog, "configure_logging", lambda *a: SimpleNamespace(info=print, warning=print))
    monkeypatch.setattr(provenance, "git_state", lambda repo: {"commit": "a" * 40, "dirty": False})
    ran = dict(provenance.made_with("embedding", None, "cuda:0", 2), git={"commit": "a" * 40, "dirty": False})
    stats = tmp_path / "queries.stats.json"
    stats.write_text(json.dumps({"records": 3, "seconds": 1.5, "made_with": ran}))
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"source_sha256": {}, "chunks": []}))
    out = tmp_path / "provenance.json"
    inputs = _Named(manifest=str(manifest), raw=[], jobs=[], benchmarks=[], outputs=[], stats=[str(stats)])
    smk = SimpleNamespace(input=inputs, output=[str(out)], log=[str(tmp_path / "log")],
                          params=_Named(config={}, models={}, repo=str(tmp_path)))
    runpy.run_path(str(REPO / "scripts" / "provenance.py"), init_globals={"snakemake": smk})
    made = json.loads(out.read_text())["jobs_made_with"]
    assert made["jobs"] == 1 and made["devices"] == [["cuda:0", "NVIDIA H100 80GB HBM3"]]
    assert made["cuda"] == [["12.4", 90100]] and json.loads(out.read_text())["outputs"] == {}


@pytest.mark.parametrize(("job_device", "backend", "searched_on", "gpu"),
                         [("cuda:1", "torch", "cuda:1", "NVIDIA H100 80GB HBM3"), ("cuda", "faiss", "cpu", None)])
def test_the_evaluations_run_is_recorded_and_read_into_the_record(tmp_path, monkeypatch, job_device, backend,
                                                                  searched_on, gpu):
    """retrieval_evaluate searches on a device (ties and float sums differ between the CPU
    and a GPU, and between GPUs) but recorded no `made_with`, so a rerun months later
    whose nDCG differs could not be told apart by its device in `jobs_made_with`. It
    writes its record in its stats file, naming the device the search ran on (faiss's on
    the CPU, whatever the job was given), and the provenance rule gets that file
    (TaskFiles.stats) as it gets embed_queries'."""
    import runpy
    from types import SimpleNamespace

    import torch

    from shardflow.core import gpujob
    from shardflow.retrieval import pipeline
    from shardflow.workflow.tasks import task_files
    from tests.helpers import REPO

    (retrieval,) = task_files(("retrieval",), "scifact", {}, "demo")
    assert "results/scifact/retrieval/evaluate.stats.json" in retrieval.stats
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(madewith, "git_state", lambda repo: {"commit": "a" * 40, "dirty": False})
    monkeypatch.setattr(madewith, "model_sha256_kept", lambda path: {"path": path, "sha256": "f" * 64})
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device: "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(torch.version, "cuda", "12.4")
    monkeypatch.setattr(torch.backends.cudnn, "version", lambda: 90100)
    monkeypatch.setattr(torch, "set_num_threads", lambda n: None)  # the test process's own
    job = SimpleNamespace(device=job_device, threads=3, log=SimpleNamespace(info=lambda *a: None))
    monkeypatch.setattr(gpujob, "start_gpu_job", lambda *a: job)
    monkeypatch.setattr(pipeline, "search_and_score", lambda *a: {"ndcg_at_10": 0.5, "device": searched_on})
    monkeypatch.setattr(pipeline, "plot_per_query", lambda *a: None)
    stats = tmp_path / "evaluate.stats.json"
    names = ("docs", "doc_ids", "queries", "query_ids", "qrels")
    smk = SimpleNamespace(
        params=_Named(top_k=10, block_size=64, backend=backend, drop_identical_ids=False, model="default"),
        input=_Named((n, n) for n in names),
        output=_Named(metrics="m", per_query="q", run="r", figure="f", stats=str(stats)),
    )
    runpy.run_path(str(REPO / "scripts" / "retrieval_evaluate.py"), init_globals={"snakemake": smk})
    record = json.loads(stats.read_text())
    ran = record["made_with"]
    assert (ran["device"], ran["gpu"], ran["threads"], ran["role"]) == (searched_on, gpu, 3, "embedding")
    assert isinstance(record["seconds"], float) and record["seconds"] >= 0  # the search's: make estimate's rate
    manifest = provenance.build_manifest(str(tmp_path), {}, {}, [], {}, {}, stats=[str(stats)])
    made = manifest["jobs_made_with"]
    assert made["jobs"] == 1 and made["devices"] == [[searched_on, gpu]]
    assert made["cuda"] == ([["12.4", 90100]] if gpu else [])
