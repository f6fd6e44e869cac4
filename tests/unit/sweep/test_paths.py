"""Point ids: canonical numbers, path-safe strings that decode back, short keys, long ids."""

from __future__ import annotations

import re

import numpy as np
import pytest

from shardflow.sweep.paths import (
    MAX_ID,
    POINT_ID_REGEX,
    format_value,
    id_keys,
    job_dir,
    parse_point_id,
    point_id,
)


def test_float_spellings_are_one_point():
    assert point_id({"train.lr": 1e-3}) == point_id({"train.lr": 0.001}) == "lr=0.001"
    assert point_id({"train.lr": np.float64(1e-3)}) == "lr=0.001"


@pytest.mark.parametrize("value, text", [
    (1e20, "1e20"), (1e-5, "1e-05"), (-0.0, "0.0"), (2.0, "2.0"), (2, "2"), (-3, "-3"), (np.int64(7), "7"),
    (True, "true"), (False, "false"), (None, "null"), (float("inf"), "inf"), (float("-inf"), "-inf"),
])
def test_numbers_have_one_spelling(value, text):
    assert format_value(value) == text


def test_nan_and_containers_are_not_values():
    with pytest.raises(ValueError, match="NaN"):
        format_value(float("nan"))
    with pytest.raises(TypeError, match="string, number, boolean or null"):
        format_value([1, 2])


STRINGS = ["a/b c", "under_score", "a__b", "ünïcode", "4", "", "true", "null", "inf", "x=y", "%d %j", "..", "-1e3",
           "sentence-transformers/all-MiniLM-L6-v2", "tab\there", "_q"]


@pytest.mark.parametrize("text", STRINGS)
def test_strings_are_one_safe_folder_and_decode_back(tmp_path, text):
    point = {"embedding.model": text, "train.lr": 0.001}
    pid = point_id(point)
    assert re.fullmatch(POINT_ID_REGEX, pid) and "/" not in pid and "%" not in pid and len(pid) <= MAX_ID
    folder = tmp_path / pid
    folder.mkdir()
    assert [p.name for p in tmp_path.iterdir()] == [pid]
    assert parse_point_id(pid, list(point)) == point
    assert type(parse_point_id(pid)["model"]) is str


def test_readable_ids():
    assert point_id({"embedding.model": "sentence-transformers/all-MiniLM-L6-v2"}) == \
        "model=sentence-transformers_2fall-MiniLM-L6-v2"
    assert point_id({"embedding.model": "4"}) == "model=_q4"  # not the number 4
    assert point_id({}) == "base"


def test_typed_values_decode_back():
    point = {"train.lr": 3e-4, "train.n_layer": 4, "train.bias": False, "train.lr_decay_iters": None}
    pid = point_id(point)
    assert pid == "bias=false__lr=0.0003__lr_decay_iters=null__n_layer=4"  # keys sorted: order-independent
    assert parse_point_id(pid, list(point)) == point
    assert point_id(dict(reversed(point.items()))) == pid


def test_keys_are_short_unless_ambiguous():
    keys = id_keys(["train.lr", "train.n_layer", "other.lr"])
    assert keys == {"train.lr": "train.lr", "train.n_layer": "n_layer", "other.lr": "other.lr"}
    point = {"train.lr": 0.1, "train.n_layer": 2, "other.lr": 0.2}
    pid = point_id(point, keys)
    assert pid == "other.lr=0.2__train.lr=0.1__n_layer=2"  # sorted by dotted key
    assert parse_point_id(pid, list(point)) == point


def test_long_ids_end_in_a_hash_and_stay_distinct():
    a = point_id({"train.lr": 0.1, "embedding.prompt": "x" * 300})
    b = point_id({"train.lr": 0.1, "embedding.prompt": "x" * 299 + "y"})
    assert a != b and len(a) <= MAX_ID and len(b) <= MAX_ID
    assert a.startswith("lr=0.1__id-hash=") and re.fullmatch(POINT_ID_REGEX, a)
    assert a == point_id({"embedding.prompt": "x" * 300, "train.lr": 0.1})
    with pytest.raises(ValueError, match="points table"):
        parse_point_id(a)


@pytest.mark.parametrize("bad", ["lr=a/b", "lr", "lr=_zz", "=1", "lr=1___n=2"])
def test_parse_rejects_what_point_id_never_writes(bad):
    with pytest.raises(ValueError):
        parse_point_id(bad)


def test_job_dir():
    assert job_dir("lr-depth", "lr=0.001", 3) == "lr-depth/lr=0.001/seed=3"
