"""Random search (`sample:`): a grid's points drawn at parse time, the same on every
machine and in every version, the first N of a larger N, without repeats."""

from __future__ import annotations

import functools
import json

import pytest
import yaml

from shardflow.core.config import load_schema, validate_config
from shardflow.sweep.report import points_record
from shardflow.sweep.sample import Range, draw, drawn_range
from shardflow.sweep.spec import SweepError, parse_sweeps, write_tables_record
from tests.conftest import REPO

from .conftest import parse, sweep

RANGES = {
    "train.lr": {"log_uniform": ["1e-4", "1e-2"]},  # as YAML 1.1 reads 1e-4: a string
    "train.dropout": {"uniform": [0, 0.5]},
    "train.n_layer": {"int_uniform": [2, 8]},
    "train.dtype": ["float32", "bfloat16"],
}


def sampled(points: int, seed: int = 7, grid: dict | None = None, **overrides):
    return parse({"s": sweep(grid=grid or RANGES, sample={"points": points, "seed": seed}, **overrides)})["s"]


def test_a_sample_is_these_points_on_every_machine_and_every_run():
    """Pinned: a change of the draw (hash, mapping to a range, rounding) would move every
    finished sampled sweep's points to new ids, and rerun all its jobs."""
    spec = sampled(4)
    assert spec.ids == (
        "dropout=0.478__dtype=bfloat16__lr=0.00333__n_layer=4",
        "dropout=0.139__dtype=bfloat16__lr=0.000137__n_layer=6",
        "dropout=0.351__dtype=bfloat16__lr=0.000145__n_layer=7",
        "dropout=0.286__dtype=bfloat16__lr=0.00314__n_layer=8",
    )
    assert spec.points[0] == {"train.lr": 0.00333, "train.dropout": 0.478, "train.n_layer": 4, "train.dtype": "bfloat16"}
    assert spec.params == tuple(RANGES)
    assert sampled(4) == spec
    assert sampled(4, seed=8).ids != spec.ids
    assert draw({"k": Range("log_uniform", 1e-4, 1e-2)}, 0, 0) == {"k": 0.00402}


def test_more_points_keep_the_first_ones_and_their_jobs():
    """Raising `points:` adds points after the ones that ran: their jobs' params are unchanged."""
    few, more = sampled(5), sampled(30)
    assert more.ids[:5] == few.ids
    assert all(few.job_config(pid, 0) == more.job_config(pid, 0) for pid in few.ids)


def test_a_grid_of_lists_is_sampled_without_repeats():
    grid = {"train.lr": [0.001, 0.002, 0.003], "train.n_layer": [2, 4, 8]}
    spec = sampled(8, grid=grid)
    full = parse({"s": sweep(grid=grid)})["s"]
    assert len(set(spec.ids)) == 8 and set(spec.ids) < set(full.ids)
    # An int range with a list: 6 points in all, 5 drawn, each once.
    spec = sampled(5, grid={"train.n_layer": {"int_uniform": [1, 3]}, "train.dtype": ["auto", "float32"]})
    assert len(set(spec.ids)) == 5


def test_each_kind_of_range_draws_within_its_bounds_and_rounded():
    """log_uniform to 3 significant digits; uniform to its width's steps (0.001 here)."""
    spec = sampled(300, grid={"train.lr": {"log_uniform": [1.0e-4, 1.0e-2]}, "train.dropout": {"uniform": [0.05, 0.95]},
                              "train.n_layer": {"int_uniform": [2, 5]}})
    lrs, dropouts, layers = ([p[k] for p in spec.points] for k in ("train.lr", "train.dropout", "train.n_layer"))
    assert all(1e-4 <= v <= 1e-2 and float(f"{v:.3g}") == v for v in lrs)
    assert min(lrs) < 1e-3 < max(lrs)  # log-uniform: both decades drawn
    assert all(0.05 <= v <= 0.95 and round(v, 3) == v for v in dropouts)
    assert set(layers) == {2, 3, 4, 5} and all(type(v) is int for v in layers)  # inclusive
    across_zero = [draw({"k": Range("uniform", -1.0, 1.0)}, 0, i)["k"] for i in range(100)]
    assert all(-1 <= v <= 1 and round(v, 2) == v for v in across_zero) and min(across_zero) < 0 < max(across_zero)
    # Rounding to nearest would leave the range at its ends: it rounds toward the inside there.
    assert Range("uniform", 0.12341, 0.2).value(0) == 0.1235  # the draw is the low end itself; steps of 0.0001
    assert Range("uniform", 0.1, 0.12349).value(2**256 - 1) == 0.1234  # just below the high end
    assert Range("log_uniform", 0.12341, 0.2).value(0) == 0.124 and Range("log_uniform", 0.1, 0.12349).value(2**256 - 1) == 0.123
    assert sampled(3, grid={"train.lr": {"uniform": [0.5, 1.5]}}).ids[0] == "lr=1.261"  # the id reads as written by hand


RANGE = {"train.lr": {"uniform": [0.001, 0.01]}}
SAMPLE = {"points": 3, "seed": 0}


@pytest.mark.parametrize("overrides, message", [
    ({"grid": RANGE}, "sweep 'bad': grid parameter 'train.lr' is a range: add `sample: {points: N, seed: S}`"),
    ({"grid": None, "points": [{"train.lr": 0.1}], "sample": SAMPLE},
     "sweep 'bad': `sample:` draws points from `grid:`, not from a list of `points:`"),
    ({"grid": RANGE, "sample": 3}, "sweep 'bad': sample: 3 is not a mapping of `points` (how many to draw) and `seed`"),
    ({"grid": RANGE, "sample": {"n": 3, "seed": 0}}, "sweep 'bad': sample: unknown key 'n'"),
    ({"grid": RANGE, "sample": {"points": 0, "seed": 0}}, "sweep 'bad': sample: points 0 is not a positive integer"),
    ({"grid": RANGE, "sample": {"points": 3}}, "sweep 'bad': sample: no `seed`; it takes `points` (how many to draw)"),
    ({"grid": RANGE, "sample": {"points": 3, "seed": -1}}, "sample: seed -1 is not a non-negative integer"),
    ({"grid": {"train.lr": [0.1, 0.2], "train.n_layer": [2, 4]}, "sample": {"points": 4, "seed": 0}},
     "sweep 'bad': sample: points 4 is not fewer than the 4 points of the grid: drop `sample:` to run all of them"),
    ({"grid": {"train.n_layer": {"int_uniform": [1, 3]}}, "sample": SAMPLE},
     "sample: points 3 is not fewer than the 3 points of the grid: drop `sample:` to run all of them (each "
     "int_uniform range written as the list of its values)"),
    ({"grid": {"train.lr": {"normal": [0, 1]}}, "sample": SAMPLE},
     "sweep 'bad': grid parameter 'train.lr': {'normal': [0, 1]} is not a range; give a list of values, or "
     "{uniform: [low, high]} or {log_uniform: [low, high]} or {int_uniform: [low, high]}"),
    ({"grid": {"train.lr": {"uniform": [0.1]}}, "sample": SAMPLE},
     "sweep 'bad': grid parameter 'train.lr': uniform takes [low, high], not [0.1]"),
    ({"grid": {"train.lr": {"uniform": [0.1, "high"]}}, "sample": SAMPLE},
     "grid parameter 'train.lr': uniform bounds [0.1, 'high'] must be finite numbers"),
    ({"grid": {"train.lr": {"log_uniform": [0, 0.1]}}, "sample": SAMPLE},
     "sweep 'bad': grid parameter 'train.lr': log_uniform low 0.0 must be above 0 (its logarithm is drawn)"),
    ({"grid": {"train.lr": {"uniform": [0.1, 0.1]}}, "sample": SAMPLE},
     "grid parameter 'train.lr': uniform low 0.1 must be below high 0.1 (one value is a list: [0.1])"),
    ({"grid": {"train.n_layer": {"int_uniform": [2, 8.5]}}, "sample": SAMPLE},
     "sweep 'bad': grid parameter 'train.n_layer': int_uniform bounds [2, 8.5] must be integers"),
    ({"grid": {"train.n_layer": {"uniform": [2, 8]}}, "sample": SAMPLE},
     "sweep 'bad': grid parameter 'train.n_layer' is an integer: draw it with {int_uniform: [low, high]}"),
    ({"grid": {"train.dropout": {"uniform": [0.5, 2]}}, "sample": SAMPLE},
     "sweep 'bad': train.dropout = 2.0 is not valid: config key 'train.dropout': 2.0 is greater than the maximum of 1"),
    ({"grid": {"train.lr": {"log_uniform": [0.12341, 0.12349]}}, "sample": SAMPLE},
     "grid parameter 'train.lr': log_uniform [0.12341, 0.12349] holds no value of 3 significant digits"),
    ({"grid": {"train.lr": {"log_uniform": [0.1, 0.102]}}, "sample": {"points": 5, "seed": 0}},
     "sweep 'bad': sample: 3 distinct points in 1500 draws, of the 5 asked for: too few lie in train.lr: "
     "{log_uniform: [0.1, 0.102]} (drawn values rounded to 3 significant digits): widen a range or ask for fewer points"),
    ({"grid": {"train.lr": {"uniform": [0.1, 0.102]}}, "sample": {"points": 250, "seed": 0}},
     "sample: 201 distinct points in 26000 draws, of the 250 asked for: too few lie in train.lr: "
     "{uniform: [0.1, 0.102]} (drawn values rounded to steps of 0.00001): widen a range or ask for fewer points"),
])
def test_bad_input_is_an_error_naming_the_sweep_and_key(overrides, message):
    with pytest.raises(SweepError) as err:
        parse({"bad": sweep(**overrides)})
    assert message in str(err.value)


def test_the_tables_and_points_records_say_how_the_points_were_drawn(tmp_path, spec):
    """spec.json (rule sweep_spec's param and the collection's input) and points.json name
    the sample and the grid it was drawn from (which the tables, figures and first page
    say), each range as the config writes it; a grid's or a list's records hold no
    `sample` key, as before it existed."""
    drawn = sampled(3)
    record = {"points": 3, "seed": 7, "grid": {
        "train.lr": {"log_uniform": [0.0001, 0.01]}, "train.dropout": {"uniform": [0.0, 0.5]},
        "train.n_layer": {"int_uniform": [2, 8]}, "train.dtype": ["float32", "bfloat16"]}}
    assert drawn.tables_record()["sample"] == record == points_record(drawn)["sample"]
    assert "sample" not in spec.tables_record() and "sample" not in points_record(spec)
    write_tables_record(str(tmp_path / "spec.json"), drawn.tables_record(), str(tmp_path / "spec.log"))
    assert json.loads((tmp_path / "spec.json").read_text())["sample"] == record
    assert drawn_range(record, "train.lr") == Range("log_uniform", 1e-4, 1e-2)
    assert drawn_range(record, "train.dtype") is None and drawn_range({"points": 3, "seed": 7}, "train.lr") is None
    assert (tmp_path / "spec.log").read_text().startswith("sweep s: 3 points (drawn from the grid, seed 7), metrics")


def test_a_sampled_sweep_in_a_config_file_parses_as_the_workflow_parses_it(config):
    """YAML text, the shipped schema and config, parse_sweeps as rules/common.smk calls it."""
    schema = load_schema(REPO / "config" / "config.schema.yaml")
    overlay = yaml.safe_load(
        "sweeps:\n"
        "  lr-random:\n"
        "    stage: train\n"
        "    grid:\n"
        "      train.lr: {log_uniform: [1e-4, 1e-2]}\n"
        "      train.dropout: {uniform: [0.0, 0.2]}\n"
        "      train.n_layer: [2, 4]\n"
        "    sample: {points: 6, seed: 0}\n"
        "    seeds: [0]\n"
        "    metrics: {best_val_loss: min}\n"
    )
    config = validate_config({**config, **overlay}, schema)
    specs = parse_sweeps(config["sweeps"], config, functools.partial(validate_config, schema=schema), root=REPO)
    spec = specs["lr-random"]
    assert len(spec.ids) == 6 and {k: spec.sample[k] for k in ("points", "seed")} == {"points": 6, "seed": 0}
    job = spec.job_config(spec.ids[0], 0)["train"]
    assert job["lr"] == spec.points[0]["train.lr"] and type(job["lr"]) is float


def test_a_uniform_value_is_rounded_to_a_step_set_by_the_ranges_width():
    """Rounded to 3 significant digits, [0.99, 0.9999] held 10 values (0.999 took 14 % of
    the draws, nothing above 0.9995 could be drawn) and `points: 20` on it stopped with
    "widen a range"; [0, 1] gave 7.53e-05 beside 0.478. A uniform value is rounded to the
    smallest power of ten that splits the width into at most 1,000 steps."""
    narrow = sampled(20, grid={"train.dropout": {"uniform": [0.99, 0.9999]}})
    values = [p["train.dropout"] for p in narrow.points]
    assert len(set(values)) == 20 and all(0.99 <= v <= 0.9999 for v in values)
    draws = [draw({"k": Range("uniform", 0.99, 0.9999)}, 0, i)["k"] for i in range(2000)]
    assert max(draws) > 0.9995 and all(0.99 <= v <= 0.9999 and round(v, 5) == v for v in draws)
    assert max(draws.count(v) for v in set(draws)) < 0.01 * len(draws)  # evenly spread over its ~1,000 steps
    unit = [draw({"k": Range("uniform", 0.0, 1.0)}, 0, i)["k"] for i in range(2000)]
    assert all(0 <= v <= 1 and round(v, 3) == v for v in unit) and min(v for v in unit if v) >= 0.001
    assert len(set(unit)) > 500  # 0.001 steps, not 0.01: [0, 1] holds 1,001 values
    wide = [draw({"k": Range("uniform", -50.0, 250.0)}, 0, i)["k"] for i in range(200)]
    assert all(-50 <= v <= 250 and round(v, 0) == v for v in wide)  # a width of 300: steps of 1
    # A draw just below 0 rounds to 0, not to a -0.0 that would read "-0.0" in its id.
    assert str(Range("uniform", -1.0, 1.0).value((2**63 - 1) << 192)) == "0.0"
