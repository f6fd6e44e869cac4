"""Point ids: one readable, stable, path-safe folder name per sweep point.

    lr=0.001__n_layer=4__model=sentence-transformers_2fall-MiniLM-L6-v2

Why not `snakemake.utils.Paramspace`'s own patterns:
  - its `instance_patterns` go through `DataFrame.itertuples`, which renames every
    column that is not a Python identifier: dotted config keys (`train.lr`) and
    keywords (`class`) become `_1`, `_2` (snakemake #1673, #2241);
  - values are written with `str()`: the YAML string "1e-3" and the float 0.001 are two
    folders, a "/" in a value makes nested folders, and an "_" in a value is ambiguous
    with its separator;
  - `Paramspace.instance()` converts every value through pandas and, with a single
    wildcard, matches a regex per call; here a job finds its point with one dict lookup.

The id is made of `key=value` pairs joined by "__", keys sorted by their dotted name:
  - keys are the last dotted component (`train.lr` -> `lr`) unless two of the sweep's
    keys share it, then the whole dotted key;
  - numbers are canonical: a float is its shortest round-trip `repr` (1e-3 and 0.001
    are both `0.001`; `1e+20` is written `1e20`), -0.0 is 0.0, ints stay ints (those of
    64 bits: INT64_RANGE);
    true/false/null as in YAML;
  - a string keeps `A-Z a-z 0-9 . -` and writes every other character as `_xx` per
    UTF-8 byte (lower-case hex): "/" is `_2f`, " " is `_20`, "_" itself is `_5f`. So an
    id never holds "/", "%" (sbatch reads `%` in the SLURM plugin's log path, which
    holds the wildcards) or a double underscore inside a value; it is one path
    component, safe in S3 keys, shells and Kubernetes volumes, and it decodes back;
  - a string that would read back as another type ("4", "true", "inf") or is empty
    starts with `_q` ("4" -> `_q4`);
  - an id longer than MAX_ID characters keeps the whole pairs that fit and ends with
    `__id-hash=<12 hex>` of the full id (a key cannot contain "-"); such an id does not
    decode: look it up in the sweep's points table.

The charset of every id is POINT_ID_REGEX, the wildcard constraint for `{point}`.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

MAX_ID = 120
HASH_KEY = "id-hash"
EMPTY_POINT_ID = "base"  # a point that varies nothing (a seeds-only sweep)
POINT_ID_REGEX = r"[A-Za-z0-9._=-]+"
SEED_REGEX = r"[0-9]+"

# A config key: dotted components, each letters/digits joined by single underscores.
KEY_REGEX = re.compile(r"[A-Za-z0-9]+(?:_[A-Za-z0-9]+)*(?:\.[A-Za-z0-9]+(?:_[A-Za-z0-9]+)*)*")
_SAFE_CHAR = re.compile(r"[A-Za-z0-9.\-]")
_ESCAPES = re.compile(r"(?:_[0-9a-f]{2})+")
_INT = re.compile(r"-?[0-9]+")
# The runs table holds an integer parameter as pandas' Int64 and the seed as int64, so a
# wider integer (10**400 written out in a sweep file) would stop the collection after
# every job ran; format_value refuses it at parse time instead.
INT64_RANGE = range(-(2**63), 2**63)
_STRING = object()


def plain(value: Any) -> Any:
    """numpy/pandas scalars as Python ones (pandas hands back numpy types)."""
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        return value.item()
    return value


def format_float(x: float) -> str:
    if math.isnan(x):
        raise ValueError("NaN cannot be a sweep value (it is not equal to itself)")
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return repr(x + 0.0).replace("e+", "e")  # + 0.0 turns -0.0 into 0.0


def _escape(text: str) -> str:
    return "".join(c if _SAFE_CHAR.fullmatch(c) else "".join(f"_{b:02x}" for b in c.encode("utf-8")) for c in text)


def _unescape(text: str) -> str:
    if not all(_SAFE_CHAR.fullmatch(c) for c in _ESCAPES.sub("", text)):
        raise ValueError(f"not an encoded value: {text!r}")
    return _ESCAPES.sub(lambda m: bytes.fromhex(m.group().replace("_", "")).decode("utf-8"), text)


def _literal(text: str) -> Any:
    """The null, boolean or number that `text` spells, else the marker _STRING (it is a string)."""
    if text in ("null", "true", "false"):
        return {"null": None, "true": True, "false": False}[text]
    if _INT.fullmatch(text):
        return int(text)
    try:
        return float(text)
    except ValueError:
        return _STRING


def format_value(value: Any) -> str:
    """One value as it appears in a point id (see the module docstring)."""
    value = plain(value)
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        if value not in INT64_RANGE:
            raise ValueError(
                "an integer outside the signed 64-bit range (-2**63 to 2**63 - 1) of the sweep's tables' integer columns"
            )
        return str(value)
    if isinstance(value, float):
        return format_float(value)
    if isinstance(value, str):
        text = _escape(value)
        if text == value and (value == "" or _literal(value) is not _STRING):
            text = "_q" + text
        return text
    raise TypeError(f"a sweep value must be a string, number, boolean or null, not {type(value).__name__}")


def parse_value(text: str) -> Any:
    """Inverse of format_value."""
    if text.startswith("_q"):
        return _unescape(text[2:])
    if "_" in text:
        return _unescape(text)
    literal = _literal(text)
    return _unescape(text) if literal is _STRING else literal


def id_keys(params: Iterable[str]) -> dict[str, str]:
    """{dotted key: the name it has in ids and tables}: its last component where unique."""
    params = list(params)
    last = [p.rsplit(".", 1)[-1] for p in params]
    return {p: (s if last.count(s) == 1 else p) for p, s in zip(params, last, strict=True)}


def point_id(point: Mapping[str, Any], keys: Mapping[str, str] | None = None) -> str:
    """The folder name of one point ({dotted key: value}); `keys` from id_keys(all params)."""
    if not point:
        return EMPTY_POINT_ID
    keys = keys or id_keys(point)
    pairs = [f"{keys[k]}={format_value(point[k])}" for k in sorted(point)]
    full = "__".join(pairs)
    if len(full) <= MAX_ID:
        return full
    digest = hashlib.sha256(full.encode()).hexdigest()[:12]
    tail = f"__{HASH_KEY}={digest}"
    kept = []
    for pair in pairs:  # the pairs that fit, in order; a long one is left to the hash
        if len("__".join(kept + [pair])) + len(tail) <= MAX_ID:
            kept.append(pair)
    return "__".join(kept) + tail if kept else tail[2:]


def parse_point_id(pid: str, params: Sequence[str] | None = None) -> dict[str, Any]:
    """Inverse of point_id: {key: value}, keys as dotted names when `params` is given.

    A shortened id (ending in `id-hash=...`) raises ValueError: its values are only in
    the sweep's points table.
    """
    if pid == EMPTY_POINT_ID:
        return {}
    if not re.fullmatch(POINT_ID_REGEX, pid):
        raise ValueError(f"not a point id: {pid!r}")
    names = {v: k for k, v in id_keys(params).items()} if params is not None else None
    out = {}
    for pair in pid.split("__"):
        key, sep, text = pair.partition("=")
        if key == HASH_KEY:
            raise ValueError(f"point id {pid!r} was shortened; look it up in the sweep's points table")
        if not sep or not KEY_REGEX.fullmatch(key):
            raise ValueError(f"not a point id: {pid!r} (bad pair {pair!r})")
        if names is not None:
            if key not in names:
                raise ValueError(f"point id {pid!r}: {key!r} is not one of the parameters {list(params)}")
            key = names[key]
        out[key] = parse_value(text)
    return out


def job_dir(folder: str, pid: str, seed: int) -> str:
    """The folder of one job, relative to the sweeps root: <sweep folder>/<point id>/seed=<n>."""
    return f"{folder}/{pid}/seed={seed}"


SWEEPS_ROOT = "results/sweeps"


def job_metrics(stage: str, folder: str, pid: str, seed: int) -> str:
    """The metrics JSON of one sweep job (rules/sweep.smk: its last job's output, which
    the collection reads): a training job's is its train rule's, in train/."""
    job = f"{SWEEPS_ROOT}/{job_dir(folder, pid, seed)}"
    return f"{job}/train/metrics.json" if stage == "train" else f"{job}/metrics.json"


def case_collisions(names: Iterable[str]) -> list[tuple[str, str]]:
    """Pairs of names that differ only in letter case (one folder on macOS and Windows)."""
    seen: dict[str, str] = {}
    clashes = []
    for name in names:
        other = seen.setdefault(name.casefold(), name)
        if other != name:
            clashes.append((other, name))
    return clashes
