"""workflow.compare: why two runs differ, from their provenance records: the outputs
first, then what could have changed them, each group listing only what differs."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys

import pytest

from shardflow.cli import main
from shardflow.workflow import compare, provenance
from shardflow.workflow.reproduce import ReproductionError
from tests.helpers import REPO

CONFIG = {"dataset": "demo", "embedding": {"batch_size": 64, "model": "default"}, "n_chunks": 2}


@pytest.fixture
def record(tmp_path, monkeypatch) -> dict:
    """A record as the provenance job writes it (build_manifest), of a run with two
    outputs, three inputs, a model and one job's made_with."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "model.safetensors").write_bytes(b"weights")
    (tmp_path / "embeddings.npy").write_bytes(b"vectors")
    (tmp_path / "ids.json").write_text('["a", "b"]')
    ran = provenance.made_with("embedding", str(tmp_path / "model"), "cpu", 2)
    inputs = {f"data/part{i}.jsonl": str(i) * 64 for i in range(3)}
    timings = {"benchmarks/embed/0.tsv": {"s": 10.0, "max_rss": 1.0, "cpu_time": 9.0}}
    return provenance.build_manifest(str(tmp_path), copy.deepcopy(CONFIG), inputs, ["embeddings.npy", "ids.json"],
                                     timings, {"embedding": str(tmp_path / "model")}, jobs_made_with=[ran])


def _written(tmp_path, name: str, record: dict) -> str:
    path = tmp_path / name
    path.write_text(json.dumps(record))
    return str(path)


def test_identical_records_say_so_in_one_line_a_group(record):
    diff = compare.compare(record, copy.deepcopy(record))
    assert diff["outputs_identical"] is True
    assert all(diff[group]["same"] for group in compare.GROUPS), diff
    text = compare.table(diff, "a.json", "b.json")
    lines = text.splitlines()
    assert lines[3] == "outputs: identical (2 files)", text
    for group in compare.GROUPS:
        (line,) = [x for x in lines if x.startswith(f"{group}: ")]
        assert "same" in line or "identical" in line, line
    assert not [x for x in lines if x.startswith(" ")], text  # nothing listed under a group that agrees


def test_an_output_that_differs_is_named_first_with_those_in_one_record_only(record):
    other = copy.deepcopy(record)
    other["outputs"]["embeddings.npy"] = "f" * 64
    other["outputs"]["extra.json"] = "e" * 64
    del other["outputs"]["ids.json"]
    diff = compare.compare(record, other)
    assert diff["outputs_identical"] is False
    assert diff["outputs"] == {"same": False, "files": [2, 2], "differ": ["embeddings.npy"], "only_a": ["ids.json"],
                               "only_b": ["extra.json"]}
    lines = compare.table(diff, "a.json", "b.json").splitlines()
    assert lines[3] == "outputs: DIFFER: 1 of 1 in both differs, 1 only in A, 1 only in B"
    assert lines[4:7] == ["  differ:    embeddings.npy", "  only in A: ids.json", "  only in B: extra.json"]
    assert diff["inputs"]["same"] is True  # the causes still say what agrees


def test_a_config_key_changed_added_or_removed_is_shown_by_its_dotted_path(record):
    other = copy.deepcopy(record)
    other["config"]["embedding"]["batch_size"] = 128
    other["config"]["embedding"]["dtype"] = "bf16"
    del other["config"]["n_chunks"]
    other["config_sha256"] = provenance.config_sha256(other["config"])
    diff = compare.compare(record, other)["config"]
    assert diff["same"] is False and diff["config_sha256"] == [record["config_sha256"], other["config_sha256"]]
    assert diff["changed"] == {"embedding.batch_size": [64, 128]}
    assert diff["only_a"] == {"n_chunks": 2} and diff["only_b"] == {"embedding.dtype": "bf16"}
    text = compare.table(compare.compare(record, other), "a.json", "b.json")
    assert "\n  embedding.batch_size: 64 -> 128\n" in text
    assert '\n  + embedding.dtype: "bf16" (only in B)\n' in text and "\n  - n_chunks: 2 (only in A)\n" in text


def test_a_setting_whose_json_differs_though_python_calls_it_equal_is_a_change(record):
    """1 and 1.0, or true and 1, are equal in Python, but not the same config: the hash
    differs, and so would a key list that compared them with ==."""
    other = copy.deepcopy(record)
    other["config"]["n_chunks"] = 2.0
    other["config_sha256"] = provenance.config_sha256(other["config"])
    assert compare.compare(record, other)["config"]["changed"] == {"n_chunks": [2, 2.0]}


def test_a_package_changed_in_the_jobs_and_installed_is_shown_once(record):
    other = copy.deepcopy(record)
    other["packages"] = dict(other["packages"], torch="9.9.9", newpkg="1.0")
    del other["packages"]["numpy"]
    other["jobs_made_with"]["packages"] = [dict(other["jobs_made_with"]["packages"][0], torch="9.9.9")]
    diff = compare.compare(record, other)["packages"]
    assert diff["same"] is False
    assert diff["installed"]["changed"] == {"torch": [record["packages"]["torch"], "9.9.9"]}
    assert diff["installed"]["only_a"] == {"numpy": record["packages"]["numpy"]}
    assert diff["installed"]["only_b"] == {"newpkg": "1.0"}
    assert diff["jobs"]["changed"] == {"torch": [record["packages"]["torch"], "9.9.9"]}
    text = compare.table(compare.compare(record, other), "a.json", "b.json")
    assert text.count("torch") == 1, text  # the jobs ran what was installed: one line
    other["python"] = other["packages"]["python"] = "3.99.0"  # the record keeps it twice
    text = compare.table(compare.compare(record, other), "a.json", "b.json")
    assert text.count("3.99.0") == 1 and "environment: same" in text, text
    # The jobs ran another version than the one installed when provenance ran: both shown.
    other["jobs_made_with"]["packages"] = [dict(record["jobs_made_with"]["packages"][0], torch="8.0")]
    text = compare.table(compare.compare(record, other), "a.json", "b.json")
    assert f"\n  torch (jobs): {record['packages']['torch']} -> 8.0\n" in text, text


def test_a_model_checkout_and_gpu_that_differ_are_named(record):
    other = copy.deepcopy(record)
    other["models"]["embedding"] = {"path": "/elsewhere/model", "sha256": "9" * 64}
    other["git"] = dict(other["git"], commit="c" * 40, dirty=True, diff_sha256="d" * 64)
    other["jobs_made_with"]["devices"] = [["cuda:0", "NVIDIA H100 80GB HBM3"]]
    diff = compare.compare(record, other)
    assert list(diff["models"]["changed"]) == ["embedding"]
    assert diff["git"]["checkout"]["changed"]["commit"] == [record["git"]["commit"], "c" * 40]
    assert diff["environment"]["changed"]["jobs.devices"] == [[["cpu", None]], [["cuda:0", "NVIDIA H100 80GB HBM3"]]]
    text = compare.table(diff, "a.json", "b.json")
    assert "/elsewhere/model" in text and "NVIDIA H100 80GB HBM3" in text and "c" * 12 in text
    # The same weights in another folder are the same model.
    other["models"]["embedding"] = dict(record["models"]["embedding"], path="/elsewhere/model")
    assert compare.compare(record, other)["models"]["same"] is True


def test_a_record_from_before_diff_sha256_is_the_same_checkout_as_a_newer_one_of_its_commit(record):
    """Compared as provenance compares a job's checkout with its record's (same_checkout,
    by the keys both hold): a run recorded before diff_sha256 against its rerun today, at
    the same clean commit, said `git: differs` and listed the new key."""
    record["git"] = {"commit": "a" * 40, "dirty": False, "diff_sha256": None, "diff_files": [], "diff_unhashed": []}
    record["jobs_made_with"]["git"] = [record["git"]]
    old = copy.deepcopy(record)
    old["git"] = {"commit": "a" * 40, "dirty": False}
    old["jobs_made_with"]["git"] = [old["git"]]
    diff = compare.compare(old, record)
    assert diff["git"]["same"] is True and diff["git"]["jobs"] is None
    assert "git: same (aaaaaaaaaaaa clean)" in compare.table(diff, "a.json", "b.json")
    record["git"]["commit"] = "b" * 40  # another commit still differs
    assert compare.compare(old, record)["git"]["same"] is False
    # Both edited, one record from before the edits were hashed: not known to be the same.
    record["git"].update(commit="a" * 40, dirty=True, diff_sha256="d" * 64)
    old["git"]["dirty"] = True
    diff = compare.compare(old, record)
    assert diff["git"]["same"] is None
    assert "git: unknown: both at aaaaaaaaaaaa with uncommitted edits" in compare.table(diff, "a.json", "b.json")


def test_long_values_are_shortened_in_the_middle_to_fit_100_columns(record):
    other = copy.deepcopy(record)
    long_path = "/very/long/" + "folder/" * 30 + "corpus.jsonl"
    record["config"]["input"] = {"path": "/short.jsonl"}
    other["config"]["input"] = {"path": long_path}
    other["config_sha256"] = "0" * 64
    other["outputs"]["results/" + "x" * 150 + "/embeddings.npy"] = "1" * 64
    text = compare.table(compare.compare(record, other), "a.json", "b.json")
    assert max(len(line) for line in text.splitlines()) <= 100, text
    (line,) = [x for x in text.splitlines() if x.startswith("  input.path: ")]
    assert line.startswith('  input.path: "/short.jsonl" -> "/very/long/folder/') and line.endswith('/corpus.jsonl"')
    assert "..." in line
    assert "/embeddings.npy" in text


def test_only_the_first_few_files_are_named_and_json_lists_them_all(record, tmp_path):
    other = copy.deepcopy(record)
    other["inputs"] = {f"data/new{i}.jsonl": "a" * 64 for i in range(compare.SHOWN_FILES + 3)}
    diff = compare.compare(record, other)
    text = compare.table(diff, "a.json", "b.json")
    assert text.count("only in B: ") == compare.SHOWN_FILES and "  ... and 3 more only in B (--json lists all)" in text
    a, b = _written(tmp_path, "a.json", record), _written(tmp_path, "b.json", other)
    assert len(compare.as_json(diff, a, b)["inputs"]["only_b"]) == compare.SHOWN_FILES + 3


def test_a_bad_record_is_refused_naming_the_file_and_key(record, tmp_path):
    """compare reads more of a record than verify_reproduction: a key it reads that is
    missing or of another type is one error naming the file, not a TypeError mid-table."""
    bad = _written(tmp_path, "bad.json", dict(record, config="embedding.batch_size=64"))
    with pytest.raises(ReproductionError, match=rf"^{bad}: key 'config' is a string, not an object"):
        compare.read_record(bad)
    missing = {k: v for k, v in record.items() if k != "git"}
    with pytest.raises(ReproductionError, match=r"key 'git' missing"):
        compare.read_record(_written(tmp_path, "old.json", missing))
    assert compare.read_record(_written(tmp_path, "good.json", record)) == json.loads(json.dumps(record))


def test_the_cli_exits_0_when_the_outputs_are_identical_1_when_they_differ_2_for_a_bad_record(
    record, tmp_path, capsys
):
    a = _written(tmp_path, "a.json", record)
    assert main(["compare", a, _written(tmp_path, "same.json", record)]) == 0
    out = capsys.readouterr().out
    assert "outputs: identical (2 files)" in out and f"A: {a}" in out
    other = copy.deepcopy(record)
    other["outputs"]["ids.json"] = "f" * 64
    b = _written(tmp_path, "b.json", other)
    assert main(["compare", a, b]) == 1
    assert "  differ:    ids.json" in capsys.readouterr().out
    assert main(["compare", a, b, "--json"]) == 1
    parsed = json.loads(capsys.readouterr().out)
    assert parsed["a"] == a and parsed["b"] == b and parsed["outputs"]["differ"] == ["ids.json"]
    assert parsed == json.loads(json.dumps(compare.as_json(compare.compare(record, other), a, b)))
    # Python's json reads NaN, which strict JSON cannot hold: written as null.
    nan = _written(tmp_path, "nan.json", dict(other, created_unix=float("nan")))
    assert main(["compare", a, nan, "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["created_unix"][1] is None
    bad = _written(tmp_path, "bad.json", dict(record, format="shardflow.provenance/0"))
    assert main(["compare", a, bad]) == 2
    assert capsys.readouterr().err.startswith(f"compare: {bad}: format 'shardflow.provenance/0'")
    assert main(["compare", str(tmp_path / "nope.json"), a]) == 2
    assert "nope.json" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["compare", a])
    assert exc.value.code == 2


def test_json_piped_into_a_reader_that_leaves_early_ends_without_a_traceback(tmp_path, record):
    """`... --json | head`: Python's BrokenPipeError traceback, twice (the print, then the
    flush at exit), where a Unix tool stops quietly with SIGPIPE's status."""
    other = copy.deepcopy(record)
    other["inputs"] = {f"data/part{i}.jsonl": "f" * 64 for i in range(5000)}  # JSON well over a pipe's buffer
    a, b = _written(tmp_path, "a.json", record), _written(tmp_path, "b.json", other)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-m", "shardflow.cli", "compare", a, b, "--json"], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert len(proc.stdout.read(10)) == 10  # the reader takes a little, then leaves
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait() == 141 and "Traceback" not in err and "BrokenPipe" not in err, err


def test_each_records_own_warnings_are_said_last_where_they_differ(record):
    """A record's warnings (its jobs ran another model version than the folder holds now,
    another checkout) say what its hashes are taken from: listed under their side where
    the records' differ, counted where they agree."""
    other = copy.deepcopy(record)
    other["warnings"] = ["the embedding model at /m changed since its jobs ran: they used sha256 aaa, it is now "
                         + "b" * 120]
    diff = compare.compare(record, other)
    assert diff["warnings"] == [record["warnings"], other["warnings"]]
    lines = compare.table(diff, "a.json", "b.json").splitlines()
    assert lines[lines.index("warnings: differ") + 1].startswith("  A's record: the jobs ran at git")
    at = next(i for i, line in enumerate(lines) if line.startswith("  B's record: the embedding model at /m"))
    assert lines[at + 1].startswith("    b") and all(len(line) <= compare.WIDTH for line in lines)
    same = compare.table(compare.compare(record, record), "a.json", "b.json").splitlines()
    assert same[-1] == f"warnings: the same {len(record['warnings'])} in both (--json lists them)"
    record["warnings"] = []
    assert compare.table(compare.compare(record, record), "a.json", "b.json").splitlines()[-1] == "warnings: none"
