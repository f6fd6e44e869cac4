"""The `sweeps:` config section, parsed and checked at parse time.

    sweeps:
      lr-depth:                       # the sweep's name (and default folder)
        stage: train                  # train, retrieval, summarise or embed
        base: null                    # or an experiment file merged over the config
        grid:                         # every combination (last key varies fastest) ...
          train.lr: [1.0e-3, 3.0e-4]
          train.n_layer: [2, 4]
        # points:                     # ... or an explicit list of points
        #   - {train.lr: 1.0e-3, train.n_layer: 2}
        # sample:                     # ... or 20 points drawn from the grid, whose
        #   points: 20                # parameters may then also be ranges:
        #   seed: 0                   # train.lr: {log_uniform: [1.0e-4, 1.0e-2]}
        seeds: [0, 1, 2]              # every point runs once per seed
        metrics: {best_val_loss: min} # what the tables show, and which way is better
        best: best_val_loss           # picks the best point (default: the first metric)

Every problem is a SweepError naming the sweep and the key: an unknown parameter (with
the keys its section has), an empty grid or value list, a value the config schema
rejects, two equal points, two sweeps writing to one folder, a range without `sample:`, a
sample as large as its grid or one its ranges cannot fill. `sweeps_in_files` reads the
config files themselves, for what their merge hides (a key written twice, one sweep
defined in two files).

Each point is checked the way the workflow checks its config: the point is applied to a
copy of the sweep's base config and `schema_validate` (the workflow's validator) runs
on it. For a grid it runs once per distinct (key, value) rather than once per point:
the schema constrains each key on its own (no if/then across keys), so that is the same
check at the cost of the sum, not the product, of the value lists; parse-time code runs
again in every remote job, so a 1,000-point grid must stay cheap to parse. A sampled
sweep (shardflow.sweep.sample) is drawn into the same list of points a `points:` sweep
gives, each drawn value checked as a grid's value is.
"""

from __future__ import annotations

import copy
import difflib
import itertools
import math
import os
import re
import reprlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from shardflow.core.config import YAML11_FLOAT, config_file_nodes, read_yaml, repeated_keys
from shardflow.sweep.paths import (
    KEY_REGEX,
    case_collisions,
    format_value,
    id_keys,
    plain,
    point_id,
)
from shardflow.sweep.sample import RANGE_KINDS, Range, draw, grid_record, grid_size, max_draws


class SweepError(ValueError):
    pass


@dataclass(frozen=True)
class Stage:
    name: str
    sections: tuple[str, ...]  # the config sections its jobs read: the only ones a sweep may vary
    seed_key: str  # where a run's seed goes
    example_metric: str  # for the message when `metrics` is missing
    # Keys of those sections that every job of a sweep shares: what the data set is and
    # how its outputs are scored (one split, one set of references for all points).
    shared: tuple[str, ...] = ()


_RETRIEVAL_DATA = tuple(f"retrieval.{k}" for k in (
    "path", "format", "name", "split", "msmarco_collection", "msmarco_queries", "msmarco_qrels", "n_chunks",
    "relevance_level"))
_SUMMARY_SCORING = tuple(f"summarise.{k}" for k in (
    "method", "reference_field", "reference_format", "stored_field", "stored_format", "bootstrap_resamples"))

STAGES = {
    "train": Stage("train", ("train",), "train.seed", "best_val_loss: min"),
    "retrieval": Stage("retrieval", ("retrieval", "embedding"), "embedding.seed", "ndcg_at_10: max", _RETRIEVAL_DATA),
    "summarise": Stage("summarise", ("summarise",), "summarise.seed", "rouge1: max", _SUMMARY_SCORING),
    "embed": Stage("embed", ("embedding",), "embedding.seed", "items_per_s: max"),
}

# Keys the rules read from the main config for every job of the run, a sweep's included
# (rules/common.smk chunk_vectors): a point's value would be ignored, its tables labelled
# with a setting its jobs did not have.
RUN_WIDE = ("embedding.keep_chunk_vectors",)

SWEEP_KEYS = ("stage", "base", "grid", "points", "sample", "seeds", "metrics", "best", "folder", "description")
NAME_REGEX = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
# YAML 1.1 (PyYAML) reads 1e-3 as a string: it wants a dot (1.0e-3) to see a float.


@dataclass(frozen=True)
class SweepSpec:
    name: str
    stage: str
    folder: str  # one path component under the sweeps root
    base: str | None  # the experiment file merged over the config, or None
    params: tuple[str, ...]  # dotted keys, in the order given
    points: tuple[Mapping[str, Any], ...]  # each sets every param, canonical values
    ids: tuple[str, ...]  # point ids (folder names), aligned with points
    seeds: tuple[int, ...]
    metrics: tuple[str, ...]  # what the summary, plots and exports show
    goals: Mapping[str, str]  # metric -> "max" or "min"
    best: str  # the metric that picks the best point
    description: str = ""
    # {points, seed, grid} where the points were drawn from the grid (grid: sample.grid_record).
    sample: Mapping[str, Any] | None = None
    base_config: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @cached_property
    def by_id(self) -> dict[str, Mapping[str, Any]]:
        return dict(zip(self.ids, self.points, strict=True))

    @cached_property
    def names(self) -> dict[str, str]:
        """{dotted key: its short name in ids, tables and plots}."""
        return id_keys(self.params)

    @property
    def maximize(self) -> bool:
        return self.goals[self.best] == "max"

    def point(self, pid: str) -> dict[str, Any]:
        try:
            return dict(self.by_id[pid])
        except KeyError:
            raise SweepError(f"sweep '{self.name}' has no point {pid!r} ({len(self.ids)} points)") from None

    def tables_record(self) -> dict[str, Any]:
        """What decides the sweep's tables, exports, plots and best point, in builtins only.

        Rule sweep_spec records this as its params and writes it to spec.json, an input
        of the collection: Snakemake records a param only where it is a builtin
        (`_serialize_param_builtin`; a SweepSpec is skipped), so a changed metric, goal,
        `best`, point or seed reruns the collection. Lists keep the tables' order.
        """
        return {
            "name": self.name, "stage": self.stage, "base": self.base, "params": list(self.params),
            "points": [[pid, dict(p)] for pid, p in zip(self.ids, self.points, strict=True)],
            **({"sample": copy.deepcopy(dict(self.sample))} if self.sample else {}),
            "seeds": list(self.seeds), "metrics": [[m, self.goals[m]] for m in self.metrics], "best": self.best,
        }

    def jobs(self) -> list[tuple[str, int]]:
        """Every (point id, seed), points in order, seeds within each."""
        return [(pid, seed) for pid in self.ids for seed in self.seeds]

    def job_config(self, pid: str, seed: int, sections: tuple[str, ...] | None = None) -> dict:
        """The config sections one job reads (default: its stage's), with the point and seed set.

        Pass this through a rule's `params:`: a job then reruns when its own values
        change, and a change anywhere else (another section, another point) reruns nothing.
        Keys are sorted at every level: Snakemake compares params by their repr, so
        reordering the config file must not look like a change.
        """
        sections = sections or STAGES[self.stage].sections
        config = {s: copy.deepcopy(self.base_config[s]) for s in sections if s in self.base_config}
        seed_key = STAGES[self.stage].seed_key
        seed_set = {seed_key: seed} if seed_key.split(".")[0] in config else {}
        return _sorted_keys(apply_point(config, {**self.point(pid), **seed_set}, copy_config=False))


def seeds_without_effect(spec: SweepSpec) -> str | None:
    """Why `spec`'s seeds cannot change its results, or None: then each seed after the
    first repeats its point's computation (GPU time) for the same numbers and a zero
    std. Retrieval: inference reads no randomness (embedding.seed seeds only weights a
    model folder lacks). Summarise: lead and extractive read no seed, and abstractive
    generation without sampling (`do_sample: false` at every point) is deterministic;
    with `do_sample: null` the model's own generation config may sample."""
    if len(spec.seeds) < 2:
        return None
    if spec.stage == "retrieval":
        return "retrieval scores do not depend on embedding.seed (it seeds only weights a model folder lacks)"
    if spec.stage == "summarise":
        method = spec.base_config["summarise"]["method"]
        if method != "abstractive":
            return f"summarise.method {method} reads no seed"
        sampling = [spec.job_config(p, spec.seeds[0])["summarise"]["generation"].get("do_sample") for p in spec.ids]
        if all(value is False for value in sampling):
            return "generation does not sample (summarise.generation.do_sample: false)"
    return None


def _sorted_keys(node: Any) -> Any:
    if isinstance(node, Mapping):
        return {k: _sorted_keys(node[k]) for k in sorted(node)}
    return node


def canonical_value(value: Any, like: Any) -> Any:
    """`value` in the type of the base config's value `like` where that is a number:
    "1e-3" (a YAML 1.1 string) and 1 become floats for a float key, 1000.0 an int for an
    int key, so that equal values are one point."""
    value = plain(value)
    if isinstance(like, bool) or not isinstance(like, (int, float)) or isinstance(value, bool):
        return value
    if isinstance(value, str) and YAML11_FLOAT.fullmatch(value.strip()):
        value = float(value)
    if isinstance(like, float) and isinstance(value, int):
        try:
            return float(value)
        except OverflowError:  # 10**400: left an int, for format_value to refuse by name
            return value
    if isinstance(like, int) and isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def value_key(value: Any) -> tuple:
    """A sweep value as one setting: 1 and 1.0 are one (a key whose base value is null
    keeps either as given), true and 1 are not, nor 1 and "1". The number itself, not
    its float: Python compares an int with a float exactly, where float() would make
    2**53 and 2**53 + 1 one value."""
    value = plain(value)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return ("number", value)
    return (type(value).__name__, value)


def lookup(config: Mapping[str, Any], key: str) -> Any:
    """The value at dotted `key`; SweepError naming what exists where it is missing."""
    node: Any = config
    parts = key.split(".")
    for depth, part in enumerate(parts):
        if not isinstance(node, Mapping) or part not in node:
            raise SweepError(_unknown(config, key, parts[:depth], node))
        node = node[part]
    return node


def _leaf_keys(node: Any, prefix: str = "") -> list[str]:
    if not isinstance(node, Mapping):
        return [prefix] if prefix else []
    return [k for name, sub in node.items() for k in _leaf_keys(sub, f"{prefix}.{name}" if prefix else str(name))]


def _unknown(config: Mapping, key: str, found: list[str], node: Any) -> str:
    close = difflib.get_close_matches(key, _leaf_keys(config), n=1, cutoff=0.75)
    hint = f"; did you mean '{close[0]}'?" if close else ""
    if not found:
        return f"unknown parameter '{key}' (no section '{key.split('.')[0]}'{hint})"
    parent = ".".join(found)
    if isinstance(node, Mapping):
        return f"unknown parameter '{key}' ({parent} has: {', '.join(sorted(map(str, node)))}{hint})"
    return f"unknown parameter '{key}' ({parent} is a value, not a section{hint})"


def apply_point(config: Mapping[str, Any], point: Mapping[str, Any], copy_config: bool = True) -> dict:
    """`config` (copied) with each dotted key of `point` set; an unknown key is a SweepError."""
    out = copy.deepcopy(config) if copy_config else config
    for key, value in point.items():
        lookup(out, key)
        *parents, last = key.split(".")
        node = out
        for part in parents:
            node = node[part]
        node[last] = value
    return out


def merge(base: Mapping[str, Any], overlay: Mapping[str, Any]) -> dict:
    """`overlay` merged into a copy of `base`, section by section (Snakemake's --configfile)."""
    out = copy.deepcopy(dict(base))
    for key, value in overlay.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def write_tables_record(path: str, record: Mapping[str, Any], log: str) -> None:
    """Rule sweep_spec: a sweep's `tables_record` -> spec.json (atomically), and one line
    in the job's log naming its points and metrics."""
    from shardflow.core.atomic import write_json

    write_json(path, record)
    sample = record.get("sample")
    drawn = f" (drawn from the grid, seed {sample['seed']})" if sample else ""
    with open(log, "w", encoding="utf-8") as fh:
        fh.write(f"sweep {record['name']}: {len(record['points'])} points{drawn}, metrics {record['metrics']}\n")


def expand_grid(grid: Mapping[str, list]) -> list[dict[str, Any]]:
    """Every combination, in the order written: the last key varies fastest."""
    keys = list(grid)
    return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*(grid[k] for k in keys))]


def _problem(exc: Exception) -> str:
    lines = [ln.strip().lstrip("- ").strip() for ln in str(exc).splitlines()]
    lines = [ln for ln in lines if ln and ln.rstrip(":") != "invalid configuration"]
    return "; ".join(lines) or type(exc).__name__


class _Checker:
    """Checks one sweep's keys and values against its base config and the schema."""

    def __init__(self, name: str, stage: Stage, base: dict, schema_validate: Callable[[dict], Any]):
        self.name, self.stage, self.base, self.validate = name, stage, base, schema_validate
        self.checked: dict[tuple[str, str], Any] = {}  # (key, value text) -> the value as validated

    def fail(self, message: str) -> SweepError:
        return SweepError(f"sweep '{self.name}': {message}")

    def key(self, key: Any) -> Any:
        """Check a parameter name; return the base value it overrides."""
        if not isinstance(key, str) or not KEY_REGEX.fullmatch(key):
            raise self.fail(f"parameter {key!r} is not a dotted config key such as 'train.lr'")
        if key == self.stage.seed_key:
            raise self.fail(f"'{key}' is set by seeds: list the seeds under `seeds:` instead")
        try:
            like = lookup(self.base, key)
        except SweepError as exc:
            raise self.fail(str(exc)) from None
        if key.split(".")[0] not in self.stage.sections:
            raise self.fail(
                f"parameter '{key}' is not read by a {self.stage.name} job "
                f"(it reads: {', '.join(self.stage.sections)})"
            )
        if key in self.stage.shared:
            raise self.fail(
                f"parameter '{key}' is shared by every job of a {self.stage.name} sweep (the data set, the "
                f"method and how it is scored); run one sweep per value"
            )
        if key in RUN_WIDE:
            raise self.fail(
                f"parameter '{key}' applies to every job of the run, a sweep's included, from the config "
                "itself: set it there"
            )
        if isinstance(like, Mapping):
            raise self.fail(f"parameter '{key}' is a section; sweep one of its keys ({', '.join(map(str, like))})")
        if isinstance(like, list):
            raise self.fail(f"parameter '{key}' holds a list; a sweep varies single values")
        return like

    def value(self, key: str, value: Any, like: Any) -> Any:
        """`value` as the config would hold it (canonical_value, then the validator's
        reading), after checking it once per distinct value."""
        value = canonical_value(value, like)
        try:
            text = format_value(value)
        except (TypeError, ValueError) as exc:
            raise self.fail(f"{key} = {reprlib.repr(value)}: {exc}") from None
        if (key, text) not in self.checked:
            self.checked[(key, text)] = self.config({key: value}, f"{key} = {value!r}")[key]
        return self.checked[(key, text)]

    def range(self, key: str, given: Mapping, like: Any) -> Range:
        """A grid parameter's range ({kind: [low, high]}), its bounds checked as values."""
        kinds = " or ".join(f"{{{k}: [low, high]}}" for k in RANGE_KINDS)
        if len(given) != 1 or next(iter(given)) not in RANGE_KINDS:
            raise self.fail(f"grid parameter '{key}': {dict(given)!r} is not a range; give a list of values, or {kinds}")
        ((kind, bounds),) = given.items()
        if not isinstance(bounds, list) or len(bounds) != 2:
            raise self.fail(f"grid parameter '{key}': {kind} takes [low, high], not {bounds!r}")
        if kind == "int_uniform":
            if not all(isinstance(b, int) and not isinstance(b, bool) for b in bounds):
                raise self.fail(f"grid parameter '{key}': int_uniform bounds {bounds!r} must be integers")
        else:
            bounds = [canonical_value(b, 0.0) for b in bounds]  # YAML 1.1's 1e-4 is a string
            if not all(isinstance(b, float) and math.isfinite(b) for b in bounds):
                raise self.fail(f"grid parameter '{key}': {kind} bounds {bounds!r} must be finite numbers")
            if isinstance(like, int) and not isinstance(like, bool):
                raise self.fail(f"grid parameter '{key}' is an integer: draw it with {{int_uniform: [low, high]}}")
        try:
            drawn = Range(kind, *bounds)
        except ValueError as exc:
            raise self.fail(f"grid parameter '{key}': {kind} {exc}") from None
        for bound in bounds:  # both ends can be drawn (a continuous one once rounded)
            self.value(key, bound, like)
        return drawn

    def config(self, point: Mapping[str, Any], what: str) -> dict[str, Any]:
        """Validate the base config with `point` applied; return the point's values as the
        validated config holds them: the validator converts in place, so an unquoted YAML
        on/off arrives as the word where the key's schema offers it
        (core.config.yaml11_switches), exactly as in the config itself."""
        candidate = apply_point(self.base, point)
        try:
            self.validate(candidate)
        except Exception as exc:  # noqa: BLE001 -- the workflow's validator: whatever it raises, name the point
            raise self.fail(f"{what} is not valid: {_problem(exc)}") from None
        return {key: lookup(candidate, key) for key in point}


def parse_sweep(
    name: str,
    sweep: Any,
    config: Mapping[str, Any],
    schema_validate: Callable[[dict], Any],
    load_file: Callable[[str], Any] = read_yaml,
    root: str | os.PathLike = ".",
) -> SweepSpec:
    """One sweep's section as a SweepSpec (see the module docstring)."""
    if not isinstance(name, str) or not NAME_REGEX.fullmatch(name):
        raise SweepError(f"sweep name {name!r}: use letters, digits, '.', '_' and '-' (it names a folder)")
    if not isinstance(sweep, Mapping):
        raise SweepError(f"sweep '{name}': expected a mapping with {', '.join(SWEEP_KEYS)}")
    unknown = [k for k in sweep if k not in SWEEP_KEYS]
    if unknown:
        raise SweepError(f"sweep '{name}': unknown key{'s' if len(unknown) > 1 else ''} "
                         f"{', '.join(map(repr, unknown))}; allowed: {', '.join(SWEEP_KEYS)}")
    stage = STAGES.get(sweep.get("stage"))
    if stage is None:
        raise SweepError(f"sweep '{name}': stage {sweep.get('stage')!r} is not one of {', '.join(STAGES)}")

    base_path = sweep.get("base")
    base = {k: v for k, v in config.items() if k != "sweeps"}
    if base_path is not None:
        # Validated in place (a copy of its own): the validator reads YAML 1.1's `1e-5` and
        # on/off as the config does, and the jobs get the values it read.
        base = copy.deepcopy(_load_base(name, str(base_path), base, load_file, root))
        try:
            schema_validate(base)
        except Exception as exc:  # noqa: BLE001 -- as in _Checker.config
            raise SweepError(f"sweep '{name}': base '{base_path}' is not a valid config: {_problem(exc)}") from None
        _check_base_keys(name, str(base_path), stage, base, {k: v for k, v in config.items() if k != "sweeps"})
    check = _Checker(name, stage, base, schema_validate)

    folder = sweep.get("folder", name)
    if not isinstance(folder, str) or not NAME_REGEX.fullmatch(folder):
        raise check.fail(f"folder {folder!r} must be one folder name (letters, digits, '.', '_', '-')")

    params, points, sample = _points(check, sweep)
    keys = id_keys(params)
    ids = [point_id(p, keys) for p in points]
    first: dict[tuple, int] = {}  # equal ids are equal values, so this finds both
    for i, point in enumerate(points):
        j = first.setdefault(tuple(value_key(point[k]) for k in params), i)
        if j != i:
            pid = ids[i] if ids[i] == ids[j] else f"{ids[j]} and {ids[i]}"
            raise check.fail(f"points {j + 1} and {i + 1} are the same point ({pid})")
    for a, b in case_collisions(ids):
        raise check.fail(f"points {a} and {b} differ only in letter case: one folder on macOS and Windows")

    seeds = _seeds(check, sweep.get("seeds"))
    metrics, goals, best = _metrics(check, sweep.get("metrics"), sweep.get("best"))
    return SweepSpec(
        name=name, stage=stage.name, folder=folder, base=base_path, params=tuple(params),
        points=tuple(points), ids=tuple(ids), seeds=seeds, metrics=metrics, goals=goals, best=best,
        description=str(sweep.get("description") or ""), base_config=base, sample=sample,
    )


def _check_base_keys(name: str, path: str, stage: Stage, base: Mapping, config: Mapping) -> None:
    """A base file may change only what the sweep's jobs take from it: the stage's sections,
    less the keys every job shares with the main run (the data set, the method, how it is
    scored; the rules read those from the config). Any other change would be silently
    ignored, and the tables labelled with settings the jobs did not use."""
    mine = {k: lookup(base, k) for k in _leaf_keys(base)}
    main = {k: lookup(config, k) for k in _leaf_keys(config)}
    ignored = sorted(
        k for k in set(mine) | set(main)
        if mine.get(k, _MISSING) != main.get(k, _MISSING)
        and (
            k.split(".")[0] not in stage.sections
            or k in RUN_WIDE
            or any(k == s or k.startswith(s + ".") for s in stage.shared)
        )
    )
    if ignored:
        shown = ", ".join(ignored[:5]) + (f" (and {len(ignored) - 5} more)" if len(ignored) > 5 else "")
        raise SweepError(
            f"sweep '{name}': base '{path}' sets {shown}, which a {stage.name} sweep's jobs do not take from "
            f"a base file (they share it with the main run, or do not read it): set it in the config itself, "
            f"or run the sweep with a config of its own"
        )


_MISSING = object()


def _load_base(name: str, path: str, config: dict, load_file: Callable, root) -> dict:
    """The config with base file `path` merged over it. What YAML would read with a loss
    (a key written twice: it keeps the last and drops the first, as in the config files,
    core.config.repeated_keys) or not at all is a SweepError naming the sweep, so that the
    parse names it with the other sweeps' problems."""
    import yaml

    full = path if os.path.isabs(path) else os.path.join(root, path)
    try:
        overlay = load_file(full)
    except FileNotFoundError:
        raise SweepError(f"sweep '{name}': base file '{path}' not found") from None
    except IsADirectoryError:
        example = f"{path.rstrip('/') or '.'}/<name>.yaml"
        raise SweepError(f"sweep '{name}': base '{path}' is a folder; give a config file in it, such as '{example}'") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SweepError(f"sweep '{name}': base file '{path}' cannot be read: {exc}") from None
    except yaml.YAMLError as exc:
        raise SweepError(f"sweep '{name}': base file '{path}' is not YAML: {_problem(exc)}") from None
    repeated = repeated_keys([full])
    if repeated:
        raise SweepError(f"sweep '{name}': base file '{path}': {'; '.join(repeated)}")
    if not isinstance(overlay, Mapping):
        raise SweepError(f"sweep '{name}': base file '{path}' is not a mapping of config sections")
    return merge(config, {k: v for k, v in overlay.items() if k != "sweeps"})


def _points(check: _Checker, sweep: Mapping) -> tuple[list[str], list[dict], dict | None]:
    """The sweep's parameters, its points, and where they were drawn from a grid, the
    sample's record ({points, seed, grid}; SweepSpec.sample), else None."""
    grid, listed, sample = sweep.get("grid"), sweep.get("points"), sweep.get("sample")
    if sample is not None and listed is not None:
        raise check.fail("`sample:` draws points from `grid:`, not from a list of `points:`: give one of the two")
    if (grid is None) == (listed is None):
        raise check.fail("give either `grid:` (values per parameter) or `points:` (a list of points)")
    if grid is not None:
        if not isinstance(grid, Mapping) or not grid:
            raise check.fail("empty grid: give at least one parameter and its values")
        values: dict[str, list | Range] = {}
        for key, vals in grid.items():
            like = check.key(key)
            if isinstance(vals, Mapping):
                values[key] = check.range(key, vals, like)
                if sample is None:
                    raise check.fail(f"grid parameter '{key}' is a range: add `sample: {{points: N, seed: S}}` to draw "
                                     "N points from the grid (a range cannot be run whole)")
                continue
            if not isinstance(vals, list):
                example = format_value(like) if like is not None else 1
                raise check.fail(f"grid parameter '{key}' must be a list of values, e.g. [{example}]")
            if not vals:
                raise check.fail(f"grid parameter '{key}' has no values")
            canon = [check.value(key, v, like) for v in vals]
            seen: dict[tuple, int] = {}
            for i, v in enumerate(canon):
                j = seen.setdefault(value_key(v), i)
                if j != i:
                    raise check.fail(f"grid parameter '{key}' lists {format_value(v)} twice ({vals[j]!r} and {vals[i]!r})")
            values[key] = canon
        if sample is not None:
            points, seed = _sample(check, sample)
            drawn = _sampled(check, values, points, seed)
            return list(values), drawn, {"points": points, "seed": seed, "grid": grid_record(values)}
        return list(values), expand_grid(values), None

    if not isinstance(listed, list) or not listed:
        raise check.fail("empty list of points")
    if not all(isinstance(p, Mapping) for p in listed):
        raise check.fail("each entry of `points:` must be a mapping of parameter to value")
    params = list(dict.fromkeys(k for p in listed for k in p))
    likes = {k: check.key(k) for k in params}
    points = []
    for i, given in enumerate(listed):
        point = {k: canonical_value(given[k], likes[k]) if k in given else likes[k] for k in params}
        for key, value in point.items():
            try:
                format_value(value)
            except (TypeError, ValueError) as exc:
                raise check.fail(f"point {i + 1}: {key} = {reprlib.repr(value)}: {exc}") from None
        pid = point_id(point, id_keys(params))
        points.append(check.config(point, f"point {i + 1} ({pid})"))
    return params, points, None


def _sample(check: _Checker, sample: Any) -> tuple[int, int]:
    """`sample:`'s (points, seed)."""
    example = "e.g. `sample: {points: 20, seed: 0}`"
    if not isinstance(sample, Mapping):
        raise check.fail(f"sample: {sample!r} is not a mapping of `points` (how many to draw) and `seed`, {example}")
    unknown = [k for k in sample if k not in ("points", "seed")]
    if unknown:
        raise check.fail(f"sample: unknown key {unknown[0]!r}; it takes `points` (how many to draw) and `seed`, {example}")
    missing = [k for k in ("points", "seed") if k not in sample]
    if missing:
        raise check.fail(f"sample: no `{missing[0]}`; it takes `points` (how many to draw) and `seed`, {example}")
    points, seed = sample["points"], sample["seed"]
    if isinstance(points, bool) or not isinstance(points, int) or points < 1:
        raise check.fail(f"sample: points {points!r} is not a positive integer (how many points to draw), {example}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise check.fail(f"sample: seed {seed!r} is not a non-negative integer (it decides which points), {example}")
    return points, seed


def _sampled(check: _Checker, values: Mapping[str, list | Range], points: int, seed: int) -> list[dict]:
    """The first `points` distinct draws (sample.draw) of the grid, each drawn value checked
    as a grid's value; a draw equal to an earlier point is skipped."""
    ranges = {k: v for k, v in values.items() if isinstance(v, Range)}
    size = grid_size(values)
    if size is not None and points >= size:
        listed = " (each int_uniform range written as the list of its values)" if ranges else ""
        raise check.fail(f"sample: points {points} is not fewer than the {size} points of the grid: drop `sample:` to run "
                         f"all of them{listed}")
    likes = {k: lookup(check.base, k) for k in ranges}  # what check.key found: the key is known
    found: dict[tuple, dict] = {}
    for index in range(max_draws(points)):
        point = draw(values, seed, index)
        for key in ranges:
            point[key] = check.value(key, point[key], likes[key])
        found.setdefault(tuple(value_key(v) for v in point.values()), point)
        if len(found) == points:
            return list(found.values())
    shown = ", ".join(f"{k}: {r} (drawn values rounded to {r.rounding})" for k, r in ranges.items() if r.size is None)
    raise check.fail(
        f"sample: {len(found)} distinct points in {max_draws(points)} draws, of the {points} asked for: too few lie in "
        f"{shown or 'the grid'}: widen a range or ask for fewer points"
    )


def _seeds(check: _Checker, seeds: Any) -> tuple[int, ...]:
    if isinstance(seeds, int) and not isinstance(seeds, bool) and seeds >= 0:
        # `seeds: 3` reads as three seeds or as seed 3: say both, rather than "no seeds".
        listed = str(list(range(seeds))) if seeds <= 5 else f"[0, 1, ..., {seeds - 1}]"
        more = f", or `seeds: {listed}` for {seeds} runs per point" if seeds > 1 else ""
        raise check.fail(
            f"seeds: {seeds} is not a list: give `seeds: [{seeds}]` for one run per point with seed {seeds}{more}"
        )
    if seeds is not None and not isinstance(seeds, list):
        raise check.fail(
            f"seeds: {seeds!r} is not a list of seeds, e.g. `seeds: [0]`, or `seeds: [0, 1, 2]` for mean and std"
        )
    if not seeds:
        raise check.fail("no seeds: give `seeds: [0]` for one run per point, or several for mean and std")
    for seed in seeds:
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise check.fail(f"seed {seed!r} is not a non-negative integer")
        try:
            format_value(seed)
        except ValueError as exc:
            raise check.fail(f"seed {reprlib.repr(seed)}: {exc}") from None
    dup = [s for i, s in enumerate(seeds) if s in seeds[:i]]
    if dup:
        raise check.fail(f"seed {dup[0]} is listed twice")
    for seed in seeds:
        check.config({check.stage.seed_key: seed}, f"seed {seed} ({check.stage.seed_key})")
    return tuple(seeds)


def _metrics(check: _Checker, metrics: Any, best: Any) -> tuple[tuple[str, ...], dict[str, str], str]:
    example = f"metrics: {{{check.stage.example_metric}}}"
    if not isinstance(metrics, Mapping) or not metrics:
        raise check.fail(f"say which metrics to tabulate and which way is better, e.g. `{example}`")
    for metric, goal in metrics.items():
        if not isinstance(metric, str) or not metric:
            raise check.fail(f"metric name {metric!r} must be a non-empty string")
        if goal not in ("max", "min"):
            raise check.fail(f"metric '{metric}': goal {goal!r} must be max or min")
    best = next(iter(metrics)) if best is None else best
    if best not in metrics:
        raise check.fail(f"best metric {best!r} is not one of the metrics ({', '.join(metrics)})")
    return tuple(metrics), dict(metrics), best


def collection_rule(name: str) -> str:
    """The rule that collects sweep `name`'s tables (a rule name holds no '-' or '.')."""
    return "collect_sweep_" + re.sub(r"\W", "_", name)


def parse_sweeps(
    sweeps: Mapping[str, Any] | None,
    config: Mapping[str, Any],
    schema_validate: Callable[[dict], Any],
    load_file: Callable[[str], Any] = read_yaml,
    root: str | os.PathLike = ".",
    problems: list[str] | None = None,
) -> dict[str, SweepSpec]:
    """Every sweep of the `sweeps:` section; one SweepError listing every problem.

    `config` is the validated workflow config; `schema_validate(config)` raises on an
    invalid one (the workflow passes its own validator); base files are read with
    `load_file`, relative to `root` (the workflow's folder). With a `problems` list, the
    problems are appended to it instead and the sweeps without one returned, so that the
    caller can report them with its own checks', all at once.
    """
    if not sweeps:
        return {}
    found: list[str] = []
    specs: dict[str, SweepSpec] = {}
    if not isinstance(sweeps, Mapping):
        found.append("`sweeps:` must map sweep names to their settings")
        sweeps = {}
    for name, sweep in sweeps.items():
        try:
            specs[name] = parse_sweep(name, sweep, config, schema_validate, load_file, root)
        except SweepError as exc:
            found.append(str(exc))
    folders: dict[str, str] = {}
    rules: dict[str, str] = {}
    for spec in specs.values():
        other = folders.setdefault(spec.folder.casefold(), spec.name)
        if other != spec.name:
            found.append(f"sweeps '{other}' and '{spec.name}' write to the same folder '{spec.folder}'")
        other = rules.setdefault(collection_rule(spec.name), spec.name)
        if other != spec.name:
            found.append(f"sweeps '{other}' and '{spec.name}' would share the rule {collection_rule(spec.name)}: "
                         "rename one (names that differ only in '-', '.' and '_' cannot both be used)")
    if problems is not None:
        problems += found
    elif found:
        raise SweepError("invalid sweeps:\n  - " + "\n  - ".join(found))
    return specs


# ----------------------------------------------------------- the files, as written

def sweeps_in_files(paths: Iterable[str | os.PathLike]) -> list[str]:
    """What the config files of one run (Snakemake's `workflow.configfiles`) write under
    `sweeps:` that the merged config no longer shows, one problem a line: a sweep that two
    files define, each with its `stage` or each with a `grid`. Snakemake merges config
    files key by key, so the run swept a mix of the two (the grids' keys together, the
    later file's seeds). A file that changes only what is no grid of a sweep another file
    defines (its seeds, points, best) is an overlay like any other, and an equal
    definition merges into itself. (A key written twice within one file, which YAML
    drops, is core.config.repeated_keys's, for every section.)
    """
    import yaml

    found: list[str] = []
    defined: dict[str, list[tuple[str, int, Any]]] = {}  # name -> (file, line, definition)
    for path, root in config_file_nodes(paths):
        if not isinstance(root, yaml.MappingNode):
            continue
        entries = [(k, v) for k, v in root.value if isinstance(k, yaml.ScalarNode) and k.value == "sweeps"]
        if not entries or not isinstance(entries[-1][1], yaml.MappingNode):
            continue
        sweeps = yaml.SafeLoader("").construct_document(entries[-1][1])  # the one YAML keeps
        lines = {k.value: k.start_mark.line + 1 for k, _ in entries[-1][1].value if isinstance(k, yaml.ScalarNode)}
        for name, definition in sweeps.items():
            defined.setdefault(str(name), []).append((str(path), lines.get(str(name), 0), definition))
    for name, places in defined.items():
        clash = next(((a, b) for i, b in enumerate(places) for a in places[:i] if _mixed(a[2], b[2])), None)
        if clash:
            (file_a, line_a, a), (file_b, line_b, b) = clash
            grids = [d.get("grid") for d in (a, b)]
            keys = sorted({str(k) for g in grids if isinstance(g, Mapping) for k in g})
            mix = f" (grid: {', '.join(keys)})" if all(isinstance(g, Mapping) for g in grids) else ""
            found.append(
                f"sweep '{name}' is defined in {file_a}:{line_a} and in {file_b}:{line_b}: Snakemake merges config "
                f"files key by key, so the run would sweep a mix of the two{mix}; give each sweep its own name, or "
                "change it in one file"
            )
    return found


def _mixed(a: Any, b: Any) -> bool:
    """Whether two files' definitions of one sweep merge into a sweep neither describes."""
    if not isinstance(a, Mapping) or not isinstance(b, Mapping) or a == b:
        return False
    both_grids = isinstance(a.get("grid"), Mapping) and isinstance(b.get("grid"), Mapping)
    return ("stage" in a and "stage" in b) or both_grids


