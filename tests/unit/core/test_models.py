"""shardflow.core.models.unavailable: what the workflow's parse-time check says of each
kind of configured model name."""

import json
import re

import pytest

from shardflow.core.models import bundled_model_path, resolve_model, same_model, unavailable
from shardflow.embed.stconfig import resolve_model_folder


def test_the_bundled_model_and_a_model_folder_are_there(tmp_path):
    assert unavailable("default") is None
    assert unavailable(resolve_model("default")) is None  # a sentence-transformers folder
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "config.json").write_text("{}")
    assert unavailable(str(tmp_path / "plain")) is None
    # A transformers-only loader (summarise.model: AutoConfig) needs config.json.
    (tmp_path / "st_only").mkdir()
    (tmp_path / "st_only" / "modules.json").write_text("[]")
    assert unavailable(str(tmp_path / "st_only")) is None
    assert unavailable(str(tmp_path / "st_only"), marks=("config.json",)) == (
        "the folder holds no config.json: not a model folder"
    )


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("{tmp}/empty", "the folder holds no config.json or modules.json: not a model folder"),
        ("{tmp}/empty/weights.bin", "a file: give the model folder"),
        ("{tmp}/typo", "no such folder"),
        ("./models/typo", "no such folder"),
        ("~/models/typo", "no such folder"),
        ("a/b/c", "no such folder"),  # no hub name has two slashes
    ],
)
def test_what_is_not_a_model_folder_is_named(tmp_path, name, why):
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "weights.bin").write_bytes(b"")
    assert unavailable(name.format(tmp=tmp_path)) == why


def test_a_hub_name_is_looked_up_in_the_local_cache_only(tmp_path, monkeypatch):
    """A name found in the cache is there, as the embed and summarise jobs' loaders find
    it (a transformers-only loader's snapshot needs config.json, as its folder would);
    one that is not is named with the cache it was looked for in and the command that
    fetches it once, outside the run."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    snapshot = tmp_path / "models--shardflow-test--tiny" / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text(json.dumps({"model_type": "bert"}))
    (tmp_path / "models--shardflow-test--tiny" / "refs").mkdir()
    (tmp_path / "models--shardflow-test--tiny" / "refs" / "main").write_text("0" * 40)

    assert unavailable("shardflow-test/tiny") is None
    assert unavailable("shardflow-test/tiny", marks=("config.json",)) is None
    assert resolve_model_folder("shardflow-test/tiny") == snapshot
    (snapshot / "config.json").rename(snapshot / "modules.json")
    assert unavailable("shardflow-test/tiny") is None
    assert unavailable("shardflow-test/tiny", marks=("config.json",)) == (
        "the folder holds no config.json: not a model folder"
    )
    why = unavailable("shardflow-test/absent")
    assert why == (
        f"neither a folder nor in the local Hugging Face cache {tmp_path}: fetch it once, outside the run, "
        "with `hf download shardflow-test/absent` into the cache the jobs read (HF_HOME)"
    )
    from shardflow.core.models import hub_snapshot

    with pytest.raises(FileNotFoundError, match="fetch it once with `hf download shardflow-test/absent`"):
        hub_snapshot("shardflow-test/absent")  # what a job says, where the parse did not look (a SLURM node's cache)


def test_weights_cut_short_or_left_as_lfs_pointers_are_found_before_any_job(tmp_path):
    """A clone without `git lfs pull`, or a copy that stopped: the folder looked like a
    model, and every embed job failed on it (and was resubmitted) with a header error
    naming no folder."""
    import numpy as np
    from safetensors.numpy import save_file

    from shardflow.core.models import unavailable

    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    save_file({"w": np.ones((64, 64), dtype=np.float32)}, str(folder / "model.safetensors"))
    assert unavailable(str(folder)) is None
    whole = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(whole[:-100])
    assert unavailable(str(folder)) == f"model.safetensors is cut short: {len(whole) - 100:,} of its {len(whole):,} bytes"
    (folder / "model.safetensors").write_bytes(whole[:20])
    assert "model.safetensors is cut short: its header alone is" in unavailable(str(folder))
    (folder / "model.safetensors").write_bytes(
        b"version https://git-lfs.github.com/spec/v1\noid sha256:0123\nsize 90000000\n"
    )
    assert unavailable(str(folder)) == f"model.safetensors is a Git LFS pointer, not the weights (run `git lfs pull` in {folder})"


def test_two_spellings_of_one_model_are_the_same_model(tmp_path, monkeypatch):
    """An embed sweep compares a point's vectors with the main run's only where both load
    one model (rules/common.smk embed_reference): "default" and the bundled folder, a
    folder with a trailing slash, through `~`, relative or through a link are that model."""
    bundled = bundled_model_path()
    assert same_model("default", bundled) and same_model(bundled + "/", "default")
    folder = tmp_path / "models" / "e5"
    folder.mkdir(parents=True)
    (tmp_path / "link").symlink_to(folder)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    for spelling in (f"{folder}/", "models/e5", "./models/e5/", "~/models/e5", str(tmp_path / "link")):
        assert same_model(spelling, str(folder)), spelling
    assert same_model("/only/on/the/nodes/", "/only/on/the/nodes")  # a folder the image holds
    assert not same_model("default", str(folder)) and not same_model("org/e5", "org/e5-large")


def test_a_job_whose_model_folder_has_gone_stops_naming_it(tmp_path):
    """resolve_model, which every job that loads a model goes through: a path that is no
    folder (moved since the run that made the outputs; the parse only warns where those
    all exist) stops the job naming the model and the keys, instead of a loader's error
    about hub repository ids. A hub name is left to its loader."""
    gone = str(tmp_path / "moved")
    for name in (gone, "~/no-such-model", "./models/typo", "a/b/c"):
        gone_message = rf"model '{re.escape(name)}': no such folder \(moved or deleted\?\)"
        with pytest.raises(FileNotFoundError, match=gone_message + r".*\(embedding.model, summarise.model"):
            resolve_model(name)
    assert resolve_model("org/name") == "org/name"
    (tmp_path / "moved").mkdir()
    assert resolve_model(gone) == gone
