"""shardflow.sweep.adopt: a finished sweep's job folders moved to their point's new id
after a key was added to or removed from its grid, with Snakemake's records of them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from snakemake.persistence import MetadataRecord
from snakemake.persistence.file import FilePersistence

from shardflow.sweep.adopt import adopt, plan_adoption, unadopted_points_warning
from shardflow.sweep.spec import SweepSpec
from tests.unit.sweep.conftest import CONFIG, parse, sweep

NEW = "lr=0.001__n_layer=4"  # the base config's n_layer is 4


def _spec(grid: dict):
    return parse({"lr-depth": sweep(grid=grid, seeds=[0])})["lr-depth"]


@pytest.fixture
def grown():
    """The grid gained train.n_layer, whose values include the base's (4)."""
    return _spec({"train.lr": [0.001, 0.0003], "train.n_layer": [2, 4]})


def test_a_point_that_gained_a_key_matches_the_point_at_the_keys_base_value(grown):
    plan = plan_adoption(grown, ["lr=0.001", "lr=0.0003", "lr=0.01", NEW], None, grown.base_config)
    assert [(m.old, m.new) for m in plan.moves] == [("lr=0.0003", "lr=0.0003__n_layer=4"), ("lr=0.001", NEW)]
    assert plan.problems == [
        "lr=0.01: not adopted: no current point has its values (train.lr=0.01, with the base's train.n_layer): a value "
        "no longer in the grid, or a key whose base value is not the one it ran with"
    ]


def test_numbers_compare_as_the_spec_compares_them(grown):
    """An int for a float key, or 1e-3 spelt another way, is the same setting."""
    spec = _spec({"train.lr": [1.0, 0.5], "train.n_layer": [4]})
    assert [(m.old, m.new) for m in plan_adoption(spec, ["lr=1"], None, spec.base_config).moves] == [
        ("lr=1", "lr=1.0__n_layer=4")
    ]


def test_a_removed_key_must_hold_the_base_value():
    spec = _spec({"train.lr": [0.001]})
    plan = plan_adoption(spec, ["lr=0.001__n_layer=4", "lr=0.001__n_layer=2"], None, spec.base_config)
    assert [(m.old, m.new) for m in plan.moves] == [("lr=0.001__n_layer=4", "lr=0.001")]
    assert plan.problems[0].startswith("lr=0.001__n_layer=2: not adopted: no current point has its values")


def test_a_key_the_id_names_alone_is_looked_up_in_the_stage_sections():
    """`dropout` is no grid key now: the id's short name is found in the train section."""
    spec = _spec({"train.lr": [0.001]})
    plan = plan_adoption(spec, ["dropout=0.0__lr=0.001", "bogus=1__lr=0.001"], None, spec.base_config)
    assert [(m.old, m.new) for m in plan.moves] == [("dropout=0.0__lr=0.001", "lr=0.001")]
    assert plan.problems == [
        "bogus=1__lr=0.001: not adopted: its key 'bogus' names no one config key (no key of the train sections ends "
        "in it) and points.json does not list it"
    ]


def test_a_shortened_id_is_read_from_points_json_or_reported(grown):
    hashed = "lr=0.001__id-hash=0123456789ab"
    plan = plan_adoption(grown, [hashed], None, grown.base_config)
    assert plan.moves == [] and plan.problems == [
        f"{hashed}: not adopted: a shortened id that points.json does not list: its values cannot be read back"
    ]
    listed = {"points": [{"id": hashed, "params": {"train.lr": 0.001}}]}
    assert [(m.old, m.new) for m in plan_adoption(grown, [hashed], listed, grown.base_config).moves] == [(hashed, NEW)]
    with pytest.raises(ValueError, match="not a sweep's points table"):
        plan_adoption(grown, [hashed], {"points": {"a": 1}}, grown.base_config)


def test_ambiguous_matches_adopt_nothing(grown):
    """Two old folders for one point (1e-3 and 0.001 spelt apart), and a point that
    matches two (a spec whose points are equal: parse_sweep refuses one, so built by hand)."""
    plan = plan_adoption(grown, ["lr=0.001", "lr=1e-3"], None, grown.base_config)
    assert plan.moves == [] and plan.problems == [
        f"lr=0.001: not adopted: lr=1e-3 also matches {NEW}; move one of them by hand",
        f"lr=1e-3: not adopted: lr=0.001 also matches {NEW}; move one of them by hand",
    ]
    twins = SweepSpec(
        name="t",
        stage="train",
        folder="t",
        base=None,
        params=("train.lr",),
        points=({"train.lr": 1.0}, {"train.lr": 1}),
        ids=("lr=1.0", "lr=1"),
        seeds=(0,),
        metrics=("m",),
        goals={"m": "min"},
        best="m",
        base_config=CONFIG,
    )
    plan = plan_adoption(twins, ["lr=1.00"], None, CONFIG)
    assert plan.moves == [] and plan.problems == ["lr=1.00: not adopted: it matches 2 current points (lr=1.0, lr=1)"]


# ------------------------------------------------------------------ on disk, with Snakemake's records

LONG = "x" * 200  # a key whose record Snakemake splits into folders (file names are limited)


def _job(root: Path, pid: str, seed: int = 0) -> dict[str, str]:
    """One finished seed folder of results, logs and benchmarks, with Snakemake's records
    of its two outputs, the second made from the first."""
    job = f"results/sweeps/lr-depth/{pid}/seed={seed}"
    files = {
        "out": f"{job}/summaries.jsonl",
        "metrics": f"{job}/metrics.json",
        "long": f"{job}/{LONG}.json",
        "log": f"logs/sweeps/lr-depth/{pid}/seed={seed}/evaluate.log",
        "bench": f"benchmarks/sweeps/lr-depth/{pid}/seed={seed}/evaluate.tsv",
    }
    for path in files.values():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(path)
    store = FilePersistence(path=root / ".snakemake")
    for name, made_from in (("out", None), ("metrics", "out"), ("long", None)):
        inputs = [files[made_from], files["bench"]] if made_from else ["results/sw/chunks/chunk_0.jsonl"]
        store._write_record(
            files[name],
            MetadataRecord(
                rule="r",
                input=inputs,
                log=[files["log"]],
                params=["{'lr': 0.001}"],
                record_format_version=6,
                input_checksums={p: "sha256:00" for p in inputs},
            ),
        )
    return files


def _record(root: Path, key: str):
    return FilePersistence(path=root / ".snakemake")._read_record(key)


def test_adopt_moves_the_folders_and_snakemakes_records(tmp_path, grown):
    old = _job(tmp_path, "lr=0.001")
    lines = adopt(grown, tmp_path, dry_run=True)
    assert lines == [
        f"sweep 'lr-depth': lr=0.001 -> {NEW}, seed=0: would move results, logs, benchmarks and 3 Snakemake records"
    ]
    assert all((tmp_path / p).exists() for p in old.values()) and _record(tmp_path, old["metrics"]) is not None

    assert adopt(grown, tmp_path) == [lines[0].replace("would move", "moved")]
    new = {k: p.replace("lr=0.001/", f"{NEW}/") for k, p in old.items()}
    assert all((tmp_path / p).read_text() == old[k] for k, p in new.items())
    assert not (tmp_path / "results/sweeps/lr-depth/lr=0.001").exists()  # the emptied point folder goes too
    for key in ("out", "metrics", "long"):
        assert _record(tmp_path, old[key]) is None
    record = _record(tmp_path, new["metrics"])
    # Params as recorded (a changed base value still reruns the job); paths in moved folders renamed.
    assert record.params == ["{'lr': 0.001}"] and record.rule == "r"
    assert record.input == [new["out"], new["bench"]] and record.log == [new["log"]]
    assert set(record.input_checksums) == {new["out"], new["bench"]}
    assert _record(tmp_path, new["out"]).input == ["results/sw/chunks/chunk_0.jsonl"]
    assert _record(tmp_path, new["long"]) is not None

    # Again: nothing left to do.
    assert adopt(grown, tmp_path) == [
        "sweep 'lr-depth': nothing to adopt: every point folder under results/sweeps/lr-depth/ is a current point"
    ]


def test_adopt_finishes_a_move_that_stopped_half_way(tmp_path, grown):
    """Results moved, logs not (a killed adoption): the logs are found and moved."""
    old = _job(tmp_path, "lr=0.001")
    os.makedirs(tmp_path / f"results/sweeps/lr-depth/{NEW}")
    os.rename(tmp_path / "results/sweeps/lr-depth/lr=0.001/seed=0", tmp_path / f"results/sweeps/lr-depth/{NEW}/seed=0")
    os.rmdir(tmp_path / "results/sweeps/lr-depth/lr=0.001")
    for key in ("out", "metrics", "long"):  # its records had moved first
        (tmp_path / ".snakemake/metadata").joinpath(
            FilePersistence(path=tmp_path / ".snakemake")._record_path(".", old[key])
        ).unlink()
    assert adopt(grown, tmp_path) == [
        f"sweep 'lr-depth': lr=0.001 -> {NEW}, seed=0: moved logs, benchmarks and 0 Snakemake records"
    ]
    assert (tmp_path / old["log"].replace("lr=0.001/", f"{NEW}/")).exists()


def test_adopt_never_overwrites_and_leaves_unfinished_jobs(tmp_path, grown):
    _job(tmp_path, "lr=0.001", seed=0)
    _job(tmp_path, "lr=0.001", seed=1)
    _job(tmp_path, "lr=0.0003", seed=0)
    (tmp_path / f"logs/sweeps/lr-depth/{NEW}/seed=1").mkdir(parents=True)  # the new point's job has run
    FilePersistence(path=tmp_path / ".snakemake")._mark_incomplete(
        "results/sweeps/lr-depth/lr=0.0003/seed=0/metrics.json", None
    )
    lines = adopt(grown, tmp_path)
    assert lines == [
        "sweep 'lr-depth': lr=0.0003 -> lr=0.0003__n_layer=4, seed=0: left: Snakemake marks "
        "results/sweeps/lr-depth/lr=0.0003/seed=0/metrics.json incomplete (a job that did not finish; its resume "
        "folder is named by the old id): rerun the sweep as it was first, or remove the seed's folders "
        "(results/sweeps/lr-depth/lr=0.0003/seed=0, logs/sweeps/lr-depth/lr=0.0003/seed=0, "
        "benchmarks/sweeps/lr-depth/lr=0.0003/seed=0)",
        f"sweep 'lr-depth': lr=0.001 -> {NEW}, seed=0: moved results, logs, benchmarks and 3 Snakemake records",
        f"sweep 'lr-depth': lr=0.001 -> {NEW}, seed=1: left: logs/sweeps/lr-depth/{NEW}/seed=1 exists (nothing is "
        "overwritten)",
    ]
    assert (tmp_path / "results/sweeps/lr-depth/lr=0.001/seed=1/metrics.json").exists()
    assert (tmp_path / "results/sweeps/lr-depth/lr=0.0003/seed=0/metrics.json").exists()


def test_the_parse_warns_of_point_folders_named_by_other_keys(tmp_path, grown):
    folder = tmp_path / "results/sweeps/lr-depth"
    assert unadopted_points_warning(grown, tmp_path) is None  # no folder yet
    for name in (NEW, "lr=0.05__n_layer=4", "plots", "points.json"):  # a removed value: no matter
        (folder / name).mkdir(parents=True)
    assert unadopted_points_warning(grown, tmp_path) is None
    (folder / "lr=0.001").mkdir()
    (folder / "lr=0.01__n_layer=4__id-hash=0123456789ab").mkdir()  # shortened, its keys the grid's: unknown
    assert unadopted_points_warning(grown, tmp_path) == (
        "sweep 'lr-depth': results/sweeps/lr-depth/ holds 1 point folder named by other keys than its grid's "
        "(lr=0.001): where a key was added to or removed from the grid, `make sweep-adopt SWEEP=lr-depth` (with "
        "this run's CONFIG=) moves the finished jobs that are current points to their new ids, instead of running "
        "them again"
    )


def test_a_recorded_param_naming_the_jobs_own_folder_follows_the_move(tmp_path, grown):
    """A params string with the job's wildcards (sweep_embed_verify's failed_json,
    `logs/sweeps/{sweep}/{point}/seed={seed}/verify.failed.json`) is recorded with the
    old id: left so, Snakemake reruns the job ("params have changed"). A path that only
    starts like it (seed=01) and the config values stay as recorded."""
    old = _job(tmp_path, "lr=0.001")
    store = FilePersistence(path=tmp_path / ".snakemake")
    record = store._read_record(old["metrics"])
    failed = "logs/sweeps/lr-depth/lr=0.001/seed=0/verify.failed.json"
    record.params = ["{'lr': 0.001}", repr(failed), repr("logs/sweeps/lr-depth/lr=0.001/seed=01/x")]
    store._write_record(old["metrics"], record)
    adopt(grown, tmp_path)
    moved = _record(tmp_path, old["metrics"].replace("lr=0.001/", f"{NEW}/"))
    assert moved.params == [
        "{'lr': 0.001}",
        repr(failed.replace("lr=0.001/", f"{NEW}/")),
        repr("logs/sweeps/lr-depth/lr=0.001/seed=01/x"),
    ]


def test_adopt_finishes_a_move_stopped_between_writing_a_record_and_removing_the_old(tmp_path, grown):
    """A stop after a record's copy at the new id was written, before the old one was
    removed: the copy is this adoption's own, so a second run finishes the move."""
    old = _job(tmp_path, "lr=0.001")
    store = FilePersistence(path=tmp_path / ".snakemake")
    new_out = old["out"].replace("lr=0.001/", f"{NEW}/")
    copy = store._read_record(old["out"])  # as the stopped adoption wrote it: its log path renamed
    copy.log = [old["log"].replace("lr=0.001/", f"{NEW}/")]
    store._write_record(new_out, copy)
    assert adopt(grown, tmp_path) == [
        f"sweep 'lr-depth': lr=0.001 -> {NEW}, seed=0: moved results, logs, benchmarks and 3 Snakemake records"
    ]
    assert _record(tmp_path, old["out"]) is None and _record(tmp_path, new_out) is not None
    # A record at the new id that is not this adoption's copy is still left alone.
    other = _job(tmp_path, "lr=0.0003")
    new_other = other["out"].replace("lr=0.0003/", "lr=0.0003__n_layer=4/")
    record = store._read_record(other["out"])
    record.params = ["{'lr': 0.0003, 'n_layer': 2}"]
    store._write_record(new_other, record)
    assert adopt(grown, tmp_path) == [
        "sweep 'lr-depth': lr=0.0003 -> lr=0.0003__n_layer=4, seed=0: left: Snakemake's record of "
        f"{new_other} exists (nothing is overwritten)"
    ]


def test_the_parse_names_only_folders_that_sweep_adopt_would_move(tmp_path, grown):
    """Left after an adoption, or after the renamed points all ran again: folders no
    current point matches (a removed key's other value), and folders whose point's
    seeds are all on disk under the new id. Naming them on every parse would point at a
    command that does nothing."""
    folder = tmp_path / "results/sweeps/lr-depth"
    shrunk = _spec({"train.lr": [0.001]})
    (folder / "lr=0.001__n_layer=2/seed=0").mkdir(parents=True)  # n_layer left the grid; 2 is not the base's 4
    assert unadopted_points_warning(shrunk, tmp_path) is None
    (folder / "lr=0.001/seed=0").mkdir(parents=True)
    (folder / f"{NEW}/seed=0").mkdir(parents=True)  # ran again under the new id, not adopted
    assert unadopted_points_warning(grown, tmp_path) is None
    (folder / "lr=0.001/seed=1").mkdir()  # a seed the new point lacks: adopt would move it
    assert "holds 1 point folder named by other keys than its grid's (lr=0.001)" in unadopted_points_warning(
        grown, tmp_path
    )
