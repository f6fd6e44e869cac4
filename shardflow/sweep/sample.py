"""Random search: a sweep's `sample: {points: N, seed: S}` draws N points of its grid at parse time.

    grid:
      train.lr: {log_uniform: [1.0e-4, 1.0e-2]}   # rounded to 3 significant digits
      train.dropout: {uniform: [0.0, 0.3]}        # rounded to steps of 0.001 (its width's)
      train.n_layer: {int_uniform: [2, 8]}        # inclusive
      train.dtype: [float32, bfloat16]            # a list: one of its values
    sample: {points: 20, seed: 0}

The job graph must be known at parse time (`snakemake -n` shows every job), and the
parse runs again in every remote job, so the draw is a pure function of the config.
Draws must read the same on every machine and months later: Python's `random` and
numpy's generators may change their algorithms between versions, so each value comes
from sha256 of (seed, draw index, key) (core.hashing.digest), mapped to its range with
`decimal` arithmetic (correctly rounded ln and exp, the same on every platform; libm's
may differ in the last bit). Draw i depends on nothing but i: the points of `points: 20`
are the first 20 of `points: 40`, so raising N reuses the finished jobs.

The sample's record (`grid_record`: each range as {kind: [low, high]}, each list as its
values) goes into spec.json and points.json beside `points` and `seed`, so that the
tables, figures and the report's first page can say what the points were drawn from
(`drawn_range` reads a range back).

A continuous value is rounded (half to even; toward the inside of the range where that
would leave it), so that ids, folders and tables read like a hand-written grid:
- log_uniform, to SIGNIFICANT digits: a log scale's resolution is relative, and 0.000137
  sits beside 0.0137 as a hand-written learning-rate grid has them.
- uniform, to a step set by the range's width (Range.step): the smallest power of ten
  that splits it into at most UNIFORM_STEPS steps (at least a tenth as many). Significant
  digits gave a uniform range the resolution of its values, not its width: [0.99, 0.9999]
  held 10 values, one of them 14 % of the draws, and [0, 1] drew 7.53e-05 beside 0.478.
  The steps are spaced evenly, so each value is about as likely as another. At most
  1,000 rather than at most 100: a width that is a power of ten ([0, 1], [0, 0.1]), the
  commonest, gets the finest steps (0.001 on [0, 1]: 1,001 values), not the coarsest
  (0.01: 101 values, which a one-parameter sample of a few dozen points would already
  repeat often, and whose 101 points were all it could ever draw). A value reads with at
  most 3 digits past the width's first.

A draw equal to an earlier point is skipped (spec: the point list must hold each point
once), which also makes a grid of lists a sample without repeats.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import ROUND_CEILING, ROUND_FLOOR, ROUND_HALF_EVEN, Context, Decimal
from functools import cached_property
from typing import Any

from shardflow.core.hashing import digest

RANGE_KINDS = ("uniform", "log_uniform", "int_uniform")
SIGNIFICANT = 3
UNIFORM_STEPS = 1000
# A draw is a point, or a repeat of one; this many draws per point asked for (and a
# spare) before the sample gives up: a sample without repeats of all but one point of
# an n-point grid takes about n ln n draws, which this covers up to e**100 points.
DRAWS_PER_POINT = 100
SPARE_DRAWS = 1000
# Digits the decimal arithmetic keeps: far more than a double's 17, so that rounding
# sees the exact draw.
_CONTEXT = Context(prec=40, rounding=ROUND_HALF_EVEN)
_UNIT_BITS = 64


def _significant(x: Decimal, rounding: str) -> Decimal:
    return x.quantize(Decimal(1).scaleb(x.adjusted() - SIGNIFICANT + 1), rounding=rounding, context=_CONTEXT)


@dataclass(frozen=True)
class Range:
    """One grid parameter's range (RANGE_KINDS): ints for int_uniform, else floats."""

    kind: str
    low: int | float
    high: int | float

    def __post_init__(self):
        if self.kind not in RANGE_KINDS:
            raise ValueError(f"{self.kind!r} is not a range kind ({', '.join(RANGE_KINDS)})")
        if not self.low < self.high:
            raise ValueError(f"low {self.low!r} must be below high {self.high!r} (one value is a list: [{self.low!r}])")
        if self.kind == "log_uniform" and self.low <= 0:
            raise ValueError(f"low {self.low!r} must be above 0 (its logarithm is drawn)")
        # Only log_uniform's can hold none: a uniform range holds UNIFORM_STEPS / 10 steps at least.
        if self.kind != "int_uniform" and self._round(self._low, ROUND_CEILING) > self._high:
            raise ValueError(f"[{self.low!r}, {self.high!r}] holds no value of {SIGNIFICANT} significant digits "
                             "(drawn values are rounded to them)")

    @property
    def size(self) -> int | None:
        """How many values it holds; None for a continuous range."""
        return self.high - self.low + 1 if self.kind == "int_uniform" else None

    @cached_property
    def _low(self) -> Decimal:
        return Decimal(repr(self.low))  # as written (1e-4 is 0.0001, not the double's expansion)

    @cached_property
    def _high(self) -> Decimal:
        return Decimal(repr(self.high))

    @cached_property
    def step(self) -> Decimal:
        """A uniform range's rounding step: the smallest power of ten that splits its width
        into at most UNIFORM_STEPS steps (0.001 for [0, 1] and for [0, 0.5])."""
        width = _CONTEXT.subtract(self._high, self._low)
        at_most = _CONTEXT.divide(width, Decimal(UNIFORM_STEPS))
        # Decimal's adjusted() is floor(log10), exact where float's log10 may round a power of ten.
        exponent = at_most.adjusted()
        return Decimal(1).scaleb(exponent if at_most == Decimal(1).scaleb(exponent) else exponent + 1)

    @property
    def rounding(self) -> str:
        """What a drawn value is rounded to, for a person."""
        return f"steps of {self.step:f}" if self.kind == "uniform" else f"{SIGNIFICANT} significant digits"

    def _round(self, x: Decimal, rounding: str) -> Decimal:
        if self.kind == "uniform":
            return x.quantize(self.step, rounding=rounding, context=_CONTEXT)
        return _significant(x, rounding)

    @cached_property
    def _logs(self) -> tuple[Decimal, Decimal]:
        return _CONTEXT.ln(self._low), _CONTEXT.ln(self._high)

    def value(self, h: int) -> int | float:
        """The value that hash `h` (a 256-bit integer) picks."""
        if self.kind == "int_uniform":
            return self.low + h % self.size
        unit = _CONTEXT.divide(Decimal(h >> (256 - _UNIT_BITS)), Decimal(2**_UNIT_BITS))  # in [0, 1)
        if self.kind == "uniform":
            x = _CONTEXT.fma(unit, _CONTEXT.subtract(self._high, self._low), self._low)
        else:
            low, high = self._logs
            x = _CONTEXT.exp(_CONTEXT.fma(unit, _CONTEXT.subtract(high, low), low))
        for rounding in (ROUND_HALF_EVEN, ROUND_CEILING, ROUND_FLOOR):
            # Where the nearest value is outside, the one on the other side is inside:
            # __post_init__ made sure the range holds one.
            rounded = self._round(x, rounding)
            if self._low <= rounded <= self._high:
                return float(rounded) + 0.0  # a draw just below 0 rounds to -0, which would read "-0.0"
        raise AssertionError(f"{self}: no rounding of {x} is inside")  # pragma: no cover

    def __str__(self) -> str:
        return f"{{{self.kind}: [{self.low!r}, {self.high!r}]}}"  # as the config writes it


def grid_size(values: Mapping[str, Sequence | Range]) -> int | None:
    """The number of points the grid holds; None where a range is continuous."""
    sizes = [v.size if isinstance(v, Range) else len(v) for v in values.values()]
    return None if None in sizes else math.prod(sizes)


def draw(values: Mapping[str, Sequence | Range], seed: int, index: int) -> dict[str, Any]:
    """Draw `index` of the sample with `seed`: each key's value picked by the hash of
    (seed, index, key) alone, so a draw does not depend on how many are asked for, nor
    one key's value on the others'."""
    out = {}
    for key, vals in values.items():
        h = int(digest([seed, index, key]), 16)
        out[key] = vals.value(h) if isinstance(vals, Range) else vals[h % len(vals)]
    return out


def grid_record(values: Mapping[str, Sequence | Range]) -> dict[str, Any]:
    """The grid a sample is drawn from in builtins, as the config writes it: a range as
    {kind: [low, high]}, a list as its values (as the config holds them)."""
    return {key: {v.kind: [v.low, v.high]} if isinstance(v, Range) else list(v) for key, v in values.items()}


def drawn_range(sample: Mapping[str, Any] | None, key: str) -> Range | None:
    """The range `key` was drawn from in a sample's record (SweepSpec.sample, points.json's
    `sample`); None for a list of values, a sweep that is no sample, or a record from
    before the sample named its grid."""
    given = (sample or {}).get("grid", {}).get(key)
    if not isinstance(given, Mapping):
        return None
    ((kind, (low, high)),) = given.items()
    return Range(kind, low, high)


def max_draws(points: int) -> int:
    return DRAWS_PER_POINT * points + SPARE_DRAWS
