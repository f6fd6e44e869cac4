"""workflow.provenance: the manifest takes what the jobs ran with from their records, and
says where the checkout or the model has changed since."""

from __future__ import annotations

import json

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
