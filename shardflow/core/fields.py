"""The Python types of a params dataclass's fields: a whole float in an int field made
that int, and a value of a type its annotation does not name refused, naming the field.

Kept apart from core.config, with nothing but the standard library: the demo corpus's
builder checks its DemoParams in a fresh interpreter that then reads the docstrings of
the whole standard library, and core.config's jsonschema brings in typing_extensions,
which patches `typing` and so changes that corpus.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import os
import re
from typing import Any


def whole_floats_as_ints(params: Any) -> None:
    """In a frozen params dataclass, a whole float in a field typed int (`128.0`,
    `5.0e+3`: JSON Schema's "integer" takes them) becomes that int, in place: the code
    slices and counts with them. Done where params are built, not in the config, so the
    values Snakemake records (and sweep point ids) stay as written. A list in a field of
    integers (`tuple[int, ...]`: YAML's `[64, 128.0]`) gets the same for each item, and
    stays a list (its class makes the tuple, after check_field_types)."""

    def whole(value: Any) -> Any:
        return int(value) if isinstance(value, float) and value.is_integer() else value

    for f in dataclasses.fields(params):
        value = getattr(params, f.name)
        annotation = f.type if isinstance(f.type, str) else str(f.type)
        kinds = set(re.findall(r"\w+", annotation))
        if isinstance(value, float) and "int" in kinds and "float" not in kinds:
            object.__setattr__(params, f.name, whole(value))
        elif isinstance(value, (list, tuple)) and "tuple[int, ...]" in annotation:
            object.__setattr__(params, f.name, [whole(v) for v in value])


def one_of(value: Any, allowed: Any) -> bool:
    """Whether `value` is one of `allowed` (a tuple, a set, a dict's keys). A value that
    cannot be hashed (a list or a dict from a Python caller) is none of them: `in` a set
    or a dict raised Python's bare TypeError ("unhashable type: 'list'") for it, naming
    no field, where the class's check names the field and what it takes."""
    try:
        return value in allowed
    except TypeError:
        return False


DEVICES = ("auto", "cpu", "cuda")  # plus "cuda:N"


def check_device(name: str) -> None:
    """A configured device name is auto, cpu, cuda or cuda:N (None or a number is not one).
    Here, not in core.devices, which imports torch: TrainParams checks its device when the
    workflow is parsed."""
    if not isinstance(name, str) or (name not in DEVICES and not (name.startswith("cuda:") and name[5:].isdigit())):
        raise ValueError(f"device {name!r}: expected auto, cpu, cuda or cuda:N")


def whole_int(text: str) -> int:
    """argparse type of an integer option: `10`, or a whole float written as text
    (`10.0`, `1e3`). A shell rule passes a config value as Python writes it, and JSON
    Schema's "integer" takes 10.0, which int() refuses; 10.5 stays an error, which
    argparse reports naming the option."""
    import argparse  # here: the demo corpus's fresh interpreter imports this module, and no more than it needs

    try:
        return int(text)
    except ValueError:
        pass
    try:
        number = float(text)
    except ValueError:
        number = None
    if number is None or not number.is_integer():
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}")
    return int(number)


def _is_integer(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


# What a params dataclass's annotation parts take, and how an error says it. bool is an
# int in Python (True == 1, True < 1 is False), so a number field takes no bool, and a
# bool field no 0 or 1. A list is as good as a tuple: YAML gives lists.
FIELD_KINDS = {
    "int": ("an integer", _is_integer),
    "float": ("a number", lambda v: isinstance(v, numbers.Real) and not isinstance(v, bool)),
    "bool": ("a bool", lambda v: isinstance(v, bool)),
    "str": ("a string", lambda v: isinstance(v, str)),
    "None": ("None", lambda v: v is None),
    "tuple[int, ...]": ("a list of integers", lambda v: isinstance(v, (list, tuple)) and all(map(_is_integer, v))),
}


def check_field_types(params: Any) -> None:
    """In a params dataclass, each field's value is of a type its annotation names (a
    union of FIELD_KINDS: `int | None`, `bool | str | None`), else a TypeError naming the
    field, the value and what it takes. Called in `__post_init__`, after
    whole_floats_as_ints and the checks whose messages list a field's allowed words, and
    before comparisons, which would fail with Python's bare TypeError ('<' not supported
    between 'str' and 'int') or pass a wrong value (a bool where a number is meant, a
    string never compared). A field whose annotation names anything else is left to its
    class. A path object (pathlib.Path) where a string is meant is taken as its string
    (os.fspath), as the classes took a model folder before they checked types. A NaN or an
    infinity in a float field is a ValueError (check_finite)."""
    for f in dataclasses.fields(params):
        annotation = f.type.__name__ if isinstance(f.type, type) else str(f.type)
        kinds = [part.strip() for part in annotation.split("|")]
        if not all(kind in FIELD_KINDS for kind in kinds):
            continue
        value = getattr(params, f.name)
        if "str" in kinds and isinstance(value, os.PathLike):
            value = os.fspath(value)
            object.__setattr__(params, f.name, value)  # the classes are frozen
        if not any(FIELD_KINDS[kind][1](value) for kind in kinds):
            words = [FIELD_KINDS[kind][0] for kind in kinds]
            expected = words[0] if len(words) == 1 else f"{', '.join(words[:-1])} or {words[-1]}"
            raise TypeError(f"{f.name} {value!r}: expected {expected}")
        if "float" in kinds:
            check_finite(f.name, value)


def check_finite(name: str, value: Any) -> None:
    """A number in a float field is finite, else a ValueError naming the field. The config
    check refuses `.nan` and `.inf` (core.config.non_finite_numbers), but a Python caller's
    float('nan') passed every bound written as a comparison (NaN compares false), and a
    NaN lr trained to NaN losses. No float field means anything by inf (grad_clip 0 and
    shard_mb None are the "no limit" values), and the values are recorded in strict JSON,
    which has neither. An int is finite: math.isfinite would overflow on a large one."""
    if isinstance(value, numbers.Real) and not isinstance(value, numbers.Integral) and not math.isfinite(value):
        raise ValueError(f"{name} {value!r}: expected a finite number")
