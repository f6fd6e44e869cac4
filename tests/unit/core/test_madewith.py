"""core.madewith: what a job ran with, the checkout's uncommitted edits among it."""

from __future__ import annotations

import subprocess

from shardflow.core import madewith


def _git(repo, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
                   check=True, capture_output=True)


def _checkout(tmp_path):
    repo = tmp_path / "repo"
    (repo / "shardflow").mkdir(parents=True)
    (repo / "shardflow" / "train.py").write_text("lr = 1e-3\n")
    (repo / ".gitignore").write_text("results/\n")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "first")
    return repo


def test_uncommitted_edits_are_told_apart_by_their_hash(tmp_path):
    """git_state recorded `dirty: true` only: two runs from different uncommitted edits
    read the same, and a rerun could not check it had the same edits. diff_sha256 hashes
    the files that differ from HEAD, tracked and untracked (not ignored), by content."""
    repo = _checkout(tmp_path)
    clean = madewith.git_state(repo)
    assert (clean["dirty"], clean["diff_sha256"], clean["diff_files"], clean["diff_unhashed"]) == (False, None, 0, [])

    (repo / "shardflow" / "train.py").write_text("lr = 3e-4\n")
    one = madewith.git_state(repo)
    (repo / "shardflow" / "train.py").write_text("lr = 1e-2\n")
    other = madewith.git_state(repo)
    assert one["dirty"] and other["dirty"] and one["commit"] == other["commit"] == clean["commit"]
    assert one["diff_sha256"] != other["diff_sha256"] and one["diff_files"] == 1

    (repo / "shardflow" / "train.py").write_text("lr = 3e-4\n")  # the same edit again: the same hash
    assert madewith.git_state(repo) == one
    _git(repo, "add", "shardflow/train.py")  # staged or not: the same bytes ran
    assert madewith.git_state(repo) == one
    _git(repo, "reset", "-q")

    (repo / "results").mkdir()
    (repo / "results" / "out.json").write_text("{}")  # ignored: no part of the checkout
    assert madewith.git_state(repo) == one
    (repo / "shardflow" / "helper.py").write_text("x = 1\n")  # untracked: code the edit may import
    with_helper = madewith.git_state(repo)
    assert with_helper["diff_sha256"] not in (one["diff_sha256"], None) and with_helper["diff_files"] == 2
    assert with_helper["dirty"] is True
    (repo / "shardflow" / "train.py").write_text("lr = 1e-3\n")  # tracked edit undone: only the new file differs
    untracked_only = madewith.git_state(repo)
    assert untracked_only["dirty"] is False and untracked_only["diff_sha256"] is not None
    (repo / "shardflow" / "train.py").unlink()
    assert madewith.git_state(repo)["diff_sha256"] != untracked_only["diff_sha256"]  # a deletion counts


def test_a_large_file_enters_the_diff_hash_by_its_size_and_is_named(tmp_path, monkeypatch):
    """Every job records the state: a file over the limit is not read, only sized, and named."""
    repo = _checkout(tmp_path)
    monkeypatch.setattr(madewith, "DIFF_FILE_BYTES", 8)
    (repo / "big.py").write_bytes(b"0123456789")
    first = madewith.git_state(repo)
    assert first["diff_unhashed"] == ["big.py (10 bytes)"] and first["diff_files"] == 1
    (repo / "big.py").write_bytes(b"9876543210")  # same size: not told apart, as the record says
    assert madewith.git_state(repo) == first
    (repo / "big.py").write_bytes(b"01234567890")
    assert madewith.git_state(repo)["diff_sha256"] != first["diff_sha256"]


def test_files_past_the_total_enter_by_their_size_and_the_list_is_cut_at_its_limit(tmp_path, monkeypatch):
    """The bytes read are bounded in all (DIFF_TOTAL_BYTES, in path order), and so is the
    list of files entered by size (DIFF_UNHASHED_NAMED, then a count)."""
    repo = _checkout(tmp_path)
    monkeypatch.setattr(madewith, "DIFF_TOTAL_BYTES", 10)
    monkeypatch.setattr(madewith, "DIFF_UNHASHED_NAMED", 2)
    for name in ("a", "b", "c", "d", "e"):
        (repo / f"{name}.py").write_bytes(b"123456")
    state = madewith.git_state(repo)
    assert state["diff_files"] == 5
    assert state["diff_unhashed"] == ["b.py (6 bytes)", "c.py (6 bytes)", "and 2 more"]  # a.py hashed: 6 of 10


def test_a_config_or_data_edited_in_the_checkout_is_no_other_checkout(tmp_path):
    """`dirty` and the hash follow code: a user's config beside the Snakefile
    (`--configfile my.yaml`), edited between two runs, a tracked config edited in place, a
    corpus part added under data/ or a test written made every earlier job's checkout
    another, and provenance warned that the jobs ran at another checkout. Their settings
    are the jobs' params, recorded apart. Code in a folder of code counts, whatever its
    suffix; at the top, the Snakefile and Python or rule files."""
    repo = _checkout(tmp_path)
    (repo / "config").mkdir()
    (repo / "config" / "config.yaml").write_text("n_chunks: 4\n")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "config")
    clean = madewith.git_state(repo)
    (repo / "my.yaml").write_text("n_chunks: 8\n")
    (repo / "config" / "config.yaml").write_text("n_chunks: 16\n")
    (repo / "notes.md").write_text("try lr 3e-4\n")
    (repo / "data" / "news").mkdir(parents=True)  # README's own corpus, a part added
    (repo / "data" / "news" / "part-002.jsonl.gz").write_bytes(b"\x1f\x8b a part")
    (repo / "tests").mkdir()
    (repo / "tests" / "test_mine.py").write_text("def test(): pass\n")
    edited = madewith.git_state(repo)
    assert edited == clean and clean["dirty"] is False and clean["diff_sha256"] is None
    (repo / "rules").mkdir()
    (repo / "rules" / "extra.smk").write_text("rule x: pass\n")
    (repo / "scripts").mkdir()
    (repo / "scripts" / "run.R").write_text("1\n")
    (repo / "Snakefile").write_text("include: 'rules/extra.smk'\n")
    code = madewith.git_state(repo)
    assert code["diff_files"] == 3 and code["dirty"] is False  # untracked: in the hash, not dirty
    (repo / "shardflow" / "train.py").write_text("lr = 0.1\n")
    assert madewith.git_state(repo)["dirty"] is True


def test_a_record_from_before_the_diff_hash_is_the_same_checkout_by_its_commit():
    now = {"commit": "a" * 40, "dirty": True, "diff_sha256": "b" * 64, "diff_files": 1, "diff_unhashed": []}
    assert madewith.same_checkout({"commit": "a" * 40, "dirty": True}, now)
    assert not madewith.same_checkout({"commit": "c" * 40, "dirty": True}, now)
    assert not madewith.same_checkout(dict(now, diff_sha256="d" * 64), now)
