"""The field types of params dataclasses (core.fields): union annotations read, a path
taken as its string, and nothing imported beyond the standard library."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from shardflow.core.fields import check_field_types, one_of, whole_int

REPO = Path(__file__).resolve().parents[3]


def test_check_field_types_reads_union_annotations_and_leaves_the_others_to_the_class():
    """String annotations (`from __future__ import annotations`) and runtime ones alike; a
    field typed with anything but FIELD_KINDS (a Path, a list of strings) is not checked."""

    @dataclasses.dataclass
    class Params:
        n: int | None = None
        rate: float = 0.5
        flag: bool = False
        folder: Path = Path(".")
        names: list[str] = dataclasses.field(default_factory=list)

    runtime = dataclasses.make_dataclass("Runtime", [("n", int), ("mode", bool | str)])
    check_field_types(Params(n=3, rate=1, folder="x", names="not a list"))  # an int is a number
    check_field_types(runtime(n=1, mode="never"))
    for bad, message in (
        (Params(n=True), "n True: expected an integer or None"),
        (Params(rate="0.5"), "rate '0.5': expected a number"),
        (Params(flag=0), "flag 0: expected a bool"),
        (runtime(n=1.5, mode="x"), "n 1.5: expected an integer"),
        (runtime(n=1, mode=1), "mode 1: expected a bool or a string"),
    ):
        with pytest.raises(TypeError) as info:
            check_field_types(bad)
        assert str(info.value) == message


def test_a_path_where_a_string_is_meant_is_taken_as_its_string():
    """A model folder given as a pathlib.Path (as a notebook would) worked before the type
    checks: it is taken as its string, in a frozen class too, and checked as one."""
    from shardflow.embed.params import EmbedParams

    @dataclasses.dataclass(frozen=True)
    class Params:
        model: str = "m"
        prompt: str | None = None

    params = Params(model=Path("/models/x"), prompt=Path("p"))
    check_field_types(params)
    assert (params.model, params.prompt) == ("/models/x", "p")
    assert EmbedParams(model=Path("/models/x")).model == "/models/x"


def test_importing_it_brings_in_nothing_but_the_standard_library():
    """DemoParams checks its fields in the demo corpus's fresh interpreter, which then reads
    the standard library's docstrings: typing_extensions (jsonschema's, so core.config's)
    patches `typing` there: the shipped corpus came out with two docstrings fewer and
    another sample of 3,000."""
    script = (
        "import sys; before = set(sys.modules); import shardflow.core.fields; "
        "print(sorted(m for m in set(sys.modules) - before "
        "if m.split('.')[0] not in sys.stdlib_module_names and m.split('.')[0] != 'shardflow'))"
    )
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "[]"


def test_whole_int_reads_a_whole_float_and_refuses_a_fraction_or_a_word():
    """The argparse type of an integer option: "10.0" (a config's whole float, as a shell
    rule writes it) is 10; "10.5", "inf" and "ten" are argparse errors."""
    import argparse

    assert [whole_int(text) for text in ("10", "10.0", "1e3", "-2")] == [10, 10, 1000, -2]
    assert type(whole_int("10.0")) is int
    for text in ("10.5", "inf", "nan", "ten", ""):
        with pytest.raises(argparse.ArgumentTypeError, match=f"expected an integer, got {text!r}"):
            whole_int(text)


def test_whole_floats_in_a_list_of_integers_are_ints_and_a_fraction_is_left_to_the_type_check():
    """A `tuple[int, ...]` field from YAML (`[64, 128.0]`) gets each whole float as its int
    (a list still: the class makes its tuple after the type check); 64.5 stays, refused."""
    from shardflow.core.fields import whole_floats_as_ints

    @dataclasses.dataclass(frozen=True)
    class Params:
        widths: str | tuple[int, ...] = "auto"
        scale: float = 1.0

    params = Params(widths=(64, 128.0), scale=2.0)
    whole_floats_as_ints(params)
    assert params.widths == [64, 128] and all(type(w) is int for w in params.widths)
    assert params.scale == 2.0 and type(params.scale) is float
    kept = Params(widths=[16, 64.5])
    whole_floats_as_ints(kept)
    assert kept.widths == [16, 64.5]
    with pytest.raises(TypeError, match="expected a string or a list of integers"):
        check_field_types(kept)


def test_one_of_takes_a_value_that_cannot_be_hashed_as_none_of_the_choices():
    """`in` a set or a dict raised Python's bare TypeError for a list or a dict (from a
    Python caller: EmbedParams(dtype=[1])), which names no field; one_of says no, and the
    class's check names the field and what it takes."""
    choices = {"float32": 4, "float16": 2}
    assert one_of("float16", choices) and one_of("on", ("auto", "on")) and not one_of("fp16", choices)
    assert not one_of([1], choices) and not one_of({"a": 1}, {"auto"}) and not one_of([1], ("auto",))


def test_a_float_field_that_is_not_finite_is_refused_naming_the_field():
    """The config check refuses `.nan` and `.inf` (core.config.non_finite_numbers), but a
    Python caller's float('nan') passed every bound written as a comparison (NaN compares
    false): a NaN lr trained to NaN losses. No float field of a params class means
    anything by inf (grad_clip 0 and shard_mb None are the "no limit" values), and every
    one is recorded in strict JSON. An int in a float field, however large, is finite."""

    @dataclasses.dataclass(frozen=True)
    class Params:
        rate: float = 0.5
        cap: float | None = None

    check_field_types(Params(rate=10**400, cap=-1.5))
    for bad, message in (
        (Params(rate=float("nan")), "rate nan: expected a finite number"),
        (Params(rate=float("-inf")), "rate -inf: expected a finite number"),
        (Params(cap=float("inf")), "cap inf: expected a finite number"),
    ):
        with pytest.raises(ValueError) as info:
            check_field_types(bad)
        assert str(info.value) == message


def test_a_params_class_refuses_a_nan_learning_rate():
    """Through a real params class: TrainParams's bounds let a NaN lr through (min_lr > nan
    is false), and the run trained to NaN losses."""
    import numpy as np

    from shardflow.embed.verify import VerifyParams
    from shardflow.train.params import TrainParams

    with pytest.raises(ValueError, match=r"^lr nan: expected a finite number$"):
        TrainParams(lr=float("nan"))
    with pytest.raises(ValueError, match=r"^norm_tolerance .*inf.*: expected a finite number$"):
        VerifyParams(10, 8, True, norm_tolerance=np.float64("inf"))  # numpy's floats are numbers too
    assert TrainParams(lr=2e-3).lr == 2e-3
