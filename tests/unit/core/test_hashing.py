"""The hashes that are recorded (resume keys, ids, provenance) must never change: a
changed spelling would rerun, or fail to resume, every finished job."""

from shardflow.core.hashing import config_sha256, digest, texts_fingerprint

RECORD = {"model": "m", "max_length": None, "window": 4096, "prompt": "é"}


def test_recorded_hashes_are_pinned():
    # Values from the implementation before digest and config_sha256 shared one
    # (json.dumps with sorted keys; config_sha256 without spaces).
    assert digest(RECORD) == "0e1c54578f17e6f4ee2bbcf69d562f15910c5f42ed6da50da70ef83284311c5e"
    assert config_sha256(RECORD) == "1bd399c29aae60fb47acad5d269a55d761c992aa27ad7837785d906e5c2d5dbe"


def test_key_order_and_unjsonable_values():
    from pathlib import Path

    assert digest({"a": 1, "b": 2}) == digest({"b": 2, "a": 1})
    assert digest({"p": Path("/x")}) == digest({"p": "/x"})  # str() of what JSON cannot hold


def test_texts_fingerprint_keeps_boundaries():
    assert texts_fingerprint(["ab", "c"]) != texts_fingerprint(["a", "bc"])


def test_a_hub_name_is_hashed_from_its_cached_snapshot_with_its_revision(tmp_path, monkeypatch):
    """Offline: the local Hugging Face cache resolves the name (refs/main -> a snapshot);
    nothing is downloaded, and a name not in the cache gets no hash."""
    from huggingface_hub import constants

    from shardflow.core.hashing import model_sha256, sha256_folder

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))  # read at import: set where it is read
    repo = tmp_path / "models--acme--minilm"
    snapshot = repo / "snapshots" / ("a" * 40)
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text('{"hidden_size": 4}')
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("a" * 40)
    found = model_sha256("acme/minilm")
    assert found == {"path": "acme/minilm", "sha256": sha256_folder(snapshot, (".json",)), "revision": "a" * 40}
    assert model_sha256("acme/absent")["sha256"] is None


def test_weights_re_saved_in_place_change_the_model_identity(tmp_path):
    """Resume keys hold `model_identity`: weights of the same names and sizes saved over
    the old ones (a fine-tune of the same shape) must not resume the old model's parts."""
    import os

    from shardflow.core.hashing import HASH_CONTENT_BELOW, model_identity

    weights, config = tmp_path / "model.safetensors", tmp_path / "config.json"
    config.write_text('{"hidden_size": 8}')
    weights.write_bytes(b"\1" * HASH_CONTENT_BELOW)
    before = model_identity(tmp_path)
    assert model_identity(tmp_path) == before
    weights.write_bytes(b"\2" * HASH_CONTENT_BELOW)
    st = weights.stat()
    os.utime(weights, ns=(st.st_atime_ns, st.st_mtime_ns + 1))  # coarse clocks: a distinct mtime
    assert model_identity(tmp_path) != before
    config.write_text('{"hidden_size": 9}')  # small files by content
    assert model_identity(tmp_path)[0][2] != before[0][2]


def test_a_changed_chat_template_changes_the_model_sha256(tmp_path):
    """transformers 5 saves a chat template as chat_template.jinja, and summarisation
    prompts go through it: the model's recorded hash must see it change."""
    from shardflow.core.hashing import model_sha256

    (tmp_path / "config.json").write_text('{"hidden_size": 4}')
    (tmp_path / "chat_template.jinja").write_text("{{ messages[0]['content'] }}")
    before = model_sha256(str(tmp_path))["sha256"]
    (tmp_path / "chat_template.jinja").write_text("Summarise: {{ messages[0]['content'] }}")
    assert model_sha256(str(tmp_path))["sha256"] != before
