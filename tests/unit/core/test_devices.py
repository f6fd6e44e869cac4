"""shardflow.core.devices: the compile cache every GPU job points torch at."""

from __future__ import annotations

import os

from shardflow.core import devices
from shardflow.core.devices import use_compile_cache


def test_compile_cache_folder_is_made_and_exported(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "placeholder")  # so that monkeypatch restores it
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR")
    monkeypatch.setattr(devices, "_PROCESS_CACHE_DIR", None)  # the process had no setting of its own
    assert use_compile_cache(None) is None
    assert "TORCHINDUCTOR_CACHE_DIR" not in os.environ  # null: torch's own cache, untouched
    monkeypatch.chdir(tmp_path)
    got = use_compile_cache("shared/inductor")
    assert got == tmp_path / "shared" / "inductor" and got.is_dir()
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(got)  # absolute: jobs in other folders agree
    assert use_compile_cache("shared/inductor", "kept-apart") == got / "kept-apart"
    assert use_compile_cache(None) is None and "TORCHINDUCTOR_CACHE_DIR" not in os.environ  # torch's own again
    monkeypatch.setattr(devices, "_PROCESS_CACHE_DIR", str(tmp_path / "own"))  # a setting of the process's
    assert use_compile_cache(None, "kept-apart") == tmp_path / "own" / "kept-apart"
    use_compile_cache(None)
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "own")
