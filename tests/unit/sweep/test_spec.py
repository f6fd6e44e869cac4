"""parse_sweeps: grids and point lists expanded, every bad input a parse-time error naming it."""

from __future__ import annotations

import copy
import functools

import pytest
import yaml

from shardflow.core.config import load_schema, validate_config
from shardflow.sweep.spec import SweepError, apply_point, parse_sweeps
from shardflow.sweep.table import RunResult, collect

from .conftest import CONFIG, parse, sweep


def test_grid_expands_in_the_order_written(spec):
    assert spec.params == ("train.lr", "train.n_layer")
    assert [tuple(p.values()) for p in spec.points] == [(0.001, 2), (0.001, 4), (0.0003, 2), (0.0003, 4)]
    assert spec.ids == ("lr=0.001__n_layer=2", "lr=0.001__n_layer=4", "lr=0.0003__n_layer=2", "lr=0.0003__n_layer=4")
    assert spec.jobs()[:3] == [("lr=0.001__n_layer=2", 0), ("lr=0.001__n_layer=2", 1), ("lr=0.001__n_layer=4", 0)]
    assert spec.folder == "lr-depth" and spec.seeds == (0, 1) and spec.best == "best_val_loss" and not spec.maximize


def test_yaml_float_spellings_are_numbers_and_one_point():
    # PyYAML reads 1e-3 as a string; the base value (a float) says it is a number.
    grid = yaml.safe_load("{train.lr: [1e-3, 3e-4], train.n_layer: [2.0, 8]}")
    assert grid["train.lr"] == ["1e-3", "3e-4"]
    spec = parse({"s": sweep(grid=grid)})["s"]
    assert spec.points[0] == {"train.lr": 0.001, "train.n_layer": 2}
    assert type(spec.points[0]["train.n_layer"]) is int
    with pytest.raises(SweepError, match=r"grid parameter 'train.lr' lists 0.001 twice \('1e-3' and 0.001\)"):
        parse({"s": sweep(grid={"train.lr": ["1e-3", 0.001]})})


def test_explicit_points_take_the_base_value_for_keys_they_leave_out():
    spec = parse({"s": sweep(grid=None, points=[{"train.lr": 0.01}, {"train.n_layer": 8}])})["s"]
    assert spec.params == ("train.lr", "train.n_layer")
    assert spec.points == ({"train.lr": 0.01, "train.n_layer": 4}, {"train.lr": 0.001, "train.n_layer": 8})
    assert spec.ids == ("lr=0.01__n_layer=4", "lr=0.001__n_layer=8")


def test_a_seeds_only_sweep_has_one_point():
    spec = parse({"s": sweep(grid=None, points=[{}], seeds=[0, 1, 2])})["s"]
    assert spec.ids == ("base",) and spec.params == ()


UNKNOWN_KEY = ("sweep 'bad': unknown parameter 'train.lrr' (train has: dropout, dtype, lr, lr_decay_iters, "
               "n_layer, seed; did you mean 'train.lr'?)")


@pytest.mark.parametrize("overrides, message", [
    ({"grid": {"train.lrr": [0.1]}}, UNKNOWN_KEY),
    ({"grid": {"trian.lr": [0.1]}}, "unknown parameter 'trian.lr' (no section 'trian'; did you mean 'train.lr'?)"),
    ({"grid": {"train.lr.x": [0.1]}}, "unknown parameter 'train.lr.x' (train.lr is a value, not a section; did you mean 'train.lr'?)"),
    ({"grid": {}}, "sweep 'bad': empty grid"),
    ({"grid": {"train.lr": []}}, "sweep 'bad': grid parameter 'train.lr' has no values"),
    ({"grid": {"train.lr": 0.1}}, "grid parameter 'train.lr' must be a list of values, e.g. [0.001]"),
    ({"grid": {"train.lr": ["abc"]}},
     "sweep 'bad': train.lr = 'abc' is not valid: config key 'train.lr': 'abc' is not of type 'number'"),
    ({"grid": {"train.n_layer": [2.5]}}, "train.n_layer = 2.5 is not valid: config key 'train.n_layer': 2.5 is not of type 'integer'"),
    ({"grid": {"train.dtype": ["fp8"]}}, "train.dtype = 'fp8' is not valid: config key 'train.dtype'"),
    ({"grid": {"train.lr": [[0.1]]}}, "train.lr = [0.1]: a sweep value must be a string, number, boolean or null"),
    ({"grid": {"train.lr": [float("nan")]}}, "train.lr = nan: NaN cannot be a sweep value"),
    ({"grid": {"train.lr": [0.1]}, "points": [{"train.lr": 0.1}]}, "give either `grid:`"),
    ({"grid": None}, "give either `grid:`"),
    ({"grid": None, "points": []}, "sweep 'bad': empty list of points"),
    ({"grid": None, "points": [{"train.lr": 0.1}, {"train.lr": -1.0}]},
     "sweep 'bad': point 2 (lr=-1.0) is not valid: config key 'train.lr': -1.0 is less than or equal to the minimum of 0"),
    ({"grid": None, "points": [{"train.lr": "1e-3"}, {"train.lr": 0.001}]},
     "sweep 'bad': points 1 and 2 are the same point (lr=0.001)"),
    ({"grid": None, "points": [{"train.lr": 0.1}, {"train.lr": 0.1, "train.n_layer": 4}]},
     "points 1 and 2 are the same point (lr=0.1__n_layer=4)"),
    ({"seeds": None}, "sweep 'bad': no seeds: give `seeds: [0]`"),
    ({"seeds": []}, "sweep 'bad': no seeds"),
    ({"seeds": 3}, "sweep 'bad': seeds: 3 is not a list: give `seeds: [3]` for one run per point with seed 3, "
                   "or `seeds: [0, 1, 2]` for 3 runs per point"),
    ({"seeds": [0, -1]}, "seed -1 is not a non-negative integer"),
    ({"seeds": [True]}, "seed True is not a non-negative integer"),
    ({"seeds": [1, 1]}, "seed 1 is listed twice"),
    ({"stage": "training"}, "sweep 'bad': stage 'training' is not one of train, retrieval, summarise, embed"),
    ({"grids": {}}, "sweep 'bad': unknown key 'grids'; allowed: stage, base, grid"),
    ({"grid": {"report.map": ["umap"]}}, "parameter 'report.map' is not read by a train job (it reads: train)"),
    ({"grid": {"train.seed": [1, 2]}}, "'train.seed' is set by seeds: list the seeds under `seeds:` instead"),
    ({"stage": "retrieval", "grid": {"retrieval.path": ["a", "b"]}, "metrics": {"ndcg_at_10": "max"}},
     "parameter 'retrieval.path' is shared by every job of a retrieval sweep"),
    ({"stage": "summarise", "grid": {"summarise.method": ["lead", "extractive"]}, "metrics": {"rouge1": "max"}},
     "parameter 'summarise.method' is shared by every job of a summarise sweep"),
    ({"grid": {"train": [1]}}, "parameter 'train' is a section; sweep one of its keys (lr, n_layer"),
    ({"grid": {"train.n-layer": [1]}}, "parameter 'train.n-layer' is not a dotted config key"),
    ({"metrics": None}, "say which metrics to tabulate and which way is better, e.g. `metrics: {best_val_loss: min}`"),
    ({"metrics": {"loss": "lower"}}, "metric 'loss': goal 'lower' must be max or min"),
    ({"best": "acc"}, "best metric 'acc' is not one of the metrics (best_val_loss)"),
    ({"folder": "a/b"}, "folder 'a/b' must be one folder name"),
    ({"stage": "retrieval", "grid": {"embedding.model": ["Mini", "mini"]}, "metrics": {"ndcg_at_10": "max"}},
     "points model=Mini and model=mini differ only in letter case"),
])
def test_bad_input_is_an_error_naming_it(overrides, message):
    with pytest.raises(SweepError) as err:
        parse({"bad": sweep(**overrides)})
    assert message in str(err.value)


def test_a_bad_sweep_name():
    with pytest.raises(SweepError, match="sweep name 'a b': use letters, digits"):
        parse({"a b": sweep()})


def test_two_sweeps_writing_to_one_folder():
    with pytest.raises(SweepError, match="sweeps 'a' and 'b' write to the same folder 'shared'"):
        parse({"a": sweep(folder="shared"), "b": sweep(folder="shared")})
    with pytest.raises(SweepError, match="sweeps 'lr' and 'LR' write to the same folder 'LR'"):
        parse({"lr": sweep(), "LR": sweep()})  # one folder on macOS and Windows


def test_two_sweep_names_that_make_one_rule_are_named():
    with pytest.raises(SweepError, match="sweeps 'a-b' and 'a_b' would share the rule collect_sweep_a_b"):
        parse({"a-b": sweep(folder="x"), "a_b": sweep(folder="y")})


def test_every_problem_is_reported_at_once():
    with pytest.raises(SweepError) as err:
        parse({"a": sweep(grid={"train.lrr": [1.0]}), "ok": sweep(), "b": sweep(seeds=[])})
    lines = str(err.value).splitlines()
    assert lines[0] == "invalid sweeps:" and len(lines) == 3
    assert lines[1].startswith("  - sweep 'a': unknown parameter") and lines[2].startswith("  - sweep 'b': no seeds")


def test_no_sweeps():
    assert parse_sweeps(None, CONFIG, lambda c: None) == {} == parse_sweeps({}, CONFIG, lambda c: None)


def test_base_file_is_merged_over_the_config(tmp_path):
    (tmp_path / "exp.yaml").write_text("train: {n_layer: 8, dropout: 1e-1}\nsweeps: {ignored: 1}\n")
    (tmp_path / "typo.yaml").write_text("train: {n_layers: 8}\n")
    spec = parse({"s": sweep(grid=None, points=[{"train.lr": 0.01}], base="exp.yaml")}, root=tmp_path)["s"]
    assert spec.base == "exp.yaml" and spec.points == ({"train.lr": 0.01},)
    assert spec.job_config(spec.ids[0], 5)["train"]["n_layer"] == 8
    assert spec.job_config(spec.ids[0], 5)["train"]["dropout"] == 0.1  # YAML 1.1's '1e-1', read as the config reads it
    with pytest.raises(SweepError, match="sweep 's': base 'typo.yaml' is not a valid config: unknown config key 'n_layers'"):
        parse({"s": sweep(base="typo.yaml")}, root=tmp_path)
    with pytest.raises(SweepError, match="sweep 's': base file 'nope.yaml' not found"):
        parse({"s": sweep(base="nope.yaml")}, root=tmp_path)


def test_a_base_file_may_change_only_what_the_jobs_take_from_it(tmp_path):
    """Keys the jobs share with the main run (how a summarise sweep is scored) or do not
    read (another section) were silently ignored, and the table labelled with them."""
    (tmp_path / "scoring.yaml").write_text("summarise: {method: extractive, k: 2}\n")
    summarise = sweep(stage="summarise", grid={"summarise.k": [1, 2]}, metrics={"rouge1": "max"})
    with pytest.raises(SweepError, match=r"sweep 's': base 'scoring.yaml' sets summarise.method, which a summarise "
                                         r"sweep's jobs do not take from a base file"):
        parse({"s": {**summarise, "base": "scoring.yaml"}}, root=tmp_path)
    (tmp_path / "other.yaml").write_text("train: {n_layer: 8}\nreport: {map: umap}\n")
    with pytest.raises(SweepError, match="base 'other.yaml' sets report.map"):
        parse({"s": sweep(base="other.yaml")}, root=tmp_path)
    (tmp_path / "k.yaml").write_text("summarise: {k: 2}\n")  # a key the jobs read: the points' start
    spec = parse({"s": {**summarise, "base": "k.yaml", "grid": None, "points": [{}]}}, root=tmp_path)["s"]
    assert spec.job_config("base", 0)["summarise"]["k"] == 2


def test_a_key_the_rules_apply_to_every_job_is_neither_swept_nor_set_by_a_base_file(tmp_path):
    """embedding.keep_chunk_vectors decides the chunk files of every embed job, a sweep's
    included, from the config itself (rules/common.smk chunk_vectors): a point's value or
    a base file's would be ignored, the tables labelled with it."""
    config = {**CONFIG, "embedding": {**CONFIG["embedding"], "keep_chunk_vectors": True}}
    embed = sweep(stage="embed", grid={"embedding.keep_chunk_vectors": [True, False]}, metrics={"items_per_s": "max"})
    with pytest.raises(SweepError, match=r"parameter 'embedding.keep_chunk_vectors' applies to every job of the run"):
        parse({"e": embed}, config=config)
    (tmp_path / "keep.yaml").write_text("embedding: {keep_chunk_vectors: false}\n")
    with pytest.raises(SweepError, match=r"base 'keep.yaml' sets embedding.keep_chunk_vectors, which an? embed sweep"):
        parse({"e": {**embed, "grid": {"embedding.max_length": [64]}, "base": "keep.yaml"}}, config=config, root=tmp_path)


def test_a_base_file_that_yaml_reads_with_a_loss_or_not_at_all_is_an_error_naming_the_sweep(tmp_path):
    """A key written twice in a base file (a second `train:` pasted below the first) lost
    the first's settings without a word, as core.config.repeated_keys says of the config
    files; a base that is a folder, or not YAML, stopped the parse with a bare
    IsADirectoryError or ParserError, naming no sweep, and hid the other sweeps' problems."""
    (tmp_path / "twice.yaml").write_text("train:\n  dropout: 0.1\ntrain:\n  n_layer: 8\n")
    (tmp_path / "broken.yaml").write_text("train: {dropout: [\n")
    (tmp_path / "exp").mkdir()
    with pytest.raises(SweepError, match=r"sweep 's': base file 'twice.yaml': .*twice.yaml:3: key 'train' is written "
                                         r"again \(first at line 1\): YAML keeps the last"):
        parse({"s": sweep(base="twice.yaml")}, root=tmp_path)
    with pytest.raises(SweepError, match=r"sweep 's': base file 'broken.yaml' is not YAML: .*line 2"):
        parse({"s": sweep(base="broken.yaml")}, root=tmp_path)
    problems = []
    parse({"s": sweep(base="exp"), "t": sweep(metrics=None)}, root=tmp_path, problems=problems)
    assert problems[0] == "sweep 's': base 'exp' is a folder; give a config file in it, such as 'exp/<name>.yaml'"
    assert problems[1].startswith("sweep 't': say which metrics")


def test_a_job_gets_its_stage_sections_with_its_point_and_seed(spec):
    job = spec.job_config("lr=0.0003__n_layer=2", 7)
    assert job == {"train": {**CONFIG["train"], "lr": 0.0003, "n_layer": 2, "seed": 7}}
    assert list(job["train"]) == sorted(CONFIG["train"])  # Snakemake compares params by repr
    reordered = parse({"lr-depth": sweep()}, config={"train": dict(reversed(CONFIG["train"].items()))})["lr-depth"]
    assert repr(reordered.job_config("lr=0.0003__n_layer=2", 7)) == repr(job)
    assert spec.base_config["train"]["lr"] == 0.001  # not modified
    retrieval = parse({"r": sweep(stage="retrieval", grid={"embedding.max_length": [128]},
                                  metrics={"ndcg_at_10": "max"})})["r"]
    assert set(retrieval.job_config("max_length=128", 3)) == {"retrieval", "embedding"}
    assert retrieval.job_config("max_length=128", 3)["embedding"]["seed"] == 3
    with pytest.raises(SweepError, match="sweep 'lr-depth' has no point 'lr=9'"):
        spec.job_config("lr=9", 0)


def test_incremental_new_values_and_unrelated_changes_leave_jobs_alone(spec):
    """A job's params are job_config: equal params (and folder) mean Snakemake reruns nothing."""
    before = {job: spec.job_config(*job) for job in spec.jobs()}
    grown = parse({"lr-depth": sweep(grid={"train.lr": [0.001, 0.0003, 0.01], "train.n_layer": [2, 4]},
                                     seeds=[0, 1, 2])})["lr-depth"]
    after = {job: grown.job_config(*job) for job in grown.jobs()}
    assert {job: after[job] for job in before} == before
    assert len(set(after) - set(before)) == 3 * 2 * 3 - 2 * 2 * 2
    other = copy.deepcopy(CONFIG)
    other["report"]["map"] = "umap"
    other["embedding"]["max_length"] = 64
    unrelated = parse({"lr-depth": sweep()}, config=other)["lr-depth"]
    assert {job: unrelated.job_config(*job) for job in unrelated.jobs()} == before


def test_apply_point_sets_dotted_keys_on_a_copy():
    out = apply_point(CONFIG, {"train.lr": 0.5, "embedding.max_length": 64})
    assert out["train"]["lr"] == 0.5 and out["embedding"]["max_length"] == 64 and CONFIG["train"]["lr"] == 0.001
    with pytest.raises(SweepError, match="unknown parameter 'train.lrr'"):
        apply_point(CONFIG, {"train.lrr": 1})


def test_the_shipped_config_and_schema(config):
    """The stages' sections and seed keys exist in the real config, and its schema judges values."""
    schema = load_schema(__import__("tests.conftest").conftest.REPO / "config" / "config.schema.yaml")
    config = validate_config(config, schema)
    check = functools.partial(validate_config, schema=schema)
    sweeps = {
        "t": sweep(),
        "r": sweep(stage="retrieval", grid={"embedding.max_length": [128, 256], "retrieval.top_k": [100]},
                   metrics={"ndcg_at_10": "max"}),
        "s": sweep(stage="summarise", grid={"summarise.k": [1, 3]}, metrics={"rouge1": "max"}),
        "e": sweep(stage="embed", grid={"embedding.max_batch_size": [64, 128]}, metrics={"items_per_s": "max"}),
    }
    specs = parse_sweeps(sweeps, config, check)
    assert [len(s.ids) for s in specs.values()] == [4, 2, 2, 2]
    with pytest.raises(SweepError, match="train.n_layer = '4' is not valid: config key 'train.n_layer': '4' is not of type 'integer'"):
        parse_sweeps({"t": sweep(grid={"train.n_layer": ["4"]})}, config, check)


def test_unquoted_on_off_in_sweep_values_are_the_words_the_config_reads(config):
    """YAML 1.1 reads an unquoted on/off as a boolean; the config validator reads it as the
    word where the schema offers one, and so do sweep values: one point per word, the point
    id and the jobs' params say `on`, and `[on, "on"]` is a duplicate."""
    schema = load_schema(__import__("tests.conftest").conftest.REPO / "config" / "config.schema.yaml")
    config = validate_config(config, schema)
    check = functools.partial(validate_config, schema=schema)
    metrics = {"ndcg_at_10": "max"}
    grid = yaml.safe_load("{embedding.packing: [on, off]}")
    assert grid["embedding.packing"] == [True, False]
    spec = parse_sweeps({"r": sweep(stage="retrieval", grid=grid, metrics=metrics)}, config, check)["r"]
    assert spec.points == ({"embedding.packing": "on"}, {"embedding.packing": "off"})
    assert spec.ids == ("packing=on", "packing=off")
    assert spec.job_config("packing=off", 0, ("embedding",))["embedding"]["packing"] == "off"
    points = yaml.safe_load("[{embedding.packing: on, embedding.cuda_graphs: off}]")
    spec = parse_sweeps({"p": sweep(stage="retrieval", grid=None, points=points, metrics=metrics)}, config, check)["p"]
    assert spec.points == ({"embedding.packing": "on", "embedding.cuda_graphs": "off"},)
    with pytest.raises(SweepError, match=r"lists on twice \(True and 'on'\)"):
        parse_sweeps({"r": sweep(stage="retrieval", grid={"embedding.packing": [True, "on"]}, metrics=metrics)},
                     config, check)
    # where the schema offers no word, a boolean stays a boolean, and an error
    with pytest.raises(SweepError, match="embedding.model = True is not valid"):
        parse_sweeps({"r": sweep(stage="retrieval", grid={"embedding.model": [True]}, metrics=metrics)}, config, check)


def test_tables_record_is_builtins_and_follows_what_the_tables_show(spec):
    """Rule sweep_spec records it (Snakemake records builtin params only): a change in the
    metrics, a goal, `best`, the points or the seeds changes it; the description does not."""
    import json

    record = spec.tables_record()
    assert json.loads(json.dumps(record)) == record
    assert record["metrics"] == [["best_val_loss", "min"]] and record["seeds"] == [0, 1]
    assert record["points"][0] == ["lr=0.001__n_layer=2", {"train.lr": 0.001, "train.n_layer": 2}]

    def changed(**overrides):
        return parse({"lr-depth": sweep(**overrides)})["lr-depth"].tables_record() != record

    assert changed(metrics={"best_val_loss": "min", "final_train_loss": "min"})
    assert changed(metrics={"best_val_loss": "max"})
    assert changed(metrics={"final_train_loss": "min", "best_val_loss": "min"}, best="best_val_loss")
    assert changed(seeds=[0, 1, 2]) and changed(grid={"train.lr": [0.001], "train.n_layer": [2, 4]})
    assert not changed(description="notes") and not changed()


def test_seeds_that_cannot_change_a_result_are_named():
    """seeds_without_effect: the workflow warns at parse time that each seed after the
    first would repeat its point for the same numbers."""
    import dataclasses

    from shardflow.sweep.spec import seeds_without_effect

    train = parse({"s": sweep()})["s"]
    assert seeds_without_effect(train) is None  # the seed draws the weights and batches
    retrieval = parse({"s": sweep(stage="retrieval", grid={"retrieval.top_k": [10, 100]})})["s"]
    assert seeds_without_effect(retrieval).startswith("retrieval scores do not depend on embedding.seed")
    assert seeds_without_effect(dataclasses.replace(retrieval, seeds=(0,))) is None  # one seed: nothing repeats
    lead = parse({"s": sweep(stage="summarise", grid={"summarise.k": [1, 2]})})["s"]
    assert seeds_without_effect(lead) == "summarise.method lead reads no seed"

    def abstractive(do_sample):
        base = copy.deepcopy(lead.base_config)
        base["summarise"].update(method="abstractive", generation={"do_sample": do_sample})
        return dataclasses.replace(lead, base_config=base)

    assert seeds_without_effect(abstractive(False)) == "generation does not sample (summarise.generation.do_sample: false)"
    assert seeds_without_effect(abstractive(True)) is None
    assert seeds_without_effect(abstractive(None)) is None  # the model's generation config may sample


def test_a_key_whose_base_is_null_takes_one_point_per_value():
    """With no base value to go by, 100 and 100.0 were two points (each run). A value is
    kept as written (its point id and recorded params do not change); the job's params
    take a whole float for an int (core.fields.whole_floats_as_ints)."""
    spec = parse({"s": sweep(grid={"train.lr_decay_iters": [100.0, 200]})})["s"]
    assert [p["train.lr_decay_iters"] for p in spec.points] == [100, 200]
    assert spec.ids[0] == "lr_decay_iters=100.0"
    with pytest.raises(SweepError, match=r"grid parameter 'train.lr_decay_iters' lists 100.0 twice \(100 and 100.0\)"):
        parse({"s": sweep(grid={"train.lr_decay_iters": [100, 100.0]})})
    with pytest.raises(SweepError, match=r"points 1 and 2 are the same point \(lr_decay_iters=100 and lr_decay_iters=100.0\)"):
        parse({"s": sweep(grid=None, points=[{"train.lr_decay_iters": 100}, {"train.lr_decay_iters": 100.0}])})


def test_same_value_is_numeric_equality_without_booleans():
    from shardflow.sweep.spec import value_key

    def same_value(a, b):
        return value_key(a) == value_key(b)

    assert same_value(1, 1.0) and same_value("a", "a") and same_value(None, None)
    assert not same_value(True, 1) and not same_value(1, "1") and not same_value(0.5, 0.25) and same_value(True, True)


def test_a_key_written_twice_in_a_files_sweeps_is_named_with_both_lines(tmp_path):
    """YAML keeps the last of two equal keys and drops the first without a word: a grid
    line pasted below the one it extends lost the first's values, and a sweep copied
    under its own name replaced it (core.config.repeated_keys, which every section gets)."""
    from shardflow.core.config import repeated_keys

    path = tmp_path / "lr.yaml"
    path.write_text(
        "train: {lr: 1.0e-3}\n"
        "sweeps:\n"
        "  lr:\n"
        "    stage: train\n"
        "    grid:\n"
        "      train.lr: [1.0e-3, 3.0e-3]\n"
        "      train.lr: [1.0e-2]\n"
        "    seeds: [0]\n"
        "  lr:\n"
        "    stage: train\n"
        "    points: [{train.lr: 1.0e-3, train.lr: 2.0e-3}]\n"
    )
    assert repeated_keys([path]) == [
        f"{path}:7: sweeps.lr.grid: key 'train.lr' is written again (first at line 6): YAML keeps the last "
        "and drops the first without a word; write it once",
        f"{path}:9: sweeps: key 'lr' is written again (first at line 3): YAML keeps the last and drops "
        "the first without a word; write it once",
        f"{path}:11: sweeps.lr.points[0]: key 'train.lr' is written again (first at line 11): YAML keeps the "
        "last and drops the first without a word; write it once",
    ]
    path.write_text("sweeps:\n  a: {stage: train}\nsweeps:\n  b: {stage: train}\n")
    assert repeated_keys([path]) == [f"{path}:3: key 'sweeps' is written again (first at line 1): YAML keeps "
                                     "the last and drops the first without a word; write it once"]


def test_a_sweep_defined_in_two_config_files_is_named_with_both(tmp_path):
    """Snakemake merges --configfile files key by key: two files defining one sweep ran a
    sweep neither describes (the grids' keys together, the later file's seeds), silently."""
    from shardflow.sweep.spec import sweeps_in_files

    a, b, seeds, same = (tmp_path / f"{n}.yaml" for n in ("a", "b", "seeds", "same"))
    a.write_text("sweeps:\n  tb:\n    stage: embed\n    grid: {embedding.token_budget: [512, 2048]}\n"
                 "    seeds: [0]\n    metrics: {items_per_s: max}\n")
    b.write_text("dataset: x\nsweeps:\n  tb:\n    stage: embed\n    grid: {embedding.max_batch_size: [8, 16]}\n"
                 "    seeds: [1]\n    metrics: {items_per_s: max}\n")
    assert sweeps_in_files([a, b]) == [
        f"sweep 'tb' is defined in {a}:2 and in {b}:3: Snakemake merges config files key by key, so the run "
        "would sweep a mix of the two (grid: embedding.max_batch_size, embedding.token_budget); give each "
        "sweep its own name, or change it in one file"
    ]
    b.write_text("sweeps:\n  tb:\n    stage: embed\n    points: [{embedding.max_batch_size: 8}]\n")
    assert sweeps_in_files([a, b]) == [
        f"sweep 'tb' is defined in {a}:2 and in {b}:2: Snakemake merges config files key by key, so the run "
        "would sweep a mix of the two; give each sweep its own name, or change it in one file"
    ]
    # An overlay that changes what the grid does not hold is an overlay like any other;
    # the same file twice, or an equal definition, merges into itself.
    seeds.write_text("sweeps: {tb: {seeds: [0, 1, 2]}}\n")
    same.write_text(a.read_text())
    assert sweeps_in_files([a, seeds, a, same]) == []
    assert sweeps_in_files([tmp_path / "missing.yaml", a]) == []  # left to Snakemake's own loader


def test_the_tables_record_is_written_as_json_with_one_log_line(tmp_path, spec):
    import json

    from shardflow.sweep.spec import write_tables_record

    record = spec.tables_record()
    write_tables_record(str(tmp_path / "spec.json"), record, str(tmp_path / "spec.log"))
    assert json.loads((tmp_path / "spec.json").read_text()) == json.loads(json.dumps(record))
    assert (tmp_path / "spec.log").read_text() == (
        "sweep lr-depth: 4 points, metrics [['best_val_loss', 'min']]\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.json", "spec.log"]  # no temporary left


def test_an_integer_the_tables_cannot_hold_is_an_error_naming_its_key():
    """10**400 written out in a sweep (a 401-digit integer, which YAML reads as an int)
    stopped the parse with float()'s bare OverflowError, naming neither sweep nor key; 2**63,
    which a float holds, parsed and ran every job, then stopped the collection: the runs
    table holds an integer parameter as Int64 and the seed as int64."""
    huge = yaml.safe_load("1" + "0" * 400)
    shown = "100000000000000000...0000000000000000000"
    outside = "outside the signed 64-bit range (-2**63 to 2**63 - 1) of the sweep's tables' integer columns"
    for overrides, message in [
        ({"grid": {"train.n_layer": [huge]}}, f"sweep 's': train.n_layer = {shown}: an integer {outside}"),
        ({"grid": {"train.lr": [0.1, -huge]}}, "sweep 's': train.lr = -1000"),  # a float key: float() overflowed
        ({"grid": {"train.lr_decay_iters": [5, 2**63]}}, f"train.lr_decay_iters = {2**63}: an integer {outside}"),
        ({"grid": None, "points": [{"train.n_layer": 2}, {"train.lr": huge}]}, f"point 2: train.lr = {shown}: "),
        ({"seeds": [0, 2**63]}, f"sweep 's': seed {2**63}: an integer {outside}"),
    ]:
        with pytest.raises(SweepError) as err:
            parse({"s": sweep(**overrides)})
        assert message in str(err.value)
    # The edges of the range are values, and integers past float's 2**53 stay apart.
    edges = [2**63 - 1, -(2**63), 2**53, 2**53 + 1]
    spec = parse({"s": sweep(grid={"train.lr_decay_iters": edges}, seeds=[2**63 - 1])})["s"]
    assert [p["train.lr_decay_iters"] for p in spec.points] == edges
    runs = collect(spec, [RunResult(pid, seed, {"best_val_loss": 1.0}) for pid, seed in spec.jobs()])
    assert list(runs["train.lr_decay_iters"]) == edges and list(runs["seed"]) == [2**63 - 1] * 4
    # YAML's .inf and .nan were already named: the schema check refuses an infinity, ids a NaN.
    for text, message in [(".inf", "train.lr = inf is not valid: config key 'train.lr': inf is not a finite number"),
                          ("-.inf", "train.n_layer = -inf is not valid"), (".nan", "train.dropout = nan: NaN cannot")]:
        key = message.split(" =")[0]
        with pytest.raises(SweepError) as err:
            parse({"s": sweep(grid={key: yaml.safe_load(f"[{text}]")})})
        assert message in str(err.value)
