"""core.parsecache: a value derived from input files is computed once per version of
those files, across parses."""

from __future__ import annotations

import json

import pytest

from shardflow.core.parsecache import cache_file, cached


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the cache lives under the working directory


def _counter():
    calls = []

    def compute():
        calls.append(1)
        return len(calls)

    return compute, calls


def test_computed_once_for_unchanged_files(tmp_path):
    data = tmp_path / "data.txt"
    data.write_text("abc\n")
    compute, calls = _counter()
    assert cached("n", [str(data)], "x", compute) == 1
    assert cached("n", [str(data)], "x", compute) == 1
    assert len(calls) == 1 and cache_file("n").is_file()


def test_a_changed_file_or_extra_or_kind_computes_again(tmp_path):
    data = tmp_path / "data.txt"
    data.write_text("abc\n")
    compute, calls = _counter()
    cached("n", [str(data)], "x", compute)
    data.write_text("abcd\n")  # another size
    assert cached("n", [str(data)], "x", compute) == 2
    assert cached("n", [str(data)], "y", compute) == 3  # another `extra`
    assert cached("other", [str(data)], "x", compute) == 4  # another kind, another file
    assert cached("n", [str(data)], "x", compute) == 2 and len(calls) == 4


def test_a_failing_compute_keeps_nothing(tmp_path):
    data = tmp_path / "data.txt"
    data.write_text("abc\n")

    def broken():
        raise ValueError("bad line 3")

    with pytest.raises(ValueError, match="bad line 3"):
        cached("n", [str(data)], None, broken)
    compute, _ = _counter()
    assert cached("n", [str(data)], None, compute) == 1


@pytest.mark.parametrize("content", ["{not json", "[1, 2]", ""])
def test_a_corrupt_cache_file_is_rebuilt(tmp_path, content):
    data = tmp_path / "data.txt"
    data.write_text("abc\n")
    cache_file("n").parent.mkdir(parents=True)
    cache_file("n").write_text(content)
    compute, _ = _counter()
    assert cached("n", [str(data)], None, compute) == 1
    assert len(json.loads(cache_file("n").read_text())) == 1
    assert not list(cache_file("n").parent.glob("*.tmp-*"))


def test_a_missing_input_is_an_error_naming_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="gone.txt"):
        cached("n", [str(tmp_path / "gone.txt")], None, lambda: 1)


def test_a_cache_that_cannot_be_written_still_gives_the_value(tmp_path):
    """Best effort: a read-only or full working directory costs a recomputation per parse,
    never an error (an error would change what the caller records)."""
    data = tmp_path / "data.txt"
    data.write_text("abc\n")
    (tmp_path / ".snakemake").write_text("a file where the cache folder would go")
    compute, calls = _counter()
    assert cached("n", [str(data)], None, compute) == 1
    assert cached("n", [str(data)], None, compute) == 2 and len(calls) == 2


def test_the_keys_are_the_files_versions_as_kept_before(tmp_path):
    """Keys are hashing.file_version rows (path, size, mtime_ns, shared with the failure
    records) then `extra`, spelt as they always were: caches kept by an earlier version
    stay valid."""
    data = tmp_path / "data.txt"
    data.write_text("abc\n")
    st = data.stat()
    key = json.dumps([[str(data), st.st_size, st.st_mtime_ns], "x"], sort_keys=True)
    cache_file("n").parent.mkdir(parents=True)
    cache_file("n").write_text(json.dumps({key: 41}))
    assert cached("n", [str(data)], "x", lambda: pytest.fail("computed again")) == 41


def test_a_value_computed_while_its_files_changed_is_not_kept(tmp_path):
    """A file rewritten while its value was computed (minutes, for a model's hash) gave
    a value of neither version; kept against the version read before, it was taken for
    that version once the file was back as it was. It is returned, not kept: the files,
    and an `extra` given as a function that reads it, are read again after compute."""
    import os

    data = tmp_path / "data.txt"
    data.write_text("abc\n")
    before = data.stat()
    compute, calls = _counter()

    def rewritten_meanwhile():
        data.write_text("other bytes\n")
        return compute()

    assert cached("n", [str(data)], None, rewritten_meanwhile) == 1
    data.write_text("abc\n")  # back as it was read before
    os.utime(data, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert cached("n", [str(data)], None, compute) == 2 == cached("n", [str(data)], None, compute)
    state = ["a"]

    def flipped_meanwhile():
        state[0] = "b"
        return compute()

    assert cached("m", [], lambda: list(state), flipped_meanwhile) == 3
    state[0] = "a"
    assert cached("m", [], lambda: list(state), compute) == 4 == cached("m", [], lambda: list(state), compute)
    assert len(calls) == 4
