"""shardflow.core.devices: the compile cache every GPU job points torch at."""

from __future__ import annotations

import os

from shardflow.core.devices import use_compile_cache


def test_compile_cache_folder_is_made_and_exported(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "placeholder")  # so that monkeypatch restores it
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR")
    assert use_compile_cache(None) is None
    assert "TORCHINDUCTOR_CACHE_DIR" not in os.environ  # null: torch's own cache, untouched
    monkeypatch.chdir(tmp_path)
    got = use_compile_cache("shared/inductor")
    assert got == tmp_path / "shared" / "inductor" and got.is_dir()
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(got)  # absolute: jobs in other folders agree
