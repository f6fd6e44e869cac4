"""expand_and_name(n): a grid of at least n points, however small n is, and every job's
params built. (test_report runs it once at 1,000 points.)"""

from __future__ import annotations

import copy

import pytest

from shardflow.sweep.bench import expand_and_name

from .conftest import CONFIG, validate


@pytest.mark.parametrize("n", [1, 2, 3, 4, 9, 26, 99, 100, 101, 250])
def test_a_grid_holds_at_least_n_points_and_fewer_than_n_plus_a_hundred(n):
    out = expand_and_name(n)
    assert n <= out["points"] < n + 100 and out["jobs"] == out["points"]


def test_seeds_multiply_the_jobs_and_every_grid_value_is_one_the_schema_accepts():
    # the workflow's schema keeps dropout within [0, 1] and n_layer >= 1 (validate raises otherwise)
    out = expand_and_name(250, config=copy.deepcopy(CONFIG), schema_validate=validate, seeds=3)
    assert out["jobs"] == 3 * out["points"] == 3 * 300
